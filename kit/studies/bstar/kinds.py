"""The test kind of the B-STaR claims (issue #47): policies compared on the same held-out tasks.

Registered through the study record (:attr:`kit.studies.Study.claim_kinds`), not in :mod:`kit.claims`.

Notebook 12 (:mod:`kit.studies.bstar.chain`) samples every policy (the cold start, each arm after each iteration)
on the same held-out tasks with the same seed at T = 1 and writes one row per policy, iteration and task to
``bstar/eval.jsonl``::

    {"policy": "cold_start" | "bstar" | "fixed", "iteration": int, "problem": id, "samples": n, "correct": int,
     "pass_at_k": 0/1, "distinct_correct": int}

A test names two policies (``minuend``, ``subtrahend``: ``cold_start``, ``<arm>_first``, ``<arm>_last`` or
``<arm>_<k>`` for an arm of :data:`kit.studies.bstar.ARMS`) and a ``measure`` of :data:`MEASURES`; the
statistic is the measure's ratio of the minuend minus that of the subtrahend over the tasks both were sampled on,
with a paired bootstrap over those tasks (:func:`kit.claims.paired.paired_ratio_diff`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kit.claims.files import Missing, RunDirs, read_jsonl
from kit.claims.paired import SIDES, Measure, iteration_rows, paired_ratio_diff
from kit.claims.results import TestResult
from kit.studies.bstar import ARMS, EVAL_FILE

#: measure -> (numerator, denominator) of one row (one policy on one task)
MEASURES: dict[str, Measure] = {
    "accuracy": (lambda r: r["correct"], lambda r: r["samples"]),  # correct share of the samples
    "pass_at_k": (lambda r: r["pass_at_k"], lambda r: 1),  # share of tasks with a correct sample (k = the samples)
    "distinct_correct": (lambda r: r["distinct_correct"], lambda r: 1),  # distinct correct texts per task
}


def policy_rows(rows: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """Rows of the policy ``label``: ``cold_start``, or ``<arm>_first`` / ``<arm>_last`` / ``<arm>_<k>``.

    Raises:
        Missing: an unknown label, an arm without rows, or a first iteration asked of an arm with one.
    """
    if label == "cold_start":
        return [r for r in rows if r.get("policy") == "cold_start"]
    arm, _, which = label.rpartition("_")
    if arm not in ARMS:
        raise Missing(f"unknown policy label {label!r} (cold_start or <arm>_first/_last/_<k>, arms {ARMS})")
    return iteration_rows(rows, arm, which)


def stat_bstar_diff(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``measure`` of ``minuend`` minus that of ``subtrahend`` (``bstar/eval.jsonl``) over the tasks both were
    sampled on; paired bootstrap over those tasks. Minimums: ``min_problems`` shared tasks, ``min_units`` (the
    summed denominator: samples or tasks) per policy.

    Raises:
        Missing: the file, a policy or the minimum data is absent (the test is inconclusive).
        KeyError: ``measure`` is not one of :data:`MEASURES`.
    """
    if spec["measure"] not in MEASURES:
        raise KeyError(f"bstar_diff: unknown measure {spec['measure']!r}; known: {sorted(MEASURES)}")
    rows = read_jsonl(dirs.folder("bstar") / EVAL_FILE)
    sides = {side: policy_rows(rows, spec[side]) for side in SIDES}
    return paired_ratio_diff(sides, MEASURES[spec["measure"]], spec, res, f"units for {spec['measure']}")


KINDS = {"bstar_diff": stat_bstar_diff}
