"""The toy study's own claim test kind (:attr:`kit.studies.Study.claim_kinds`): a study brings the kinds its
claims need without touching ``kit/claims``. Imported only when claims are judged."""

from collections.abc import Mapping
from typing import Any

from kit.claims.files import Missing, RunDirs
from kit.claims.results import TestResult
from kit.claims.stats import decide


def stat_toy_figures(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """How many ``toy_figure.*`` files the toy notebook drew into its folder (a count: the interval is the
    count itself). Raises Missing when the folder is absent."""
    folder = dirs.folder("toy")
    if not folder.is_dir():
        raise Missing(f"{folder} not found")
    n = len(list(folder.glob("toy_figure.*")))
    res.value, res.ci95, res.n, res.interval = float(n), (float(n), float(n)), n, "a count (no sampling)"
    res.verdict, res.reason = decide(n, n, spec["comparison"], float(spec["threshold"]))
    return res


KINDS = {"toy_figures": stat_toy_figures}
