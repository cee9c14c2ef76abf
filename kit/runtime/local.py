"""The ``local`` runtime: training in this process with the CPU engine of ``kit.train``.

Adapts the engine's entry points (which take a *policy* folder) to the runtime contract of
:mod:`kit.runtime` (which takes the upstream *run* folder): ``init_dir/policy`` is the starting
policy. Cold start :func:`kit.train.sft.run_sft`; stages :func:`kit.train.rl.run_stage`; stage 3's
pool :func:`kit.train.rl.prepare_hard_subset`; the ablation :func:`kit.train.ablation.run_ablation`.
Everything runs on the CPU; nothing imports VERL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.config import KitConfig
from kit.data import pool as data_pool
from kit.data.curate import CurationResult, write_curated
from kit.runtime.folders import upstream_run
from kit.train import ablation, rl, sft

Progress = Callable[[dict], None] | None
PathLike = str | os.PathLike


def _no_options(where: str, **options: Any) -> None:
    """Raise for options only the ``verl`` runtime honours, when they are set."""
    given = [k for k, v in options.items() if v]
    if given:
        raise ValueError(f"{where}: {', '.join(given)} is an input of the 'verl' runtime; the 'local' runtime "
                         "trains and samples it itself (set runtime='verl' or leave it empty)")


def prepare_data(cfg: KitConfig, curation: CurationResult, *, run_dir: PathLike) -> dict[str, Path]:
    """Write the curated pools under ``run_dir/data/`` (:func:`kit.data.curate.write_curated`).

    Returns:
        ``{"parquet", "funnel", "removed"}`` paths.
    """
    return write_curated(run_dir, curation)


def run_sft(cfg: KitConfig, *, run_dir: PathLike, init_dir: PathLike | None = None,
            data_dir: PathLike | None = None, progress: Progress = None, sft_checkpoint: str = "",
            sft_data: str = "") -> dict[str, Any]:
    """Cold-start SFT of ``cfg.model`` into ``run_dir`` (:func:`kit.train.sft.run_sft`: task demos and
    function-calling chats from ``cfg.data``; ``data_dir`` is not read).

    Raises:
        ValueError: ``init_dir`` (the cold start starts from ``cfg.model``), ``sft_checkpoint`` or
            ``sft_data`` given.
    """
    if init_dir is not None:
        raise ValueError(f"run_sft: the cold start starts from cfg.model ({cfg.model.name_or_path}); got "
                         f"init_dir={init_dir}")
    _no_options("run_sft", sft_checkpoint=sft_checkpoint, sft_data=sft_data)
    return sft.run_sft(cfg, run_dir, progress=progress)


def run_stage(cfg: KitConfig, stage: str, *, run_dir: PathLike, init_dir: PathLike, data_dir: PathLike | None = None,
              progress: Progress = None) -> dict[str, Any]:
    """One RL stage from ``init_dir/policy`` (:func:`kit.train.rl.run_stage`) on the pool
    :func:`kit.data.pool.pool` gives (``data.source = "curated"``: ``data_dir/data/curated.parquet``);
    a ``hard`` stage reads the subset :func:`prepare_hard_subset` left in ``run_dir`` (or builds it first).

    Raises:
        ValueError, FileNotFoundError: ``init_dir`` is not an upstream run folder with a ``policy/``
            (:func:`kit.runtime.folders.upstream_run` names the mistake); ``data.source = "curated"``
            without ``data_dir`` or its ``data/curated.parquet``.
    """
    return rl.run_stage(cfg, stage, upstream_run(init_dir, "run_stage") / "policy", run_dir, progress, data_dir=data_dir)


def prepare_hard_subset(cfg: KitConfig, stage: str, *, run_dir: PathLike, init_dir: PathLike,
                      data_dir: PathLike | None = None, hard_counts: str = "", sampler_url: str = "") -> dict[str, Any]:
    """Stage 3's pool: the problems of :func:`kit.data.pool.pool` that ``init_dir/policy`` does not
    solve every time (:func:`kit.train.rl.prepare_hard_subset`; ``run_dir/hard_subset.json``).

    Raises:
        ValueError: ``hard_counts`` or ``sampler_url`` given (the local runtime samples itself), or
            ``init_dir`` None or a policy folder.
        FileNotFoundError: ``init_dir`` or its ``policy/`` does not exist.
    """
    _no_options("prepare_hard_subset", hard_counts=hard_counts, sampler_url=sampler_url)
    return rl.prepare_hard_subset(cfg, stage, upstream_run(init_dir, "prepare_hard_subset") / "policy", run_dir,
                                  data_dir=data_dir)


def run_ablation(cfg: KitConfig, *, run_dir: PathLike, init_dir: PathLike, data_dir: PathLike | None = None,
                 progress: Progress = None, reuse: Sequence[PathLike] = ()) -> dict[str, Any]:
    """GRPO against GRPO-RoC from ``init_dir/policy`` (:func:`kit.train.ablation.run_ablation`); ``reuse``:
    finished stage run folders that may already be an arm.

    Raises:
        ValueError, FileNotFoundError: ``init_dir`` is not an upstream run folder with a ``policy/``;
            ``data.source = "curated"`` (the local ablation's arms train on the task family only).
    """
    if data_pool.source(cfg) == "curated":
        raise ValueError("run_ablation: the local runtime's ablation arms train on the task family; data.source="
                         "'curated' reaches run_stage and prepare_hard_subset only (set data.source='tasks' here)")
    policy = upstream_run(init_dir, "run_ablation") / "policy"
    return ablation.run_ablation(cfg, policy, run_dir, progress=progress, reuse=list(reuse))
