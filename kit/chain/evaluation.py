"""Evaluation and behaviour analysis of checkpoints for notebooks 07 and 08: evaluate a policy on
every benchmark of the profile (:func:`evaluate_checkpoint`, via ``kit.eval``) and the entropy
analysis over checkpoints (:func:`analyze_checkpoints`, via ``kit.analysis``). Also the prompt
budget helpers the pass@k and consistency code shares (``eval_rollout_cfg``, ``prompt_fits``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import jsonio, prompts
from kit.analysis.entropy import entropy_html, high_entropy_mask, trajectory_entropy
from kit.analysis.tokens import classify_tokens, count_labels, counts_by_checkpoint, post_feedback_tokens
from kit.chain.policies import heldout_problems, load_run_policy, model_context, sample_trajectories
from kit.config import KitConfig
from kit.eval.benchmarks import benchmark_path, load_benchmark
from kit.eval.evaluate import evaluate_async, save_result
from kit.eval.manifest import sha256_file
from kit.progress import bar as progress_bar
from kit.rollout import HFBackend, run_coroutine
from kit.sandbox import SandboxPool


def eval_benchmarks(cfg: KitConfig) -> list[str]:
    """The profile's benchmarks, plus ``gpqa`` when the user supplied ``eval.gpqa_path``."""
    names = list(cfg.eval.benchmarks)
    if cfg.eval.gpqa_path and "gpqa" not in names:
        names.append("gpqa")
    return names


def eval_rollout_cfg(cfg: KitConfig, context: int):
    """``cfg.rollout`` with the prompt budget widened to the context minus ``eval.max_tokens``."""
    return dataclasses.replace(cfg.rollout, max_prompt_tokens=max(cfg.rollout.max_prompt_tokens,
                                                                  context - cfg.eval.max_tokens))


def prompt_fits(tok: Any, question: str, rollout_cfg: Any) -> bool:
    """Whether the rendered prompt of ``question`` fits ``rollout_cfg.max_prompt_tokens``."""
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
    model, tok = load_run_policy(policy_dir)
    ev = cfg.eval
    names = list(benchmarks) if benchmarks is not None else eval_benchmarks(cfg)
    context = model_context(model)
    rollout_cfg = eval_rollout_cfg(cfg, context)
    data_dir = cfg.data.data_dir or None

    def fits(item) -> bool:
        return prompt_fits(tok, item.question, rollout_cfg)

    async def go():
        out = {}
        async with SandboxPool(cfg.sandbox) as pool:
            for bench in names:
                bar.set_postfix_str(bench)
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
                try:
                    res = await evaluate_async(
                        backend, bench, tokenizer=tok, executor=pool, n=ev.n_samples, temperature=ev.temperature,
                        top_p=ev.top_p, max_tokens=ev.max_tokens, max_turns=ev.max_turns, max_problems=ev.max_problems,
                        rollout_cfg=rollout_cfg, seed=cfg.seed, model_name=str(policy_dir),
                        bootstrap_samples=ev.bootstrap_samples, items=kept)
                finally:  # a backend per benchmark: stop its batching task before the next one
                    await backend.aclose()
                path = benchmark_path(bench, data_dir, ev.gpqa_path)
                res.manifest["data_files"] = {str(path): sha256_file(path)}
                res.manifest.update({"profile": cfg.profile, "benchmark_size": len(load_benchmark(bench, data_dir, ev.gpqa_path)),
                                     "skipped_prompt_too_long": skipped, "max_prompt_tokens": rollout_cfg.max_prompt_tokens})
                save_result(run_dir, res, tag)
                out[bench] = res
                bar.update(1)
        return out

    with progress_bar(len(names), f"evaluating {tag or Path(policy_dir).parent.name or 'policy'}", unit="benchmark") as bar:
        return run_coroutine(go())


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
                         "window_tokens": post_feedback_tokens(tr.response_mask),
                         "high_tokens": [p for p, lab in zip(pieces, labels, strict=True) if lab is not None][:40]})
            if name not in pages:
                pages[name] = entropy_html(pieces, ent, tr.response_mask, top_frac,
                                           title=f"{name}: held-out problem {i} ({'correct' if rows[-1]['correct'] else 'wrong'})")
    with (out / "entropy_tokens.jsonl").open("w") as fh:
        for r in rows:
            fh.write(jsonio.dumps(r) + "\n")
    counts = counts_by_checkpoint(rows)
    counts.to_csv(out / "entropy_counts.csv")
    return Analysis(counts=counts, html=pages, rows=rows)
