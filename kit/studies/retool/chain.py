"""Notebook 10: ReTool (Feng et al. 2025) on this run, PPO against GRPO-RoC (issue #33).

ReTool trains with PPO (a critic, GAE advantages, no KL) from a cold start on code-integrated
reasoning and reports what RL does to the model's use of the interpreter (its §3.3). Here PPO
(``algorithm.adv_estimator = "gae"``, :data:`kit.plan.RETOOL_ARMS`) trains from the same cold-start
policy, for the same steps and seeds as notebook 06's GRPO-RoC arms, which are its baseline
(``ablation/grpo_roc_seed<s>/``; not trained again). Both log ReTool's behaviour metrics every step
(:mod:`kit.analysis.code_behaviour`); :func:`behaviour_figure` draws them like ReTool's Figure panels,
:func:`find_self_correction` looks for a correct response with a code self-correction in the PPO
policy's samples, and :func:`retool_verdicts` evaluates the ReTool claims of
``kit/reference/claims.yaml`` (``section: ReTool``) on the two folders.

:func:`train_retool` is what the notebook's training cell runs and what the pipeline's background
job runs (:mod:`kit.studies.retool.job`), with the same parameters; a finished arm is not trained again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from kit import claims, jsonio, runtime
from kit.analysis import code_behaviour
from kit.chain.findings import bullets, column_mean, fmt, plural, thirds
from kit.chain.policies import sample_trajectories
from kit.config import KitConfig, load
from kit.metrics import read_rows
from kit.plan import RETOOL_BASELINE, retool_arms
from kit.progress import StepBar
from kit.report.figures import collect_metrics, save_figure
from kit.studies.retool.emergence import EMERGENCE_DIR, EVAL_FILE, train_emergence
from kit.studies.retool.figures import figure_retool_behaviour
from kit.studies.retool.kinds import MEASURES

SECTION = "ReTool"  # the claims' section in kit/reference/claims.yaml


def retool_config(profile: str, overrides: Mapping[str, Any] | None, run_dir, seed: int) -> KitConfig:
    """Notebook 10's config (``profile`` with ``overrides``); writes ``run_dir/config.json``. The notebook
    and the background job (:mod:`kit.studies.retool.job`) both build it here, so they train the same arms.

    Raises:
        kit.config.ConfigError: an unknown key or a value of the wrong type.
    """
    return load(profile, dict(overrides or {}), run_dir=run_dir, seed=seed)


def train_retool(cfg: KitConfig, run_dir: str | os.PathLike, init_dir: str | os.PathLike,
                 data_dir: str | os.PathLike | None, progress=None) -> dict[str, Any]:
    """Train every arm of :func:`kit.plan.retool_arms` (PPO per seed) from the upstream run folder
    ``init_dir`` (the cold start), one first-stage run each through the runtime's ``run_stage``, in
    ``run_dir/<arm>_seed<s>/``, then the emergence arm (:func:`kit.studies.retool.emergence.train_emergence`:
    a clean cold start, PPO from it, both sampled on held-out tasks; none when ``retool.emergence_seeds`` is 0);
    writes ``run_dir/retool.json`` (the arms and their summaries).

    Returns:
        ``{"arms": {folder: summary}, "baseline": "grpo_roc", "steps", "seeds", "emergence": {...}}``.
    Raises:
        ValueError: ``retool.emergence_seeds`` > 0 with a model other than the tiny one.
    """
    arms = retool_arms(cfg, run_dir)
    rt = runtime.get(cfg)
    out: dict[str, Any] = {"arms": {}, "baseline": RETOOL_BASELINE, "steps": cfg.ablation.steps,
                           "seeds": sorted({a.seed for _, a in arms})}
    with StepBar(cfg.ablation.steps * len(arms), f"ReTool: PPO ({len(arms)} runs)", progress, count_rows=True) as bar:
        for folder, arm in arms:
            seen: list[dict] = []

            def relay(row: dict, seen=seen) -> None:
                if "summary" not in row:  # one arm's end is not the comparison's (it would close the bar)
                    seen.append(row)
                    bar(row)

            out["arms"][folder] = rt.run_stage(arm, arm.stages[0].name, run_dir=arm.run_dir, init_dir=init_dir,
                                               data_dir=data_dir, progress=relay)
            # an arm finished earlier (the background job) reports nothing: its rows are shown as trained
            for row in read_rows(Path(arm.run_dir) / "metrics.jsonl", missing_ok=True)[sum("step" in r for r in seen):]:
                bar(row)
        bar({"stage": "retool", "summary": jsonio.jsonable(out)})
    out["emergence"] = train_emergence(cfg, run_dir, data_dir)
    out = jsonio.jsonable(out)
    jsonio.write_json(Path(run_dir) / "retool.json", out)
    return out


def arm_metrics(run_dir: str | os.PathLike, ablation_dir: str | os.PathLike, seeds) -> pd.DataFrame:
    """The metrics rows of the PPO arms (``run_dir``) and of the ablation's GRPO-RoC arms of ``seeds``
    (``ablation_dir``), one frame; ``algorithm`` is ``ppo`` / ``grpo_roc``.

    Raises:
        kit.metrics.MetricsError: an arm has no ``metrics.jsonl``.
    """
    ppo = collect_metrics(sorted(Path(run_dir).glob("*_seed*/metrics.jsonl")))
    base = collect_metrics([Path(ablation_dir) / f"{RETOOL_BASELINE}_seed{s}" / "metrics.jsonl" for s in seeds])
    return pd.concat([ppo, base], ignore_index=True)


def behaviour_figure(run_dir, ablation_dir, seeds, *, note: str = "", smooth: int = 1):
    """ReTool's Figure panels (a)-(f) for this run (:func:`kit.studies.retool.figures.figure_retool_behaviour`),
    saved as ``run_dir/retool_behaviour.png/.pdf``; returns the Figure."""
    fig = figure_retool_behaviour(arm_metrics(run_dir, ablation_dir, seeds), note=note, smooth=smooth)
    save_figure(fig, run_dir, "retool_behaviour")
    return fig


def find_self_correction(cfg: KitConfig, run_dir: str | os.PathLike, *, n_problems: int = 16, n: int = 8, seed: int = 0):
    """A correct response with a code self-correction (a failed call followed by a working one) from
    the PPO arms' final policies: ``n`` samples of ``n_problems`` held-out problems from each arm's
    policy in turn (``<arm>_seed<s>/policy``), stopping at the first arm that gives one (at the tiny
    profile's rate, ~0.04 of correct responses, one arm's 128 samples expect about two).

    Returns:
        ``(trajectory, tokenizer, counts)``: the first such trajectory (None when no sample has one)
        and ``{"samples", "correct", "self_corrected_correct", "policies"}`` over the policies sampled.
    """
    counts = {"samples": 0, "correct": 0, "self_corrected_correct": 0, "policies": 0}
    tok = None
    for policy in sorted(Path(run_dir).glob("*_seed*/policy")):
        trs, tok, batch = sample_trajectories(cfg, policy, n_problems=n_problems, n=n, seed=seed)
        open_id = code_behaviour.call_open_id(tok)
        correct = (batch.rewards.reshape(-1) > 0).tolist()
        hits = [t for t, ok in zip(trs, correct, strict=True) if ok and code_behaviour.code_use(t, open_id).self_corrections]
        counts = {"samples": counts["samples"] + len(trs), "correct": counts["correct"] + int(sum(correct)),
                  "self_corrected_correct": counts["self_corrected_correct"] + len(hits), "policies": counts["policies"] + 1}
        if hits:
            return hits[0], tok, counts
    return None, tok, counts


def retool_verdicts(root: str | os.PathLike, run_dir: str | os.PathLike, ablation_dir: str | os.PathLike):
    """The ReTool claims (``section: ReTool``) evaluated on the PPO arms in ``run_dir`` and the
    ablation's arms in ``ablation_dir`` (notebook 20 evaluates them again for ``claims.json``).

    Returns:
        ``(results, table)``: the :class:`kit.claims.ClaimResult` list and one row per test.
    """
    mine = [c for c in claims.load_claims() if c.get("section") == SECTION]
    results = claims.evaluate_claims(claims.RunDirs.under(root, retool=run_dir, ablation=ablation_dir), mine)
    table = pd.DataFrame([{"claim": r.id, "test": t.name, "statistic": t.value, "verdict": t.verdict, "reason": t.reason}
                          for r in results for t in r.tests]).set_index(["claim", "test"])
    return results, table


def last_rows(run_dir: str | os.PathLike) -> pd.DataFrame:
    """The last step of each PPO arm: its behaviour keys and accuracy (for the notebook's closing note)."""
    rows = []
    for f in sorted(Path(run_dir).glob("*_seed*/metrics.jsonl")):
        got = read_rows(f, missing_ok=True)
        if got:
            rows.append({"arm": f.parent.name, **{k: got[-1].get(k) for k in ("step", "accuracy", *code_behaviour.KEYS)}})
    return pd.DataFrame(rows)


def emergence_table(run_dir: str | os.PathLike) -> pd.DataFrame:
    """The emergence arm (``run_dir/emergence/eval.jsonl``, :mod:`kit.studies.retool.emergence`), one row per
    policy (the clean cold start, PPO from it): trajectories, accuracy, the share with a failed call, then the
    claims' measures over all of the policy's rows (:data:`kit.studies.retool.kinds.MEASURES`: failed calls fixed
    later, first-call position) with the failed-call count. Empty when the arm did not run
    (``retool.emergence_seeds = 0``).

    Raises:
        kit.metrics.MetricsError: the file is not JSON lines.
    """
    rows = read_rows(Path(run_dir) / EMERGENCE_DIR / EVAL_FILE, missing_ok=True)
    out: dict[str, dict[str, Any]] = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]

        def ratio(measure: str, mine=mine) -> float:
            (num, den), _ = MEASURES[measure]
            d = sum(den(r) for r in mine)
            return sum(num(r) for r in mine) / d if d else float("nan")

        out[policy] = {"trajectories": len(mine), "accuracy": ratio("accuracy"),
                       "with a failed call": sum(r["failed_call"] for r in mine) / len(mine),
                       "fixed after a failure": ratio("fix_after_failure"),
                       "failed, n": sum(r["failed_call"] for r in mine), "first-call position": ratio("first_call_position")}
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("policy")


def retool_findings(run_dir: str | os.PathLike) -> str:
    """Markdown: ReTool's comparison in ``run_dir`` (notebook 10): for the PPO arms, the first-third and
    last-third means over seeds of ReTool's behaviour keys and accuracy, and the ReTool verdicts the
    notebook wrote to ``verdicts.json`` (``{claim id: verdict}``; notebook 20 writes them to claims.json).

    Raises:
        kit.metrics.MetricsError: no ``metrics.jsonl`` under ``run_dir``, or a malformed one.
    """
    df = collect_metrics(sorted(Path(run_dir).glob("*_seed*/metrics.jsonl")))
    keys = {"code_ratio": "code ratio", "code_lines_per_call": "code lines per call", "code_pass_rate": "code pass rate",
            "self_correction_rate_correct": "self-correction rate of correct responses",
            "first_call_position": "first-call position", "accuracy": "training accuracy"}
    ends = {}
    for seed, arm in df.groupby("seed"):
        first, last, _ = thirds(arm)
        ends[int(seed)] = {f"{k}_{w}": column_mean(d, k) for k in keys for w, d in (("first", first), ("last", last))}
    arms = pd.DataFrame(ends).T
    lines: list[str | None] = [f"PPO ({plural(len(arms), 'seed')}), first third -> last third of each arm's steps: " + "; ".join(
        f"{label} {fmt(arms[f'{k}_first'].mean())} -> {fmt(arms[f'{k}_last'].mean())}" for k, label in keys.items())]
    em = emergence_table(run_dir)
    if {"cold_start", "ppo"} <= set(em.index):
        a, b = em.loc["cold_start"], em.loc["ppo"]
        lines.append("Emergence arm (a cold start never shown a fix, then PPO), on the same held-out tasks: " + "; ".join(
            f"{k} {fmt(a[k])} -> {fmt(b[k])}" for k in ("fixed after a failure", "first-call position", "accuracy"))
            + f" ({int(a['failed, n'])} and {int(b['failed, n'])} trajectories with a failed call)")
    verdicts = Path(run_dir) / "verdicts.json"
    if verdicts.exists():
        got = json.loads(verdicts.read_text())
        lines.append("ReTool's pre-registered claims: " + ", ".join(f"`{k}` {v}" for k, v in got.items()))
    return bullets("What this run showed", lines)
