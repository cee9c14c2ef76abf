"""Policies sampled on the same problems: a ratio per policy, the difference paired over problems.

A study's kind (Agent-R's ``agent_r_diff``, ReTool's ``retool_emergence_diff``) samples two or more policies on
the same held-out problems with the same sampling streams and writes one row per trajectory (``problem`` plus
the measure's fields). A *measure* is a ratio ``sum(numerator) / sum(denominator)`` over one policy's
trajectories (a numerator and a denominator function of a row); a test's statistic is the ratio of its
``minuend`` policy minus that of its ``subtrahend`` over the problems both were sampled on, with a paired
percentile bootstrap over those problems (:func:`kit.claims.stats.bootstrap_ratio_diff_paired`, issue #42).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kit.claims.files import Missing
from kit.claims.results import TestResult
from kit.claims.stats import bootstrap_ratio_diff_paired, decide

Row = Mapping[str, Any]
#: (numerator, denominator) of one trajectory row
Measure = tuple[Callable[[Row], float], Callable[[Row], float]]
SIDES = ("minuend", "subtrahend")


def iteration_rows(rows: Sequence[Row], policy: str, which: str = "last") -> list[Row]:
    """The rows of ``policy`` at one of its iterations: ``"first"``, ``"last"`` or a number (the self-training
    studies' policy labels ``<arm>_first``, ``<arm>_last``, ``<arm>_<k>``).

    Raises:
        Missing: no rows of ``policy``, or a first asked of a policy evaluated at one iteration only (first and
            last would be the same policy).
    """
    its = sorted({int(r.get("iteration", 0)) for r in rows if r.get("policy") == policy})
    if not its:
        raise Missing(f"no {policy} rows")
    if which == "first" and len(its) < 2:
        raise Missing(f"{len(its)} {policy} iteration evaluated; a first distinct from the last needs two")
    it = its[0] if which == "first" else its[-1] if which == "last" else int(which)
    return [r for r in rows if r.get("policy") == policy and int(r.get("iteration", 0)) == it]


def sums_by_problem(rows: Sequence[Row], measure: Measure) -> dict[str, list[float]]:
    """``{problem: [numerator, denominator]}`` of ``measure`` summed over each problem's trajectories.

    Raises:
        KeyError: a row lacks ``problem`` or a field the measure reads.
    """
    num_f, den_f = measure
    by: dict[str, list[float]] = {}
    for r in rows:
        acc = by.setdefault(str(r["problem"]), [0.0, 0.0])
        acc[0] += float(num_f(r))
        acc[1] += float(den_f(r))
    return by


def paired_ratio_diff(sides: Mapping[str, Sequence[Row]], measure: Measure, spec: Mapping[str, Any],
                      res: TestResult, units: str = "units", within: str = "one seed") -> TestResult:
    """Fill ``res`` with the paired test of ``spec`` on two policies' trajectory rows.

    Args:
        sides: ``{"minuend": rows, "subtrahend": rows}``, the rows of the policies ``spec["minuend"]`` and
            ``spec["subtrahend"]`` name.
        measure: the ratio compared (:data:`Measure`).
        spec: the test (``comparison``, ``threshold``; minimums ``min_problems`` shared problems and
            ``min_units`` summed denominator per policy, 1 by default).
        res: the result to fill (``value``, ``ci95``, ``n``, ``interval``, ``verdict``, ``reason``,
            ``detail[label] = {ratio, units, problems}``).
        units: what the denominator counts, for the messages (e.g. "trajectories with a failed call").
        within: what one unit's rows come from, for the interval's text (default "one seed").
    Returns:
        ``res``.
    Raises:
        Missing: a policy has fewer shared problems or units than the minimums (the test is inconclusive).
    """
    by = {side: sums_by_problem(sides[side], measure) for side in SIDES}
    common = sorted(set(by["minuend"]) & set(by["subtrahend"]))
    parts = {}
    for side in SIDES:
        num, den = [by[side][k][0] for k in common], [by[side][k][1] for k in common]
        if len(num) < spec.get("min_problems", 1):
            raise Missing(f"{spec[side]}: {len(num)} problems shared with the other policy, the test needs at least "
                          f"{spec.get('min_problems', 1)}")
        if sum(den) < spec.get("min_units", 1):
            raise Missing(f"{spec[side]}: {sum(den):g} {units}, the test needs at least {spec.get('min_units', 1)}")
        parts[side] = (num, den)
        res.detail[spec[side]] = {"ratio": sum(num) / sum(den) if sum(den) else None, "units": sum(den),
                                  "problems": len(num)}
    (na, da), (nb, db) = parts["minuend"], parts["subtrahend"]
    res.value, lo, hi = bootstrap_ratio_diff_paired(na, da, nb, db)
    res.ci95, res.n = (lo, hi), len(common)
    res.interval = f"paired bootstrap over {len(common)} problems ({within})"
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res
