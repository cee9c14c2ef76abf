"""The RoC ablation on the local engine (rStar2-Agent §5.3, Figures 4 and 9): GRPO against GRPO-RoC
from the same policy, same steps, several seeds, each arm (:func:`kit.plan.ablation_arms`, the
arms the VERL runtime trains too) one :func:`kit.train.rl.run_stage` of its own config.

The arms train in this process or ``cfg.ablation.workers`` at once in worker processes (the
process manager :func:`_run_arms`); a finished stage run that is exactly an arm is reused
(:func:`reusable_run`). Writes ``run_dir/<algorithm>_seed<s>/`` per arm and ``run_dir/ablation.json``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kit import jsonio
from kit.config import KitConfig, from_json, save
from kit.plan import ABLATION_ALGORITHMS, ablation_arms
from kit.train import common
from kit.train.rl import run_stage


def _nanmean_columns(rows: Sequence[Sequence[float]]) -> list[float]:
    """Per-step mean over seeds of equal-length curves, skipping NaN (undefined) entries."""
    a = np.asarray(rows, dtype=float)
    n = (~np.isnan(a)).sum(axis=0)
    return [float(x) if c else float("nan") for x, c in zip(np.nansum(a, axis=0) / np.maximum(n, 1), n, strict=True)]


def _spread(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not v.size:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}


#: config sections that must agree for a finished stage run to stand in for an ablation arm
#: (``model.torch_threads`` excepted: it changes float summation order only)
_REUSE_SECTIONS = ("model", "data", "sandbox", "rollout", "algorithm", "stages")


def reusable_run(cfg: KitConfig, candidate: str | Path, expect: dict[str, Any]) -> bool:
    """Whether the finished run in ``candidate`` is exactly the run ``expect`` describes.

    True when its ``summary.json`` matches every key of ``expect`` (stage, algorithm, seed,
    steps, budget, init_dir = the policy folder; see :func:`kit.train.common.finished_summary`) and its ``config.json``
    equals ``cfg`` on every section that shapes training (:data:`_REUSE_SECTIONS`). Runs are
    deterministic for a seed (the kill-and-resume test), so such a run is the run.
    """
    candidate = Path(candidate)
    if common.finished_summary(candidate, expect) is None or not (candidate / "config.json").exists():
        return False
    theirs = json.loads((candidate / "config.json").read_text())
    ours = json.loads(json.dumps(cfg.to_dict()))
    for d in (theirs, ours):
        d.get("model", {}).pop("torch_threads", None)
        data = d.get("data", {})
        if data.get("split_seed", -1) < 0:  # -1: the run's seed (kit.plan.ablation_arms sets it)
            data["split_seed"] = d.get("seed")
    return all(theirs.get(k) == ours.get(k) for k in _REUSE_SECTIONS)


def _arm_cli(argv: Sequence[str]) -> None:
    """Entry of an ablation worker process: ``<run_dir> <policy_dir>``; the arm's config is the run
    dir's ``config.json`` (written by the parent), its stage the config's first."""
    rd, policy_dir = argv
    cfg = from_json(Path(rd) / "config.json")
    run_stage(cfg, cfg.stages[0].name, policy_dir, rd, evaluate=False)


def die_with_parent() -> None:
    """In a child, before exec (``preexec_fn``): ask Linux to SIGKILL it when the parent dies (even by
    SIGKILL), so no orphan keeps writing into an arm folder that a rerun resumes (ablation workers,
    the pipeline's background job). No-op elsewhere."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_arms(cfg: KitConfig, policy_dir: Path, jobs: list[tuple[KitConfig, Path]],
              progress: Callable[[dict], None] | None) -> None:
    """Train ``jobs`` (arm config, run dir): in this process, or ``cfg.ablation.workers`` at once.

    Workers are separate Python processes (``sys.executable``; safe from notebooks and from
    scripts without a ``__main__`` guard) with ``model.torch_threads // workers`` threads each,
    their output in ``<arm>/worker.log``; their metrics rows reach ``progress`` by polling the
    arms' ``metrics.jsonl``. A failed arm raises ``RuntimeError`` naming it and its log (finished
    arms stay finished; a rerun resumes the rest from their checkpoints).
    """
    workers = min(cfg.ablation.workers, len(jobs))
    if workers <= 1:
        for arm, rd in jobs:
            run_stage(arm, arm.stages[0].name, policy_dir, rd, progress, evaluate=False)
        return
    threads = max(1, cfg.model.torch_threads // workers)
    seen = {rd: len(common.metric_rows(rd)) for _, rd in jobs}

    def relay() -> None:
        for rd in seen:
            rows = common.metric_rows(rd)
            for row in rows[seen[rd]:]:
                if progress is not None:
                    progress(row)
            seen[rd] = len(rows)

    # longest first (GRPO-RoC arms sample 2G), so the last wave is a short arm
    queue, running = sorted(jobs, key=lambda j: j[0].algorithm.selection != "roc"), []
    code = "import sys; from kit.train.ablation import _arm_cli; _arm_cli(sys.argv[1:])"
    try:
        while queue or running:
            while queue and len(running) < workers:
                arm, rd = queue.pop(0)
                rd.mkdir(parents=True, exist_ok=True)
                save(dataclasses.replace(arm, model=dataclasses.replace(arm.model, torch_threads=threads)), rd)
                log = (rd / "worker.log").open("w")
                proc = subprocess.Popen([sys.executable, "-c", code, str(rd), str(policy_dir)],
                                        stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
                running.append((proc, log, arm.algorithm.label, arm.seed, rd))
            time.sleep(1.0)
            relay()
            for item in list(running):
                proc, log, alg, seed, rd = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                log.close()
                if proc.returncode:
                    tail = (rd / "worker.log").read_text(errors="replace").strip().splitlines()[-1:]
                    raise RuntimeError(f"ablation arm {alg} seed {seed} failed (exit {proc.returncode}): "
                                       f"{tail[0] if tail else ''} [log: {rd / 'worker.log'}]")
    finally:
        for proc, log, *_ in running:
            proc.kill()
            proc.wait()
            log.close()
    relay()


def run_ablation(cfg: KitConfig, policy_dir: str | Path, run_dir: str | Path, seeds: Sequence[int] | None = None,
                 progress: Callable[[dict], None] | None = None,
                 reuse: Sequence[str | Path] = ()) -> dict[str, Any]:
    """GRPO against GRPO-RoC from the same policy, same steps, several seeds (report §5.3, Figures 4, 9).

    Each arm of :func:`kit.plan.ablation_arms` (seed, algorithm; the first stage's turns and level,
    ``cfg.ablation.steps`` steps at ``rollout.max_response_tokens``) is one :func:`run_stage`, in
    ``run_dir/<algorithm>_seed<seed>/``;
    ``cfg.ablation.workers`` of them train at once in separate processes. ``grpo``
    samples G per prompt and uses all of them; ``grpo_roc`` samples 2G and keeps G.

    The compared quantity is the tool-error ratio among correct trajectories *as sampled* (the
    policy's behaviour, ``tool_error_ratio_correct_before``), averaged over the first and the
    last ``min(5, steps)`` steps of each run, then summarised over seeds (mean, sample std,
    min, max). The report's Figure 4 expects it to fall under RoC and stay flat under GRPO.

    Args:
        cfg: resolved config (``cfg.ablation.steps``, ``cfg.ablation.seeds``).
        policy_dir: the starting policy (usually the SFT policy).
        run_dir: the ablation's run directory; writes ``ablation.json``.
        seeds: default :func:`kit.plan.arm_seeds` (``cfg.ablation.seeds`` shifted by ``cfg.seed``).
        progress: called with every metrics row (it carries ``algorithm`` and ``seed``).
        reuse: finished run directories (e.g. the main first-stage run, which is the ``grpo_roc``
            arm of seed ``cfg.seed`` when ``ablation.steps`` and the budget equal the stage's); an arm
            whose run one of them already is (:func:`reusable_run`) is copied, not trained
            again, and its entry in ``runs`` names ``reused_from``.
    Returns:
        ``{"steps", "seeds", "runs": {"<algo>_seed<s>": {...first/last values}},
        "<algo>": {"tool_error_ratio_correct_first"/"_last"/"_drop", "reward_first"/"_last":
        spread dicts}, "curves": {"<algo>": per-step mean over seeds}, "seconds"}``.
    """
    run_dir = Path(run_dir)
    if seeds is not None:  # the arms of these seeds: offsets from the run's seed, as arm_seeds reads them
        cfg = dataclasses.replace(cfg, ablation=dataclasses.replace(cfg.ablation, seeds=tuple(s - cfg.seed for s in seeds)))
    arms = ablation_arms(cfg, run_dir)
    seeds = tuple(dict.fromkeys(arm.seed for arm in arms))
    steps = cfg.ablation.steps
    stage_name = arms[0].stages[0].name if arms else cfg.stages[0].name
    t0 = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    curves: dict[str, list[list[float]]] = {alg: [] for alg in ABLATION_ALGORITHMS}
    jobs = []
    for arm in arms:
        rd = Path(arm.run_dir)
        expect = {"stage": stage_name, "algorithm": arm.algorithm.label, "seed": arm.seed, "steps": steps,
                  "init_dir": str(policy_dir), "max_response_tokens": arm.stages[0].max_response_tokens}
        if common.finished_summary(rd, expect) is not None:  # e.g. trained by the pipeline's background job
            if progress is not None:  # shown as trained: the live curves and the bar get its rows
                for row in common.metric_rows(rd):
                    progress(row)
            continue
        source = next((Path(c) for c in reuse if reusable_run(arm, c, expect)), None)
        if source is not None:
            shutil.rmtree(rd, ignore_errors=True)
            shutil.copytree(source, rd, ignore=shutil.ignore_patterns("checkpoints"))
            (rd / "REUSED_FROM").write_text(f"{source}\n")
            if progress is not None:
                for row in common.metric_rows(rd):
                    progress(row)
            continue
        jobs.append((arm, rd))
    _run_arms(cfg, Path(policy_dir), jobs, progress)
    for seed in seeds:
        for alg in ABLATION_ALGORITHMS:
            rd = run_dir / f"{alg}_seed{seed}"
            rows = [r for r in common.metric_rows(rd) if r.get("stage") == stage_name]
            k = min(5, len(rows))
            err = [r["tool_error_ratio_correct_before"] for r in rows]
            rew = [r["reward_mean"] for r in rows]
            runs[f"{alg}_seed{seed}"] = {
                "algorithm": alg, "seed": seed,
                "tool_error_ratio_correct_first": common.nanmean(err[:k]),
                "tool_error_ratio_correct_last": common.nanmean(err[-k:]),
                "reward_first": float(np.mean(rew[:k])), "reward_last": float(np.mean(rew[-k:])),
                "response_len_last": float(np.mean([r["response_len_mean"] for r in rows[-k:]])),
                "tool_calls_per_traj_last": float(np.mean([r["tool_calls_per_traj"] for r in rows[-k:]])),
            }
            if (rd / "REUSED_FROM").exists():
                runs[f"{alg}_seed{seed}"]["reused_from"] = (rd / "REUSED_FROM").read_text().strip()
            curves[alg].append(err)
    summary: dict[str, Any] = {"steps": steps, "seeds": list(seeds), "stage": stage_name, "runs": runs}
    for alg in ABLATION_ALGORITHMS:
        rs = [v for v in runs.values() if v["algorithm"] == alg]
        summary[alg] = {key: _spread([r[key] for r in rs]) for key in
                        ("tool_error_ratio_correct_first", "tool_error_ratio_correct_last", "reward_first", "reward_last")}
        summary[alg]["tool_error_ratio_correct_drop"] = _spread(
            [r["tool_error_ratio_correct_first"] - r["tool_error_ratio_correct_last"] for r in rs])
    summary["curves"] = {alg: _nanmean_columns(c) for alg, c in curves.items() if c}
    summary["seconds"] = time.perf_counter() - t0
    summary = jsonio.jsonable(summary)  # returned as written: an undefined value is None, as in the file
    jsonio.write_json(run_dir / "ablation.json", summary)
    if progress is not None:
        progress({"stage": "ablation", "summary": summary})
    return summary
