"""Verdicts over pipeline seeds (issue #42): every claim judged over runs, the spread between runs
in its interval.

The unit is the **pipeline seed**: one run folder of ``python -m kit reproduce --seed s`` redraws the
split, the cold start, the RL seeds and the evaluation draws. Each run's ``claims.json`` gives, per
test, the run's statistic (``value``; a run's RL seeds are averaged first, as its own test does). The
pooled test takes those statistics over runs and applies the claims file's rules (``rules.pooling``
in ``kit/reference/claims.yaml``, registered before the first pooled run):

* interval over runs: Student t for fewer than :data:`BOOTSTRAP_FROM` runs (:func:`t_interval`),
  a BCa bootstrap over runs from there (``scipy.stats.bootstrap``, :data:`BOOTSTRAP_RESAMPLES`
  resamples, seed 0). One level: a run's statistic already carries its own sampling noise, so its
  spread over runs includes it (resampling within runs as well would count that noise twice;
  Davison & Hinkley 1997, §3.8);
* paired designs stay paired: a test that compares two arms of one run is pooled on the run's
  difference, so resampling runs keeps both arms of a seed together;
* the three-way verdict rule (:func:`kit.claims.stats.decide`) on the pooled interval; Holm's step-down
  correction over the tests of each paper's ``role: primary`` claims decides whether a primary test
  may say "reproduced" (:func:`holm`; a claim without ``role`` is secondary, uncorrected);
* runs that fail a registered precondition (a claim's ``requires:``; each run's ``claims.json``
  records its ``preconditions``) are listed and left out by that rule; a run without a statistic
  for a test (too little data) is listed and left out of that test;
* descriptions beside the verdict, never the verdict: the share of runs whose statistic lies on
  the claimed side of the threshold, the share whose own verdict was "reproduced", and for arm
  comparisons the probability of improvement (the share of runs whose difference favours the claimed
  arm, ties counting half; Agarwal et al. 2021's measure for paired runs).

Usage::

    python -m kit claims pool reports/tiny/s1 reports/tiny/s2 ... --out reports/tiny/pooled

writes ``pooled_claims.json``, ``pooled_claims.csv`` and the "over seeds" page (``over_seeds.pdf``,
a forest plot per claim: :mod:`kit.claims.forest`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from kit import fingerprint, jsonio, studies
from kit.claims import ClaimsError, load_claims, read_claims
from kit.claims.forest import over_seeds_page
from kit.claims.over_seeds import environment_notes
from kit.claims.results import DEFAULT_SECTION, INVALID, VERDICTS
from kit.claims.stats import CONFIDENCE, decide
from kit.plan import run_parameters

__all__ = ["ARM_COMPARISONS", "BOOTSTRAP_FROM", "BOOTSTRAP_RESAMPLES", "POOLED_FILE", "SCHEMA", "holm",
           "interval_p", "pool_claims", "pool_runs", "pooled_interval", "precondition_failures", "probability_of_improvement",
           "arm_comparisons", "seeds_needed", "write_pooled"]

SCHEMA = 1
POOLED_FILE = "pooled_claims.json"
#: runs from which the interval is a BCa bootstrap over runs instead of Student t (claims.yaml rules.pooling)
BOOTSTRAP_FROM = 10
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0
#: the kit's test kinds whose statistic is a difference of two arms (or two checkpoints) of one run; a
#: study adds its own (:attr:`kit.studies.Study.paired_kinds`, :func:`arm_comparisons`)
ARM_COMPARISONS = frozenset({"ablation_paired_last", "heldout_rise", "heldout_no_drop", "heldout_non_inferior",
                             "stage_length_change", "passk_gap", "passk_gap_closing", "entropy_share_diff"})


def arm_comparisons() -> frozenset[str]:
    """:data:`ARM_COMPARISONS` and every registered study's :attr:`~kit.studies.Study.paired_kinds`."""
    return ARM_COMPARISONS.union(*(s.paired_kinds for s in studies.STUDIES))


def _finite(values: Sequence[float]) -> np.ndarray:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    return v[np.isfinite(v)]


def _bca(v: np.ndarray, confidence: float) -> tuple[float, float]:
    """BCa bootstrap interval of the mean of ``v`` (runs resampled); the mean itself where all runs agree."""
    if np.ptp(v) == 0:
        return float(v[0]), float(v[0])
    with warnings.catch_warnings():  # a degenerate resample distribution warns; the bounds are still reported
        warnings.simplefilter("ignore")
        r = stats.bootstrap((v,), np.mean, confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                            method="BCa", random_state=np.random.default_rng(BOOTSTRAP_SEED))
    return float(r.confidence_interval.low), float(r.confidence_interval.high)


def pooled_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> tuple[float, float, float, str]:
    """Mean over runs with the pooled interval of claims.yaml ``rules.pooling``.

    Args:
        values: (R,) the runs' statistics; None and NaN (a run without the statistic) are dropped.
        confidence: two-sided level (0.95 by the rules; :func:`interval_p` varies it).
    Returns:
        ``(mean, lo, hi, how)``: Student t over runs for fewer than :data:`BOOTSTRAP_FROM` runs, BCa
        bootstrap over runs from there; NaN bounds for fewer than 2 runs; ``how`` says which, with the count.
    """
    v = _finite(values)
    if v.size == 0:
        return math.nan, math.nan, math.nan, "no run has the statistic"
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan, "1 run: no interval over runs"
    if v.size < BOOTSTRAP_FROM:
        half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
        return m, m - half, m + half, f"t over {v.size} runs"
    lo, hi = _bca(v, confidence)
    return m, lo, hi, f"BCa bootstrap over {v.size} runs"


def interval_p(values: Sequence[float | None], comparison: str, threshold: float) -> float:
    """The smallest ``alpha`` at which the two-sided ``1 - alpha`` pooled interval lies strictly on the
    claimed side of ``threshold``: the p-value Holm's correction orders (``< 0.05`` exactly when the 95%
    interval says reproduced).

    With fewer than :data:`BOOTSTRAP_FROM` runs it is twice the one-sided t-test p-value; from there it
    is found by bisection over the bootstrap's level (same resamples each time). 1.0 for fewer than 2
    runs; all runs equal: 0.0 on the claimed side, else 1.0.

    Raises:
        ValueError: a comparison other than ``">"`` / ``"<"``.
    """
    if comparison not in (">", "<"):
        raise ValueError(f"comparison must be '>' or '<', got {comparison!r}")
    v = _finite(values)
    if v.size < 2:
        return 1.0
    sign = 1.0 if comparison == ">" else -1.0
    if np.ptp(v) == 0:
        return 0.0 if sign * (v[0] - threshold) > 0 else 1.0
    if v.size < BOOTSTRAP_FROM:
        p = stats.ttest_1samp(v, threshold, alternative="greater" if comparison == ">" else "less").pvalue
        return float(min(1.0, 2 * p))

    def clears(alpha: float) -> bool:
        lo, hi = _bca(v, 1 - alpha)
        return lo > threshold if comparison == ">" else hi < threshold

    if not clears(0.999):
        return 1.0
    lo_a, hi_a = 0.0, 0.999  # clears(hi_a) holds; find the smallest alpha that clears
    for _ in range(14):
        mid = (lo_a + hi_a) / 2
        lo_a, hi_a = (lo_a, mid) if clears(mid) else (mid, hi_a)
    return hi_a


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (Holm 1979): sorted ascending, ``p_(i)`` becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``; a hypothesis is rejected at level ``alpha`` when its
    adjusted p is below ``alpha``. Ties keep the input order. ``{}`` for no hypotheses."""
    order = sorted(pvalues, key=lambda k: pvalues[k])
    m, running, out = len(order), 0.0, {}
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[k]))
        out[k] = running
    return out


def probability_of_improvement(values: Sequence[float | None], comparison: str) -> float:
    """Share of runs whose arm difference favours the claimed arm (``> 0`` for ``">"``, ``< 0`` for
    ``"<"``), ties at 0 counting half: the probability of improvement of paired runs. NaN for no runs."""
    v = _finite(values)
    if v.size == 0:
        return math.nan
    s = v if comparison == ">" else -v
    return float(((s > 0).sum() + 0.5 * (s == 0).sum()) / v.size)


def seeds_needed(values: Sequence[float | None], comparison: str, threshold: float, most: int = 200) -> int | None:
    """Runs a test needs for its t interval over runs to clear ``threshold``, if the runs so far are
    what the method gives: the smallest ``n >= 2`` with ``t(0.975, n-1) sd / sqrt(n) < |mean - threshold|``
    (mean and sample sd of ``values``). None when the runs' mean is not on the claimed side, when there
    are fewer than 2 runs, or when more than ``most`` would be needed. A planning figure, not a power
    guarantee: the sd of a few runs is itself uncertain."""
    v = _finite(values)
    if v.size < 2:
        return None
    gap = (v.mean() - threshold) * (1.0 if comparison == ">" else -1.0)
    if gap <= 0:
        return None
    sd = float(v.std(ddof=1))
    for n in range(2, most + 1):
        if stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n) < gap:
            return n
    return None


# --------------------------------------------------------------------------- pooling claims.json documents


def _state(run: Path) -> dict[str, Any]:
    """A run folder's ``pipeline_state.json``; {} when it is missing or unreadable."""
    try:
        state = json.loads((run / "pipeline_state.json").read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _seed(state: Mapping[str, Any]) -> int | None:
    """The pipeline seed a run's state records (:func:`kit.plan.run_parameters`), None when it records none."""
    seed = run_parameters(state).get("seed")
    return seed if isinstance(seed, int) else None


def _unfinished(state: Mapping[str, Any]) -> list[str]:
    """``"<notebook> <status>"`` for every notebook of a run's state that did not finish (failed, interrupted,
    running)."""
    return [f"{k} {v['status']}" for k, v in state.items() if isinstance(v, dict) and v.get("status", "done") != "done"]


def precondition_failures(doc: Mapping[str, Any], requires: Sequence[str]) -> list[str]:
    """Why a run's ``claims.json`` document ``doc`` may not judge a claim that ``requires`` these preconditions: one
    line per precondition not recorded or failed (``[]``: all passed). The pooled verdict's rule, and the lever
    equivalence check's (``benchmarks/lever_equivalence.py``)."""
    pre = doc.get("preconditions") or {}
    out = []
    for name in requires:
        rec = pre.get(name)
        if rec is None:
            out.append(f"precondition {name!r} not recorded")
        elif not rec.get("passed"):
            tail = f" ({INVALID})" if rec.get("on_fail") == INVALID else ""
            out.append(f"precondition {name!r} failed{tail}: {rec.get('reason', '')}".rstrip(": "))
    return out


def pool_claims(docs: Sequence[tuple[str, Mapping[str, Any]]], claims: Sequence[Mapping[str, Any]] | None = None,
                section: str | None = None) -> list[dict[str, Any]]:
    """Pool each claim's tests over runs.

    Args:
        docs: (R,) ``(run name, claims.json document)``; the first run's claim order is kept.
        section: pool only this paper's claims (None: all); a claim of another section need not be in every run.
        claims: the claims file's claims (default :func:`kit.claims.load_claims`): their ``role``
            (``primary`` / ``secondary``, default secondary) and ``requires`` (precondition names).
    Returns:
        One dict per claim: ``id, section, source, claim, role, verdict, tests`` where each test has
        ``name, kind, comparison, threshold, per_run {run: statistic or None}, used [runs], excluded
        {run: reason}, value, ci95, interval, n, p_interval, p_holm, verdict, reason,
        share_claimed_side, share_runs_reproduced, seeds_needed`` (:func:`seeds_needed` on these runs) and, for arm comparisons (:data:`ARM_COMPARISONS`),
        ``probability_of_improvement``. Grouped by paper (in the order the first run names them), within a paper
        primaries first and world checks last.
    Raises:
        ClaimsError: the runs do not hold the same claims (of ``section``) or a claim the same tests (matched
            by name), or a test's comparison or threshold differs between runs (the claims file changed: such
            runs test different claims).
    """
    if not docs:
        raise ClaimsError("no runs to pool")
    spec = {c["id"]: c for c in (load_claims() if claims is None else claims)}
    by_run = [(name, {c["id"]: c for c in d["claims"]}, d) for name, d in docs]
    for name, d in docs:  # tests are matched by name: two of one name would pool one twice and lose the other
        for c in d["claims"]:
            names = [t["name"] for t in c["tests"]]
            dup = next((n for n in names if names.count(n) > 1), None)
            if dup is not None:
                raise ClaimsError(f"claim {c['id']!r} in {name}/claims.json has two tests named {dup!r}: test names "
                                  "must be unique within a claim")
    mine = lambda d: {c["id"] for c in d["claims"] if section is None or (c.get("section") or DEFAULT_SECTION) == section}  # noqa: E731
    for name, d in docs[1:]:
        extra = sorted(mine(d) - mine(docs[0][1]))
        if extra:  # the first run must not decide alone which claims exist
            raise ClaimsError(f"claim {extra[0]!r} is in {name}/claims.json but not in {docs[0][0]}/claims.json (the runs "
                              "were judged by different claims files; pool one paper with --section)")
    out = []
    for c0 in docs[0][1]["claims"]:
        if section is not None and (c0.get("section") or DEFAULT_SECTION) != section:
            continue
        cid = c0["id"]
        cspec = spec.get(cid, {})
        role = str(cspec.get("role") or c0.get("role") or "secondary")
        requires = list(cspec.get("requires") or [])
        tests = []
        for name, claims_of, _ in by_run[1:]:
            extra = [t["name"] for t in (claims_of.get(cid) or {}).get("tests", [])
                     if t["name"] not in {t0["name"] for t0 in c0["tests"]}]
            if extra:
                raise ClaimsError(f"claim {cid!r}: {name}/claims.json has a test {extra[0]!r} that "
                                  f"{docs[0][0]}/claims.json has not: the runs were judged by different claims files")
        for t0 in c0["tests"]:
            per_run, excluded, verdicts, invalid_runs = {}, {}, [], []
            for name, claims_of, doc in by_run:
                c = claims_of.get(cid)
                if c is None:
                    raise ClaimsError(f"claim {cid!r} is in {docs[0][0]}/claims.json but not in {name}/claims.json (the "
                                      "runs were judged by different claims files; pool one paper with --section)")
                t = next((x for x in c["tests"] if x["name"] == t0["name"]), None)
                if t is None:  # tests are matched by name, never by position
                    raise ClaimsError(f"claim {cid!r}: {name}/claims.json has no test {t0['name']!r} "
                                      f"({docs[0][0]} has it): the runs were judged by different claims files")
                if (t["comparison"], t["threshold"]) != (t0["comparison"], t0["threshold"]):
                    raise ClaimsError(f"claim {cid!r}, test {t0['name']!r}: {name} tests {t['comparison']} "
                                      f"{t['threshold']}, {docs[0][0]} tests {t0['comparison']} {t0['threshold']}: "
                                      "the runs were judged by different claims files")
                per_run[name] = t.get("value")
                failed = precondition_failures(doc, requires)
                if failed:
                    excluded[name] = "; ".join(failed)
                    if all(f"({INVALID})" in f for f in failed):
                        invalid_runs.append(name)
                elif t.get("value") is None:
                    excluded[name] = f"no statistic ({t.get('reason', 'too little data')})"
                else:
                    verdicts.append(t.get("verdict"))
            used = [n for n in per_run if n not in excluded]
            vals = [per_run[n] for n in used]
            cmp_, thr = t0["comparison"], float(t0["threshold"])
            mean, lo, hi, how = pooled_interval(vals)
            verdict, reason = decide(lo, hi, cmp_, thr) if len(vals) >= 2 else (
                "inconclusive", f"{len(vals)} run(s) with the statistic: an interval over runs needs 2")
            invalid = [n for n in invalid_runs if n in excluded]
            if len(vals) < 2 and invalid:  # the design's own control failed in the runs that would have judged it
                verdict, reason = INVALID, (f"{len(invalid)} of {len(per_run)} runs failed a precondition on the "
                                            f"design's own control; {len(vals)} left to judge")
            v = _finite(vals)
            side = (v > thr) if cmp_ == ">" else (v < thr)
            test = {"name": t0["name"], "kind": t0["kind"], "comparison": cmp_, "threshold": thr,
                    "per_run": per_run, "used": used, "excluded": excluded, "value": mean, "ci95": [lo, hi],
                    "interval": how, "n": len(vals), "p_interval": interval_p(vals, cmp_, thr), "p_holm": None,
                    "verdict": verdict, "reason": reason,
                    "share_claimed_side": float(side.mean()) if v.size else math.nan,
                    "share_runs_reproduced": (sum(x == "reproduced" for x in verdicts) / len(verdicts)
                                              if verdicts else math.nan),
                    "seeds_needed": seeds_needed(vals, cmp_, thr)}
            if t0["kind"] in arm_comparisons():
                test["probability_of_improvement"] = probability_of_improvement(vals, cmp_)
            tests.append(test)
        out.append({"id": cid, "section": c0.get("section") or DEFAULT_SECTION, "source": c0["source"],
                    "claim": c0["claim"], "role": role, "requires": requires, "tests": tests})
    _apply_holm(out)
    # by paper (in the order the claims file first names it), within a paper primaries first, world checks last;
    # stable: the file's order within a role
    papers = list(dict.fromkeys(c["section"] for c in out))
    roles = ("primary", "secondary", "world_check")
    out.sort(key=lambda c: (papers.index(c["section"]), roles.index(c["role"]) if c["role"] in roles else 1))
    for c in out:
        vs = [t["verdict"] for t in c["tests"]]
        c["verdict"] = (INVALID if INVALID in vs else "reproduced" if all(v == "reproduced" for v in vs)
                        else "not reproduced" if "not reproduced" in vs else "inconclusive")
    return out


def _apply_holm(pooled: list[dict[str, Any]]) -> None:
    """Holm over the tests of each section's primary claims: a primary test says "reproduced" only
    when its adjusted p-value is below 1 - confidence."""
    alpha = 1 - CONFIDENCE
    for section in {c["section"] for c in pooled}:
        family = {(c["id"], i): t["p_interval"] for c in pooled if c["section"] == section and c["role"] == "primary"
                  for i, t in enumerate(c["tests"])}
        adjusted = holm(family)
        for c in pooled:
            for i, t in enumerate(c["tests"]):
                if (c["id"], i) not in adjusted:
                    continue
                t["p_holm"] = adjusted[(c["id"], i)]
                if t["verdict"] == "reproduced" and t["p_holm"] >= alpha:
                    t["verdict"] = "inconclusive"
                    t["reason"] += (f"; but not after Holm's correction over the {len(adjusted)} primary tests of "
                                    f"{section} (adjusted p = {t['p_holm']:.3g})")


def claims_file_notes(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """A line when the runs were judged by different claims files (``claims_sha256`` of ``claims.json``), naming
    the runs of each; [] when they agree or do not say. A pooled claim is still the same claim wherever its test's
    comparison and threshold agree (:func:`pool_claims` checks that), but a reader should know."""
    groups: dict[str, list[str]] = {}
    for name, d in docs:
        if d.get("claims_sha256"):
            groups.setdefault(d["claims_sha256"], []).append(name)
    if len(groups) < 2:
        return []
    return ["the runs were judged by different claims files: " + "; ".join(
        f"{', '.join(names)} ({sha[:12]})" for sha, names in groups.items())]


def pool_runs(runs: Sequence[str | os.PathLike], section: str | None = None) -> dict[str, Any]:
    """The pooled document of run folders (each with a ``claims.json``, notebook 20); ``section``: one paper's
    claims only (None: all).

    Returns:
        ``{schema_version, kind: "pooled", profile, created_utc, runs [{name, path, seed, environment_key,
        repeatable}], notes [environment notes], counts {verdict: n} (world checks left out),
        world_check_counts {verdict: n}, claims [pool_claims rows]}``.
    Raises:
        ClaimsError: fewer than 2 runs, a missing or invalid ``claims.json`` (named), a run that has not
            finished (a notebook failed, interrupted or running in its ``pipeline_state.json``), runs of
            different profiles, a run without a recorded pipeline seed or two runs of one seed (the unit would
            count twice), or :func:`pool_claims`'s errors.
    """
    paths = [Path(r) for r in runs]
    if len(paths) < 2:
        raise ClaimsError(f"a pool needs at least 2 runs (an interval over runs), got {len(paths)}"
                          + (f": {paths[0]}" if paths else ""))
    docs = [(p.name or p.resolve().name, read_claims(p / "claims.json")) for p in paths]  # "." is named too
    states = {p: _state(p) for p in paths}
    for p in paths:
        unfinished = _unfinished(states[p])
        if unfinished:
            raise ClaimsError(f"{p} has not finished ({'; '.join(unfinished)}), so its claims.json may be older than its "
                              "results: finish it (rerun its python -m kit reproduce command) or leave it out")
    names = [n for n, _ in docs]
    if len(set(names)) != len(names):
        raise ClaimsError(f"run folder names repeat ({', '.join(names)}): each run is named by its folder")
    profiles = {d["profile"] for _, d in docs}
    if len(profiles) > 1:
        raise ClaimsError(f"the runs are of different profiles ({', '.join(sorted(profiles))}): pool one profile")
    seeds: dict[int, Path] = {}
    for p in paths:
        s = _seed(states[p])
        if s is None:
            raise ClaimsError(f"{p}: no pipeline seed recorded ({p / 'pipeline_state.json'} is missing, unreadable or names none; "
                              "python -m kit reproduce records it): the unit of the pool is the seed, so each run's "
                              "must be known")
        if s in seeds:
            raise ClaimsError(f"{seeds[s]} and {p} are both pipeline seed {s}: the unit of the pool is the seed, "
                              "so a seed counts once")
        seeds[s] = p
    pooled = pool_claims(docs, section=section)
    return {"schema_version": SCHEMA, "kind": "pooled", "profile": profiles.pop(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "runs": [{"name": n, "path": str(p), "seed": _seed(states[p]),
                      "environment_key": fingerprint.fingerprint_key(d[fingerprint.ENVIRONMENT_KEY])
                      if d.get(fingerprint.ENVIRONMENT_KEY) else None,
                      "repeatable": d.get(fingerprint.REPEATABLE_KEY)} for (n, d), p in zip(docs, paths, strict=True)],
            "notes": environment_notes(docs) + claims_file_notes(docs),
            "counts": {v: sum(c["verdict"] == v for c in pooled if c["role"] != "world_check") for v in VERDICTS},
            "world_check_counts": {v: sum(c["verdict"] == v for c in pooled if c["role"] == "world_check")
                                   for v in VERDICTS},
            "claims": pooled}


def _fmt(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:+.3f}"


def table_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """Rows ``[section, claim, test, runs, pooled statistic (interval), verdict, share of runs on the claimed
    side, probability of improvement, seeds needed, runs left out (run: why)]`` (header first) of a pooled
    document."""
    rows = [["section", "claim", "test", "runs", "pooled (95% interval over runs)", "verdict", "share claimed side",
             "P(improvement)", "seeds needed", "left out"]]
    for c in doc["claims"]:
        for t in c["tests"]:
            lo, hi = t["ci95"]
            rows.append([c["section"], f"{c['source'].split(' (')[0]}: {c['claim']}", t["name"], str(t["n"]),
                         f"{_fmt(t['value'])} ({_fmt(lo)} to {_fmt(hi)})", t["verdict"],
                         f"{t['share_claimed_side']:.2f}" if t["share_claimed_side"] == t["share_claimed_side"] else "n/a",
                         (f"{t['probability_of_improvement']:.2f}" if t["probability_of_improvement"] == t["probability_of_improvement"]
                          else "n/a") if "probability_of_improvement" in t else "",
                         "" if t.get("seeds_needed") is None else str(t["seeds_needed"]),
                         "; ".join(f"{run}: {why}" for run, why in t.get("excluded", {}).items())])
    return rows


def write_pooled(doc: Mapping[str, Any], out: str | os.PathLike, *, page: bool = True) -> list[Path]:
    """Write ``pooled_claims.json``, ``pooled_claims.csv`` and (``page``) the "over seeds" page
    ``over_seeds.pdf`` into the folder ``out`` (created); returns the paths written."""
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise ClaimsError(f"--out {d} is a file, not a folder: name a folder for pooled_claims.json, "
                          "pooled_claims.csv and over_seeds.pdf")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on the way to it, no permission
        raise ClaimsError(f"--out {d}: cannot make the folder ({exc})") from exc
    paths = [d / POOLED_FILE, d / "pooled_claims.csv"]
    paths[0].write_text(jsonio.dumps(doc, indent=2) + "\n")
    with open(paths[1], "w", newline="") as fh:
        csv.writer(fh).writerows(table_rows(doc))
    if page:
        paths.append(over_seeds_page(doc, d / "over_seeds.pdf"))
    return paths
