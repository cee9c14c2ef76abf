"""Evaluation statistics over per-sample correctness (pure functions on arrays).

Symbols: ``N`` problems of a benchmark, ``n`` samples per problem (16 in the report), ``k <= n``.

- avg@n: the mean over problems of the fraction of correct samples (= mean pass@1; the metric of
  rStar2-Agent Table 3, "avg@16 at temperature 0.6").
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al. 2021 (Codex, §2.1),
  averaged over problems; used for pass@k-boundary curves (Yue et al. 2025, "Does RL really
  incentivize reasoning capacity beyond the base model?").
- maj@k: majority vote over answers; the estimator averages over every size-k subset when
  ``exact=True`` (small n) and otherwise draws ``resamples`` random subsets.
- bootstrap CI: percentile interval from resampling problems with replacement.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np


def _as_matrix(correct) -> np.ndarray:
    arr = np.asarray(correct, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"correct must be a 2-D (N, n) array of 0/1, got shape {arr.shape}")
    if arr.size and not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError("correct must hold only 0/1 (or booleans)")
    return arr


def avg_at_n(correct) -> float:
    """Mean pass@1 over problems (rStar2-Agent's avg@16).

    Args:
        correct: (N, n) 0/1 array, ``correct[i, j]`` = sample j of problem i was graded right.
    Returns:
        A float in [0, 1] (NaN when N = 0).
    Raises:
        ValueError: not 2-D or not 0/1.
    """
    arr = _as_matrix(correct)
    return float(arr.mean()) if arr.size else float("nan")


def pass_at_k_one(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` correct out of ``n`` samples:
    1 - C(n-c, k) / C(n, k), computed as a stable product (Chen et al. 2021).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k(correct, k: int) -> float:
    """Mean unbiased pass@k over problems.

    Args:
        correct: (N, n) 0/1 array.
        k: 1 <= k <= n.
    Raises:
        ValueError: k out of range, or a malformed array.
    """
    arr = _as_matrix(correct)
    n = arr.shape[1]
    counts = arr.sum(axis=1).astype(int)
    return float(np.mean([pass_at_k_one(n, int(c), k) for c in counts])) if len(counts) else float("nan")


def pass_at_k_curve(correct, ks: Sequence[int] | None = None) -> dict[int, float]:
    """``{k: pass@k}`` for every k in ``ks`` (default 1..n)."""
    arr = _as_matrix(correct)
    ks = list(ks) if ks is not None else list(range(1, arr.shape[1] + 1))
    return {k: pass_at_k(arr, k) for k in ks}


def majority_answer(answers: Sequence[Hashable | None]) -> Hashable | None:
    """Most frequent non-None answer; ties go to the answer seen first; None if all are None."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def maj_at_k(answers: Sequence[Sequence[Hashable | None]], golds_correct: Sequence[Sequence[bool]] | None = None,
             k: int | None = None, *, exact: bool | None = None, resamples: int = 200, seed: int = 0) -> float:
    """Majority-vote accuracy over k samples, averaged over problems.

    Args:
        answers: (N, n) canonical extracted answers (None = no answer); equal answers must be
            equal values (normalise them first, e.g. with ``kit.reward.extract_final_answer``).
        golds_correct: (N, n) correctness of each sample; the voted answer counts as correct
            when a sample carrying it was graded correct. Required.
        k: subset size (default n).
        exact: average over all C(n, k) subsets (default: when C(n, k) <= 5000) or over
            ``resamples`` random subsets drawn with ``seed``.
    Returns:
        Mean over problems of P(majority of a random k-subset is correct).
    Raises:
        ValueError: shapes differ, or k out of range.
    """
    if golds_correct is None:
        raise ValueError("maj_at_k needs the per-sample correctness to grade the voted answer")
    if len(answers) != len(golds_correct):
        raise ValueError(f"{len(answers)} answer rows but {len(golds_correct)} correctness rows")
    if not answers:
        return float("nan")
    rng = np.random.default_rng(seed)
    scores = []
    for i, (row, ok) in enumerate(zip(answers, golds_correct, strict=True)):
        n = len(row)
        if len(ok) != n:
            raise ValueError(f"problem {i}: {n} answers but {len(ok)} correctness flags")
        kk = n if k is None else k
        if not 1 <= kk <= n:
            raise ValueError(f"k must be in [1, {n}], got {kk}")
        right = {a for a, c in zip(row, ok, strict=True) if c and a is not None}
        use_exact = exact if exact is not None else math.comb(n, kk) <= 5000
        # uniform k-subsets; sorted so that ties go to the lowest sample index, as in the exact
        # (lexicographic) enumeration and in majority_answer over the original order
        subsets = (_all_subsets(n, kk) if use_exact
                   else np.sort(np.argsort(rng.random((resamples, n)), axis=1)[:, :kk], axis=1))
        scores.append(_majority_hits(row, right, subsets))
    return float(np.mean(scores))


@functools.lru_cache(maxsize=64)
def _all_subsets(n: int, k: int) -> np.ndarray:
    """(C(n, k), k) array of every k-subset of range(n), in lexicographic order."""
    return np.array(list(itertools.combinations(range(n), k)), dtype=int).reshape(-1, k)


def _majority_hits(row: Sequence[Hashable | None], right: set, subsets: np.ndarray) -> float:
    """Share of ``subsets`` (S, k) of sample indices whose majority answer (ties: first seen in
    the subset, None never votes, as :func:`majority_answer`) is in ``right``; vectorised."""
    values = list(dict.fromkeys(a for a in row if a is not None))
    if not values or not right:
        return 0.0
    code = {a: i for i, a in enumerate(values)}
    codes = np.array([code[a] if a is not None else -1 for a in row])[subsets]  # (S, k)
    onehot = codes[:, :, None] == np.arange(len(values))[None, None, :]  # (S, k, m)
    counts = onehot.sum(axis=1)  # (S, m)
    k = subsets.shape[1]
    first = np.where(onehot.any(axis=1), onehot.argmax(axis=1), k)  # (S, m) first position
    score = np.where(counts > 0, counts * (k + 1) - first, -1)
    winner = score.argmax(axis=1)  # (S,)
    voted = counts.max(axis=1) > 0
    good = np.array([v in right for v in values])
    return float(np.mean(good[winner] & voted))


def bootstrap_ci(per_problem: Sequence[float], samples: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-problem scores (problems resampled with
    replacement; ``EvalConfig.bootstrap_samples``).

    Args:
        per_problem: (N,) scores, e.g. each problem's fraction of correct samples.
    Returns:
        ``(low, high)`` of the (1 - alpha) interval; ``(nan, nan)`` when N = 0.
    Raises:
        ValueError: samples < 1 or alpha outside (0, 1).
    """
    if samples < 1 or not 0 < alpha < 1:
        raise ValueError(f"need samples >= 1 and 0 < alpha < 1, got {samples}, {alpha}")
    x = np.asarray(per_problem, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(samples, x.size))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))
