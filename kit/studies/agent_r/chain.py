"""Notebook 11: Agent-R from the cold-start policy against three baselines with the same budget (issue #34).

Arms, each ``agent_r.iterations`` iterations from the cold-start policy (:mod:`kit.studies.agent_r.iterate`):
``agent_r`` (revision + good trajectories), ``direct`` (the same pairs revised at the bad branch's last
observed turn), ``good_only`` (good trajectories only: rejection-sampling fine-tuning from the same search
budget) and ``null`` (the same fine-tune, the Agent-R arm's steps, on the cold-start data alone: the design's
control, issue #46); the fifth policy is the cold start itself: notebook 02's, or with ``agent_r.cold_start =
"clean"`` one trained in ``cold_start/`` without failed-then-fixed demos (:func:`base_cold_start`). Every arm is sampled after every iteration on the same held-out tasks
(``policy_eval.jsonl``, the file the Agent-R claims read, :mod:`kit.studies.agent_r.kinds`); ``summary.json``
carries ``null_accuracy_change``, which the ``agent_r_null_arm_holds`` precondition reads.

Files in ``run_dir``: ``config.json``, ``search_cost.jsonl`` (per arm and iteration: rollouts, model
turns sampled and replayed, sandbox calls run and replayed, the engine's prefill and reused
tokens, wall and CPU seconds of the search), ``iterations.jsonl`` (rows, pairs, alpha, steps, passes per row, peak lr, loss),
``policy_eval.jsonl``, ``probe_eval.jsonl`` (forced-error probes, :mod:`kit.studies.agent_r.probes`), ``trees/<arm>_iter<k>.json`` (one tree for the picture),
``revisions.jsonl`` (a few revision rows with their segments), ``<arm>/iter_<k>/policy/``,
``verl/revision_sft.parquet`` (the last Agent-R iteration's rows with the cold-start mix, for
VERL's SFT trainer) and ``summary.json`` (totals, CPU seconds of the notebook's process).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from kit import jsonio
from kit.algo.roc_penalties import tool_failure_count
from kit.analysis.tokens import analyze_trajectory
from kit.config import KitConfig, load, save
from kit.data import tasks
from kit.models import load_policy, save_policy
from kit.report.figures import save_figure
from kit.rollout import run_coroutine
from kit.sandbox import SandboxPool
from kit.studies.agent_r import iterate, parquet, probes
from kit.studies.agent_r.figures import figure_agent_r
from kit.studies.agent_r.search import params_from_config
from kit.studies.agent_r.tree import lowest_common
from kit.train import common, sft
from kit.train.sft import SFT_DATA_FILE, encode_rows, prepare_sft_data

EVAL_FILE, COST_FILE, ITER_FILE, REV_FILE = "policy_eval.jsonl", "search_cost.jsonl", "iterations.jsonl", "revisions.jsonl"
#: the run's figure (:func:`policies_figure`), ``run_dir/<name>.png/.pdf``, copied into the report by notebook 20
AGENT_R_FIGURE = "agent_r_policies"


def agent_r_config(profile: str, overrides: Mapping[str, Any] | None, run_dir, seed: int) -> KitConfig:
    """Notebook 11's config (``[agent_r]`` and the rest); writes ``run_dir/config.json``."""
    return load(profile, dict(overrides or {}), run_dir=run_dir, seed=seed)


def base_cold_start(cfg: KitConfig, run_dir, sft_dir, progress: Callable[[str], None] = print) -> Path:
    """The folder whose ``policy/`` every arm starts from and whose demos are the general data: ``sft_dir``
    (notebook 02's cold start) for ``agent_r.cold_start = "run"``; for ``"clean"``, ``run_dir/cold_start/``,
    trained there first when it holds no policy (:func:`kit.train.sft.clean_config`: the run's recipe and
    seed, no demo whose call fails and is then fixed, so recovery is not taught; Agent-R's premise, issue #46).

    Raises:
        ValueError: ``"clean"`` with a model other than the tiny one (its cold start is not made of the task
            family's demos), or ``cold_start/`` trained with another config (named; delete it).
    """
    if cfg.agent_r.cold_start == "run":
        return Path(sft_dir)
    if cfg.model.name_or_path != "tiny":
        raise ValueError(f"agent_r.cold_start = 'clean' trains a cold start from the tiny task family's demos, which "
                         f"model {cfg.model.name_or_path!r} does not use; set agent_r.cold_start = 'run'")
    clean = sft.clean_config(cfg, Path(run_dir) / "cold_start")
    sft.refuse_other_config(clean.run_dir, clean, ignore=("agent_r",))  # agent_r's keys do not reach the cold start
    if not (Path(clean.run_dir) / "policy" / "config.json").exists():
        progress(f"clean cold start: {clean.sft.steps} SFT steps, data.demo_error_fraction = 0")
        save(clean, clean.run_dir)
        sft.run_sft(clean, clean.run_dir)
    return Path(clean.run_dir)


def cold_start_rows(cfg: KitConfig, tok, sft_dir, run_dir) -> list:
    """The cold-start SFT rows (task demos and function calling) of ``sft_dir`` (its ``sft_data.json``;
    rebuilt in ``run_dir`` when absent), ``(ids, mask)`` each: Agent-R's general data."""
    cached = Path(sft_dir) / SFT_DATA_FILE
    data = json.loads(cached.read_text()) if cached.exists() else prepare_sft_data(cfg, run_dir)
    task_rows, fc_rows, _ = encode_rows(cfg, tok, data)
    return task_rows + fc_rows


def evaluate(cfg: KitConfig, model, tok, problems, *, policy: str, iteration: int, seed: int) -> list[dict[str, Any]]:
    """Sample ``agent_r.eval_samples`` trajectories per held-out problem at T = 1 and label each:
    ``correct``, ``failed_call`` (a failed tool call, the model's fault), §5.4 ``reflection`` and
    ``high`` token counts (:func:`kit.analysis.tokens.analyze_trajectory`). Rows of ``policy_eval.jsonl``."""
    batch = probes.sample_heldout(cfg, model, tok, problems, cfg.agent_r.eval_samples, seed=seed)
    rows = []
    for p, group, rewards in zip(batch.problems, batch.groups, batch.rewards, strict=True):
        for tr, r in zip(group, rewards, strict=True):
            counts = analyze_trajectory(model, tok, tr)["counts"]
            rows.append({"policy": policy, "iteration": iteration, "problem": p.id, "correct": int(r > 0),
                         "failed_call": int(tool_failure_count(tr.tool_errors) > 0), "reflection": counts["reflection"],
                         "high": counts["high"], "tool_calls": tr.tool_calls, "tokens": len(tr.response_ids)})
    return rows


def tree_json(tree, tok, rows) -> dict[str, Any]:
    """One tree for the picture: nodes (id, parent, depth, visits, q, terminal, failed_call, text,
    reward of a leaf) and, when one of ``rows`` is a revision of this tree, its pair's good and bad
    leaves, shared node and transition node."""
    ids = {}
    nodes = []
    for n in tree.root.walk():
        ids[id(n)] = len(ids)
        reward = tree.rewards[n.leaves[0]] if n.leaves else None
        nodes.append({"id": ids[id(n)], "parent": ids[id(n.parent)] if n.parent is not None else None,
                      "depth": n.depth, "visits": n.visits, "q": n.q, "terminal": n.terminal,
                      "failed_call": n.failed_call, "reward": reward,
                      "text": tok.decode(list(n.turn_ids), skip_special_tokens=False)[:160] if n.turn_ids else "prompt"})
    out = {"task": tree.problem.id, "question": tree.problem.question, "nodes": nodes, "pair": None}
    rev = next((r for r in rows if r.kind == "revision" and r.task == tree.problem.id), None)
    if rev is not None:
        good, bad = tree.leaves[rev.good], tree.leaves[rev.bad]
        out["pair"] = {"good": ids[id(good)], "bad": ids[id(bad)], "shared": ids[id(lowest_common(good, bad))],
                       "transition": ids[id(bad.path()[rev.transition])], "signal": rev.signal}
    return out


def revision_json(row, tok) -> dict[str, Any]:
    """A revision row as text segments ``[{kind, text, loss}]`` for the coloured view (feedback
    inside the good continuation is its own ``feedback`` segment, without loss); a segment's ``loss`` is its
    training mask (the revision signal's is 1 when ``agent_r.train_signal`` trained it)."""
    segs = []
    for kind, s, e in row.segments:
        if kind != "good":
            segs.append({"kind": kind, "text": tok.decode(row.ids[s:e], skip_special_tokens=False),
                         "loss": int(any(row.mask[s:e]))})
            continue
        t = s
        while t < e:  # split the continuation by its mask: model tokens (loss) and tool feedback (none)
            u = t
            while u < e and row.mask[u] == row.mask[t]:
                u += 1
            segs.append({"kind": "good" if row.mask[t] else "feedback",
                         "text": tok.decode(row.ids[t:u], skip_special_tokens=False), "loss": int(row.mask[t])})
            t = u
    return {"task": row.task, "transition": row.transition, "signal": row.signal, "segments": segs}


def run_agent_r(cfg: KitConfig, run_dir, sft_dir, progress: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Agent-R and its three baselines from the base cold start's policy (:func:`base_cold_start`: ``sft_dir``'s,
    or a clean one trained in ``run_dir/cold_start/``); the module docstring says what it writes.

    On ``runtime = "verl"`` nothing is searched (the search runs on the local engine; the paper
    scale trains the parquet of :func:`kit.studies.agent_r.parquet.write_rows` with VERL's SFT trainer,
    ``kit.bridge.revision_sft``): ``summary.json`` says so and the Agent-R claims are inconclusive.

    Raises:
        FileNotFoundError: ``sft_dir/policy`` is missing.
        ValueError: from :func:`base_cold_start`.
    """
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    save(cfg, run)
    if cfg.runtime != "local":  # the paper chain goes on; the claims read no file and are inconclusive
        summary = {"skipped": f"runtime {cfg.runtime!r}: the search runs on the local engine only; at paper scale "
                              "write the rows with kit.studies.agent_r.parquet and train them with kit.bridge.revision_sft"}
        jsonio.write_json(run / "summary.json", summary)
        return summary
    for name in (EVAL_FILE, COST_FILE, ITER_FILE, REV_FILE, probes.PROBE_FILE):
        (run / name).unlink(missing_ok=True)
    c0, t0 = time.process_time(), time.perf_counter()
    say = progress or (lambda s: None)
    common.set_threads(cfg.model.torch_threads)
    sft_dir = base_cold_start(cfg, run, sft_dir, say)
    policy = Path(sft_dir) / "policy"
    if not (policy / "config.json").exists():
        raise FileNotFoundError(f"{policy}: the cold-start policy is missing (notebook 02 writes it)")
    cold, tok = load_policy(policy)
    cold.eval()
    general = cold_start_rows(cfg, tok, sft_dir, run)
    split = tasks.task_split(cfg)
    a = cfg.agent_r
    heldout = list(split.heldout)[: a.eval_problems or None]
    p = params_from_config(cfg)
    turns = probes.probe_turns(heldout, cfg.seed)

    def sample(model, policy: str, iteration: int) -> None:  # a policy on the held-out tasks, then on the probes
        for r in evaluate(cfg, model, tok, heldout, policy=policy, iteration=iteration,
                          seed=common.step_seed(cfg.seed, "ar-eval")):
            jsonio.append_jsonl(run / EVAL_FILE, r)
        if a.probe_samples:
            for r in probes.evaluate_probes(cfg, model, tok, heldout, turns, policy=policy, iteration=iteration,
                                            seed=common.step_seed(cfg.seed, "ar-probe")):
                jsonio.append_jsonl(run / probes.PROBE_FILE, r)

    say(f"cold start: sampling {len(heldout)} held-out tasks x {a.eval_samples}"
        + (f", and their forced-error probes x {a.probe_samples}" if a.probe_samples else ""))
    sample(cold, "cold_start", 0)
    last_rows: list = []
    agent_r_steps: dict[int, int] = {}  # iteration -> the Agent-R arm's steps, which the null arm takes
    for arm in iterate.ARMS:
        model, _ = load_policy(policy)
        seen: list = []  # the arm's rows of every iteration so far (agent_r.train_from = "cold_start")
        for k in range(1, a.iterations + 1):
            alpha = iterate.alpha_at(a.alphas, k)
            rows, counts, trees = [], {"good": 0, "pairs": 0, "revision": 0, "skipped": 0}, []
            if arm in iterate.SEARCHED:
                problems = iterate.task_slice(list(split.train), a.tasks, k)
                seed = common.step_seed(cfg.seed, "agent_r-search", k)  # both arms' first search: the same samples

                async def go(model=model, problems=problems, seed=seed):
                    async with SandboxPool(cfg.sandbox) as pool:
                        return await iterate.collect_trees(model, tok, problems, pool, p, cfg.rollout, seed=seed)

                trees, cost = run_coroutine(go())
                jsonio.append_jsonl(run / COST_FILE, {"arm": arm, "iteration": k, "tasks": len(problems), **cost})
                rows, counts = iterate.build_rows(trees, tok, arm=arm, alpha=alpha, beta=a.beta, rule=a.transition,
                                                  max_pairs=a.max_pairs, seed=common.step_seed(cfg.seed, "rs", rs_arm(arm), k),
                                                  train_signal=a.train_signal)
            seen += rows
            if a.train_from == "cold_start":  # retrain the cold start on every iteration's rows so far
                model, _ = load_policy(policy)
            train = seen if a.train_from == "cold_start" else rows
            fit = iterate.train_iteration(cfg, model, tok, train, general, iteration=k, arm=arm,
                                          steps=agent_r_steps.get(k, 0) if arm == "null" else None)
            if arm == "agent_r":
                agent_r_steps[k] = len(fit)
            save_policy(model, tok, run / arm / f"iter_{k}" / "policy")
            jsonio.append_jsonl(run / ITER_FILE, {"arm": arm, "iteration": k, "alpha": alpha, "rows": len(rows), **counts,
                                      "trained_rows": len(train), "steps": len(fit),
                                      "passes": (len(fit) * iterate.own_per_batch(a.batch_size or cfg.sft.batch_size, a.eta)
                                                 / len(train)) if train else 0.0,
                                      "lr_peak": max((f["lr"] for f in fit), default=0.0),
                                      "loss_tokens": sum(sum(r.mask) for r in train),
                                      "loss_first": fit[0]["loss"] if fit else None,
                                      "loss_last": fit[-1]["loss"] if fit else None})
            if arm == "agent_r":
                shown = next((t for t in trees if any(r.kind == "revision" and r.task == t.problem.id for r in rows)),
                             trees[0])
                jsonio.write_json(run / "trees" / f"{arm}_iter{k}.json", tree_json(shown, tok, rows))
                for r in [r for r in rows if r.kind == "revision"][:3]:
                    jsonio.append_jsonl(run / REV_FILE, {"iteration": k, **revision_json(r, tok)})
                last_rows = rows
            loss = f"loss {fit[0]['loss']:.3f} -> {fit[-1]['loss']:.3f}" if fit else "no step (no rows)"
            say(f"{arm} iteration {k}: {len(trees)} trees, {counts['good']} good, {counts['revision']} revision rows, "
                f"alpha {alpha}, {len(fit)} steps, {loss}")
            sample(model, arm, k)  # every arm, every iteration
    mix = parquet.general_share(general, len(last_rows), a.eta, seed=cfg.seed)  # eta per Agent-R row, as the loop weighs it
    pq = parquet.write_rows(last_rows, run / "verl" / "revision_sft.parquet", tok, mix)
    summary = {"policies": ["cold_start", *[f"{arm}_{k}" for arm in iterate.ARMS for k in range(1, a.iterations + 1)]],
               "eval_problems": len(heldout), "eval_samples": a.eval_samples, "parquet": str(pq),
               "null_accuracy_change": null_accuracy_change(_rows(run / EVAL_FILE)),
               "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
               "cost": cost_table(run).to_dict(orient="records")}
    jsonio.write_json(run / "summary.json", summary)
    return summary


def rs_arm(arm: str) -> str:
    """The arm whose revision-signal stream ``arm`` draws from: both revising arms (Agent-R and direct revision)
    share Agent-R's, so their rows differ only in where the signal cuts in; other arms their own."""
    return "agent_r" if arm in iterate.REVISING else arm


def null_accuracy_change(rows: list[dict[str, Any]]) -> float | None:
    """The null arm's held-out sampled accuracy at its last iteration minus the cold start's (``policy_eval.jsonl``
    rows; both sampled on the same problems with the same streams): what the fine-tune alone did to the policy,
    the quantity of the ``agent_r_null_arm_holds`` precondition (issue #46). None without both policies' rows."""
    cold = [r["correct"] for r in rows if r["policy"] == "cold_start"]
    last = max((r["iteration"] for r in rows if r["policy"] == "null"), default=None)
    null = [r["correct"] for r in rows if r["policy"] == "null" and r["iteration"] == last]
    return (sum(null) / len(null) - sum(cold) / len(cold)) if cold and null else None


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def cost_table(run_dir: str | os.PathLike):
    """The search's cost per arm and iteration (``search_cost.jsonl``) as a DataFrame."""
    cols = ["arm", "iteration", "tasks", "rollouts", "live_turns", "replayed_turns", "live_calls", "replayed_calls",
            "prefill_tokens", "reused_tokens", "tokens", "wall_s", "cpu_s"]
    df = pd.DataFrame(_rows(Path(run_dir) / COST_FILE))
    return df[[c for c in cols if c in df]] if not df.empty else df


def _labels(df) -> list[str]:
    """A policy label per row: ``cold_start``, else ``<arm>_<iteration>``."""
    return [p if p == "cold_start" else f"{p}_{i}" for p, i in zip(df["policy"], df["iteration"], strict=True)]


def policy_table(run_dir: str | os.PathLike):
    """Per policy (cold start, each arm's iterations): trajectories, accuracy, share with a failed call,
    recovery after a failed call, reflection share of high-entropy tokens, and, when the run has forced-error
    probes (``probe_eval.jsonl``), recovery after the forced failing call and the number of probes."""
    df = pd.DataFrame(_rows(Path(run_dir) / EVAL_FILE))
    if df.empty:
        return df
    df["label"] = _labels(df)
    g = df.groupby("label", sort=False)
    fail = df[df["failed_call"] > 0].groupby("label", sort=False)
    out = pd.DataFrame({"trajectories": g.size(), "accuracy": g["correct"].mean(),
                        "with_failed_call": g["failed_call"].mean(),
                        "recovery": fail["correct"].mean(), "failed_n": fail.size(),
                        "reflection_share": g["reflection"].sum() / g["high"].sum().where(g["high"].sum() > 0)})
    pr = pd.DataFrame(_rows(Path(run_dir) / probes.PROBE_FILE))
    if not pr.empty:
        pr["label"] = _labels(pr)
        by = pr.groupby("label", sort=False)["correct"]
        out["probe_recovery"], out["probes"] = by.mean(), by.size()
    return out.round(3)


def policies_figure(run_dir: str | os.PathLike, note: str = ""):
    """Agent-R's figure for this run (:func:`kit.studies.agent_r.figures.figure_agent_r`: the policies on the
    held-out tasks by iteration, and the first Agent-R tree), saved as ``run_dir/agent_r_policies.png/.pdf``
    where notebook 20 copies it for the summary's Agent-R page; returns the Figure, or None (with a
    line saying so) when the run evaluated no policy.
    """
    path = Path(run_dir) / EVAL_FILE
    if not path.exists() or not path.read_text().strip():
        print(f"no policy was evaluated in {run_dir} (no {EVAL_FILE})")
        return None
    trees = sorted(Path(run_dir, "trees").glob("agent_r_iter*.json"))
    probe_rows = _rows(Path(run_dir) / probes.PROBE_FILE)
    fig = figure_agent_r(pd.read_json(path, lines=True), probes=pd.DataFrame(probe_rows) if probe_rows else None,
                         tree=trees[0] if trees else None, note=note)
    save_figure(fig, run_dir, AGENT_R_FIGURE)
    return fig


def agent_r_findings(run_dir: str | os.PathLike) -> str:
    """What this run showed, as Markdown computed from its files (the notebook's closing cell)."""
    run = Path(run_dir)
    tab = policy_table(run)
    if tab.empty:
        return f"No policy was evaluated in `{run}` (no `{EVAL_FILE}`)."
    its = _rows(run / ITER_FILE)
    s = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    lines = [f"- Held-out tasks: {s.get('eval_problems', '?')} x {s.get('eval_samples', '?')} samples per policy (T = 1)."]
    for label, r in tab.iterrows():
        rec = "n/a" if r["failed_n"] != r["failed_n"] or not r["failed_n"] else f"{r['recovery']:.3f} of {int(r['failed_n'])}"
        probe = (f", after the forced failing call {r['probe_recovery']:.3f} of {int(r['probes'])} probes"
                 if "probes" in r and r["probes"] == r["probes"] else "")
        lines.append(f"- `{label}`: accuracy {r['accuracy']:.3f}, recovery after a failed call {rec}{probe}, "
                     f"reflection share {r['reflection_share']:.3f}.")
    rev = sum(i.get("revision", 0) for i in its if i["arm"] == "agent_r")
    direct = sum(i.get("revision", 0) for i in its if i["arm"] == "direct")
    good = sum(i.get("good", 0) for i in its if i["arm"] == "good_only")
    cost = cost_table(run)
    if not cost.empty:
        lines.append(f"- Search cost: {int(cost['rollouts'].sum())} rollouts, {int(cost['live_calls'].sum())} sandbox "
                     f"calls run and {int(cost['replayed_calls'].sum())} replayed, "
                     f"{cost['cpu_s'].sum():.1f} CPU s of search; the notebook's process used {s.get('cpu_s', 0):.1f} CPU s.")
    lines.append(f"- Training rows: {rev} revision trajectories over the Agent-R iterations, {direct} direct-revision "
                 f"trajectories (revised at the bad branch's last observation), {good} good-only rows; "
                 f"{sum(i.get('skipped', 0) for i in its if i['arm'] == 'agent_r')} good/bad pairs were skipped because "
                 "the transition turn had no tool observation to revise after.")
    change = s.get("null_accuracy_change")
    if change is not None:
        lines.append(f"- Null arm (the same fine-tune, the Agent-R arm's steps, on the cold-start data alone): held-out "
                     f"accuracy {change:+.3f} against the cold start at its last iteration; the precondition "
                     "`agent_r_null_arm_holds` reads it (a damaged null arm makes the Agent-R claims 'invalid design').")
    cold = tab.loc["cold_start", "accuracy"] if "cold_start" in tab.index else float("nan")
    worse = [lab for lab, r in tab.iterrows() if lab != "cold_start" and r["accuracy"] < cold]
    if worse and len(worse) == len(tab) - 1:
        lines.append(f"- **Every trained policy scores below the cold start** ({cold:.3f}; "
                     + ", ".join(f"`{lab}` {tab.loc[lab, 'accuracy']:.3f}" for lab in worse)
                     + "): the self-training itself hurts at this scale, for every arm, so the Agent-R against "
                       "good-only comparison is between two damaged policies. reports/LOG.md has the runs.")
    lines.append("- The verdicts are notebook 20's (`claims.json`, section Agent-R); a short run is inconclusive by design.")
    return "\n".join(lines)

