"""Glue the notebooks of the chain call, so their cells stay short: load a run's policy, sample a
few trajectories to look at, evaluate a checkpoint on every benchmark of the profile, and run the
entropy analysis over checkpoints.

Everything here composes public functions of ``kit.rollout``, ``kit.sandbox``, ``kit.eval``,
``kit.analysis`` and ``kit.train``; nothing samples, runs code or grades by itself.
"""

from __future__ import annotations

import html as _html
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.config import KitConfig


def load_run_policy(policy_dir: str | os.PathLike):
    """``(model, tokenizer)`` from a ``policy/`` folder written by a trainer.

    Raises:
        FileNotFoundError: the folder does not exist or holds no model (names it and the notebook
            that writes it).
    """
    from kit.models import load_policy

    p = Path(policy_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"policy folder not found: {p} (written by the upstream training notebook; "
                                "run it first, or pass the right run directory as a parameter)")
    if not (p / "config.json").exists():
        raise FileNotFoundError(f"{p} holds no model (no config.json): the upstream training notebook did not "
                                "finish; rerun it")
    return load_policy(p)


def count_parameters(policy_dir: str | os.PathLike) -> int | None:
    """Number of parameters in a saved policy (tied weights counted once), read from the
    safetensors headers without loading the model; None when the folder holds none."""
    from safetensors import safe_open

    files = sorted(Path(policy_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with safe_open(str(f), framework="np") as fh:
            for key in fh.keys():
                n = 1
                for d in fh.get_slice(key).get_shape():
                    n *= d
                total += n
    return total


def heldout_problems(cfg: KitConfig, n: int = 0) -> list:
    """The first ``n`` held-out problems of the profile's task family (all when ``n`` is 0)."""
    from kit.train.sft import task_split

    probs = list(task_split(cfg).heldout)
    return probs[:n] if n else probs


def sample_trajectories(cfg: KitConfig, policy_dir: str | os.PathLike, *, n_problems: int = 2, n: int = 1,
                        seed: int = 0, temperature: float = 1.0, problems: Sequence[Any] | None = None):
    """Roll out the policy in ``policy_dir`` on held-out task problems through the real sandbox.

    Args:
        cfg: the config (``cfg.sandbox``, ``cfg.rollout``; budgets from ``cfg.eval``).
        policy_dir: a ``policy/`` folder.
        n_problems: how many held-out problems (ignored when ``problems`` is given).
        n: samples per problem.
        seed: backend seed.
        temperature: sampling temperature (1.0 = as in RL training; 0 = greedy).
        problems: explicit ``kit.data.tasks.Problem`` objects.
    Returns:
        ``(trajectories, tokenizer, batch)``: a flat list (problem-major), the policy's tokenizer
        and the graded :class:`kit.train.rollouts.Batch` (``batch.rewards`` is (P, n)).
    """
    from kit.rollout import run_sync
    from kit.sandbox import SandboxPool
    from kit.train.rollouts import collect

    model, tok = load_run_policy(policy_dir)
    probs = list(problems) if problems is not None else heldout_problems(cfg, n_problems)

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            return await collect(cfg, model, tok, probs, n, pool, seed=seed, max_response_tokens=cfg.eval.max_tokens,
                                 max_turns=cfg.eval.max_turns, temperature=temperature)

    batch = run_sync(go())
    return batch.flat(), tok, batch


# --------------------------------------------------------------------------- training, local or on a cluster


def uses_cluster(cfg: KitConfig) -> bool:
    """True for the paper profiles (SGLang rollouts): training runs in VERL through :mod:`kit.recipe`."""
    return cfg.rollout.engine == "sglang"


def prepare_rl_data(cfg: KitConfig, curation: Any, run_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the curated pools (``kit.data.curate.write_curated``) and, for the paper profiles, the
    VERL train/val parquet files (``kit.recipe.prepare_data``) under ``run_dir/data/``."""
    import dataclasses

    from kit.data.curate import write_curated

    paths = write_curated(run_dir, curation)
    if uses_cluster(cfg):
        from kit import recipe

        paths.update(recipe.prepare_data(dataclasses.replace(cfg, run_dir=str(run_dir)), curated=curation))
    return paths


def cold_start(cfg: KitConfig, run_dir: str | os.PathLike, progress=None, *, sft_checkpoint: str = "",
               sft_data: str = "") -> dict[str, Any]:
    """Cold-start SFT: the local engine (:func:`kit.train.sft.run_sft`) for CPU profiles.

    Paper profiles (:mod:`kit.bridge.sft`): ``sft_checkpoint`` (a Hugging Face model folder you
    trained) is linked as ``run_dir/policy``; else ``sft_data`` (a parquet in VERL's multi-turn
    SFT schema) is trained with VERL's SFT trainer and merged into ``run_dir/policy``. Both write
    ``run_dir/summary.json``.

    ``KIT_SFT_CHECKPOINT`` / ``KIT_SFT_DATA`` stand in for the parameters (``kit reproduce``).

    Raises:
        RuntimeError: a paper profile with neither.
        FileNotFoundError: ``sft_checkpoint`` or ``sft_data`` does not exist.
    """
    if not uses_cluster(cfg):
        from kit.train.sft import run_sft

        return run_sft(cfg, run_dir, progress=progress)
    from kit.bridge import sft
    from kit.bridge.stages import Cluster

    sft_checkpoint = sft_checkpoint or os.environ.get("KIT_SFT_CHECKPOINT", "")
    sft_data = sft_data or os.environ.get("KIT_SFT_DATA", "")
    if sft_checkpoint:
        return sft.link_checkpoint(sft_checkpoint, run_dir)
    if sft_data:
        c = Cluster.from_env()
        return sft.run_sft(cfg, run_dir, sft_data, gpus_per_node=c.gpus_per_node, python=c.python)
    raise RuntimeError(f"profile {cfg.profile}: the report's SFT data is not released; pass your cold-start model "
                       "as the `sft_checkpoint` parameter of 02_cold_start_sft, or a VERL multi-turn SFT parquet "
                       "as `sft_data` (kit.bridge.sft)")


def train_stage(cfg: KitConfig, stage: str, run_dir, init_dir, data_dir, progress=None, *,
                hard_counts: str = "", sampler_url: str = "") -> dict[str, Any]:
    """One RL stage from ``init_dir/policy``: the local engine (:func:`kit.train.rl.run_stage`), or,
    on the paper profiles, VERL on the Ray cluster (:func:`kit.bridge.stages.run_stage`): resume
    from the upstream stage's last checkpoint, train, merge the last checkpoint into
    ``run_dir/policy``, convert VERL's metrics to ``run_dir/metrics.jsonl`` and write
    ``run_dir/summary.json``. Stage 3 on a cluster first builds ``run_dir/data/hard.parquet``
    from ``hard_counts`` (a solve-count JSON) or by sampling the stage-2 policy served at
    ``sampler_url`` (:func:`kit.bridge.hard_subset.prepare_stage3_data`; ``KIT_HARD_COUNTS`` /
    ``KIT_SAMPLER_URL`` stand in for them under ``kit reproduce``)."""
    if uses_cluster(cfg):
        from kit.bridge import stages

        if getattr(cfg.stages, stage).steps == 0:  # e.g. paper-32b: stages 1-2 only
            return stages.skip_stage(cfg, stage, run_dir, init_dir)
        if stage == "stage3":
            from kit.bridge.hard_subset import prepare_stage3_data

            prepare_stage3_data(cfg, run_dir, data_dir, init_dir,
                                hard_counts=hard_counts or os.environ.get("KIT_HARD_COUNTS", ""),
                                sampler_url=sampler_url or os.environ.get("KIT_SAMPLER_URL", ""))
        return stages.run_stage(cfg, stage, run_dir, init_dir, data_dir)
    from kit.train.rl import run_stage

    return run_stage(cfg, stage, Path(init_dir) / "policy", run_dir, progress)


def train_ablation(cfg: KitConfig, run_dir, init_dir, data_dir, progress=None, reuse=()) -> dict[str, Any]:
    """The RoC ablation from ``init_dir/policy``: :func:`kit.train.rl.run_ablation` locally, or one
    VERL stage-1 run per (algorithm, seed) on the paper profiles (:func:`kit.bridge.stages.run_ablation`,
    same subfolders, each with ``metrics.jsonl``, ``policy/`` and ``summary.json``).

    ``reuse``: finished local stage run dirs that may already be one of the arms (the stage-1
    run is the ``grpo_roc`` arm of the main seed when the steps agree); local engine only."""
    if not uses_cluster(cfg):
        from kit.train.rl import run_ablation

        return run_ablation(cfg, Path(init_dir) / "policy", run_dir, progress=progress, reuse=list(reuse))
    from kit.bridge import stages

    return stages.run_ablation(cfg, run_dir, init_dir, data_dir)


def summary_markdown(summary: Mapping[str, Any], digits: int = 4):
    """A trainer's summary dict as a two-column Markdown table (scalars only; nested values are
    left out), which renders as a table in JupyterLab and in the PDF alike."""
    from IPython.display import Markdown

    rows = ["| key | value |", "|---|---|"]
    for k, v in summary.items():
        if isinstance(v, Mapping | list | tuple):
            continue
        text = f"{v:.{digits}g}" if isinstance(v, float) else str(v)
        rows.append(f"| {k} | {text.replace('|', '/')} |")
    return Markdown("\n".join(rows))


# --------------------------------------------------------------------------- trajectory display


def _latex_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in "&%$#_{}":
            out.append("\\" + ch)
        elif ch == "\\":
            out.append(r"\textbackslash{}")
        elif ch == "~":
            out.append(r"\textasciitilde{}")
        elif ch == "^":
            out.append(r"\textasciicircum{}")
        elif ch == "\n":
            out.append("\\newline\n")
        elif ord(ch) < 32 or ord(ch) > 0x2000:  # control characters and glyphs the PDF font lacks
            out.append("?")
        else:
            out.append(ch)
        if not ch.isalnum() and ch != "\n":  # long lines of code or garbage may break after symbols
            out.append(r"\allowbreak{}")
    return "".join(out)


class TrajectoryView:
    """One trajectory for notebooks: the rollout view's coloured HTML in JupyterLab, coloured LaTeX
    in the PDF report, and marked plain text elsewhere (model tokens plain, tool-response tokens,
    which carry no loss, between ``[tool response, mask 0]`` markers)."""

    def __init__(self, tr: Any, tokenizer: Any, title: str = ""):
        self.tr, self.tok, self.title = tr, tokenizer, title

    def _spans(self):
        for m, s, e in self.tr.spans():
            yield m, self.tok.decode(self.tr.response_ids[s:e], skip_special_tokens=False)

    def _head(self) -> str:
        tr = self.tr
        errs = ", ".join(f"{k} {v}" for k, v in tr.tool_errors.items() if v) or "none"
        return (f"{self.title + ': ' if self.title else ''}{tr.finish_reason}, {tr.turns} turns, "
                f"{tr.tool_calls} tool calls (errors: {errs}), {len(tr.response_ids)} response tokens "
                f"({sum(tr.response_mask)} sampled by the model)")

    def _repr_html_(self) -> str:
        from kit.rollout import trajectory_html

        title = f"<div><b>{_html.escape(self.title)}</b></div>" if self.title else ""
        return title + trajectory_html(self.tr, self.tok)

    def _repr_latex_(self) -> str:
        parts = [r"\begin{flushleft}\small\textbf{" + _latex_escape(self._head()) + r"}\par\ttfamily\footnotesize "]
        for m, text in self._spans():
            body = _latex_escape(text)
            parts.append(body if m == 1 else r"\textcolor{gray}{" + body + "}")
        parts.append(r"\end{flushleft}")
        return "".join(parts)

    def __repr__(self) -> str:
        out = [self._head()]
        for m, text in self._spans():
            out.append(text if m == 1 else f"[tool response, mask 0]{text}[/tool response]")
        return "\n".join(out[:1]) + "\n" + "".join(out[1:])


# --------------------------------------------------------------------------- evaluation


def eval_benchmarks(cfg: KitConfig) -> list[str]:
    """The profile's benchmarks, plus ``gpqa`` when the user supplied ``eval.gpqa_path``."""
    names = list(cfg.eval.benchmarks)
    if cfg.eval.gpqa_path and "gpqa" not in names:
        names.append("gpqa")
    return names


def _context(model: Any) -> int:
    """The model's context length in tokens (unbounded when its config does not say)."""
    return int(getattr(getattr(model, "config", None), "max_position_embeddings", 1 << 30))


def _eval_rollout_cfg(cfg: KitConfig, context: int):
    """``cfg.rollout`` with the prompt budget widened to the context minus ``eval.max_tokens``."""
    import dataclasses

    return dataclasses.replace(cfg.rollout, max_prompt_tokens=max(cfg.rollout.max_prompt_tokens,
                                                                  context - cfg.eval.max_tokens))


def _fits(tok: Any, question: str, rollout_cfg: Any) -> bool:
    """Whether the rendered prompt of ``question`` fits ``rollout_cfg.max_prompt_tokens``."""
    from kit import prompts

    return len(tok.encode(prompts.render_prompt(question), add_special_tokens=False)) <= rollout_cfg.max_prompt_tokens


def evaluate_checkpoint(cfg: KitConfig, policy_dir: str | os.PathLike, run_dir: str | os.PathLike, *,
                        tag: str = "", benchmarks: Sequence[str] | None = None) -> dict[str, Any]:
    """Evaluate the policy in ``policy_dir`` on each benchmark with the profile's protocol.

    Uses ``cfg.eval`` (n samples, temperature, top_p, token and turn budgets, ``max_problems``)
    and writes ``run_dir/eval/<benchmark>[_<tag>].json`` with manifests via :mod:`kit.eval`.

    A small model's context cannot hold every benchmark prompt: the prompt budget is the model's
    context minus ``eval.max_tokens`` (at least ``rollout.max_prompt_tokens``), and problems whose
    rendered prompt is longer are skipped, printed, and listed in the manifest under
    ``skipped_prompt_too_long`` (``n_problems`` counts only the evaluated ones).

    Returns:
        ``{benchmark: kit.eval.EvalResult}``.
    Raises:
        FileNotFoundError: the policy folder or a benchmark file is missing.
    """
    from kit.eval.benchmarks import benchmark_path, load_benchmark
    from kit.eval.evaluate import evaluate_async, save_result
    from kit.eval.manifest import sha256_file
    from kit.rollout import HFBackend, run_sync
    from kit.sandbox import SandboxPool

    model, tok = load_run_policy(policy_dir)
    ev = cfg.eval
    names = list(benchmarks) if benchmarks is not None else eval_benchmarks(cfg)
    context = _context(model)
    rollout_cfg = _eval_rollout_cfg(cfg, context)
    data_dir = cfg.data.data_dir or None

    def fits(item) -> bool:
        return _fits(tok, item.question, rollout_cfg)

    async def go():
        out = {}
        async with SandboxPool(cfg.sandbox) as pool:
            for bench in names:
                items = load_benchmark(bench, data_dir, ev.gpqa_path, ev.max_problems)
                kept = [it for it in items if fits(it)]
                skipped = [it.id for it in items if not fits(it)]
                if skipped:
                    print(f"{bench}: {len(skipped)} of {len(items)} problems skipped, prompt longer than "
                          f"{rollout_cfg.max_prompt_tokens} tokens (model context {context} - {ev.max_tokens})")
                if not kept:
                    print(f"{bench}: nothing to evaluate (every prompt is too long); no result written")
                    continue
                backend = HFBackend(model, tok, batch_size=cfg.rollout.batch_size, seed=cfg.seed)
                res = await evaluate_async(
                    backend, bench, tokenizer=tok, executor=pool, n=ev.n_samples, temperature=ev.temperature,
                    top_p=ev.top_p, max_tokens=ev.max_tokens, max_turns=ev.max_turns, max_problems=ev.max_problems,
                    rollout_cfg=rollout_cfg, seed=cfg.seed, model_name=str(policy_dir),
                    bootstrap_samples=ev.bootstrap_samples, items=kept)
                path = benchmark_path(bench, data_dir, ev.gpqa_path)
                res.manifest["data_files"] = {str(path): sha256_file(path)}
                res.manifest.update({"profile": cfg.profile, "benchmark_size": len(load_benchmark(bench, data_dir, ev.gpqa_path)),
                                     "skipped_prompt_too_long": skipped, "max_prompt_tokens": rollout_cfg.max_prompt_tokens})
                save_result(run_dir, res, tag)
                out[bench] = res
        return out

    return run_sync(go())


# --------------------------------------------------------------------------- behaviour analysis


@dataclass
class Analysis:
    """Output of :func:`analyze_checkpoints`.

    Attributes:
        counts: DataFrame, one row per checkpoint: trajectories, forking / reflection / other
            high-entropy token counts and shares (:func:`kit.analysis.tokens.counts_by_checkpoint`).
        html: ``{checkpoint: HTML}`` of its first trajectory with the top entropy tokens highlighted.
        rows: per-trajectory records as written to ``run_dir/entropy_tokens.jsonl``.
    """

    counts: Any
    html: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def analyze_checkpoints(cfg: KitConfig, policies: Mapping[str, str | os.PathLike], run_dir: str | os.PathLike, *,
                        n: int = 8, top_frac: float = 0.2, seed: int = 0) -> Analysis:
    """Entropy analysis (report §5.4) of each policy on the same ``n`` held-out problems.

    For every checkpoint: sample one trajectory per problem (temperature 1, the real sandbox),
    compute the policy's per-token entropy along it (:func:`kit.analysis.entropy.trajectory_entropy`),
    mark the top ``top_frac`` model tokens, and label them forking / reflection / other
    (:func:`kit.analysis.tokens.classify_tokens`). Writes ``run_dir/entropy_tokens.jsonl`` and
    ``run_dir/entropy_counts.csv``.

    Raises:
        FileNotFoundError: a policy folder is missing.
    """
    from kit.analysis.entropy import entropy_html, high_entropy_mask, trajectory_entropy
    from kit.analysis.tokens import classify_tokens, count_labels, counts_by_checkpoint

    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = heldout_problems(cfg, n)
    rows: list[dict[str, Any]] = []
    pages: dict[str, str] = {}
    for name, policy in policies.items():
        trajs, tok, batch = sample_trajectories(cfg, policy, problems=problems, seed=seed, temperature=1.0)
        model, _ = load_run_policy(policy)
        for i, tr in enumerate(trajs):
            if not tr.response_ids:
                continue
            ent = trajectory_entropy(model, tr.prompt_ids, tr.response_ids)
            high = high_entropy_mask(ent, tr.response_mask, top_frac)
            pieces = [tok.decode([t], skip_special_tokens=False) for t in tr.response_ids]
            labels = classify_tokens(pieces, tr.response_mask, high)
            rows.append({"checkpoint": name, "problem": i, "correct": bool(batch.rewards.reshape(-1)[i] > 0),
                         "tokens": len(tr.response_ids), "mean_entropy": float(ent[[m == 1 for m in tr.response_mask]].mean())
                         if sum(tr.response_mask) else float("nan"), **count_labels(labels),
                         "high_tokens": [p for p, lab in zip(pieces, labels, strict=True) if lab is not None][:40]})
            if name not in pages:
                pages[name] = entropy_html(pieces, ent, tr.response_mask, top_frac,
                                           title=f"{name}: held-out problem {i} ({'correct' if rows[-1]['correct'] else 'wrong'})")
    with (out / "entropy_tokens.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    counts = counts_by_checkpoint(rows)
    counts.to_csv(out / "entropy_counts.csv")
    return Analysis(counts=counts, html=pages, rows=rows)


# --------------------------------------------------------------------------- consistency filter, pass@k boundary


def policy_backend(cfg: KitConfig, policy_dir: str | os.PathLike):
    """``(backend, tokenizer, context)`` for a saved policy: an ``HFBackend`` (the backend of
    :func:`evaluate_checkpoint`) seeded with ``cfg.seed``, its tokenizer, and its context in tokens.
    To use a served model instead, pass an ``OpenAIBackend`` and its tokenizer to the callers below."""
    from kit.rollout import HFBackend

    model, tok = load_run_policy(policy_dir)
    return HFBackend(model, tok, batch_size=cfg.rollout.batch_size, seed=cfg.seed), tok, _context(model)


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
    import pandas as pd

    from kit.data.curate import answers_match, consistency_filter, sample_answers
    from kit.data.pools import Problem
    from kit.eval.manifest import write_json
    from kit.rollout import run_sync
    from kit.sandbox import SandboxPool

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
    rollout_cfg = _eval_rollout_cfg(cfg, context)
    try:
        df = pd.read_parquet(path, columns=["source", "id", "problem", "answer"])
    except Exception as exc:  # pyarrow names the missing field but not the file
        raise ValueError(f"{path}: not a curated parquet with columns source, id, problem, answer ({exc})") from exc
    df = df.sample(frac=1.0, random_state=cfg.seed)
    probs, too_long = [], 0
    for r in df.itertuples(index=False):
        if n_problems and len(probs) >= n_problems:
            break
        if _fits(tokenizer, r.problem, rollout_cfg):
            probs.append(Problem(r.source, str(r.id), r.problem, str(r.answer)))
        else:
            too_long += 1

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            return await sample_answers(backend, probs, tokenizer=tokenizer, executor=pool, n=n,
                                        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                        max_tokens=cfg.eval.max_tokens, max_turns=cfg.eval.max_turns,
                                        rollout_cfg=rollout_cfg)

    answers = run_sync(go()) if probs else {}
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

    ``source`` ``"heldout"`` is the profile's held-out task problems (default on CPU profiles, where
    the real benchmarks score ~0); a benchmark name reads that file (default on paper profiles: the
    first of ``eval.benchmarks``). ``n_problems`` defaults to ``eval.passk_problems`` (0 = all).
    """
    from kit.eval.benchmarks import BenchItem, load_benchmark

    source = source or ("heldout" if not uses_cluster(cfg) else cfg.eval.benchmarks[0])
    n_problems = cfg.eval.passk_problems if n_problems is None else n_problems
    if source == "heldout":
        return source, [BenchItem("heldout", p.id, p.question, p.answer) for p in heldout_problems(cfg, n_problems)]
    return source, load_benchmark(source, cfg.data.data_dir or None, cfg.eval.gpqa_path, n_problems)


async def _evaluate_items(cfg: KitConfig, backend: Any, tok: Any, rollout_cfg: Any, source: str, items: list, n: int,
                          model_name: str):
    """:func:`kit.eval.evaluate.evaluate_async` of ``items`` with the ``eval`` protocol and a sandbox pool."""
    from kit.eval.evaluate import evaluate_async
    from kit.sandbox import SandboxPool

    ev = cfg.eval
    async with SandboxPool(cfg.sandbox) as pool:
        return await evaluate_async(backend, source, tokenizer=tok, executor=pool, n=n, temperature=ev.temperature,
                                    top_p=ev.top_p, max_tokens=ev.max_tokens, max_turns=ev.max_turns,
                                    rollout_cfg=rollout_cfg, seed=cfg.seed, model_name=model_name,
                                    bootstrap_samples=ev.bootstrap_samples, items=items)


def passk_boundary(cfg: KitConfig, policies: Mapping[str, str | os.PathLike], run_dir: str | os.PathLike, *,
                   source: str | None = None, n_problems: int | None = None, n: int | None = None,
                   backends: Mapping[str, tuple[Any, Any]] | None = None) -> PassK:
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
    Returns:
        A :class:`PassK`.
    Raises:
        ValueError: no policies, ``n < 1``, or no problem fits.
        FileNotFoundError: a policy folder or benchmark file is missing.
    """
    from kit.eval.evaluate import passk_curves
    from kit.eval.manifest import write_json
    from kit.figures import save_figure
    from kit.rollout import run_sync

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
    source, items = passk_items(cfg, source, n_problems)
    out = Path(run_dir) / "passk"
    out.mkdir(parents=True, exist_ok=True)
    results, paths = {}, {}
    for label, policy in policies.items():
        backend, tok, context = (*backends[label], 0) if backends and label in backends else policy_backend(cfg, policy)
        rollout_cfg = _eval_rollout_cfg(cfg, context)
        if not results:
            items = [it for it in items if _fits(tok, it.question, rollout_cfg)]
            if not items:
                raise ValueError(f"pass@k: no {source} problem fits the prompt budget of {rollout_cfg.max_prompt_tokens} tokens")
        results[label] = run_sync(_evaluate_items(cfg, backend, tok, rollout_cfg, source, items, n, str(policy)))
        key = keys[label]
        paths[f"result_{key}"] = write_json(out / f"{source}_{key}.json", results[label].to_dict())
    curves = passk_curves(results)
    what = (f"{len(items)} held-out tiny task problems (not a benchmark)" if source == "heldout"
            else f"{source}, {len(items)} problems")
    title = f"pass@k, {what}; n = {n}, T = {cfg.eval.temperature}; profile {cfg.profile}"
    fig = passk_figure(curves, title)
    paths["curves"] = out / "passk_curves.csv"
    curves.to_csv(paths["curves"])
    paths["meta"] = write_json(out / "passk_curves.json", {"title": title, "source": source, "problems": len(items),
                                                           "n": n, "labels": list(results), "policies": {k: str(v) for k, v in policies.items()}})
    paths.update(zip(("png", "pdf"), save_figure(fig, out, "passk_curves"), strict=True))
    return PassK(curves=curves, results=results, figure=fig, paths=paths)


def passk_figure(curves: Any, title: str = ""):
    """A Figure of pass@k curves (:func:`kit.eval.evaluate.plot_passk_curves`, k on a log2 axis)."""
    from matplotlib.figure import Figure

    import kit.figures  # noqa: F401  (shows Figures as PNG in notebooks)
    from kit.eval.evaluate import plot_passk_curves

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    plot_passk_curves(curves, ax=fig.subplots())
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def copy_passk_figure(eval_dir: str | os.PathLike, fig_dir: str | os.PathLike) -> list[Path]:
    """Copy ``eval_dir/passk/passk_curves.{png,pdf}`` (written by :func:`passk_boundary` in
    08_evaluation) into the report's figures folder; returns the copies ([] when there are none)."""
    import shutil

    src = Path(eval_dir) / "passk"
    found = [src / f"passk_curves.{ext}" for ext in ("png", "pdf") if (src / f"passk_curves.{ext}").exists()]
    if found:
        Path(fig_dir).mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(p, Path(fig_dir) / p.name)) for p in found]
