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
  seeds (every old run with the statistic, whether or not its new run has one): a lever may move a statistic by
  less than the seed-to-seed spread the verdict already lives with. Where the old runs have no spread (margin
  0), only identical statistics are ``equivalent``.
* **Verdict per test.** ``equivalent``: the interval lies inside ``(-margin, +margin)``; ``different``: it
  lies entirely outside it; else ``undetermined`` (more seeds). A test with at least :data:`MIN_PAIRS` old
  values but fewer pairs (the new runs lack it: a failed precondition, too little data) is ``not judged``
  and listed. The lever is adopted when every test is ``equivalent``; runs judged by different claims files
  (``claims_sha256``) are refused.

What the rule implies, from its numbers alone: when the lever reseeds every run (paired spread
``sqrt(2)`` times the seeds' spread) and moves nothing on average, the interval's half-width is
``t(0.95, n-1) * sqrt(2 / n)`` seed spreads: 1.35 at 5 pairs, 1.04 at 7, 0.95 at 8, so at 5 pairs such a lever
cannot be shown equivalent at all; it can only where it keeps runs correlated. The pairs printed beside an
``undetermined`` test and by ``--plan`` are for 80% power per test (the two one-sided tests' normal-theory
approximation with t quantiles, the margin taken as fixed: Chow, Shao & Wang 2008, §3.2), about 19 for a
reseeding lever; a planning figure, not a guarantee (the margin itself is estimated from the old runs).

Usage::

    .venv/bin/python benchmarks/lever_equivalence.py --old reports/tiny/ar-s10{1..5} --new reports/tiny/lever-s10{1..5}
    .venv/bin/python benchmarks/lever_equivalence.py --plan reports/tiny/ar-s10{1..5}

Last line: ``lever_equivalence tests=<n> equivalent=<k> different=<j> undetermined=<u> not_judged=<m> adopt=<yes|no>``
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
from kit.claims.pool import precondition_failures  # noqa: E402
from kit.plan import run_parameters  # noqa: E402

#: the registered rule (see the module docstring); not changed after a lever's runs
MIN_PAIRS = 5
MARGIN_SD = 1.0
CONFIDENCE = 0.90
#: the power the printed planning figure aims at (not part of the verdict)
POWER = 0.80


def run_values(run: str | Path) -> tuple[int, dict[str, float], str]:
    """``(pipeline seed, {"claim id: test name": value}, claims file sha256)`` of one run folder: every test of a
    claim that is not a world check, whose ``requires:`` preconditions passed in this run, with a finite statistic.

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
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"{run}/pipeline_state.json records no pipeline seed")
    out: dict[str, float] = {}
    doc = read_claims(run / "claims.json")
    for claim in doc["claims"]:
        if claim.get("role") == "world_check" or precondition_failures(doc, claim.get("requires", [])):
            continue  # a world check, or a run whose registered precondition failed (as the pooled verdict)
        for test in claim.get("tests", []):
            v = test.get("value")
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                out[f"{claim['id']}: {test['name']}"] = float(v)
    return seed, out, str(doc.get("claims_sha256", ""))


def by_seed(runs: Sequence[str | Path], side: str, files: dict[str, Path] | None = None) -> dict[int, dict[str, float]]:
    """``{seed: values}`` of ``runs`` (:func:`run_values`). ``files``: claims file sha256 -> the first run judged
    by it, shared between the two sides' calls.

    Raises:
        ValueError: two folders of one side with the same seed, or runs judged by different claims files
            (names both).
    """
    out: dict[int, dict[str, float]] = {}
    where: dict[int, Path] = {}
    files = {} if files is None else files
    for run in runs:
        seed, values, sha = run_values(run)
        if seed in out:
            raise ValueError(f"--{side}: {where[seed]} and {run} are both pipeline seed {seed}; give one run per seed")
        if files and sha not in files:
            other = next(iter(files.values()))
            raise ValueError(f"{run} and {other} were judged by different claims files (claims_sha256); a lever "
                             "is compared on the same claims: rejudge both with `python -m kit claims`")
        files.setdefault(sha, Path(run))
        out[seed], where[seed] = values, Path(run)
    return out


def half_width(sd: float, n: int, confidence: float = CONFIDENCE) -> float:
    """Half-width of the two-sided Student t interval of a mean of ``n`` values with sample sd ``sd``."""
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def pairs_needed(sd_diff: float, margin: float, shift: float = 0.0, power: float = POWER, most: int = 200) -> int | None:
    """Pairs for ``power`` per test: the smallest ``n >= 2`` with ``(t(0.95, n-1) + t(q, n-1)) sd / sqrt(n) <=
    margin - |shift|``, ``q = (1 + power) / 2`` at zero shift, else ``power`` (Chow, Shao & Wang 2008, §3.2: two
    one-sided tests at 5%, the margin taken as fixed). None when ``|shift| >= margin`` or more than ``most``."""
    if abs(shift) >= margin:
        return None
    q = (1 + power) / 2 if shift == 0 else power
    for n in range(2, most + 1):
        if (stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) + stats.t.ppf(q, n - 1)) * sd_diff / math.sqrt(n) <= margin - abs(shift):
            return n
    return None


def _sd(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan


def check(old: Mapping[int, Mapping[str, float]], new: Mapping[int, Mapping[str, float]]) -> list[dict[str, Any]]:
    """The rule's verdict per test (see the module docstring).

    Args:
        old, new: ``{seed: {test: value}}`` of the old and new code (:func:`by_seed`).
    Returns:
        One row per test with at least :data:`MIN_PAIRS` old values, in the old runs' order: ``test``, ``pairs``,
        ``old_mean``, ``new_mean``, ``diff``, ``lo``, ``hi`` (90% interval of the mean difference), ``margin``
        (from every old run with the statistic), ``verdict`` (equivalent | different | undetermined | not judged:
        fewer than :data:`MIN_PAIRS` pairs) and ``pairs_needed`` (80% power at the observed paired sd and shift;
        None when out of reach or judged).
    """
    seeds = sorted(set(old) & set(new))
    tests = list(dict.fromkeys(t for v in old.values() for t in v))
    rows = []
    for test in tests:
        olds = [v[test] for v in old.values() if test in v]
        if len(olds) < MIN_PAIRS:
            continue
        margin = MARGIN_SD * _sd(olds)
        both = [s for s in seeds if test in old[s] and test in new[s]]
        row = {"test": test, "pairs": len(both), "old_mean": float(np.mean(olds)), "new_mean": math.nan,
               "diff": math.nan, "lo": math.nan, "hi": math.nan, "margin": margin, "verdict": "not judged",
               "pairs_needed": None}
        rows.append(row)
        if len(both) < MIN_PAIRS:
            continue
        d = np.array([new[s][test] - old[s][test] for s in both])
        mean, sd = float(d.mean()), float(d.std(ddof=1))
        lo, hi = mean - half_width(sd, len(d)), mean + half_width(sd, len(d))
        if margin > 0:
            verdict = ("equivalent" if -margin < lo and hi < margin
                       else "different" if lo >= margin or hi <= -margin else "undetermined")
        else:  # the old runs have no spread: only identical statistics are equivalent
            verdict = ("equivalent" if not d.any() else "different" if lo > 0 or hi < 0 else "undetermined")
        row.update(new_mean=float(np.mean([new[s][test] for s in both])), diff=mean, lo=lo, hi=hi, verdict=verdict,
                   pairs_needed=pairs_needed(sd, margin, mean) if verdict == "undetermined" and margin > 0 else None)
    return rows


def plan(old: Mapping[int, Mapping[str, float]]) -> tuple[list[dict[str, Any]], int | None]:
    """Before a lever's runs: per test of the old runs, the seed spread and the margin, and the pairs the rule
    needs for a lever that reseeds every run and moves nothing on average (the same for every test: the
    margin is in seed spreads)."""
    tests = list(dict.fromkeys(t for v in old.values() for t in v))
    rows = []
    for test in tests:
        a = [v[test] for v in old.values() if test in v]
        if len(a) >= 2:
            rows.append({"test": test, "runs": len(a), "mean": float(np.mean(a)), "sd": _sd(a), "margin": MARGIN_SD * _sd(a)})
    return rows, pairs_needed(math.sqrt(2.0), MARGIN_SD)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", nargs="+", default=[], metavar="RUN", help="run folders of the old code")
    p.add_argument("--new", nargs="+", default=[], metavar="RUN", help="run folders of the new code, same seeds")
    p.add_argument("--plan", nargs="+", default=[], metavar="RUN",
                   help="old runs only: the margins and the pairs the rule needs, before a lever's runs")
    a = p.parse_args(argv)
    if a.plan and (a.old or a.new):
        p.error("--plan reads the old runs alone: give it without --old/--new")
    if not a.plan and (not a.old or not a.new):
        p.error("give --old RUN ... and --new RUN ... (or --plan RUN ...)")
    try:
        if a.plan:
            rows, need = plan(by_seed(a.plan, "plan"))
            most = max((r["runs"] for r in rows), default=0)
            for r in rows:
                fewer = f"  (only {r['runs']} of {most} runs)" if r["runs"] < most else ""
                print(f"{r['test']}\n    runs {r['runs']}  mean {r['mean']:+.4f}  seed sd {r['sd']:.4f}  "
                      f"margin {r['margin']:.4f}{fewer}")
            print(f"a lever that reseeds every run and moves nothing: {CONFIDENCE:.0%} half-width "
                  f"{half_width(math.sqrt(2.0), MIN_PAIRS):.2f} seed spreads at {MIN_PAIRS} pairs, the margin "
                  f"{MARGIN_SD:g}; {need} pairs for {POWER:.0%} power per test")
            print(f"lever_equivalence_plan tests={len(rows)} pairs_needed_if_reseeded={need}")
            return 0
        files: dict[str, Path] = {}
        old, new = by_seed(a.old, "old", files), by_seed(a.new, "new", files)
    except (ValueError, OSError) as exc:
        print(f"lever_equivalence: {exc}", file=sys.stderr)
        return 2
    missing = sorted(set(old) ^ set(new))
    if missing:
        print(f"seeds in only one set, left out: {missing}")
    rows = check(old, new)
    if not rows:
        print(f"no test has a statistic in at least {MIN_PAIRS} old runs: nothing to judge")
    for r in rows:
        if r["verdict"] == "not judged":
            print(f"{r['test']}\n    not judged: {r['pairs']} pairs with the statistic in both runs "
                  f"(at least {MIN_PAIRS}), old mean {r['old_mean']:+.4f}")
            continue
        need = ("" if r["verdict"] != "undetermined" else
                f" (about {r['pairs_needed']} pairs for {POWER:.0%} power)" if r["pairs_needed"] else
                " (no number of pairs: the shift is at least the margin, or the old runs have no spread)")
        print(f"{r['test']}\n    pairs {r['pairs']}  old {r['old_mean']:+.4f}  new {r['new_mean']:+.4f}  new - old "
              f"{r['diff']:+.4f} ({r['lo']:+.4f} to {r['hi']:+.4f}, 90%)  margin {r['margin']:.4f}  "
              f"{r['verdict']}{need}")
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("equivalent", "different", "undetermined", "not judged")}
    adopt = "yes" if rows and count["equivalent"] == len(rows) else "no"
    print(f"lever_equivalence tests={len(rows)} equivalent={count['equivalent']} different={count['different']} "
          f"undetermined={count['undetermined']} not_judged={count['not judged']} adopt={adopt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
