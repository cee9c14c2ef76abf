"""The functions the rest of the kit calls: verify, verify_batch, their async forms, and the
trainer-facing compute_score. They share lazily started module-level pools (one per worker
count), closed at interpreter exit and re-created after a fork."""

from __future__ import annotations

import atexit
import numbers
import os
import threading
from collections.abc import Sequence
from typing import Any

from kit.reward.pool import Verifier
from kit.reward.rules import quick_grade
from kit.reward.verdict import Verdict, cut_off

_pools: dict[int, Verifier] = {}
_pools_lock = threading.Lock()


def default_verifier(workers: int | None = None) -> Verifier:
    """The shared pool with ``workers`` processes (None = one per core), started on first use.

    A pool made before a ``fork`` is not reused in the child; a new one starts there.
    """
    n = workers or os.cpu_count() or 1
    with _pools_lock:
        v = _pools.get(n)
        if v is None or not v.alive:
            if v is not None and v._pid == os.getpid():
                v.close()
            v = Verifier(n).start()
            _pools[n] = v
        return v


@atexit.register
def close_default_verifiers() -> None:
    """Close every shared pool (registered with atexit; safe to call more than once)."""
    with _pools_lock:
        pools = [v for v in _pools.values() if v._pid == os.getpid()]
        _pools.clear()
    for v in pools:
        v.close()


def verify(gold: str | int, response: str, *, timeout_s: float = 5.0, fallback: bool = False,
           verifier: Verifier | None = None) -> Verdict:
    """Grade one response against its gold answer (rStar2-Agent §2.2.1 binary reward).

    The final answer is taken with :func:`extract_final_answer` (never from tool output);
    integers, decimals, scientific notation and letters are compared exactly in this process;
    anything else goes to math_verify (gold boxed and first) in a killable worker.

    Args:
        gold: reference answer (LaTeX text, or an int).
        response: decoded response text with its tags.
        timeout_s: per-item limit in seconds from dispatch to a worker; a slower item gets
            reason ``timeout`` (score 0).
        fallback: accept unboxed answers (see :func:`extract_final_answer`).
        verifier: a pool to use; default the shared one (:func:`default_verifier`).
    Returns:
        A :class:`Verdict`.
    Raises:
        TypeError: gold or response of the wrong type.
        VerifierError: the worker processes cannot start.
    """
    return (verifier or default_verifier()).verify(gold, response, timeout_s=timeout_s, fallback=fallback)


def verify_batch(pairs: Sequence[tuple[str | int, str]], *, workers: int | None = None, timeout_s: float = 5.0,
                 fallback: bool = False, verifier: Verifier | None = None) -> list[Verdict]:
    """Grade ``(gold, response)`` pairs in parallel on ``workers`` processes.

    Returns:
        One :class:`Verdict` per pair, in input order; :func:`count_reasons` tallies them.
    Raises:
        TypeError: naming ``pairs[i]`` when a pair has the wrong types.
    """
    return (verifier or default_verifier(workers)).verify_batch(pairs, timeout_s=timeout_s, fallback=fallback)


async def averify(gold: str | int, response: str, *, timeout_s: float = 5.0, fallback: bool = False,
                  verifier: Verifier | None = None) -> Verdict:
    """:func:`verify` for asyncio code (the event loop keeps running while a worker grades)."""
    return await (verifier or default_verifier()).averify(gold, response, timeout_s=timeout_s, fallback=fallback)


async def averify_batch(pairs: Sequence[tuple[str | int, str]], *, workers: int | None = None,
                        timeout_s: float = 5.0, fallback: bool = False,
                        verifier: Verifier | None = None) -> list[Verdict]:
    """:func:`verify_batch` for asyncio code."""
    v = verifier or default_verifier(workers)
    return await v.averify_batch(pairs, timeout_s=timeout_s, fallback=fallback)


def grade_answer(gold: str, answer: str) -> tuple[str, str]:
    """Grade an already-extracted answer in *this* process, with no time or memory limit.

    For debugging and notebooks' edge-case cells; training and evaluation use :func:`verify`.

    Returns:
        ``(reason, detail)`` with reason in {correct, wrong, parse_error}.
    """
    reason, detail, g, a = quick_grade(gold, answer)
    if reason is not None:
        return reason, detail
    from kit.reward.mathcheck import grade_math

    return grade_math(g, a)


def _gold_text(ground_truth: Any) -> str:
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, numbers.Integral)):
        raise TypeError(f"ground_truth must be str or int, got {type(ground_truth).__name__}: {ground_truth!r}")
    return ground_truth if isinstance(ground_truth, str) else str(int(ground_truth))


def _score_dict(v: Verdict, extra_info: dict | None = None) -> dict[str, Any]:
    if extra_info and extra_info.get("truncated"):  # the agent loop's extra field: cut by the budget
        v = cut_off(v)
    return {"score": v.score, "acc": v.score, "reason": v.reason, "extracted": v.extracted or "",
            "verify_s": v.seconds}


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kw: Any) -> dict[str, Any]:
    """VERL custom reward function (``reward.custom_reward_function``): the binary outcome reward.

    rStar2-Agent §2.2.1: 1 when the final answer matches, else 0; no format, tool or length
    term. Unlike the release (research note §5), tool output in ``solution_str`` is ignored, and
    a trajectory the budget cut (``extra_info["truncated"]``, the agent loop's extra field) scores 0
    whatever it boxed (:func:`kit.reward.verdict.cut_off`, rStar2-Agent §4.3).

    Args:
        data_source: dataset name (unused: every source is graded the same way).
        solution_str: decoded response with its tags.
        ground_truth: the gold answer (str or int).
        extra_info: read only for ``truncated`` (True: score 0, reason ``no_answer``).
        **kw: ``timeout_s`` (default 5.0) and ``fallback`` (default False) are read; the rest
            is ignored.
    Returns:
        ``{"score": 0.0|1.0, "acc": same, "reason": str, "extracted": str ("" if none),
        "verify_s": float}``.
    Raises:
        TypeError: ground_truth or solution_str of the wrong type.
    """
    v = verify(_gold_text(ground_truth), solution_str, timeout_s=float(kw.get("timeout_s", 5.0)),
               fallback=bool(kw.get("fallback", False)))
    return _score_dict(v, extra_info)


async def acompute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                         **kw: Any) -> dict[str, Any]:
    """:func:`compute_score` as a coroutine, for async reward loops."""
    v = await averify(_gold_text(ground_truth), solution_str, timeout_s=float(kw.get("timeout_s", 5.0)),
                      fallback=bool(kw.get("fallback", False)))
    return _score_dict(v, extra_info)


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict | None] | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Batched :func:`compute_score` (VERL's batch reward manager signature), on :func:`verify_batch`.

    Args:
        data_sources, solution_strs, ground_truths: equal-length sequences (B,).
        extra_infos: None, or B dicts read as :func:`compute_score` reads ``extra_info``.
        **kw: ``timeout_s``, ``fallback``, ``workers`` are read.
    Returns:
        B dicts as :func:`compute_score` returns, in input order.
    Raises:
        ValueError: the sequences differ in length.
    """
    if not (len(data_sources) == len(solution_strs) == len(ground_truths)):
        raise ValueError(f"lengths differ: data_sources={len(data_sources)}, solution_strs={len(solution_strs)}, "
                         f"ground_truths={len(ground_truths)}")
    pairs = [(_gold_text(g), s) for g, s in zip(ground_truths, solution_strs, strict=True)]
    verdicts = verify_batch(pairs, workers=kw.get("workers"), timeout_s=float(kw.get("timeout_s", 5.0)),
                            fallback=bool(kw.get("fallback", False)))
    infos = list(extra_infos) if extra_infos is not None else [None] * len(verdicts)
    return [_score_dict(v, info) for v, info in zip(verdicts, infos, strict=True)]
