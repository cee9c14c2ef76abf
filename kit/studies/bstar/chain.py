"""Notebook 12: B-STaR's loop and the fixed arm from the cold-start policy, same budget, same seeds (issue #47).

Arms, each ``bstar.iterations`` iterations continuing in place from the cold-start policy (online self-training):

- ``bstar``: every iteration, sample the dev subset (the training split's last ``bstar.dev_problems`` tasks) at
  every temperature of ``bstar.temperatures``; score every (temperature, threshold) pair by the authors' balance
  score; take the best (:func:`kit.studies.bstar.loop.choose`); sample the iteration's training tasks at that
  temperature; re-pick the threshold on that full pool; fine-tune on the samples it selects.
- ``fixed``: the same loop at ``bstar.fixed_temperature`` and ``bstar.fixed_threshold`` (the paper's online RFT).

Both arms sample the same training tasks each iteration with the same seeds and fine-tune with the same recipe
(:func:`kit.train.sft.fit_rows`). Every policy (the cold start and each arm after each iteration) is sampled on the
same held-out tasks with the same seed at T = 1.

Files in ``run_dir``: ``config.json``; ``sweep.jsonl`` (one row per arm, iteration, phase ``dev``/``full``,
temperature and threshold: balance, selected per query, precision, accuracy, pass@n, distinct correct);
``iterations.jsonl`` (per arm and iteration: the pair used, the pool's figures at it, its task ids, trajectories
sampled (B-STaR's dev sweep included), rows and steps trained, loss); ``eval.jsonl`` (one row per policy, iteration and held-out task: ``samples``, ``correct``,
``distinct_correct``, ``pass_at_k``, the rows the B-STaR claims read, :mod:`kit.studies.bstar.kinds`);
``<arm>/iter_<k>/policy/``; ``summary.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kit import jsonio
from kit.config import KitConfig, load, save
from kit.data import tasks
from kit.metrics import read_rows
from kit.models import load_policy, save_policy
from kit.report.figures import save_figure
from kit.reward import extract_final_answer
from kit.studies.bstar import ARMS, EVAL_FILE, loop
from kit.studies.bstar.figures import figure_bstar
from kit.train import common
from kit.train.rollouts import collect_sync
from kit.train.sft import fit_rows, pass_steps

SWEEP_FILE, ITER_FILE = "sweep.jsonl", "iterations.jsonl"
#: the run's figure (:func:`curves_figure`), ``run_dir/<name>.png/.pdf``, copied into the report by notebook 20
BSTAR_FIGURE = "bstar_curves"


def bstar_config(profile: str, overrides: Mapping[str, Any] | None, run_dir, seed: int) -> KitConfig:
    """Notebook 12's config (``[bstar]`` and the rest); writes ``run_dir/config.json``."""
    return load(profile, dict(overrides or {}), run_dir=run_dir, seed=seed)


def sample(cfg: KitConfig, model, tok, problems: Sequence[tasks.TaskProblem], n: int, *, temperature: float,
           seed: int, budget: str = "rollout"):
    """``n`` samples per problem through the agent loop and the sandbox, graded: ``(pools, groups)``, one
    :class:`kit.studies.bstar.loop.Pool` and one list of trajectories per problem. ``budget``: ``"rollout"``
    (training-time sampling, ``rollout.max_response_tokens`` / ``max_turns``) or ``"eval"`` (``eval.*``, as every
    held-out evaluation of the kit)."""
    tokens, turns = ((cfg.rollout.max_response_tokens, cfg.rollout.max_turns) if budget == "rollout"
                     else (cfg.eval.max_tokens, cfg.eval.max_turns))

    batch = collect_sync(cfg, model, tok, problems, n, seed=seed, max_response_tokens=tokens, max_turns=turns,
                         temperature=temperature)
    pools = [loop.make_pool(p.id, [tr.response_text for tr in group], [extract_final_answer(tr.response_text)
                                                                       for tr in group], [r > 0 for r in rewards],
                            reference=p.answer if cfg.bstar.reference else None)  # the gold answer stands in
             for p, group, rewards in zip(batch.problems, batch.groups, batch.rewards, strict=True)]
    return pools, batch.groups


def eval_rows(pools: Sequence[loop.Pool], *, policy: str, iteration: int) -> list[dict[str, Any]]:
    """Rows of ``eval.jsonl``: per held-out task, ``samples``, ``correct``, ``distinct_correct`` (distinct correct
    texts) and ``pass_at_k`` (1 when a sample is correct: pass@k at k = the samples)."""
    return [{"policy": policy, "iteration": iteration, "problem": p.problem, "samples": len(p.correct),
             "correct": sum(p.correct), "pass_at_k": int(any(p.correct)),
             "distinct_correct": len({t for t, c in zip(p.texts, p.correct, strict=True) if c})} for p in pools]


def _row(tr) -> tuple[list[int], list[int]]:
    """A sampled trajectory as an SFT row: loss on its model tokens, none on prompt or tool feedback."""
    return list(tr.prompt_ids) + list(tr.response_ids), [0] * len(tr.prompt_ids) + list(tr.response_mask)


def pick_pair(cfg: KitConfig, model, tok, dev, *, iteration: int, previous: tuple[float, float],
              write: Callable[[Mapping[str, Any]], None]) -> tuple[float, float]:
    """B-STaR's dev sweep of one iteration: every temperature's pool of the dev subset, every threshold scored;
    the best pair (``previous`` when no pair selects anything). Each row goes to ``write``."""
    b = cfg.bstar
    pools = {}
    for t in b.temperatures:
        pools[t], _ = sample(cfg, model, tok, dev, b.samples, temperature=t,  # one stream for every temperature
                             seed=common.step_seed(cfg.seed, "bstar-dev", iteration))
    rows = loop.sweep(pools, b.thresholds, b.n_star)
    for r in rows:
        write({"arm": "bstar", "iteration": iteration, "phase": "dev", **r})
    best = loop.choose(rows)
    return previous if best is None else (best["temperature"], best["threshold"])


def run_bstar(cfg: KitConfig, run_dir, sft_dir, progress: Callable[[str], None] | None = print) -> dict[str, Any]:
    """B-STaR and the fixed arm from ``sft_dir/policy`` (the module docstring says what it writes).

    On ``runtime = "verl"`` nothing is sampled (the loop runs on the local engine; at paper scale each iteration's
    fine-tune is VERL's SFT trainer and the sampling the paper profile's sampler, ``kit.bridge.study_runs``):
    ``summary.json`` says so and the B-STaR claims are inconclusive.

    Raises:
        FileNotFoundError: ``sft_dir/policy`` is missing.
        ValueError: ``bstar.dev_problems`` leaves no training task.
    """
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    save(cfg, run)
    if cfg.runtime != "local":
        summary = {"skipped": f"runtime {cfg.runtime!r}: B-STaR's loop samples on the local engine only; at paper "
                              "scale see the profile's dry run (kit.bridge.study_runs)"}
        jsonio.write_json(run / "summary.json", summary)
        return summary
    for name in (SWEEP_FILE, ITER_FILE, EVAL_FILE):
        (run / name).unlink(missing_ok=True)
    c0, t0 = time.process_time(), time.perf_counter()
    say = progress or (lambda s: None)
    common.set_threads(cfg.model.torch_threads)
    policy = Path(sft_dir) / "policy"
    if not (policy / "config.json").exists():
        raise FileNotFoundError(f"{policy}: the cold-start policy is missing (notebook 02 writes it)")
    b = cfg.bstar
    split = tasks.task_split(cfg)
    train = list(split.train)
    if b.dev_problems >= len(train):
        raise ValueError(f"bstar.dev_problems = {b.dev_problems} leaves no training task of data.task_train_size = "
                         f"{len(train)} (the dev subset is the training split's last tasks)")
    dev, pool_tasks = train[-b.dev_problems:], train[:-b.dev_problems]
    heldout = list(split.heldout)[: b.eval_problems or None]
    eval_seed = common.step_seed(cfg.seed, "bstar-eval")  # every policy: the same tasks and sampling stream

    def evaluate(model, policy_name: str, iteration: int) -> None:
        pools, _ = sample(cfg, model, tok, heldout, b.eval_samples, temperature=1.0, seed=eval_seed, budget="eval")
        for r in eval_rows(pools, policy=policy_name, iteration=iteration):
            jsonio.append_jsonl(run / EVAL_FILE, r)

    cold, tok = load_policy(policy)
    cold.eval()
    say(f"cold start: sampling {len(heldout)} held-out tasks x {b.eval_samples}")
    evaluate(cold, "cold_start", 0)
    batch = b.batch_size or cfg.sft.batch_size
    for arm in ARMS:
        model, _ = load_policy(policy)
        model.eval()
        pair = (b.fixed_temperature, b.fixed_threshold)
        for k in range(1, b.iterations + 1):
            if arm == "bstar":
                pair = pick_pair(cfg, model, tok, dev, iteration=k, previous=pair,
                                 write=lambda r: jsonio.append_jsonl(run / SWEEP_FILE, r))
            temperature, dev_threshold = pair
            problems = tasks.task_slice(pool_tasks, b.tasks, k)
            pools, groups = sample(cfg, model, tok, problems, b.samples, temperature=temperature,
                                   seed=common.step_seed(cfg.seed, "bstar-pool", k))
            threshold = dev_threshold
            if arm == "bstar":  # the authors re-pick the threshold on the full set at the chosen temperature
                full = loop.sweep({temperature: pools}, b.thresholds, b.n_star)
                for r in full:
                    jsonio.append_jsonl(run / SWEEP_FILE, {"arm": arm, "iteration": k, "phase": "full", **r})
                best = loop.choose(full)
                threshold = dev_threshold if best is None else best["threshold"]
            index = {id(p): g for p, g in zip(pools, groups, strict=True)}
            rows = [_row(index[id(p)][i]) for p, i in loop.selection(pools, threshold)]
            steps = pass_steps(len(rows), b.passes, batch, 0.0, b.sft_steps)
            fit = fit_rows(model, tok, rows, [], steps=steps, batch_size=batch, mix_fraction=0.0, lr=b.lr or cfg.sft.lr,
                           warmup_steps=b.warmup_steps, schedule="cosine", min_lr_ratio=cfg.sft.min_lr_ratio,
                           seed=common.step_seed(cfg.seed, "bstar-fit", k),  # one batch stream for both arms
                           tag=f"bstar-{k}") if steps else []
            model.eval()
            save_policy(model, tok, run / arm / f"iter_{k}" / "policy")
            stats = loop.pool_stats(pools, threshold, b.n_star)
            jsonio.append_jsonl(run / ITER_FILE, {"arm": arm, "iteration": k, "temperature": temperature, "threshold": threshold,
                                      "dev_threshold": dev_threshold, **stats, "rows": len(rows), "steps": steps,
                                      "tasks": [p.id for p in problems],
                                      # trajectories sampled this iteration: the pool, and B-STaR's dev sweep
                                      "sampled": len(problems) * b.samples + (len(b.temperatures) * len(dev) * b.samples
                                                                               if arm == "bstar" else 0),
                                      "loss_first": fit[0]["loss"] if fit else None,
                                      "loss_last": fit[-1]["loss"] if fit else None})
            say(f"{arm} iteration {k}: T = {temperature}, threshold {threshold}, balance {stats['balance']:.3f}, "
                f"{len(rows)} rows selected (precision {stats['precision']:.2f}), {steps} steps")
            evaluate(model, arm, k)
    summary = {"policies": ["cold_start", *[f"{arm}_{k}" for arm in ARMS for k in range(1, b.iterations + 1)]],
               "eval_problems": len(heldout), "eval_samples": b.eval_samples,
               "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}
    jsonio.write_json(run / "summary.json", summary)
    return summary


def _rows(path: Path) -> list[dict[str, Any]]:
    return read_rows(path) if path.exists() else []


def iterations_table(run_dir) -> pd.DataFrame:
    """``iterations.jsonl`` as a table indexed by (arm, iteration): the pair, balance, exploration (distinct
    correct, pass@n) and exploitation (precision) of each iteration's pool, trajectories sampled, rows and steps
    trained."""
    df = pd.DataFrame(_rows(Path(run_dir) / ITER_FILE))
    if df.empty:
        return df
    cols = ["temperature", "threshold", "balance", "selected", "precision", "accuracy", "pass_at_n",
            "distinct_correct", "sampled", "rows", "steps"]
    return df.set_index(["arm", "iteration"])[cols]


def policy_table(run_dir) -> pd.DataFrame:
    """Per policy (``cold_start``, ``<arm>_<k>``) on the held-out tasks: accuracy, pass@k, distinct correct
    texts per task, tasks."""
    df = pd.DataFrame(_rows(Path(run_dir) / EVAL_FILE))
    if df.empty:
        return df
    df["label"] = [p if p == "cold_start" else f"{p}_{i}" for p, i in zip(df["policy"], df["iteration"], strict=True)]
    g = df.groupby("label", sort=False)
    return pd.DataFrame({"accuracy": g["correct"].sum() / g["samples"].sum(), "pass_at_k": g["pass_at_k"].mean(),
                         "distinct_correct": g["distinct_correct"].mean(), "tasks": g.size()})


def curves_figure(run_dir, note: str = ""):
    """B-STaR's curves for this run (:func:`kit.studies.bstar.figures.figure_bstar`), saved as
    ``run_dir/bstar_curves.png/.pdf`` where notebook 20 copies it for the summary's B-STaR page; returns the
    Figure, or None (with a line saying so) when nothing was sampled."""
    it, ev = _rows(Path(run_dir) / ITER_FILE), _rows(Path(run_dir) / EVAL_FILE)
    if not it or not ev:
        print(f"nothing was sampled in {run_dir} (no {ITER_FILE} or {EVAL_FILE})")
        return None
    fig = figure_bstar(pd.DataFrame(it), pd.DataFrame(ev), note=note)
    save_figure(fig, run_dir, BSTAR_FIGURE)
    return fig


def bstar_findings(run_dir) -> str:
    """What this run showed, in a few sentences (numbers only; the claims are judged by notebook 20)."""
    it, pol = iterations_table(run_dir), policy_table(run_dir)
    if it.empty or pol.empty:
        return "Nothing sampled (see summary.json)."
    last = int(it.index.get_level_values("iteration").max())
    pairs = ", ".join(f"({r.temperature:g}, {r.threshold:g})" for _, r in it.loc["bstar"].iterrows())
    lines = [f"B-STaR chose (temperature, threshold) {pairs} over its {last} iterations; the fixed arm kept "
             f"({it.loc[('fixed', 1), 'temperature']:g}, {it.loc[('fixed', 1), 'threshold']:g})."]
    for arm in ARMS:
        lab = f"{arm}_{last}"
        if lab in pol.index:
            r = pol.loc[lab]
            lines.append(f"{arm} after iteration {last}: held-out accuracy {r.accuracy:.3f}, pass@k {r.pass_at_k:.3f}, "
                         f"{r.distinct_correct:.2f} distinct correct responses per task.")
    c = pol.loc["cold_start"]
    lines.append(f"The cold start: accuracy {c.accuracy:.3f}, pass@k {c.pass_at_k:.3f}, "
                 f"{c.distinct_correct:.2f} distinct correct per task.")
    nan = [f"{a} {i}" for (a, i), r in it.iterrows() if pd.isna(r.precision)]
    if nan:
        lines.append(f"No sample was selected at: {', '.join(nan)} (the policy was kept).")
    return " ".join(lines)
