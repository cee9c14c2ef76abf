"""The verdicts of several runs side by side (the README's claims tables): one row per claim, one
column per run, each cell ``<statistic> (<lo>-<hi>) <verdict>`` from the run's ``claims.json``.

Usage (the one command line, :mod:`kit.cli`)::

    python -m kit claims reports/tiny/s7 reports/tiny/s11 --section ReTool --out reports/x.csv

A claim with several tests shows each test's statistic, comma-separated, and the claim's verdict.
When the runs ran in different environments (their ``claims.json``'s ``environment`` fingerprints,
:mod:`kit.fingerprint`), when one has no fingerprint, or when one is not stamped bitwise repeatable,
:func:`environment_notes` says so on standard error: such runs agree in distribution, not bit for bit.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kit import fingerprint
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


def environment_notes(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """What a reader of runs side by side must know about where they ran, one line each ([] when nothing).

    Args:
        docs: ``(run name, claims.json document)`` pairs.
    Returns:
        A line naming the runs without a fingerprint (``claims.json`` before schema 3); a line naming each
        fingerprint (:func:`kit.fingerprint.describe`) with its runs and the fields that differ from the first
        run's, when the runs have more than one; a line per run stamped not bitwise repeatable, with why.
    """
    notes = []
    missing = [name for name, d in docs if not d.get(fingerprint.ENVIRONMENT_KEY)]
    if missing:
        notes.append(f"no environment fingerprint recorded in {', '.join(missing)} (claims.json written before "
                     "issue #41): whether they ran on the same machine type and build is unknown")
    envs = [(name, d[fingerprint.ENVIRONMENT_KEY]) for name, d in docs if d.get(fingerprint.ENVIRONMENT_KEY)]
    groups: dict[str, list[str]] = {}
    for name, env in envs:
        groups.setdefault(fingerprint.fingerprint_key(env), []).append(name)
    if len(groups) > 1:
        first = envs[0][1]
        parts = []
        for names in groups.values():
            env = next(e for n, e in envs if n == names[0])
            diff = fingerprint.differences(first, env)
            parts.append(f"{', '.join(names)} on {fingerprint.describe(env)}"
                         + (f" (differs from {envs[0][0]}'s in {', '.join(d.split(':')[0] for d in diff)})" if diff else ""))
        notes.append(f"the runs ran in {len(groups)} different environments: " + "; ".join(parts)
                     + ". Their numbers are not comparable bit for bit, only in distribution")
    for name, d in docs:
        stamp = d.get(fingerprint.REPEATABLE_KEY)
        if stamp and not stamp.get("bitwise"):
            notes.append(f"{name} is not bitwise repeatable: {stamp.get('why', '')}")
    return notes


def _stderr(line: str) -> None:
    print(f"kit claims: {line}", file=sys.stderr)


def seeds_table(runs: Sequence[str | os.PathLike], section: str | None = DEFAULT_SECTION,
                echo: Callable[[str], None] | None = _stderr) -> list[list[str]]:
    """Rows ``[claim, <run 1>, ...]`` (header first: ``claim`` and each run's folder name) for the
    claims of ``section`` (None: every section) in each run's ``claims.json``, in the first run's
    order. A claim's text is the claims file's current one (``kit/reference/claims.yaml``: an
    editorial change of its wording after the runs shows; its id, statistic and threshold are the
    runs'), else the run's. Each of :func:`environment_notes` goes to ``echo`` (standard error by
    default; None: nowhere), so the table itself stays the verdicts only.

    Raises:
        kit.claims.ClaimsError: a run has no ``claims.json`` or an invalid one (named).
        KeyError: a claim of the first run is missing from another run (the claim and run named).
    """
    docs = [(Path(r).name, read_claims(Path(r) / "claims.json")) for r in runs]
    for line in environment_notes(docs) if echo is not None else ():
        echo(line)
    current = {c["id"]: c for c in load_claims(include_superseded=True)}  # an older run may hold a superseded one
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
