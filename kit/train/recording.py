"""Rollout records of the local RL step (issue #32): what :func:`kit.train.step.rl_step` sampled,
how it was graded, what RoC kept and the advantage each kept row trained with, one
:mod:`kit.records` file per recorded step.

:func:`open_recorder` builds the run's :class:`kit.records.RolloutRecorder` from ``[logging]``
(``records_every``, ``records_max_prompts``; :func:`kit.train.rl.run_stage` opens one per stage
run folder, so every ablation arm records into its own folder); :func:`step_records` turns a
:class:`kit.train.step.StepResult` into the step's ``N = P * n`` records (the anatomy view of
notebook 03 renders them without writing); :func:`record_step` writes them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from kit.algo import RocParams
from kit.config import KitConfig
from kit.records import RolloutRecorder, records_from_trajectories


def open_recorder(cfg: KitConfig, run_dir: str | os.PathLike, tokenizer_dir: str | os.PathLike | None = None
                  ) -> RolloutRecorder | None:
    """The stage run's recorder, writing ``run_dir/rollouts/``; None when ``logging.records_every = 0``.

    Args:
        cfg: the run's config (``logging.records_every``; ``logging.records_max_prompts``, 0 = all).
        run_dir: the stage's (or ablation arm's) run folder.
        tokenizer_dir: the policy folder the run starts from (the explorer decodes ids with it).
    """
    lg = cfg.logging
    if lg.records_every <= 0:
        return None
    return RolloutRecorder(Path(run_dir), every=lg.records_every, max_prompts=lg.records_max_prompts or None,
                           tokenizer_dir=tokenizer_dir)


def step_records(cfg: KitConfig, res: Any, prompts: int | None = None) -> list[dict[str, Any]]:
    """The records of one step (:data:`kit.records.SCHEMA`), from its :class:`kit.train.step.StepResult`.

    Rows are ``res.batch.flat()``'s order (problem-major, ``p * n + g``); group ``p`` is the step's
    ``p``-th problem (``prompt_id`` its id, ``group_id`` ``"<step>:<p>"``); ``kept`` and ``advantage``
    are the rows and (K,) advantages the update used; p_total uses ``cfg.algorithm``'s RoC switches.
    ``prompts`` keeps only the first that many groups (None: all).
    """
    batch, row = res.batch, res.row
    P, n = batch.rewards.shape
    flat = batch.flat()
    gids = [f"{row['step']}:{p}" for p in range(P) for _ in range(n)]
    ids = [pr.id for pr in batch.problems for _ in range(n)]
    verdicts = [v for g in batch.verdict_reasons for v in g]
    recs = records_from_trajectories(flat, batch.rewards.reshape(-1), gids, stage=row["stage"], step=row["step"],
                                     algorithm=row["algorithm"], problem_ids=ids, verdicts=verdicts,
                                     kept=np.asarray(res.kept), advantages=res.advantages, seed=row["seed"],
                                     global_step=row["global_step"], roc=RocParams.from_config(cfg.algorithm))
    return recs if prompts is None else [r for r in recs if r["prompt_index"] < prompts]


def record_step(recorder: RolloutRecorder | None, cfg: KitConfig, res: Any) -> Path | None:
    """Write step ``res`` when ``recorder`` wants it (``res.row['step']``, 1-based); the file or None."""
    if recorder is None or not recorder.wants(res.row["step"]):
        return None
    return recorder.write(step_records(cfg, res, recorder.max_prompts))
