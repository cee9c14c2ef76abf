"""Intervals and the verdict rule of the pre-registered claims (``kit/reference/claims.yaml``).

Pure functions on numbers and arrays; every interval is two-sided 95%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def window_size(steps: int) -> int:
    """Steps averaged at each end of an ablation arm: ``W = max(5, steps // 5)`` (claims.yaml
    ``rules.window``), never more than ``steps``."""
    return max(1, min(steps, max(5, steps // 5)))


def decide(lo: float, hi: float, comparison: str, threshold: float) -> tuple[str, str]:
    """The verdict of an interval against a threshold (claims.yaml, "Verdicts").

    Args:
        lo, hi: the 95% interval.
        comparison: ``">"`` (the claim says the statistic exceeds ``threshold``) or ``"<"``.
        threshold: the pre-registered boundary.
    Returns:
        ``(verdict, reason)``: ``reproduced`` when the interval lies strictly on the claimed side,
        ``not reproduced`` when it lies on the other side (touching the threshold counts as the
        other side), else ``inconclusive``; NaN bounds give ``inconclusive``.
    Raises:
        ValueError: an unknown comparison.
    """
    if comparison not in (">", "<"):
        raise ValueError(f"comparison must be '>' or '<', got {comparison!r}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive", "the interval could not be computed"
    iv = f"95% interval [{lo:.4g}, {hi:.4g}]"
    if comparison == ">":
        if lo > threshold:
            return "reproduced", f"{iv} lies above {threshold:g}"
        if hi <= threshold:
            return "not reproduced", f"{iv} lies at or below {threshold:g}"
    else:
        if hi < threshold:
            return "reproduced", f"{iv} lies below {threshold:g}"
        if lo >= threshold:
            return "not reproduced", f"{iv} lies at or above {threshold:g}"
    return "inconclusive", f"{iv} contains {threshold:g}"


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and Student-t 95% interval over ``values`` (seeds): ``mean +- t(0.975, n-1) sd/sqrt(n)``.

    Returns:
        ``(mean, lo, hi)``; NaN bounds for fewer than 2 values.
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def wilson(p: float, n: int) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion ``p`` observed over ``n`` trials."""
    if n <= 0:
        return math.nan, math.nan
    z = 1.959963984540054
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(p0: float, n0: int, p1: float, n1: int) -> tuple[float, float, float]:
    """``p1 - p0`` of two independent proportions with Newcombe's hybrid score 95% interval
    (Newcombe 1998, method 10). Returns ``(diff, lo, hi)``."""
    l0, u0 = wilson(p0, n0)
    l1, u1 = wilson(p1, n1)
    d = p1 - p0
    return d, d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """``mean(b) - mean(a)`` with a Welch t 95% interval. Returns ``(diff, lo, hi)``; NaN bounds
    when either side has fewer than 2 values."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan, math.nan
    d = float(b.mean() - a.mean())
    if a.size < 2 or b.size < 2:
        return d, math.nan, math.nan
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se)
    return d, d - half, d + half


def _rng() -> np.random.Generator:
    return np.random.default_rng(BOOTSTRAP_SEED)


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    s = samples[np.isfinite(samples)]
    if s.size == 0:
        return math.nan, math.nan
    a = (1 - CONFIDENCE) / 2
    return float(np.quantile(s, a)), float(np.quantile(s, 1 - a))


def bootstrap_mean(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean of per-unit values with a percentile bootstrap 95% interval (units resampled).
    Returns ``(mean, lo, hi)``; NaN for no values."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    idx = _rng().integers(0, v.size, size=(BOOTSTRAP_RESAMPLES, v.size))
    return (float(v.mean()), *_percentiles(v[idx].mean(axis=1)))


def bootstrap_ratio(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """``sum(num) / sum(den)`` over units (problems, trajectories) with a percentile bootstrap
    95% interval, units resampled. Returns ``(ratio, lo, hi)``; NaN when ``sum(den)`` is 0."""
    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if n.size == 0 or d.sum() <= 0:
        return math.nan, math.nan, math.nan
    idx = _rng().integers(0, n.size, size=(BOOTSTRAP_RESAMPLES, n.size))
    with np.errstate(all="ignore"):
        r = n[idx].sum(axis=1) / d[idx].sum(axis=1)
    return (float(n.sum() / d.sum()), *_percentiles(r))


def bootstrap_ratio_diff(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                         den_b: Sequence[float]) -> tuple[float, float, float]:
    """``ratio(a) - ratio(b)`` (see :func:`bootstrap_ratio`), the two groups resampled
    independently. Returns ``(diff, lo, hi)``."""
    na, da, nb, db = (np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b))
    if na.size == 0 or nb.size == 0 or da.sum() <= 0 or db.sum() <= 0:
        return math.nan, math.nan, math.nan
    rng = _rng()
    ia = rng.integers(0, na.size, size=(BOOTSTRAP_RESAMPLES, na.size))
    ib = rng.integers(0, nb.size, size=(BOOTSTRAP_RESAMPLES, nb.size))
    with np.errstate(all="ignore"):
        d = na[ia].sum(axis=1) / da[ia].sum(axis=1) - nb[ib].sum(axis=1) / db[ib].sum(axis=1)
    return (float(na.sum() / da.sum() - nb.sum() / db.sum()), *_percentiles(d))


def bootstrap_ratio_diff_paired(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                                den_b: Sequence[float]) -> tuple[float, float, float]:
    """``ratio(a) - ratio(b)`` (see :func:`bootstrap_ratio`) where unit ``i`` of ``a`` and of ``b`` is the
    same problem (both policies or checkpoints sampled on it): the units are resampled together, so the
    interval keeps what the two share (issue #42). Returns ``(diff, lo, hi)``.

    Raises:
        ValueError: ``a`` and ``b`` have different numbers of units.
    """
    na, da, nb, db = (np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b))
    if not (na.size == da.size == nb.size == db.size):
        raise ValueError(f"paired units differ in number: {na.size}, {da.size}, {nb.size}, {db.size}")
    if na.size == 0 or da.sum() <= 0 or db.sum() <= 0:
        return math.nan, math.nan, math.nan
    idx = _rng().integers(0, na.size, size=(BOOTSTRAP_RESAMPLES, na.size))
    with np.errstate(all="ignore"):
        d = na[idx].sum(axis=1) / da[idx].sum(axis=1) - nb[idx].sum(axis=1) / db[idx].sum(axis=1)
    return (float(na.sum() / da.sum() - nb.sum() / db.sum()), *_percentiles(d))


#: contiguous blocks of training steps per stage for :func:`batch_means_welch`
STEP_BATCHES = 5


def batch_means_welch(a: Sequence[float], b: Sequence[float], batches: int = STEP_BATCHES) -> tuple[float, float, float]:
    """``mean(b) - mean(a)`` of two series of training steps with a Welch t 95% interval over batch means:
    each series is cut into ``batches`` contiguous blocks of near-equal length and each block's mean is
    one unit (the batch-means method for autocorrelated output; consecutive steps share a policy, so
    a Welch interval over single steps is too narrow). NaN steps are dropped first.

    Returns:
        ``(diff, lo, hi)``; the difference is of the step means; NaN bounds when either series has
        fewer than ``batches`` steps.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan, math.nan
    d = float(b.mean() - a.mean())
    if a.size < batches or b.size < batches:
        return d, math.nan, math.nan
    dm, lo, hi = welch([blk.mean() for blk in np.array_split(a, batches)], [blk.mean() for blk in np.array_split(b, batches)])
    return d, lo + d - dm, hi + d - dm  # centred on the step means (blocks of unequal length shift the batch means')
