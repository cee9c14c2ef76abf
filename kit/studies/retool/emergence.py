"""ReTool's emergence arm (issue #45): do code self-correction and an earlier first call *emerge* under RL?

ReTool (Feng et al. 2025, §3.3) reports that PPO teaches its model to fix failing code without any
self-correction data, and that the first interpreter call moves earlier. The run's own cold start cannot test
either: a quarter of its tool demos fail and are then fixed (``data.demo_error_fraction``), so it is *taught* to
self-correct, and every tool demo opens with one short sentence before the call, so the call is pinned at the
start. This arm trains a *clean* cold start (:func:`clean_config`: the run's recipe, seed and steps with
``data.demo_error_fraction = 0`` and ``data.demo_preamble_max = retool.clean_preamble_max``, so no demo shows a
fix and the first call comes after 0 to that many reasoning sentences), PPO from it (:data:`kit.plan.RETOOL_ARMS`,
the first ``retool.emergence_seeds`` of the ReTool arms' seeds), and then samples both policies on the same
held-out tasks with the same sampling streams (:func:`evaluate_emergence`).

Files, under notebook 10's run folder::

    emergence/cold_start/    the clean cold start (an SFT run folder: config.json, policy/, summary.json)
    emergence/ppo_seed<s>/   PPO from it (a first-stage run folder, as the ReTool arms')
    emergence/eval.jsonl     one row per sampled trajectory (:data:`EVAL_FIELDS`)
    emergence/emergence.json what was trained and sampled

The claims read ``eval.jsonl`` (kind ``retool_emergence_diff``, :mod:`kit.studies.retool.kinds`). The clean
cold start is trained by the kit's SFT trainer (:func:`kit.train.sft.run_sft`) on both runtimes: it is made of
the tiny task family's demonstrations, so a paper profile, whose cold start is your own checkpoint, sets
``retool.emergence_seeds = 0``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kit import jsonio, runtime
from kit.analysis import code_behaviour
from kit.chain.policies import heldout_problems, sample_trajectories
from kit.config import KitConfig, save
from kit.metrics import read_rows
from kit.plan import retool_arms
from kit.progress import StepBar
from kit.train import common, sft

EMERGENCE_DIR = "emergence"
EVAL_FILE = "eval.jsonl"
#: the policies of ``eval.jsonl``: the clean cold start and PPO from it
POLICIES = ("cold_start", "ppo")
#: one row of ``eval.jsonl``: ``policy`` (:data:`POLICIES`), ``seed`` (the PPO arm's; -1 for the cold start),
#: ``problem`` (its id), ``sample`` (index in the problem's group as collected, which sorts a group by its
#: tokens: not a sampling stream; the claims pair by problem), ``correct`` (0/1), ``calls`` and
#: ``failed_calls`` (counted calls, those that failed by the model's fault), ``failed_call`` (0/1: at least one),
#: ``self_corrected`` (0/1: a failed call whose next call ran cleanly, :func:`kit.analysis.code_behaviour.code_use`),
#: ``first_call_position`` (tokens before the first call / response tokens; None without a call)
EVAL_FIELDS = ("policy", "seed", "problem", "sample", "correct", "calls", "failed_calls", "failed_call",
               "self_corrected", "first_call_position")


def clean_config(cfg: KitConfig, run_dir: str | os.PathLike) -> KitConfig:
    """The clean cold start's config (:func:`kit.train.sft.clean_config`): ``cfg`` with ``data.demo_error_fraction
    = 0``, ``data.demo_preamble_max = cfg.retool.clean_preamble_max`` and ``sft.steps = cfg.retool.clean_sft_steps``
    (when not 0), run in ``run_dir``; every other key, the seed included, is ``cfg``'s (the run's cold start)."""
    return sft.clean_config(cfg, run_dir, preamble_max=cfg.retool.clean_preamble_max, steps=cfg.retool.clean_sft_steps)


def train_emergence(cfg: KitConfig, run_dir: str | os.PathLike, data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """Train the emergence arm in ``run_dir/emergence/`` (notebook 10's run folder): the clean cold start, then
    PPO from it for each of the first ``cfg.retool.emergence_seeds`` ReTool seeds, then
    :func:`evaluate_emergence`, with one progress bar over every step. Finished parts are not redone (a killed
    run resumes).

    Args:
        cfg: notebook 10's resolved config.
        run_dir: notebook 10's run folder.
        data_dir: notebook 01's run folder (the RL pool on the VERL runtime).
    Returns:
        The content of ``emergence/emergence.json`` (``{}`` without writing anything when
        ``retool.emergence_seeds`` is 0): ``{"cold_start": summary, "arms": {folder: summary}, "eval": {...}}``.
    Raises:
        ValueError: ``retool.emergence_seeds`` > 0 with a model other than the tiny one (its cold start is
            not made of the tiny task family's demos; set ``retool.emergence_seeds = 0``); more emergence seeds
            than the run has ReTool arm seeds; ``emergence/`` trained with another config (named; delete it).
    """
    if cfg.retool.emergence_seeds == 0:
        return {}
    if cfg.model.name_or_path != "tiny":
        raise ValueError(f"retool.emergence_seeds = {cfg.retool.emergence_seeds}: ReTool's emergence arm trains a "
                         f"clean cold start from the tiny task family's demos, which model {cfg.model.name_or_path!r} "
                         "does not use; set retool.emergence_seeds = 0 (the paper profiles do)")
    root = Path(run_dir) / EMERGENCE_DIR
    clean = clean_config(cfg, root / "cold_start")
    # a finished part is reused only if it was trained with this config; retool's own keys act through
    # data.demo_preamble_max (training), the arm list and the eval key
    sft.refuse_other_config(root / "cold_start", clean, ignore=("retool",))
    plan = retool_arms(clean, root, n_seeds=cfg.retool.emergence_seeds)
    if len(plan) < cfg.retool.emergence_seeds:
        raise ValueError(f"retool.emergence_seeds = {cfg.retool.emergence_seeds}, but the run has {len(plan)} ReTool "
                         "arm seeds (the first of the ablation's GRPO-RoC seeds, at most kit.plan.RETOOL_SEEDS)")
    save(clean, clean.run_dir)
    rt = runtime.get(cfg)
    arms = {}
    with StepBar(clean.sft.steps + cfg.ablation.steps * len(plan), "ReTool emergence: clean cold start, PPO",
                 count_rows=True) as bar:
        def relay(row: dict) -> None:
            if "summary" not in row:  # one part's end is not the arm's (it would close the bar)
                bar(row)

        cold = sft.run_sft(clean, clean.run_dir, progress=relay)
        for folder, arm in plan:
            arms[folder] = rt.run_stage(arm, arm.stages[0].name, run_dir=arm.run_dir, init_dir=clean.run_dir,
                                        data_dir=data_dir, progress=relay)
    seeds = {folder: arm.seed for folder, arm in plan}
    out = jsonio.jsonable({"cold_start": cold, "arms": arms, "eval": evaluate_emergence(cfg, root, seeds)})
    jsonio.write_json(root / "emergence.json", out)
    return out


def trajectory_row(tr: Any, correct: bool, open_id: int | None) -> dict[str, Any]:
    """The measured fields of one trajectory (:data:`EVAL_FIELDS` less ``policy``, ``seed``, ``problem``,
    ``sample``), from :func:`kit.analysis.code_behaviour.code_use`."""
    use = code_behaviour.code_use(tr, open_id)
    failed = use.calls - use.ok_calls
    pos = (use.first_call_token / use.response_tokens
           if use.first_call_token is not None and use.response_tokens > 0 else None)
    return {"correct": int(correct), "calls": use.calls, "failed_calls": failed, "failed_call": int(failed > 0),
            "self_corrected": int(use.self_corrections > 0), "first_call_position": pos}


def evaluate_emergence(cfg: KitConfig, root: str | os.PathLike, arms: dict[str, int]) -> dict[str, Any]:
    """Sample the clean cold start and the PPO arms ``arms`` (folder under ``root``, ``emergence/`` -> its seed) on the first
    ``retool.eval_problems`` held-out tasks (0: all), ``retool.eval_samples`` each at T = 1, every policy with the
    same backend seed (the same sampling streams), and write ``root/eval.jsonl`` (:data:`EVAL_FIELDS`). A file
    written for other problems, samples or arms is sampled again (its key is in ``root/eval_key.json``).

    Returns:
        ``{"problems", "samples", "rows"}``.
    Raises:
        FileNotFoundError: a policy folder is missing (the arm did not finish).
    """
    root = Path(root)
    out, key_file = root / EVAL_FILE, root / "eval_key.json"
    problems = heldout_problems(cfg, cfg.retool.eval_problems)
    n = cfg.retool.eval_samples
    seed = common.step_seed(cfg.seed, "retool-emergence-eval")
    key = {"problems": [p.id for p in problems], "samples": n, "arms": sorted(arms), "seed": seed}
    if out.exists() and key_file.exists() and json.loads(key_file.read_text()) == key:
        rows_written = len(read_rows(out))
    else:
        policies = [("cold_start", -1, root / "cold_start" / "policy")]
        policies += [("ppo", arms[a], root / a / "policy") for a in sorted(arms)]
        rows = []
        for policy, arm_seed, path in policies:
            if not path.is_dir():
                raise FileNotFoundError(f"ReTool emergence: {path} is missing (its training did not finish)")
            trs, tok, batch = sample_trajectories(cfg, path, n=n, seed=seed, problems=problems)
            open_id = code_behaviour.call_open_id(tok)
            correct = (batch.rewards.reshape(-1) > 0).tolist()
            for i, (tr, ok) in enumerate(zip(trs, correct, strict=True)):
                rows.append({"policy": policy, "seed": arm_seed, "problem": problems[i // n].id, "sample": i % n,
                             **trajectory_row(tr, ok, open_id)})
        tmp = out.with_suffix(".jsonl.partial")
        tmp.write_text("".join(jsonio.dumps(r) + "\n" for r in rows))
        tmp.replace(out)
        jsonio.write_json(key_file, key)
        rows_written = len(rows)
    return {"problems": len(problems), "samples": n, "rows": rows_written}
