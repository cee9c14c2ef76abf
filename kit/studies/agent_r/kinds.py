"""The test kind of the Agent-R claims (issue #34): policies compared on held-out samples.

Registered through the study record (:attr:`kit.studies.Study.claim_kinds`), not in :mod:`kit.claims`.

Notebook 11 (:mod:`kit.studies.agent_r.chain`) samples every policy it compares (the cold start, the
good-only baseline, each Agent-R iteration) on the same held-out problems and writes one row per
trajectory to ``agent_r/policy_eval.jsonl``::

    {"policy": "cold_start" | "agent_r" | "direct" | "good_only" | "null", "iteration": int, "problem": id,
     "correct": 0/1, "failed_call": 0/1, "reflection": int, "high": int}

(``failed_call``: the trajectory had at least one tool call that failed, the model's fault;
``reflection`` / ``high``: its §5.4 reflection tokens and high-entropy model tokens,
:func:`kit.analysis.tokens.analyze_trajectory`). A test names two policies (``minuend``,
``subtrahend``: ``cold_start``, ``direct``, ``good_only``, ``null`` (a baseline's last iteration), ``agent_r_first``,
``agent_r_last``, or ``agent_r_<k>``) and a ``measure`` (``probe_recovery`` reads ``agent_r/probe_eval.jsonl``,
the forced-error probes of :mod:`kit.studies.agent_r.probes`; the others the file above); the statistic is the ratio of the minuend minus that of the
subtrahend, each ratio ``sum(num) / sum(den)`` over the problems both policies were sampled on, with
a paired percentile bootstrap over those problems (:mod:`kit.claims.paired`, one seed: the policies share
the problems and the sampling streams, issue #42).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kit.claims.files import Missing, RunDirs, read_jsonl
from kit.claims.paired import SIDES, Measure, iteration_rows, paired_ratio_diff
from kit.claims.results import TestResult

EVAL_FILE = "policy_eval.jsonl"
PROBE_FILE = "probe_eval.jsonl"  # kit.studies.agent_r.probes.PROBE_FILE
#: measure -> (numerator, denominator) of one trajectory row
MEASURES: dict[str, Measure] = {
    "recovery": (lambda r: r["correct"] * r["failed_call"], lambda r: r["failed_call"]),
    "accuracy": (lambda r: r["correct"], lambda r: 1),
    "reflection": (lambda r: r["reflection"], lambda r: r["high"]),
    # the forced-error probes (issue #46): correct answers after the same failing call in every policy's context
    "probe_recovery": (lambda r: r["correct"], lambda r: 1),
}
#: the file each measure reads
MEASURE_FILE = {m: PROBE_FILE if m.startswith("probe_") else EVAL_FILE for m in MEASURES}


def _policy_rows(rows: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """Rows of the policy ``label`` (``agent_r_first``/``_last``/``_<k>`` pick an iteration; a baseline's is its last)."""
    if label in ("cold_start", "direct", "good_only", "null"):  # a baseline's last iteration (the cold start has one)
        if not any(r.get("policy") == label for r in rows):
            return []
        return iteration_rows(rows, label, "last")
    if not label.startswith("agent_r"):
        raise Missing(f"unknown policy label {label!r}")
    return iteration_rows(rows, "agent_r", label[len("agent_r_"):])


def stat_agent_r_diff(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``measure`` of ``minuend`` minus that of ``subtrahend`` (``agent_r/policy_eval.jsonl``) over the
    problems both were sampled on; paired bootstrap over those problems (:func:`kit.claims.paired.paired_ratio_diff`).
    Minimums: ``min_problems`` per policy, ``min_units`` (the summed denominator: trajectories with a failed
    call, trajectories, or high-entropy tokens) per policy.

    Raises:
        Missing: the file, a policy or the minimum data is absent (the test is inconclusive).
        KeyError: ``measure`` is not one of :data:`MEASURES`.
    """
    if spec["measure"] not in MEASURES:
        raise KeyError(f"agent_r_diff: unknown measure {spec['measure']!r}; known: {sorted(MEASURES)}")
    rows = read_jsonl(dirs.folder("agent_r") / MEASURE_FILE[spec["measure"]])
    sides = {side: _policy_rows(rows, spec[side]) for side in SIDES}
    return paired_ratio_diff(sides, MEASURES[spec["measure"]], spec, res, f"units for {spec['measure']}")


KINDS = {"agent_r_diff": stat_agent_r_diff}
