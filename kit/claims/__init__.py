"""Verdicts on the paper's claims, computed from a run folder's own files (issue #16).

The claims, their statistics, thresholds and minimum data are pre-registered in
``kit/reference/claims.yaml`` (read that file for the rules); this module only evaluates them. Each
claim has one or more *tests*; a test computes one statistic with a 95% interval from the run's
files and compares the interval with its threshold:

- ``reproduced``: the interval lies entirely on the claimed side of the threshold (and any extra
  condition of the test holds);
- ``not reproduced``: it lies entirely on the other side (the data rule the claim out);
- ``inconclusive``: the interval contains the threshold, a file is missing, or the run has less
  data than the test's minimum (what a ``smoke`` run gets).

A claim is reproduced when all its tests are, not reproduced when any test is, else inconclusive.

Intervals: over seeds (Student t, paired per seed) for the ablation; for claims resting on the
main chain's single seed, over that run's sampling units (Newcombe's interval for two
proportions, a Welch interval over training steps, or a percentile bootstrap over problems or
trajectories) -- these leave out the between-seed spread, and each result says which it used.

Files read (``RunDirs``, by default the folders of ``reports/<profile>/<run>/``):
``ablation/<algorithm>_seed<s>/metrics.jsonl``, ``<sft|stage1|stage2|stage3>/summary.json``,
``stage<k>/metrics.jsonl`` and ``config.json``, ``eval/passk/passk_curves.json`` with its
``<source>_<label>.json`` results, ``analysis/entropy_tokens.jsonl``, ``retool/<arm>_seed<s>/metrics.jsonl``
(notebook 10's ReTool comparison), ``agent_r/policy_eval.jsonl`` (notebook 11's Agent-R policies).
A claim's ``section:`` (default ``rStar2-Agent``; ``ReTool``, ``Agent-R``) says which paper it is
from; ``claims.json`` carries it per claim (the summary gives each other paper a page).

Usage::

    from kit.claims import RunDirs, evaluate_claims, write_claims
    results = evaluate_claims(RunDirs.under("reports/tiny/main"))
    write_claims(results, "reports/tiny/main/claims.json", profile="tiny")
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from kit import fingerprint, jsonio
from kit.claims.files import Missing, RunDirs
from kit.claims.kinds import all_kinds
from kit.claims.results import DEFAULT_SECTION, INVALID, ROLES, VERDICTS, ClaimResult, TestResult
from kit.config import ConfigError, available_profiles, load
from kit.metrics import DECLARED
from kit.plan import Layout, read_run_keys
from kit.studies import STUDIES

CLAIMS_FILE = Path(__file__).resolve().parent.parent / "reference" / "claims.yaml"
#: 2: each claim and each test carries its ``note`` (the claims file's ``note:``, "" without one);
#: 3: the run's ``environment`` fingerprint and ``repeatable`` stamp (:mod:`kit.fingerprint`, issue #41);
#: 4: each claim's ``role`` and ``requires``, the run's ``preconditions``, ``counts`` without world checks and
#: ``world_check_counts`` (issue #45); 5: the verdict ``invalid design`` (in ``counts`` too) and each precondition
#: row's ``on_fail`` (issue #46)
SCHEMA_VERSION = 5
#: test fields that name a metrics key: each must be declared in :mod:`kit.metrics` (``DECLARED``)
KEY_FIELDS = ("key", "n_key")
TEST_KEYS = ("name", "kind", "statistic", "interval", "comparison", "threshold")
CLAIM_KEYS = ("id", "source", "claim", "paper", "tests")

__all__ = ["CLAIMS_FILE", "DEFAULT_SECTION", "ROLES", "VERDICTS", "ClaimResult", "ClaimsError", "RunDirs", "TestResult",
           "claims_table", "counted", "evaluate_claims", "evaluate_preconditions", "load_claims", "load_preconditions",
           "read_claims", "write_claims"]
PRECONDITION_KEYS = ("name", "statement", "folder", "file", "key", "comparison", "threshold")


class ClaimsError(ValueError):
    """The claims file or a claims.json is malformed (the message names the claim and the key)."""


def load_claims(path: str | os.PathLike | None = None, *, include_superseded: bool = False) -> list[dict[str, Any]]:
    """The pre-registered claims (``kit/reference/claims.yaml`` by default, then the claims file of each
    study that brings its own, :attr:`kit.studies.Study.claims_file`), checked; a claim with
    ``superseded_by:`` (kept in the file with its history, issue #45) only with ``include_superseded``.

    Raises:
        ClaimsError: a claim or test lacks a required key, an id repeats, a comparison is not
            ``>``/``<``, a test kind is unknown, a test's ``key`` / ``n_key`` is not a key
            :mod:`kit.metrics` declares, a ``role`` is not one of :data:`ROLES`, or a claim
            ``requires`` a precondition the file does not define, or is superseded by a claim the file does
            not hold, or a study's own file holds a claim of another section, or a claim of the kit's file names
            a section that is neither the kit's paper's nor a registered study's (the message names the file,
            the claim and the key).
    """
    p = Path(path) if path is not None else CLAIMS_FILE
    data = _read_yaml(p)
    preconditions = {q["name"] for q in _preconditions(data, p)}
    claims = _checked(data, p, preconditions)
    if path is None:  # the kit's file: each section is the kit's paper's or a registered study's (a typo has no page)
        known = [DEFAULT_SECTION, *(s.section for s in STUDIES)]
        for c in claims:
            if c.get("section", DEFAULT_SECTION) not in known:
                raise ClaimsError(f"{p}: claim {c['id']}: section {c['section']!r} is no registered study's; "
                                  f"known: {known}")
    for study in STUDIES if path is None else ():
        if study.claims_file:
            own = Path(study.claims_file)
            claims += _checked(_read_yaml(own), own, preconditions, section=study.section)
    seen: set[str] = set()
    for c in claims:
        if c["id"] in seen:
            raise ClaimsError(f"{p}: claim {c['id']}: id repeated")
        seen.add(c["id"])
    for c in claims:
        if c.get("superseded_by") and c["superseded_by"] not in seen:
            raise ClaimsError(f"{p}: claim {c['id']}: superseded_by {c['superseded_by']!r} is not a claim of the file")
    return claims if include_superseded else [c for c in claims if not c.get("superseded_by")]


def _read_yaml(p: Path) -> Any:
    if not p.exists():
        raise ClaimsError(f"claims file not found: {p}")
    return yaml.safe_load(p.read_text())


def _checked(data: Any, p: Path, preconditions: set[str], section: str = "") -> list[dict[str, Any]]:
    """The ``claims`` list of a parsed claims file, each claim checked (:func:`load_claims`); ``section``:
    the one section a study's own file may hold."""
    claims = (data or {}).get("claims")
    if not isinstance(claims, list) or not claims:
        raise ClaimsError(f"{p}: expected a non-empty 'claims' list")
    kinds = all_kinds()
    for i, c in enumerate(claims):
        where = f"{p}: claim {c.get('id', i) if isinstance(c, dict) else i}"
        if not isinstance(c, dict):
            raise ClaimsError(f"{where}: not a mapping")
        for k in CLAIM_KEYS:
            if k not in c:
                raise ClaimsError(f"{where}: missing key {k!r}")
        if section and c.get("section") != section:
            raise ClaimsError(f"{where}: section {c.get('section')!r}, but this file is study {section!r}'s own")
        if not c["tests"]:
            raise ClaimsError(f"{where}: no tests")
        if c.get("role", "secondary") not in ROLES:
            raise ClaimsError(f"{where}: role {c.get('role')!r} is not one of {ROLES}")
        unknown = [r for r in c.get("requires") or [] if r not in preconditions]
        if unknown:
            raise ClaimsError(f"{where}: requires {unknown} not among the preconditions {sorted(preconditions)}")
        for t in c["tests"]:
            for k in TEST_KEYS:
                if k not in t:
                    raise ClaimsError(f"{where}, test {t.get('name', '?')!r}: missing key {k!r}")
            if t["comparison"] not in (">", "<"):
                raise ClaimsError(f"{where}, test {t['name']!r}: comparison must be '>' or '<', got {t['comparison']!r}")
            if t["kind"] not in kinds:
                raise ClaimsError(f"{where}, test {t['name']!r}: unknown kind {t['kind']!r}; known: {sorted(kinds)}")
            for field in KEY_FIELDS:
                if field in t and t[field] not in DECLARED:
                    raise ClaimsError(f"{where}, test {t['name']!r}: {field} {t[field]!r} is not a key kit.metrics "
                                      "declares (RL_KEYS, SFT_KEYS, SUMMARY_KEYS); declare it there with its population")
    return list(claims)


def _preconditions(data: Any, path: Path) -> list[dict[str, Any]]:
    pre = (data or {}).get("preconditions") or []
    for i, q in enumerate(pre):
        for k in PRECONDITION_KEYS:
            if not isinstance(q, dict) or k not in q:
                raise ClaimsError(f"{path}: precondition {i}: missing key {k!r}")
        if q["comparison"] not in (">=", "<="):
            raise ClaimsError(f"{path}: precondition {q['name']!r}: comparison must be '>=' or '<=', got {q['comparison']!r}")
        if q.get("on_fail", "inconclusive") not in ("inconclusive", INVALID):
            raise ClaimsError(f"{path}: precondition {q['name']!r}: on_fail must be 'inconclusive' or {INVALID!r}, "
                              f"got {q['on_fail']!r}")
    return pre


def load_preconditions(path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The registered preconditions of the claims file (issue #45): each ``name, statement, folder,
    file, key, comparison (>= or <=), threshold`` and why; [] when the file has none.

    Raises:
        ClaimsError: the file is missing, or a precondition lacks a key or has another comparison.
    """
    p = Path(path) if path is not None else CLAIMS_FILE
    if not p.exists():
        raise ClaimsError(f"claims file not found: {p}")
    return _preconditions(yaml.safe_load(p.read_text()), p)


def evaluate_preconditions(dirs: RunDirs, preconditions: Sequence[Mapping[str, Any]] | None = None
                           ) -> dict[str, dict[str, Any]]:
    """Each precondition on the run's files: ``{name: {passed, value, comparison, threshold, reason}}``.

    A precondition whose file or key is missing has not passed (``value`` None, the reason says what is
    missing): a claim that requires it cannot be judged on this run.
    """
    out = {}
    for q in load_preconditions() if preconditions is None else preconditions:
        path = dirs.folder(q["folder"]) / q["file"]
        try:
            value = json.loads(path.read_text()).get(q["key"])
        except (OSError, ValueError):
            value = None
        thr, on_fail = float(q["threshold"]), q.get("on_fail", "inconclusive")
        if not isinstance(value, int | float) or value != value:
            out[q["name"]] = {"passed": False, "value": None, "comparison": q["comparison"], "threshold": thr,
                              "on_fail": "inconclusive",  # not checked is not a verdict on the design
                              "reason": f"{path} has no {q['key']!r}: the precondition could not be checked"}
            continue
        passed = value >= thr if q["comparison"] == ">=" else value <= thr
        out[q["name"]] = {"passed": bool(passed), "value": float(value), "comparison": q["comparison"],
                          "threshold": thr, "on_fail": on_fail,
                          "reason": f"{q['folder']}/{q['file']} {q['key']} = {value:.4g} "
                                    f"{'meets' if passed else 'misses'} {q['comparison']} {thr:g}"}
    return out


def counted(claims_docs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The claims that count in "x of N reproduced": every role but ``world_check`` (issue #45)."""
    return [c for c in claims_docs if c.get("role", "secondary") != "world_check"]


# --------------------------------------------------------------------------- evaluation


def evaluate_claims(dirs: RunDirs, claims: Sequence[Mapping[str, Any]] | None = None,
                    preconditions: Mapping[str, Mapping[str, Any]] | None = None) -> list[ClaimResult]:
    """Evaluate every claim on the run's files.

    Args:
        dirs: the run's folders (:meth:`RunDirs.under`).
        claims: the claims (default :func:`load_claims`).
        preconditions: :func:`evaluate_preconditions` of this run (default: evaluated here).
    Returns:
        One :class:`ClaimResult` per claim, in file order. A test whose inputs are missing or
        too small is ``inconclusive`` with the reason (never an exception). A claim that requires a
        precondition the run did not pass is not judged: each test ``inconclusive`` (``invalid design`` when
        that precondition is registered ``on_fail: invalid design``), its reason ``precondition failed: ...``
        (its statistic is still computed and shown).
    """
    claims = load_claims() if claims is None else claims
    pre = evaluate_preconditions(dirs) if preconditions is None else preconditions
    kinds = all_kinds()
    out = []
    for c in claims:
        failed = [f"{name} ({pre[name]['reason']})" for name in c.get("requires") or []
                  if not pre.get(name, {}).get("passed")]
        # "invalid design" only when the design's own control is all that failed: a run that also failed another
        # precondition (a cold start that did not learn) is not judged for that more basic reason
        invalid = bool(failed) and all(pre.get(name, {}).get("on_fail") == INVALID for name in c.get("requires") or []
                                       if not pre.get(name, {}).get("passed"))
        tests = []
        for spec in c["tests"]:
            res = TestResult(spec["name"], spec["kind"], spec["statistic"], spec["comparison"], float(spec["threshold"]),
                             note=_note(spec))
            try:
                res = kinds[spec["kind"]](dirs, spec, res)
            except Missing as exc:
                res.verdict, res.reason = "inconclusive", f"not enough data: {exc}"
            if failed:  # what the run would have said stays in the reason
                res.verdict = INVALID if invalid else "inconclusive"
                res.reason = (f"not judged, precondition failed: {'; '.join(failed)}"
                              + (f" (the design's own control failed: {INVALID})" if invalid else "")
                              + (f"; {res.reason}" if res.reason else ""))
            tests.append(res)
        out.append(ClaimResult(c["id"], c["source"], c["claim"], c["paper"], tests, note=_note(c),
                               section=str(c.get("section") or DEFAULT_SECTION), role=str(c.get("role") or "secondary"),
                               requires=tuple(c.get("requires") or ())))
    return out


def _note(spec: Mapping[str, Any]) -> str:
    """A claim's or test's ``note:`` from the claims file, whitespace folded; "" without one."""
    return " ".join(str(spec.get("note") or "").split())


def write_claims(results: Sequence[ClaimResult], path: str | os.PathLike, *, profile: str = "",
                 run: str = "", claims_file: str | os.PathLike | None = None, cfg: Any = None,
                 preconditions: Mapping[str, Any] | None = None, only: Sequence[str] = ()) -> Path:
    """Write ``claims.json``: ``schema_version, profile, run, created_utc, claims_file,
    claims_sha256, study_claims_sha256 {study key: sha256 of its own claims file} (studies with one), environment, repeatable, preconditions {name: evaluate_preconditions row}, counts
    {verdict: n} (world checks left out), world_check_counts {verdict: n}, claims [ClaimResult.to_dict()]``
    (each claim's ``note``: what the claims file notes about it, for the reader of a verdict); returns the path.
    ``preconditions``: default evaluated on the run folder of ``path``. ``only``: the notebooks a partial run
    (``kit reproduce --only``) ran, written as ``only`` (absent for a whole series).

    ``environment`` and ``repeatable`` (:mod:`kit.fingerprint`, issue #41) are the run's as the series
    recorded them in ``pipeline_state.json`` beside ``path``; without that file (a notebook run on its own)
    they are this process's fingerprint and the stamp of ``cfg`` (default: ``profile``'s config without
    overrides; None for an unknown profile, stamped not repeatable). ``environment`` and ``created_utc``
    describe the host and the time, not the result: a comparer of two runs' files strips them.
    """
    src = Path(claims_file) if claims_file is not None else CLAIMS_FILE
    counts = {v: sum(r.verdict == v for r in results if r.role != "world_check") for v in VERDICTS}
    world = {v: sum(r.verdict == v for r in results if r.role == "world_check") for v in VERDICTS}
    if preconditions is None:
        preconditions = evaluate_preconditions(RunDirs.under(Path(path).parent))
    env, stamp = _run_stamp(Path(path).parent, profile, cfg)
    doc = {"schema_version": SCHEMA_VERSION, "profile": profile, "run": run,
           "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "claims_file": str(src), "claims_sha256": hashlib.sha256(src.read_bytes()).hexdigest() if src.exists() else None,
           "study_claims_sha256": {s.key: hashlib.sha256(Path(s.claims_file).read_bytes()).hexdigest()
                                   for s in STUDIES if s.claims_file and Path(s.claims_file).exists()},
           fingerprint.ENVIRONMENT_KEY: env, fingerprint.REPEATABLE_KEY: stamp, "preconditions": dict(preconditions),
           "counts": counts, "world_check_counts": world, "claims": [r.to_dict() for r in results]}
    if only:
        doc = {"only": list(only), **doc}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(jsonio.dumps(doc, indent=2) + "\n")  # NaN as null, like every run file
    return p


def _run_stamp(root: Path, profile: str, cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(environment, repeatable)`` of the run in ``root``: ``pipeline_state.json``'s where the series wrote
    them, else computed here (see :func:`write_claims`)."""
    try:
        stored = read_run_keys(Layout(root=root, profile=profile))
    except ValueError:  # a damaged state file: the report names it; claims are still written
        stored = {}
    if fingerprint.ENVIRONMENT_KEY in stored and fingerprint.REPEATABLE_KEY in stored:
        return stored[fingerprint.ENVIRONMENT_KEY], stored[fingerprint.REPEATABLE_KEY]
    if cfg is None:
        try:
            cfg = load(profile, write=False) if profile in available_profiles() else None
        except ConfigError:
            cfg = None
    return fingerprint.environment_fingerprint(cfg), fingerprint.repeatability(cfg)


def read_claims(path: str | os.PathLike) -> dict[str, Any]:
    """A ``claims.json`` written by :func:`write_claims`, checked against its schema.

    Raises:
        ClaimsError: a missing file, one that is not JSON (named), a missing key (``note`` from schema version 2;
            ``environment`` and ``repeatable`` from 3) or a verdict that is not one of :data:`VERDICTS` (names the claim).
    """
    p = Path(path)
    if not p.exists():
        raise ClaimsError(f"claims file not found: {p} (written by notebook 20)")
    try:
        doc = json.loads(p.read_text())
    except ValueError as exc:  # a truncated or hand-edited file: name it
        raise ClaimsError(f"{p} is not valid JSON ({exc}): rerun notebook 20 for that run") from exc
    if not isinstance(doc, dict):
        raise ClaimsError(f"{p} holds a JSON {type(doc).__name__}, not a claims document")
    top = ("schema_version", "profile", "counts", "claims")
    if doc.get("schema_version", 0) >= 3:
        top += (fingerprint.ENVIRONMENT_KEY, fingerprint.REPEATABLE_KEY)
    for k in top:
        if k not in doc:
            raise ClaimsError(f"{p}: missing key {k!r}")
    need = ("id", "source", "claim", "paper", "verdict", "value", "ci95", "interval", "tests")
    if doc["schema_version"] >= 2:
        need += ("note",)
    for c in doc["claims"]:
        for k in need:
            if k not in c:
                raise ClaimsError(f"{p}: claim {c.get('id', '?')}: missing key {k!r}")
        if c["verdict"] not in VERDICTS:
            raise ClaimsError(f"{p}: claim {c['id']}: verdict {c['verdict']!r} is not one of {VERDICTS}")
        for t in c["tests"]:
            if t.get("verdict") not in VERDICTS:
                raise ClaimsError(f"{p}: claim {c['id']}, test {t.get('name')}: verdict {t.get('verdict')!r}")
    return doc


def claims_table(results: Sequence[ClaimResult] | Mapping[str, Any]):
    """DataFrame, one row per claim: ``claim id, source, statistic, value, 95% interval, interval,
    verdict`` (from results or a read ``claims.json``)."""
    docs = results["claims"] if isinstance(results, Mapping) else [r.to_dict() for r in results]
    rows = []
    for c in docs:
        lo, hi = c["ci95"]
        rows.append({"claim": c["id"], "source": c["source"], "statistic": c["statistic"],
                     "value": c["value"], "ci95": "" if lo is None or hi is None else f"[{lo:.3g}, {hi:.3g}]",
                     "interval": c["interval"], "verdict": c["verdict"]})
    return pd.DataFrame(rows).set_index("claim")
