"""The verdicts of several runs side by side (the README's claims tables): one row per claim, one
column per run, each cell ``<statistic> (<lo>-<hi>) <verdict>`` from the run's ``claims.json``.

Usage (the one command line, :mod:`kit.cli`)::

    python -m kit claims reports/tiny/s7 reports/tiny/s11 --section ReTool --out reports/x.csv

A claim with several tests shows each test's statistic, comma-separated, and the claim's verdict.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.claims import DEFAULT_SECTION, load_claims, read_claims


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def cell(c: Mapping[str, Any]) -> str:
    """One claim of a ``claims.json`` as ``<statistic> (<lo>-<hi>) <verdict>`` (a signed 3-decimal
    statistic; ``n/a`` where the run had too little data)."""
    tests = c.get("tests") or []
    if len(tests) > 1:
        return ", ".join(_num(t.get("value")) for t in tests) + f" {c['verdict']}"
    lo, hi = c.get("ci95") or (None, None)
    interval = f" ({_num(lo)} to {_num(hi)})" if c.get("value") is not None else ""
    return f"{_num(c.get('value'))}{interval} {c['verdict']}"


def seeds_table(runs: Sequence[str | os.PathLike], section: str | None = DEFAULT_SECTION) -> list[list[str]]:
    """Rows ``[claim, <run 1>, ...]`` (header first: ``claim`` and each run's folder name) for the
    claims of ``section`` (None: every section) in each run's ``claims.json``, in the first run's
    order. A claim's text is the claims file's current one (``kit/reference/claims.yaml``: an
    editorial change of its wording after the runs shows; its id, statistic and threshold are the
    runs'), else the run's.

    Raises:
        kit.claims.ClaimsError: a run has no ``claims.json`` or an invalid one (named).
        KeyError: a claim of the first run is missing from another run (the claim and run named).
    """
    docs = [(Path(r).name, read_claims(Path(r) / "claims.json")) for r in runs]
    current = {c["id"]: c for c in load_claims()}
    by_run = [(name, {c["id"]: c for c in d["claims"]}) for name, d in docs]
    rows = [["claim", *(name for name, _ in docs)]]
    for c in docs[0][1]["claims"]:
        if section is not None and (c.get("section") or DEFAULT_SECTION) != section:
            continue
        cells = []
        for name, claims in by_run:
            if c["id"] not in claims:
                raise KeyError(f"claim {c['id']!r} is not in {name}/claims.json")
            cells.append(cell(claims[c["id"]]))
        text = current.get(c["id"], c)
        rows.append([f"{text['source'].split(' (')[0]}: {text['claim']}", *cells])
    return rows


def write_csv(rows: Sequence[Sequence[str]], out: str | os.PathLike | None = None) -> None:
    """``rows`` (:func:`seeds_table`) as CSV into ``out``, or to standard output without one."""
    if out is None:
        csv.writer(sys.stdout, lineterminator="\n").writerows(rows)
        return
    with open(out, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
