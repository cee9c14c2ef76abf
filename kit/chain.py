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
        FileNotFoundError: the folder does not exist (names it and the notebook that writes it).
    """
    from kit.models import load_policy

    p = Path(policy_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"policy folder not found: {p} (written by the upstream training notebook; "
                                "run it first, or pass the right run directory as a parameter)")
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

        if stage == "stage3":
            from kit.bridge.hard_subset import prepare_stage3_data

            prepare_stage3_data(cfg, run_dir, data_dir, init_dir,
                                hard_counts=hard_counts or os.environ.get("KIT_HARD_COUNTS", ""),
                                sampler_url=sampler_url or os.environ.get("KIT_SAMPLER_URL", ""))
        return stages.run_stage(cfg, stage, run_dir, init_dir, data_dir)
    from kit.train.rl import run_stage

    return run_stage(cfg, stage, Path(init_dir) / "policy", run_dir, progress)


def train_ablation(cfg: KitConfig, run_dir, init_dir, data_dir, progress=None) -> dict[str, Any]:
    """The RoC ablation from ``init_dir/policy``: :func:`kit.train.rl.run_ablation` locally, or one
    VERL stage-1 run per (algorithm, seed) on the paper profiles (:func:`kit.bridge.stages.run_ablation`,
    same subfolders, each with ``metrics.jsonl``, ``policy/`` and ``summary.json``)."""
    if not uses_cluster(cfg):
        from kit.train.rl import run_ablation

        return run_ablation(cfg, Path(init_dir) / "policy", run_dir, progress=progress)
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
    import dataclasses

    from kit import prompts
    from kit.eval.benchmarks import benchmark_path, load_benchmark
    from kit.eval.evaluate import evaluate_async, save_result
    from kit.eval.manifest import sha256_file
    from kit.rollout import HFBackend, run_sync
    from kit.sandbox import SandboxPool

    model, tok = load_run_policy(policy_dir)
    ev = cfg.eval
    names = list(benchmarks) if benchmarks is not None else eval_benchmarks(cfg)
    context = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    rollout_cfg = dataclasses.replace(cfg.rollout, max_prompt_tokens=max(cfg.rollout.max_prompt_tokens,
                                                                         context - ev.max_tokens))
    data_dir = cfg.data.data_dir or None

    def fits(item) -> bool:
        ids = tok.encode(prompts.render_prompt(item.question), add_special_tokens=False)
        return len(ids) <= rollout_cfg.max_prompt_tokens

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
