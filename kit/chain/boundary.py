"""The consistency filter and the pass@k boundary of notebook 08: :func:`consistency_check` (report
§4.2: keep a problem when enough sampled answers match its label) and :func:`passk_boundary`
(unbiased pass@k curves of base vs RL policies on the same problems), with the figure helpers.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kit.chain.evaluation import eval_rollout_cfg, prompt_fits
from kit.chain.policies import heldout_problems, policy_backend
from kit.config import KitConfig
from kit.data.curate import answers_match, consistency_filter, sample_answers
from kit.data.pools import Problem
from kit.eval.benchmarks import BenchItem, load_benchmark
from kit.eval.evaluate import evaluate_async, passk_curves, plot_passk_curves
from kit.jsonio import write_json
from kit.report.figures import copy_figure, save_figure
from kit.rollout import run_coroutine
from kit.sandbox import SandboxPool
from kit.train.common import step_seed


@dataclass
class Consistency:
    """Output of :func:`consistency_check`.

    Attributes:
        funnel: one-row DataFrame (``pool, prompt_too_long, in, no_samples, inconsistent, out``),
            the filter as one more row of the curation funnel.
        rows: DataFrame, one row per sampled problem: ``uid, answer, answered, matches, kept, answers``.
        kept: the kept ``kit.data.pools.Problem`` objects.
        paths: ``{"json": ..., "parquet": ...}`` written.
    """

    funnel: Any
    rows: Any
    kept: list
    paths: dict[str, Path]


def consistency_check(cfg: KitConfig, policy_dir: str | os.PathLike, curated_path: str | os.PathLike,
                      run_dir: str | os.PathLike, *, n_problems: int | None = None, n: int | None = None,
                      backend: Any = None, tokenizer: Any = None) -> Consistency:
    """The report's consistency filter (rStar2-Agent §4.2: keep a problem when at least 2 of 16
    sampled answers match its label) with the profile's policy, on a sample of the curated pool.

    Draws a seeded random sample (``cfg.seed``) of ``n_problems`` rows of the curated parquet whose
    prompt fits the context, rolls out ``n`` agent trajectories per problem through the real sandbox
    (:func:`kit.data.curate.sample_answers`: training temperature/top_p ``cfg.rollout``, budgets
    ``eval.max_tokens`` tokens and ``eval.max_turns`` turns), and keeps a problem when at least
    ``data.consistency_min_matches`` answers equal its integer label
    (:func:`kit.data.curate.consistency_filter`). Writes ``run_dir/consistency.json`` (settings,
    counts, funnel row) and ``run_dir/consistency.parquet`` (per-problem rows). A weak policy drops
    good problems too: on the tiny profile nearly every real problem is dropped.

    Args:
        cfg: the config (``eval.consistency_problems``, ``data.consistency_samples``,
            ``data.consistency_min_matches``, ``sandbox``, ``rollout``).
        policy_dir: a ``policy/`` folder (loaded unless ``backend`` is given; else only a label).
        curated_path: ``data/curated.parquet`` of 01_data_curation (``kit.data.curate.write_curated``).
        run_dir: output folder.
        n_problems: problems to sample (default ``eval.consistency_problems``; 0 = all).
        n: samples per problem (default ``data.consistency_samples``, 16 in the report).
        backend, tokenizer: any ``kit.rollout`` backend (e.g. ``OpenAIBackend`` for a served
            14B policy) with its tokenizer; the prompt budget is then ``rollout.max_prompt_tokens``.
    Returns:
        A :class:`Consistency`.
    Raises:
        FileNotFoundError: the parquet or the policy folder is missing.
        ValueError: ``n < 1``, or a backend without a tokenizer.
    """
    n_problems = cfg.eval.consistency_problems if n_problems is None else n_problems
    n = cfg.data.consistency_samples if n is None else n
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    path = Path(curated_path)
    if not path.exists():
        raise FileNotFoundError(f"curated parquet not found: {path} (written by 01_data_curation)")
    if backend is None:
        backend, tokenizer, context = policy_backend(cfg, policy_dir)
    elif tokenizer is None:
        raise ValueError("a backend needs its tokenizer")
    else:
        context = 0
    rollout_cfg = eval_rollout_cfg(cfg, context)
    try:
        df = pd.read_parquet(path, columns=["source", "id", "problem", "answer"])
    except Exception as exc:  # pyarrow names the missing field but not the file
        raise ValueError(f"{path}: not a curated parquet with columns source, id, problem, answer ({exc})") from exc
    df = df.sample(frac=1.0, random_state=cfg.seed)
    probs, too_long = [], 0
    for r in df.itertuples(index=False):
        if n_problems and len(probs) >= n_problems:
            break
        if prompt_fits(tokenizer, r.problem, rollout_cfg):
            probs.append(Problem(r.source, str(r.id), r.problem, str(r.answer)))
        else:
            too_long += 1

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            return await sample_answers(backend, probs, tokenizer=tokenizer, executor=pool, n=n,
                                        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                        max_tokens=cfg.eval.max_tokens, max_turns=cfg.eval.max_turns,
                                        rollout_cfg=rollout_cfg)

    answers = run_coroutine(go()) if probs else {}
    kept, stats = consistency_filter(probs, answers, cfg.data.consistency_min_matches)
    kept_ids = {p.uid for p in kept}
    rows = pd.DataFrame([{"uid": p.uid, "answer": p.answer, "answered": sum(a is not None for a in answers[p.uid]),
                          "matches": sum(answers_match(p.answer, a) for a in answers[p.uid]),
                          "kept": p.uid in kept_ids, "answers": [a for a in answers[p.uid]]} for p in probs],
                        columns=["uid", "answer", "answered", "matches", "kept", "answers"])
    label = f"consistency ({n} samples, >= {cfg.data.consistency_min_matches} match)"
    funnel = pd.DataFrame([{"pool": label, "prompt_too_long": too_long, **stats}]).set_index("pool")
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "consistency.json", "parquet": out / "consistency.parquet"}
    rows.to_parquet(paths["parquet"], index=False)
    write_json(paths["json"], {"policy": str(policy_dir), "curated": str(path), "pool_size": len(df), "n": n,
                               "min_matches": cfg.data.consistency_min_matches, "seed": cfg.seed,
                               "temperature": cfg.rollout.temperature, "top_p": cfg.rollout.top_p,
                               "max_tokens": cfg.eval.max_tokens, "max_turns": cfg.eval.max_turns,
                               "prompt_too_long": too_long, **stats, "kept": sorted(kept_ids)})
    return Consistency(funnel=funnel, rows=rows, kept=kept, paths=paths)


@dataclass
class PassK:
    """Output of :func:`passk_boundary`.

    Attributes:
        curves: DataFrame indexed by k (1..n), one pass@k column per policy label.
        results: ``{label: kit.eval.EvalResult}`` on the same problems.
        figure: the matplotlib Figure of the curves.
        paths: files written (``curves``, ``meta``, ``png``, ``pdf`` and one ``result_<label>``).
    """

    curves: Any
    results: dict[str, Any]
    figure: Any
    paths: dict[str, Path]


def passk_items(cfg: KitConfig, source: str | None = None, n_problems: int | None = None) -> tuple[str, list]:
    """``(source, items)``: the problems of the pass@k curves as ``kit.eval.benchmarks.BenchItem``.

    ``source`` ``"heldout"`` is the profile's held-out task problems (default for the tiny model,
    which scores ~0 on the real benchmarks); a benchmark name reads that file (default for every
    other model: the first of ``eval.benchmarks``). ``n_problems`` defaults to ``eval.passk_problems`` (0 = all).
    """
    source = source or ("heldout" if cfg.model.name_or_path == "tiny" else cfg.eval.benchmarks[0])
    n_problems = cfg.eval.passk_problems if n_problems is None else n_problems
    if source == "heldout":
        return source, [BenchItem("heldout", p.id, p.question, p.answer) for p in heldout_problems(cfg, n_problems)]
    return source, load_benchmark(source, cfg.data.data_dir or None, cfg.eval.gpqa_path, n_problems)


async def _evaluate_items(cfg: KitConfig, backend: Any, tok: Any, rollout_cfg: Any, source: str, items: list, n: int,
                          model_name: str):
    """:func:`kit.eval.evaluate.evaluate_async` of ``items`` with the ``eval`` protocol and a sandbox pool."""
    ev = cfg.eval
    async with SandboxPool(cfg.sandbox) as pool:
        return await evaluate_async(backend, source, tokenizer=tok, executor=pool, n=n, temperature=ev.temperature,
                                    top_p=ev.top_p, max_tokens=ev.max_tokens, max_turns=ev.max_turns,
                                    rollout_cfg=rollout_cfg, seed=cfg.seed, model_name=model_name,
                                    bootstrap_samples=ev.bootstrap_samples, items=items)


def passk_boundary(cfg: KitConfig, policies: Mapping[str, str | os.PathLike], run_dir: str | os.PathLike, *,
                   source: str | None = None, n_problems: int | None = None, n: int | None = None,
                   backends: Mapping[str, tuple[Any, Any]] | None = None, items: list | None = None,
                   folder: str = "passk", what: str = "") -> PassK:
    """Unbiased pass@k curves (k = 1..n) of several policies on the same problems: base (cold-start
    SFT) vs RL, as in Yue et al. 2025's RLVR-boundary study (report §5 evaluates at n = 16).

    Each policy samples ``n`` trajectories per problem with the evaluation protocol (``eval``
    temperature, top_p, token and turn budgets; real sandbox; the kit's verifier), problems from
    :func:`passk_items`. Problems whose prompt does not fit the first policy's context are left
    out for all (the chain's policies share one tokenizer). Writes under ``run_dir/passk/``:
    ``passk_curves.csv``, ``passk_curves.json`` (title, source, sizes), one
    ``<source>_<label>.json`` :class:`kit.eval.EvalResult` per policy and the figure as
    ``passk_curves.png``/``.pdf``.

    Args:
        cfg: the config (``eval.passk_problems``, ``eval.passk_n``, ``eval`` sampling, ``sandbox``).
        policies: ``{label: policy folder}`` in legend order, e.g. ``{"SFT (base)": ..., "RL": ...}``.
        run_dir: output folder.
        source / n_problems: see :func:`passk_items`.
        n: samples per problem (default ``eval.passk_n``).
        backends: ``{label: (backend, tokenizer)}`` to use instead of loading a policy folder
            (e.g. ``OpenAIBackend`` for a served checkpoint).
        items: the problems (``BenchItem``) instead of :func:`passk_items`' (with ``source`` naming them).
        folder: the output folder's name inside ``run_dir`` (``passk_hard``: :func:`passk_hard_boundary`).
        what: the problems in words for the figure title (default from ``source``).
    Returns:
        A :class:`PassK`.
    Raises:
        ValueError: no policies, ``n < 1``, or no problem fits.
        FileNotFoundError: a policy folder or benchmark file is missing.
    """
    if not policies:
        raise ValueError("no policies given")
    n = cfg.eval.passk_n if n is None else n
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    keys = {label: "_".join("".join(c if c.isalnum() else " " for c in label).lower().split()) for label in policies}
    if len(set(keys.values())) < len(keys) or not all(keys.values()):
        raise ValueError(f"policy labels must differ in letters or digits (file names): {list(policies)}")
    for label, policy in policies.items():  # every folder checked before any evaluation runs
        if not (backends and label in backends) and not (Path(policy) / "config.json").exists():
            raise FileNotFoundError(f"policy {label!r}: no model at {policy} (no config.json); "
                                    "run the notebook that trains it first")
    if items is None:
        source, items = passk_items(cfg, source, n_problems)
    else:
        source = source or "heldout"
    out = Path(run_dir) / folder
    out.mkdir(parents=True, exist_ok=True)
    results, paths = {}, {}
    for label, policy in policies.items():
        backend, tok, context = (*backends[label], 0) if backends and label in backends else policy_backend(cfg, policy)
        rollout_cfg = eval_rollout_cfg(cfg, context)
        if not results:
            items = [it for it in items if prompt_fits(tok, it.question, rollout_cfg)]
            if not items:
                raise ValueError(f"pass@k: no {source} problem fits the prompt budget of {rollout_cfg.max_prompt_tokens} tokens")
        results[label] = run_coroutine(_evaluate_items(cfg, backend, tok, rollout_cfg, source, items, n, str(policy)))
        key = keys[label]
        paths[f"result_{key}"] = write_json(out / f"{source}_{key}.json", results[label].to_dict())
    curves = passk_curves(results)
    what = what or (f"{len(items)} held-out tiny task problems (not a benchmark)" if source == "heldout"
                     else f"{source}, {len(items)} problems")
    title = f"pass@k, {what}; n = {n}, T = {cfg.eval.temperature}; profile {cfg.profile}"
    fig = passk_figure(curves, title)
    paths["curves"] = out / "passk_curves.csv"
    curves.to_csv(paths["curves"])
    paths["meta"] = write_json(out / "passk_curves.json", {"title": title, "source": source, "problems": len(items),
                                                           "n": n, "labels": list(results), "policies": {k: str(v) for k, v in policies.items()}})
    paths.update(zip(("png", "pdf"), save_figure(fig, out, "passk_curves"), strict=True))
    return PassK(curves=curves, results=results, figure=fig, paths=paths)


#: the key of the hard subset's selection draw (:func:`kit.train.common.step_seed`), apart from the evaluation's
HARD_SELECTION_KEY = "passk_hard_selection"


def passk_hard_boundary(cfg: KitConfig, policies: Mapping[str, str | os.PathLike], run_dir: str | os.PathLike
                        ) -> PassK | None:
    """The pass@k curves on a hard subset (issue #45; claims.yaml ``passk_crossing_on_hard_problems``):
    the problems the first policy (the cold start) rarely solves, where Yue et al. 2025 find the base
    overtaking RL at large k.

    Selection: the first ``eval.passk_hard_pool`` problems of :func:`passk_items`' source are sampled
    ``eval.passk_hard_select_n`` times by the first policy with a seed of its own (``step_seed(cfg.seed,``
    :data:`HARD_SELECTION_KEY` ``)``), so the evaluation draw that follows is independent of the one that
    chose the problems (choosing and scoring on one draw would favour the cold start's unlucky problems
    regressing upward). Hard: solved at most ``eval.passk_hard_max_correct`` times; the first
    ``eval.passk_hard_problems`` of them in source order. Then :func:`passk_boundary` with
    ``eval.passk_hard_n`` samples into ``run_dir/passk_hard/``, beside ``selection.json`` (each screened
    problem's id and count).

    Returns:
        The :class:`PassK`, or None when ``eval.passk_hard_problems`` is 0 (off) or no problem is hard
        (``selection.json`` says so).
    Raises:
        as :func:`passk_boundary`.
    """
    ev = cfg.eval
    if ev.passk_hard_problems <= 0:
        return None
    first = next(iter(policies))
    source, pool = passk_items(cfg, None, ev.passk_hard_pool)
    backend, tok, context = policy_backend(cfg, policies[first])
    rollout_cfg = eval_rollout_cfg(cfg, context)
    pool = [it for it in pool if prompt_fits(tok, it.question, rollout_cfg)]
    select_cfg = dataclasses.replace(cfg, seed=step_seed(cfg.seed, HARD_SELECTION_KEY))
    screened = run_coroutine(_evaluate_items(select_cfg, backend, tok, rollout_cfg, source, pool, ev.passk_hard_select_n,
                                             str(policies[first])))
    counts = {p["id"]: int(sum(p["correct"])) for p in screened.to_dict()["per_problem"]}
    hard = [it for it in pool if counts.get(str(it.id), ev.passk_hard_select_n) <= ev.passk_hard_max_correct]
    hard = hard[:ev.passk_hard_problems]
    out = Path(run_dir) / "passk_hard"
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "selection.json", {"source": source, "screened": len(pool), "select_n": ev.passk_hard_select_n,
                                        "max_correct": ev.passk_hard_max_correct, "policy": first,
                                        "counts": counts, "hard": [it.id for it in hard]})
    if not hard:
        return None
    return passk_boundary(cfg, policies, run_dir, source=source, items=hard, n=ev.passk_hard_n, folder="passk_hard",
                          what=f"{len(hard)} hard {source} problems (the first policy solved them at most "
                               f"{ev.passk_hard_max_correct} of {ev.passk_hard_select_n} times)")


def passk_figure(curves: Any, title: str = ""):
    """A Figure of pass@k curves (:func:`kit.eval.evaluate.plot_passk_curves`, k on a log2 axis)."""
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    plot_passk_curves(curves, ax=fig.subplots())
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def copy_passk_figure(eval_dir: str | os.PathLike, fig_dir: str | os.PathLike) -> list[Path]:
    """Copy ``eval_dir/passk/passk_curves.{png,pdf}`` (written by :func:`passk_boundary` in
    08_evaluation) into the report's figures folder; returns the copies ([] when there are none)."""
    return copy_figure(Path(eval_dir) / "passk", fig_dir, "passk_curves")
