"""Results of the claims: one :class:`TestResult` per test, one :class:`ClaimResult` per claim."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

#: "invalid design" (issue #46): the run failed a precondition registered with ``on_fail: invalid design``, one
#: that checks the experiment's own control (e.g. Agent-R's null arm damaged the policy): its claims say nothing
#: about the paper either way, and are not counted as reproduced or not reproduced
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "invalid design")
INVALID = "invalid design"
#: a claim's ``role`` in the claims file (issue #45): ``primary`` (Holm-corrected when pooled),
#: ``secondary``, ``world_check`` (a property the tiny world guarantees: shown apart, never counted)
ROLES = ("primary", "secondary", "world_check")
#: the section of a claim without ``section:`` in the claims file (the kit's paper)
DEFAULT_SECTION = "rStar2-Agent"


@dataclasses.dataclass
class TestResult:
    """One test of a claim: the statistic, its 95% interval and the verdict.

    Attributes:
        value: the statistic (NaN when it could not be computed).
        ci95: (lo, hi), NaN when absent.
        interval: how the interval was made (e.g. ``"t over 3 seeds"``).
        n: the number of units behind the interval (seeds, problems, trajectories, steps).
        reason: why the verdict is what it is, in words.
        detail: per-seed or per-stage numbers behind the statistic.
        note: the claims file's ``note:`` of the test ("" without one).
    """

    name: str
    kind: str
    statistic: str
    comparison: str
    threshold: float
    value: float = math.nan
    ci95: tuple[float, float] = (math.nan, math.nan)
    interval: str = ""
    n: int = 0
    verdict: str = "inconclusive"
    reason: str = ""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["value"] = _finite(self.value)
        d["ci95"] = [_finite(self.ci95[0]), _finite(self.ci95[1])]
        d["detail"] = json.loads(json.dumps(self.detail, default=_finite))
        return d


@dataclasses.dataclass
class ClaimResult:
    """A claim with its tests and the combined verdict (see the module docstring).

    ``note``: the claims file's ``note:`` of the claim itself ("" without one); :attr:`notes` adds
    its tests' notes. ``section``: the paper the claim is from (the claims file's ``section:``,
    default :data:`DEFAULT_SECTION`), so claims.json and the summary page keep each paper's together.
    ``role``: one of :data:`ROLES`; ``requires``: the preconditions the run must pass for it to be judged.
    """

    id: str
    source: str
    claim: str
    paper: str
    tests: list[TestResult]
    note: str = ""
    section: str = DEFAULT_SECTION
    role: str = "secondary"
    requires: tuple[str, ...] = ()

    @property
    def notes(self) -> str:
        """The claim's note and each test's (``<test name>: <note>`` when the claim has several tests)."""
        parts = [self.note] if self.note else []
        several = len(self.tests) > 1
        parts += [f"{t.name}: {t.note}" if several else t.note for t in self.tests if t.note]
        return " ".join(parts)

    @property
    def verdict(self) -> str:
        verdicts = [t.verdict for t in self.tests]
        if INVALID in verdicts:
            return INVALID
        if verdicts and all(v == "reproduced" for v in verdicts):
            return "reproduced"
        if "not reproduced" in verdicts:
            return "not reproduced"
        return "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        head = self.tests[0]
        return {"id": self.id, "source": self.source, "claim": self.claim, "paper": self.paper,
                "verdict": self.verdict, "statistic": head.name, "value": _finite(head.value),
                "ci95": [_finite(head.ci95[0]), _finite(head.ci95[1])], "interval": head.interval,
                "note": self.notes, "section": self.section, "role": self.role, "requires": list(self.requires),
                "tests": [t.to_dict() for t in self.tests]}


def _finite(x: Any) -> Any:
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
