"""Evaluate a policy on a benchmark through the training agent loop, and score the samples.

Two layers:

- :func:`score_samples` (pure): given the (N, n) trajectories of N problems, their verdicts and
  the golds, compute every metric of the report's evaluation: avg@n (mean pass@1, Table 3),
  unbiased pass@k for every k <= n, maj@k, a bootstrap 95% interval of avg@n, response length
  mean/median in tokens, tool calls per trajectory, tool-error ratio, truncation ratio.
- :func:`evaluate` (driver): loads the benchmark, runs ``n`` rollouts per problem with
  :func:`kit.rollout.rollout_batch` (the same loop as training: same prompt, parser, feedback,
  turn and token budgets), grades with :func:`kit.reward.verify_batch`, scores, and writes
  ``run_dir/eval/<benchmark>.json`` with a manifest (:mod:`kit.eval.manifest`).

A trajectory the budget cut (``finish_reason`` ``length`` or ``budget``, ``truncated``) is graded
as training grades it: incorrect, reason ``no_answer``, whatever it boxed before the cut
(:func:`kit.reward.verdict.cut_off`; rStar2-Agent §4.3, no overlong filtering). VERL's validation
scores it 0 the same way (``compute_score`` reads ``extra_info["truncated"]``), so local and
VERL pass@k, avg@n and maj@k agree. A trajectory that ends at ``max_turns`` with a tool call
pending is not truncated: it is graded from its box, as in training.

Defaults follow the report (§5: avg@16, temperature 0.6, up to 30K tokens and 30 turns; top_p
0.95 is the common choice, the report does not state it). Pass ``temperature=0`` explicitly for
greedy decoding; note that n > 1 greedy samples are near-identical (the release's eval scripts
do this by accident: they decode greedily unless ``val_kwargs`` are set).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kit import prompts
from kit.eval import metrics
from kit.eval.benchmarks import benchmark_path, load_benchmark
from kit.eval.manifest import build_manifest
from kit.jsonio import write_json
from kit.reward import averify_batch, default_verifier
from kit.reward.rules import quick_grade
from kit.reward.verdict import cut_off
from kit.rollout import rollout_batch, run_coroutine


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


def _answer_key(extracted: str | None) -> str | None:
    """Voting key of an extracted answer: each run of whitespace one space, none at the ends
    (None stays None). Spaces are not all removed: ``12, 345`` (two values) is not ``12,345``
    (a thousands number), and ``x = 1 or x = 2`` needs the spaces around ``or``."""
    return None if extracted is None else " ".join(str(extracted).split())


def answer_equivalence(timeout_s: float = 5.0, verifier: Any = None) -> Callable[[str, str], bool]:
    """The verifier's equivalence of two extracted answers, for majority voting (maj@k).

    ``same(a, b)`` grades ``b`` against ``a`` as the gold, exactly as the reward does: the exact
    rules first (:func:`kit.reward.rules.quick_grade`, in this process), math_verify in a
    killable worker for the rest (:class:`kit.reward.Verifier`, started only when needed). A
    timeout or a parse error counts as "not equivalent". Callers cache results
    (:func:`kit.eval.metrics.group_equivalent`).

    Args:
        timeout_s: per comparison, seconds (math_verify path only).
        verifier: a :class:`kit.reward.Verifier`; default the shared pool.
    """
    def same(a: str, b: str) -> bool:
        reason, _, g, x = quick_grade(str(a), str(b))
        if reason is not None:
            return reason == "correct"
        return (verifier or default_verifier()).submit(g, x, timeout_s).result()[0] == "correct"

    return same


@dataclass
class EvalResult:
    """All numbers of one benchmark evaluation (see :func:`score_samples`)."""

    benchmark: str
    n_problems: int
    n_samples: int
    avg_at_n: float
    ci95: tuple[float, float]
    pass_at_k: dict[int, float]
    maj_at_k: dict[int, float]
    response_tokens_mean: float
    response_tokens_median: float
    model_tokens_mean: float
    tool_calls_per_traj: float
    tool_error_ratio: float
    truncation_ratio: float
    per_problem: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: k -> share of k-subsets whose top vote was shared by two answers (first seen won)
    maj_tie_rate: dict[int, float] = field(default_factory=dict)

    @property
    def correct(self) -> np.ndarray:
        """(N, n) 0/1 matrix rebuilt from ``per_problem``."""
        return np.array([p["correct"] for p in self.per_problem], dtype=float).reshape(self.n_problems, self.n_samples)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        d["maj_at_k"] = {str(k): v for k, v in self.maj_at_k.items()}
        d["maj_tie_rate"] = {str(k): v for k, v in self.maj_tie_rate.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalResult:
        d = dict(d)
        d["pass_at_k"] = {int(k): v for k, v in d["pass_at_k"].items()}
        d["maj_at_k"] = {int(k): v for k, v in d["maj_at_k"].items()}
        d["maj_tie_rate"] = {int(k): v for k, v in d.get("maj_tie_rate", {}).items()}  # absent in older files
        d["ci95"] = tuple(d["ci95"])
        return cls(**d)

    def summary(self) -> dict[str, float]:
        """Flat headline numbers (for tables): avg@n, CI, pass@1/pass@n, maj@n and its tie rate, lengths, tools."""
        n = self.n_samples
        return {"benchmark": self.benchmark, "problems": self.n_problems, "n": n,
                f"avg@{n}": self.avg_at_n, "ci_low": self.ci95[0], "ci_high": self.ci95[1],
                f"pass@{n}": self.pass_at_k.get(n, float("nan")), f"maj@{n}": self.maj_at_k.get(n, float("nan")),
                f"maj@{n}_tie_rate": self.maj_tie_rate.get(n, float("nan")),
                "response_tokens_mean": self.response_tokens_mean,
                "response_tokens_median": self.response_tokens_median,
                "tool_calls_per_traj": self.tool_calls_per_traj, "tool_error_ratio": self.tool_error_ratio,
                "truncation_ratio": self.truncation_ratio}


def score_samples(benchmark: str, item_ids: Sequence[str], trajectories: Sequence[Sequence[Any]],
                  verdicts: Sequence[Sequence[Any]], *, maj_ks: Sequence[int] | None = None,
                  bootstrap_samples: int = 1000, seed: int = 0,
                  equivalent: Callable[[str, str], bool] | None | str = "verifier") -> EvalResult:
    """Compute every evaluation metric from finished samples (pure; no model, no sandbox).

    Args:
        benchmark: benchmark name.
        item_ids: (N,) problem ids.
        trajectories: (N, n) trajectories (``kit.rollout.Trajectory`` or dicts from
            ``samples.jsonl``) with ``response_ids`` (or ``response_len``), ``response_mask``,
            ``tool_calls``, ``tool_errors`` (dict kind -> count, or an int) and ``truncated``.
        verdicts: (N, n) ``kit.reward.Verdict``-like objects with ``correct`` and ``extracted``,
            after the truncation rule (:func:`evaluate_async` applies it; VERL's validation
            scores already follow it): this function grades nothing.
        maj_ks: k values for maj@k (default 1, n and the powers of two in between).
        bootstrap_samples: resamples of the 95% interval (``EvalConfig.bootstrap_samples``).
        seed: bootstrap / maj@k resampling seed.
        equivalent: how answers are grouped before the maj@k vote: ``"verifier"`` (default,
            :func:`answer_equivalence`: ``\\frac{3}{4}``, ``0.75`` and ``3/4`` are one vote),
            a function ``(a, b) -> bool``, or None (answers vote as written, runs of whitespace aside).
    Returns:
        An :class:`EvalResult` (manifest left empty); ``maj_tie_rate`` holds each k's tie rate.
    Raises:
        ValueError: ragged rows, or shapes of ids, trajectories and verdicts that differ.
    """
    N = len(item_ids)
    if len(trajectories) != N or len(verdicts) != N:
        raise ValueError(f"{N} ids, {len(trajectories)} trajectory rows, {len(verdicts)} verdict rows")
    ns = {len(r) for r in trajectories} | {len(r) for r in verdicts}
    if len(ns) > 1:
        raise ValueError(f"every problem needs the same number of samples, got sizes {sorted(ns)}")
    n = ns.pop() if ns else 0
    if n == 0:
        raise ValueError("no samples to score")
    correct = np.array([[float(bool(_get(v, "correct"))) for v in row] for row in verdicts])
    answers = [[_answer_key(_get(v, "extracted")) for v in row] for row in verdicts]
    flat = [t for row in trajectories for t in row]
    lengths = np.array([_get(t, "response_len", None) or len(_get(t, "response_ids", []) or []) for t in flat], float)
    model_len = np.array([sum(_get(t, "response_mask", []) or []) for t in flat], float)
    calls = np.array([int(_get(t, "tool_calls", 0) or 0) for t in flat], float)
    errs = np.array([_n_errors(_get(t, "tool_errors", 0)) for t in flat], float)
    trunc = np.array([bool(_get(t, "truncated", False)) for t in flat], float)
    ks = sorted(set(maj_ks) if maj_ks else {1, n, *(2 ** i for i in range(1, 8) if 2 ** i < n)})
    same = answer_equivalence() if equivalent == "verifier" else equivalent
    cache: dict = {}  # comparisons shared by every k
    maj = {k: metrics.maj_at_k_stats(answers, correct.astype(bool).tolist(), k, seed=seed, equivalent=same,
                                     cache=cache) for k in ks}
    per_problem = []
    for i, pid in enumerate(item_ids):
        sl = slice(i * n, (i + 1) * n)
        per_problem.append({
            "id": str(pid), "correct": correct[i].astype(int).tolist(), "answers": answers[i],
            "pass1": float(correct[i].mean()), "response_tokens": [int(x) if np.isfinite(x) else None for x in lengths[sl]],
            "tool_calls": calls[sl].astype(int).tolist(), "tool_errors": errs[sl].astype(int).tolist(),
            "truncated": trunc[sl].astype(int).tolist(),
        })
    return EvalResult(
        benchmark=benchmark, n_problems=N, n_samples=n,
        avg_at_n=metrics.avg_at_n(correct),
        ci95=metrics.bootstrap_ci(correct.mean(axis=1), samples=bootstrap_samples, seed=seed),
        pass_at_k=metrics.pass_at_k_curve(correct),
        maj_at_k={k: v[0] for k, v in maj.items()}, maj_tie_rate={k: v[1] for k, v in maj.items()},
        response_tokens_mean=float(lengths.mean()), response_tokens_median=float(np.median(lengths)),
        model_tokens_mean=float(model_len.mean()),
        tool_calls_per_traj=float(calls.mean()),
        tool_error_ratio=float(errs.sum() / calls.sum()) if calls.sum() else float("nan"),
        truncation_ratio=float(trunc.mean()),
        per_problem=per_problem,
    )


def _n_errors(tool_errors: Any) -> int:
    if isinstance(tool_errors, Mapping):
        return int(sum(tool_errors.values()))
    return int(tool_errors or 0)


def save_result(run_dir: str | Path, result: EvalResult, tag: str = "") -> Path:
    """Write ``run_dir/eval/<benchmark>[_<tag>].json`` (metrics, per-problem samples, manifest)."""
    name = result.benchmark + (f"_{tag}" if tag else "")
    return write_json(Path(run_dir) / "eval" / f"{name}.json", result.to_dict())


def load_result(path: str | Path) -> EvalResult:
    """Read an :class:`EvalResult` written by :func:`save_result`."""
    return EvalResult.from_dict(json.loads(Path(path).read_text()))


def passk_curves(results: Mapping[str, EvalResult]):
    """pass@k curves of several models/checkpoints on the same problems (Yue et al. 2025's
    RLVR-boundary plot: base vs RL vs distilled).

    Args:
        results: ``{label: EvalResult}`` of one benchmark.
    Returns:
        A pandas DataFrame indexed by k with one column per label (k up to the smallest n).
    Raises:
        ValueError: the results cover different benchmarks or different problem ids.
    """
    if not results:
        raise ValueError("no results given")
    first = next(iter(results.values()))
    ids = [p["id"] for p in first.per_problem]
    for label, r in results.items():
        if r.benchmark != first.benchmark or [p["id"] for p in r.per_problem] != ids:
            raise ValueError(f"{label!r}: not the same benchmark problems as the first result "
                             f"({r.benchmark} vs {first.benchmark}); pass@k curves need the same items")
    kmax = min(r.n_samples for r in results.values())
    return pd.DataFrame({label: {k: r.pass_at_k[k] for k in range(1, kmax + 1)} for label, r in results.items()}).rename_axis("k")


def plot_passk_curves(curves, ax=None, title: str = ""):
    """Plot :func:`passk_curves` output (k on a log2 axis); returns the matplotlib Axes."""
    ax = ax or plt.subplots(figsize=(5, 3.5))[1]
    for col in curves.columns:
        ax.plot(curves.index, curves[col], marker="o", ms=3, label=col)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


# ------------------------------------------------------------------------------ driver


async def evaluate_async(backend: Any, benchmark: str, *, tokenizer: Any, executor: Any, n: int = 16,
                         temperature: float = 0.6, top_p: float = 0.95, max_tokens: int = 30000,
                         max_turns: int = 30, max_problems: int = 0, rollout_cfg: Any = None,
                         data_dir: str | None = None, gpqa_path: str = "", seed: int | None = 0,
                         model_name: str = "", max_concurrency: int | None = None, verify_fn: Any = None,
                         bootstrap_samples: int = 1000, run_dir: str | Path | None = None, tag: str = "",
                         items: Sequence[Any] | None = None,
                         rollout_kwargs: Mapping[str, Any] | None = None) -> EvalResult:
    """Roll out ``n`` samples per benchmark problem with the training agent loop and score them.

    Args:
        backend: a ``kit.rollout`` Backend (``HFBackend`` for the tiny model on CPU,
            ``OpenAIBackend`` for an SGLang/vLLM server, ``ScriptedBackend`` in tests).
        benchmark: a name of :data:`kit.eval.benchmarks.BENCHMARKS`.
        tokenizer: the policy's tokenizer (prompt building, token counts).
        executor: tool-call runner (``kit.sandbox.SandboxPool`` or a test double).
        n: samples per problem (report: 16). temperature / top_p: sampling (report: 0.6; 0.95).
        max_tokens: response budget in tokens shared by all turns (report: 30K).
        max_turns: model turns (report: 30).
        max_problems: first N problems only (0 = all).
        rollout_cfg: a ``kit.config.RolloutConfig`` for the remaining loop settings.
        seed: recorded in the manifest; the backend owns its RNG.
        verify_fn: ``verify_fn(pairs) -> verdicts`` with pairs ``(gold, response_text)``;
            default ``kit.reward.averify_batch`` (killable verifier workers). Whatever it
            returns for a trajectory the budget cut is replaced by
            :func:`kit.reward.verdict.cut_off` (score 0, ``no_answer``, no extracted answer for
            maj@k), the training reward's rule; a ``max_turns`` ending is graded as returned.
        run_dir: when given, the result is written to ``run_dir/eval/<benchmark>.json``.
        items: pre-loaded benchmark items (default: :func:`kit.eval.benchmarks.load_benchmark`).
        rollout_kwargs: more keywords for :func:`kit.rollout.run_trajectory` (``call_factory``,
            ``stop_ids``, ``timeout_s``).
    Returns:
        The :class:`EvalResult` with its manifest.
    Raises:
        ValueError: n < 1; errors of the loaders and of the agent loop propagate.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if items is None:
        items = load_benchmark(benchmark, data_dir=data_dir, gpqa_path=gpqa_path, max_problems=max_problems)
        files = [benchmark_path(benchmark, data_dir, gpqa_path)]
    else:
        files = []
    groups = await rollout_batch(backend, tokenizer, [it.question for it in items], executor, n, rollout_cfg,
                                 max_concurrency=max_concurrency, max_response_tokens=max_tokens,
                                 max_turns=max_turns, temperature=temperature, top_p=top_p,
                                 **dict(rollout_kwargs or {}))
    pairs = [(it.answer, tr.response_text) for it, row in zip(items, groups, strict=True) for tr in row]
    if verify_fn is None:
        flat = list(await averify_batch(pairs))
    else:
        flat = list(verify_fn(pairs))
    flat = [cut_off(v) if tr.truncated else v for v, tr in zip(flat, (t for row in groups for t in row), strict=True)]
    verdicts = [flat[i * n:(i + 1) * n] for i in range(len(items))]
    result = score_samples(benchmark, [it.id for it in items], groups, verdicts,
                           bootstrap_samples=bootstrap_samples, seed=seed or 0)
    result.manifest = build_manifest(
        model=model_name or type(backend).__name__, backend=_describe(backend),
        sampling={"n": n, "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                  "max_turns": max_turns, "greedy": temperature == 0},
        seed=seed, data_files=files,
        extra={"benchmark": benchmark, "max_problems": max_problems,
               "system_prompt_sha256": hashlib.sha256(prompts.SYSTEM_PROMPT.encode()).hexdigest(),
               "rollout": dataclasses.asdict(rollout_cfg) if dataclasses.is_dataclass(rollout_cfg) else None})
    if run_dir is not None:
        save_result(run_dir, result, tag)
    return result


def evaluate(backend: Any, benchmark: str, n: int = 16, temperature: float = 0.6, top_p: float = 0.95,
             max_tokens: int = 30000, max_turns: int = 30, **kwargs: Any) -> EvalResult:
    """Synchronous :func:`evaluate_async` (works inside Jupyter's running loop too).
    Same arguments; ``tokenizer`` and ``executor`` are required keywords."""
    return run_coroutine(evaluate_async(backend, benchmark, n=n, temperature=temperature, top_p=top_p,
                                   max_tokens=max_tokens, max_turns=max_turns, **kwargs))


def _describe(backend: Any) -> str:
    parts = [type(backend).__name__]
    for attr in ("base_url", "model", "device", "seed", "batch_size"):
        v = getattr(backend, attr, None)
        if isinstance(v, str | int | float):
            parts.append(f"{attr}={v}")
        elif v is not None and attr == "device":
            parts.append(f"device={v}")
    return " ".join(parts)
