"""The test kind of ReTool's emergence claims (issue #45): PPO against its clean cold start on held-out samples.

Registered through the study record (:attr:`kit.studies.Study.claim_kinds`), not in :mod:`kit.claims`.
Notebook 10's emergence arm (:mod:`kit.studies.retool.emergence`) samples the clean cold start and PPO from it
on the same held-out problems with the same sampling streams and writes ``retool/emergence/eval.jsonl``, one row
per trajectory. A test names the two policies (``minuend``, ``subtrahend``: ``ppo`` or ``cold_start``; the PPO
rows of every emergence seed count together) and a ``measure``:

    fix_after_failure     trajectories with a failed call in which a later call ran cleanly, over those with a
                          failed call (ReTool's code self-correction, conditioned on there being a mistake)
    first_call_position   tokens before the first call / response tokens, mean over trajectories with a call
                          (ReTool's code invocation timing)
    accuracy              correct trajectories over all

The statistic and its interval are :func:`kit.claims.paired.paired_ratio_diff`'s (paired bootstrap over problems).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kit.claims.files import Missing, RunDirs, read_jsonl
from kit.claims.paired import SIDES, Measure, paired_ratio_diff
from kit.claims.results import TestResult
from kit.studies.retool.emergence import EMERGENCE_DIR, EVAL_FILE, POLICIES

#: measure -> (numerator, denominator) of one ``eval.jsonl`` row, and what the denominator counts
MEASURES: dict[str, tuple[Measure, str]] = {
    "fix_after_failure": ((lambda r: r["self_corrected"] * r["failed_call"], lambda r: r["failed_call"]),
                          "trajectories with a failed call"),
    "first_call_position": ((lambda r: r["first_call_position"] if r["first_call_position"] is not None else 0.0,
                             lambda r: r["first_call_position"] is not None), "trajectories with a call"),
    "accuracy": ((lambda r: r["correct"], lambda r: 1), "trajectories"),
}


def stat_retool_emergence_diff(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``measure`` of ``minuend`` minus that of ``subtrahend`` in ``retool/emergence/eval.jsonl`` over the problems
    both were sampled on, paired bootstrap over those problems; minimums ``min_problems`` and ``min_units`` (the
    summed denominator) per policy.

    Raises:
        Missing: the file, a policy or the minimum data is absent (the test is inconclusive).
        KeyError: ``measure`` or a policy label is unknown (a claims-file mistake, named).
    """
    if spec["measure"] not in MEASURES:
        raise KeyError(f"retool_emergence_diff: unknown measure {spec['measure']!r}; known: {sorted(MEASURES)}")
    for side in SIDES:
        if spec[side] not in POLICIES:
            raise KeyError(f"retool_emergence_diff: {side} {spec[side]!r} is not a policy of {EVAL_FILE}; "
                           f"known: {', '.join(POLICIES)}")
    rows = read_jsonl(dirs.folder("retool") / EMERGENCE_DIR / EVAL_FILE)
    sides = {side: [r for r in rows if r.get("policy") == spec[side]] for side in SIDES}
    for side, got in sides.items():
        if not got:
            raise Missing(f"{EMERGENCE_DIR}/{EVAL_FILE} has no rows of {spec[side]!r}")
    measure, units = MEASURES[spec["measure"]]
    seeds = sorted({r.get("seed") for r in sides["minuend"] + sides["subtrahend"] if r.get("policy") == "ppo"})
    return paired_ratio_diff(sides, measure, spec, res, units, within=f"one run; PPO over {len(seeds)} seed(s)")


KINDS = {"retool_emergence_diff": stat_retool_emergence_diff}
