"""Evaluation statistics over per-sample correctness (pure functions on arrays).

Symbols: ``N`` problems of a benchmark, ``n`` samples per problem (16 in the report), ``k <= n``.

- avg@n: the mean over problems of the fraction of correct samples (= mean pass@1; the metric of
  rStar2-Agent Table 3, "avg@16 at temperature 0.6").
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al. 2021 (Codex, §2.1),
  averaged over problems; used for pass@k-boundary curves (Yue et al. 2025, "Does RL really
  incentivize reasoning capacity beyond the base model?").
- maj@k: majority vote over answers; the estimator averages over every size-k subset when
  ``exact=True`` (small n) and otherwise draws ``resamples`` random subsets. With an
  ``equivalent`` function (evaluation passes the verifier's, :func:`kit.eval.evaluate.answer_equivalence`)
  equal answers written differently (``\frac{3}{4}``, ``0.75``, ``3/4``) are one vote before
  counting; :func:`maj_at_k_stats` also reports how often the top vote was a tie.
- bootstrap CI: percentile interval from resampling problems with replacement.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

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


def group_equivalent(row: Sequence[Hashable | None], equivalent: Callable[[Hashable, Hashable], bool],
                     cache: dict | None = None) -> list[Hashable | None]:
    """Replace each answer of one problem by the first answer of its equivalence class.

    Answers are taken in order; a new answer joins the class of the first earlier
    representative ``r`` with ``equivalent(r, answer)`` (so the representative plays the gold's
    part in an asymmetric check), else it starts a class. Equal values are never compared.

    Args:
        row: (n,) answers of one problem (None = no answer, kept as None).
        equivalent: ``(a, b) -> bool``.
        cache: optional dict reused across calls: ``(a, b) -> bool``; a problem's answers are
            few, but a slow check (math_verify) is paid once per distinct pair.
    Returns:
        (n,) answers where equivalent ones are the same value.
    """
    cache = {} if cache is None else cache
    reps: list[Hashable] = []
    out: list[Hashable | None] = []
    for a in row:
        if a is None:
            out.append(None)
            continue
        for r in reps:
            if r == a:
                break
            key = (r, a)
            if key not in cache:
                cache[key] = bool(equivalent(r, a))
            if cache[key]:
                break
        else:
            reps.append(a)
            r = a
        out.append(r)
    return out


def maj_at_k(answers: Sequence[Sequence[Hashable | None]], golds_correct: Sequence[Sequence[bool]] | None = None,
             k: int | None = None, *, exact: bool | None = None, resamples: int = 200, seed: int = 0,
             equivalent: Callable[[Hashable, Hashable], bool] | None = None) -> float:
    """Majority-vote accuracy over k samples, averaged over problems (see :func:`maj_at_k_stats`)."""
    return maj_at_k_stats(answers, golds_correct, k, exact=exact, resamples=resamples, seed=seed,
                          equivalent=equivalent)[0]


def maj_at_k_stats(answers: Sequence[Sequence[Hashable | None]], golds_correct: Sequence[Sequence[bool]] | None = None,
                   k: int | None = None, *, exact: bool | None = None, resamples: int = 200, seed: int = 0,
                   equivalent: Callable[[Hashable, Hashable], bool] | None = None,
                   cache: dict | None = None) -> tuple[float, float]:
    """Majority-vote accuracy over k samples and the tie rate, averaged over problems.

    Args:
        answers: (N, n) canonical extracted answers (None = no answer).
        golds_correct: (N, n) correctness of each sample; the voted answer (class) counts as
            correct when a sample carrying it was graded correct. Required.
        k: subset size (default n).
        exact: average over all C(n, k) subsets (default: when C(n, k) <= 5000) or over
            ``resamples`` random subsets drawn with ``seed``.
        equivalent: ``(a, b) -> bool``; when given, each problem's answers are first grouped
            into equivalence classes (:func:`group_equivalent`) so that equal answers written
            differently vote together. None: answers vote as the values they are.
        cache: dict of comparisons reused across calls (several k on the same answers).
    Returns:
        ``(maj@k, tie_rate)``: mean over problems of P(majority of a random k-subset is
        correct), and of P(two or more answers share the top count in that subset; the first
        seen wins, as :func:`majority_answer`).
    Raises:
        ValueError: shapes differ, or k out of range.
    """
    if golds_correct is None:
        raise ValueError("maj_at_k needs the per-sample correctness to grade the voted answer")
    if len(answers) != len(golds_correct):
        raise ValueError(f"{len(answers)} answer rows but {len(golds_correct)} correctness rows")
    if not answers:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    cache = {} if cache is None else cache
    scores, ties = [], []
    for i, (row, ok) in enumerate(zip(answers, golds_correct, strict=True)):
        n = len(row)
        if len(ok) != n:
            raise ValueError(f"problem {i}: {n} answers but {len(ok)} correctness flags")
        kk = n if k is None else k
        if not 1 <= kk <= n:
            raise ValueError(f"k must be in [1, {n}], got {kk}")
        if equivalent is not None:
            row = group_equivalent(row, equivalent, cache)
        right = {a for a, c in zip(row, ok, strict=True) if c and a is not None}
        use_exact = exact if exact is not None else math.comb(n, kk) <= 5000
        # uniform k-subsets; sorted so that ties go to the lowest sample index, as in the exact
        # (lexicographic) enumeration and in majority_answer over the original order
        subsets = (_all_subsets(n, kk) if use_exact
                   else np.sort(np.argsort(rng.random((resamples, n)), axis=1)[:, :kk], axis=1))
        hit, tie = _majority_hits(row, right, subsets)
        scores.append(hit)
        ties.append(tie)
    return float(np.mean(scores)), float(np.mean(ties))


@functools.lru_cache(maxsize=64)
def _all_subsets(n: int, k: int) -> np.ndarray:
    """(C(n, k), k) array of every k-subset of range(n), in lexicographic order."""
    return np.array(list(itertools.combinations(range(n), k)), dtype=int).reshape(-1, k)


def _majority_hits(row: Sequence[Hashable | None], right: set, subsets: np.ndarray) -> tuple[float, float]:
    """Share of ``subsets`` (S, k) of sample indices whose majority answer (ties: first seen in
    the subset, None never votes, as :func:`majority_answer`) is in ``right``, and share of
    subsets whose top count is shared by two or more answers; vectorised."""
    values = list(dict.fromkeys(a for a in row if a is not None))
    if not values:
        return 0.0, 0.0
    code = {a: i for i, a in enumerate(values)}
    codes = np.array([code[a] if a is not None else -1 for a in row])[subsets]  # (S, k)
    onehot = codes[:, :, None] == np.arange(len(values))[None, None, :]  # (S, k, m)
    counts = onehot.sum(axis=1)  # (S, m)
    k = subsets.shape[1]
    top = counts.max(axis=1)  # (S,)
    tie = float(np.mean((top > 0) & ((counts == top[:, None]).sum(axis=1) > 1)))
    if not right:
        return 0.0, tie
    first = np.where(onehot.any(axis=1), onehot.argmax(axis=1), k)  # (S, m) first position
    score = np.where(counts > 0, counts * (k + 1) - first, -1)
    winner = score.argmax(axis=1)  # (S,)
    good = np.array([v in right for v in values])
    return float(np.mean(good[winner] & (top > 0))), tie


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
