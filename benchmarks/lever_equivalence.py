"""The equivalence check of a speed lever that changes float rounding (issue #48 item 2).

A lever that keeps every result file byte-identical is proven by comparing files
(``python -m kit compare``). One that changes rounding changes every trajectory downstream of the first
differing bit: on the tiny series a rounding change acts like a new seed (reports/LOG.md, 2026-12-03: two
cold starts 1e-8 apart at step 11 ended at held-out greedy 0.779 and 0.672). It is adopted only when each
claim's statistic, old code against new code on the same pipeline seeds, moves by less than a margin
written down before the runs. The rule, registered on 2026-12-07 before any lever's runs:

* **Runs.** ``python -m kit reproduce --seeds S`` on the old code and on the new code into two sets of run
  folders; pairs are matched by pipeline seed (each folder's ``pipeline_state.json``). At least
  :data:`MIN_PAIRS` pairs.
* **Tests.** Every test of every claim whose role is not ``world_check``, with a statistic (``value`` in
  ``claims.json``) in both runs of at least :data:`MIN_PAIRS` pairs; a run without one (too little data, a
  failed precondition) leaves its pair out of that test.
* **Statistic.** Per pair, ``d = new - old``; the mean over pairs with its two-sided 90% Student t interval
  (two one-sided tests at 5% each, Schuirmann 1987).
* **Margin.** :data:`MARGIN_SD` times the sample standard deviation of the old runs' statistic over the
  seeds: a lever may move a statistic by less than the seed-to-seed spread the verdict already lives with.
* **Verdict per test.** ``equivalent``: the interval lies inside ``(-margin, +margin)``; ``different``: it
  lies entirely outside it; else ``undetermined`` (more seeds: the line prints how many the observed
  paired spread needs). The lever is adopted when every test is ``equivalent``.

What the rule implies, from its numbers alone: when the lever reseeds every run (paired spread
``sqrt(2)`` times the seeds' spread) and moves nothing on average, the interval's half-width is
``t(0.95, n-1) * sqrt(2 / n)`` seed spreads: 1.35 at 5 pairs, 1.04 at 7, 0.95 at 8. So 5 seeds certify such
a lever only where it keeps runs correlated; ``--plan`` prints this before any run.

Usage::

    .venv/bin/python benchmarks/lever_equivalence.py --old reports/tiny/ar-s10{1..5} --new reports/tiny/lever-s10{1..5}
    .venv/bin/python benchmarks/lever_equivalence.py --plan reports/tiny/ar-s10{1..5}

Last line: ``lever_equivalence tests=<n> equivalent=<k> different=<j> undetermined=<u> adopt=<yes|no>``
(``--plan``: ``lever_equivalence_plan tests=<n> pairs_needed_if_reseeded=<n>``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.claims import read_claims  # noqa: E402
from kit.plan import run_parameters  # noqa: E402

#: the registered rule (see the module docstring); not changed after a lever's runs
MIN_PAIRS = 5
MARGIN_SD = 1.0
CONFIDENCE = 0.90


def run_values(run: str | Path) -> tuple[int, dict[str, float]]:
    """``(pipeline seed, {"claim id: test name": value})`` of one run folder: every test of a claim that is
    not a world check, whose ``requires:`` preconditions passed in this run, with a finite statistic.

    Raises:
        ValueError: the folder records no pipeline seed (names the folder).
        kit.claims.ClaimsError: no ``claims.json`` or one of the wrong schema.
    """
    run = Path(run)
    try:
        state = json.loads((run / "pipeline_state.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{run}: no readable pipeline_state.json, so no pipeline seed to pair by ({exc})") from exc
    seed = run_parameters(state).get("seed")
    if not isinstance(seed, int):
        raise ValueError(f"{run}/pipeline_state.json records no pipeline seed")
    out: dict[str, float] = {}
    doc = read_claims(run / "claims.json")
    pre = doc.get("preconditions") or {}
    for claim in doc["claims"]:
        if claim.get("role") == "world_check" or not all((pre.get(r) or {}).get("passed")
                                                          for r in claim.get("requires", [])):
            continue  # a world check, or a run whose registered precondition failed (as the pooled verdict)
        for test in claim.get("tests", []):
            v = test.get("value")
            if isinstance(v, int | float) and math.isfinite(v):
                out[f"{claim['id']}: {test['name']}"] = float(v)
    return seed, out


def by_seed(runs: Sequence[str | Path], side: str) -> dict[int, dict[str, float]]:
    """``{seed: values}`` of ``runs`` (:func:`run_values`).

    Raises:
        ValueError: two folders of one side with the same seed (names both).
    """
    out: dict[int, dict[str, float]] = {}
    where: dict[int, Path] = {}
    for run in runs:
        seed, values = run_values(run)
        if seed in out:
            raise ValueError(f"--{side}: {where[seed]} and {run} are both pipeline seed {seed}; give one run per seed")
        out[seed], where[seed] = values, Path(run)
    return out


def half_width(sd: float, n: int, confidence: float = CONFIDENCE) -> float:
    """Half-width of the two-sided Student t interval of a mean of ``n`` values with sample sd ``sd``."""
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def pairs_needed(sd_diff: float, margin: float, shift: float = 0.0, most: int = 200) -> int | None:
    """The smallest ``n >= 2`` pairs whose 90% interval around ``shift`` fits inside ``(-margin, margin)`` when
    the paired differences have sd ``sd_diff``; None when ``|shift| >= margin`` or more than ``most``."""
    if abs(shift) >= margin:
        return None
    for n in range(2, most + 1):
        if abs(shift) + half_width(sd_diff, n) < margin:
            return n
    return None


def check(old: Mapping[int, Mapping[str, float]], new: Mapping[int, Mapping[str, float]]) -> list[dict[str, Any]]:
    """The rule's verdict per test (see the module docstring).

    Args:
        old, new: ``{seed: {test: value}}`` of the old and new code (:func:`by_seed`).
    Returns:
        One row per test with at least :data:`MIN_PAIRS` pairs, in the old runs' order: ``test``, ``pairs``,
        ``old_mean``, ``new_mean``, ``diff``, ``lo``, ``hi`` (90% interval of the mean difference), ``margin``,
        ``verdict`` (equivalent | different | undetermined) and ``pairs_needed`` (at the observed paired sd and
        shift; None when out of reach).
    """
    seeds = sorted(set(old) & set(new))
    tests = list(dict.fromkeys(t for s in seeds for t in old[s]))
    rows = []
    for test in tests:
        both = [s for s in seeds if test in old[s] and test in new[s]]
        if len(both) < MIN_PAIRS:
            continue
        a = np.array([old[s][test] for s in both])
        b = np.array([new[s][test] for s in both])
        d = b - a
        mean, sd = float(d.mean()), float(d.std(ddof=1))
        half = half_width(sd, len(d))
        margin = MARGIN_SD * float(a.std(ddof=1))
        lo, hi = mean - half, mean + half
        verdict = ("equivalent" if -margin < lo and hi < margin
                   else "different" if lo >= margin or hi <= -margin else "undetermined")
        rows.append({"test": test, "pairs": len(both), "old_mean": float(a.mean()), "new_mean": float(b.mean()),
                     "diff": mean, "lo": lo, "hi": hi, "margin": margin, "verdict": verdict,
                     "pairs_needed": pairs_needed(sd, margin, mean) if margin > 0 else None})
    return rows


def plan(old: Mapping[int, Mapping[str, float]]) -> tuple[list[dict[str, Any]], int | None]:
    """Before a lever's runs: per test of the old runs, the seed spread and the margin, and the pairs the rule
    needs for a lever that reseeds every run and moves nothing on average (the same for every test: the
    margin is in seed spreads)."""
    tests = list(dict.fromkeys(t for v in old.values() for t in v))
    rows = []
    for test in tests:
        a = np.array([v[test] for v in old.values() if test in v])
        if a.size >= 2:
            rows.append({"test": test, "runs": int(a.size), "mean": float(a.mean()), "sd": float(a.std(ddof=1)),
                         "margin": MARGIN_SD * float(a.std(ddof=1))})
    return rows, pairs_needed(math.sqrt(2.0), MARGIN_SD)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", nargs="+", default=[], metavar="RUN", help="run folders of the old code")
    p.add_argument("--new", nargs="+", default=[], metavar="RUN", help="run folders of the new code, same seeds")
    p.add_argument("--plan", nargs="+", default=[], metavar="RUN",
                   help="old runs only: the margins and the pairs the rule needs, before a lever's runs")
    a = p.parse_args(argv)
    try:
        if a.plan:
            rows, need = plan(by_seed(a.plan, "plan"))
            print(f"{'test':70s} {'runs':>4s} {'mean':>9s} {'seed sd':>9s} {'margin':>9s}")
            for r in rows:
                print(f"{r['test'][:70]:70s} {r['runs']:4d} {r['mean']:+9.4f} {r['sd']:9.4f} {r['margin']:9.4f}")
            print(f"a lever that reseeds every run and moves nothing: {CONFIDENCE:.0%} half-width "
                  f"{half_width(math.sqrt(2.0), MIN_PAIRS):.2f} seed spreads at {MIN_PAIRS} pairs; "
                  f"the margin is {MARGIN_SD:g}")
            print(f"lever_equivalence_plan tests={len(rows)} pairs_needed_if_reseeded={need}")
            return 0
        if not a.old or not a.new:
            p.error("give --old RUN ... and --new RUN ... (or --plan RUN ...)")
        old, new = by_seed(a.old, "old"), by_seed(a.new, "new")
    except (ValueError, OSError) as exc:
        print(f"lever_equivalence: {exc}", file=sys.stderr)
        return 2
    missing = sorted(set(old) ^ set(new))
    if missing:
        print(f"seeds in only one set, left out: {missing}")
    rows = check(old, new)
    print(f"{'test':60s} {'n':>2s} {'old':>8s} {'new':>8s} {'new-old (90%)':>26s} {'margin':>7s}  verdict")
    for r in rows:
        need = "" if r["verdict"] != "undetermined" else f" (needs {r['pairs_needed'] or '>200'} pairs)"
        print(f"{r['test'][:60]:60s} {r['pairs']:2d} {r['old_mean']:+8.4f} {r['new_mean']:+8.4f} "
              f"{r['diff']:+8.4f} ({r['lo']:+7.4f}, {r['hi']:+7.4f}) {r['margin']:7.4f}  {r['verdict']}{need}")
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("equivalent", "different", "undetermined")}
    adopt = "yes" if rows and count["equivalent"] == len(rows) else "no"
    print(f"lever_equivalence tests={len(rows)} equivalent={count['equivalent']} different={count['different']} "
          f"undetermined={count['undetermined']} adopt={adopt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
