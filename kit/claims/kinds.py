"""The statistic of each test kind named in ``kit/reference/claims.yaml`` (``kind:``).

Each ``stat_<kind>(dirs, spec, res)`` reads the run's files through ``dirs``, fills ``res`` (value,
95% interval, how the interval was made, n, verdict, reason, detail) and returns it; it raises
:class:`kit.claims.files.Missing` when a file is absent or the data are below the test's minimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kit import studies
from kit.claims.files import Missing, RunDirs, _json, _num, read_jsonl
from kit.claims.results import TestResult
from kit.claims.stats import (
    STEP_BATCHES,
    batch_means_welch,
    bootstrap_mean,
    bootstrap_ratio,
    bootstrap_ratio_diff_paired,
    decide,
    newcombe,
    t_interval,
    window_size,
)
from kit.eval.metrics import pass_at_k_one


class SpecError(ValueError):
    """A test in the claims file names something this kind does not know (e.g. a measure)."""


# --------------------------------------------------------------------------- ablation tests


def _arms(dirs: RunDirs, algorithm: str, folder: str = "ablation") -> dict[int, list[dict[str, Any]]]:
    """``{seed: rows sorted by step}`` of the arms ``<algorithm>_seed<s>`` in the run folder ``folder``
    (``ablation``: notebook 06's; ``retool``: notebook 10's). The ablation's rows must also carry
    the arm's algorithm; another folder's arms are named by their comparison (ReTool's ``ppo`` arm),
    so their rows are taken as they are."""
    base = dirs.folder(folder)
    if not base.is_dir():
        raise Missing(f"{folder} folder {base} not found")
    out = {}
    for d in sorted(base.glob(f"{algorithm}_seed*")):
        tail = d.name[len(algorithm) + len("_seed"):]
        if not tail.isdigit() or not (d / "metrics.jsonl").exists():
            continue
        rows = [r for r in read_jsonl(d / "metrics.jsonl")
                if folder != "ablation" or r.get("algorithm", algorithm) == algorithm]
        out[int(tail)] = sorted(rows, key=lambda r: r.get("step", 0))
    if not out:
        raise Missing(f"no {algorithm}_seed<s>/metrics.jsonl under {base}")
    return out


def _ends(rows: list[dict[str, Any]], key: str) -> tuple[float, float, int, int]:
    """(mean of the first W steps, mean of the last W, steps S, W) of ``key``; NaN skipped."""
    v = np.array([_num(r.get(key)) for r in rows], dtype=float)
    S = len(v)
    W = window_size(S)
    with np.errstate(all="ignore"):
        first = float(np.nanmean(v[:W])) if np.any(~np.isnan(v[:W])) else math.nan
        last = float(np.nanmean(v[-W:])) if np.any(~np.isnan(v[-W:])) else math.nan
    return first, last, S, W


def _check_steps(spec, arms: Mapping[int, list]) -> None:
    short = {s: len(r) for s, r in arms.items() if len(r) < spec.get("min_steps", 0)}
    if short:
        raise Missing(f"arms shorter than the minimum of {spec['min_steps']} steps: {short}")


def _seed_test(res: TestResult, per_seed: Mapping[int, float], spec: Mapping[str, Any]) -> TestResult:
    vals = {s: v for s, v in per_seed.items() if math.isfinite(v)}
    res.detail["per_seed"] = {str(s): v for s, v in per_seed.items()}
    need = int(spec.get("min_seeds", 2))
    if len(vals) < max(2, need):
        res.n = len(vals)
        res.value = float(np.mean(list(vals.values()))) if vals else math.nan
        res.reason = f"{len(vals)} seed(s) with a defined value; the test needs at least {max(2, need)}"
        return res
    res.value, lo, hi = t_interval(list(vals.values()))
    res.ci95, res.n, res.interval = (lo, hi), len(vals), f"t over {len(vals)} seeds"
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


def _folder(spec: Mapping[str, Any], side: str = "") -> str:
    """The run folder of a test's arms: ``<side>_folder``, else ``folder``, else ``ablation``."""
    return str(spec.get(f"{side}_folder") or spec.get("folder") or "ablation")


def _end_change(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult, sign: float) -> TestResult:
    arms = _arms(dirs, spec["algorithm"], _folder(spec))
    _check_steps(spec, arms)
    per_seed = {}
    for s, rows in arms.items():
        first, last, S, W = _ends(rows, spec["key"])
        per_seed[s] = sign * (first - last)
        res.detail.setdefault("windows", {})[str(s)] = {"steps": S, "W": W, "first": first, "last": last}
    return _seed_test(res, per_seed, spec)


def stat_ablation_drop(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """First-W minus last-W mean of ``key`` for each seed of one algorithm; t over seeds
    (``folder``: the arms' run folder, default ``ablation``)."""
    return _end_change(dirs, spec, res, 1.0)


def stat_ablation_rise(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Last-W minus first-W mean of ``key`` for each seed of one arm; t over seeds (``folder`` as
    :func:`stat_ablation_drop`)."""
    return _end_change(dirs, spec, res, -1.0)


def stat_ablation_last(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Last-W mean of ``key`` for each seed of one arm, against a fixed level; t over seeds
    (``folder`` as :func:`stat_ablation_drop`)."""
    arms = _arms(dirs, spec["algorithm"], _folder(spec))
    _check_steps(spec, arms)
    per_seed = {}
    for s, rows in arms.items():
        _, last, S, W = _ends(rows, spec["key"])
        per_seed[s] = last
        res.detail.setdefault("windows", {})[str(s)] = {"steps": S, "W": W, "last": last}
    return _seed_test(res, per_seed, spec)


def stat_ablation_paired_last(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Per seed: last-W mean of ``key`` for ``minuend`` minus that for ``subtrahend``; t over seeds.

    ``exceeds_seed_spread``: reproduced also needs the mean difference to exceed the larger
    sample sd over seeds of either arm's last-W mean. ``minuend_folder`` / ``subtrahend_folder``
    (else ``folder``, else ``ablation``): the run folder of each side's arms, so ReTool's PPO arms
    (notebook 10) pair with the ablation's GRPO-RoC arms of the same seeds; seeds both sides have."""
    a = _arms(dirs, spec["minuend"], _folder(spec, "minuend"))
    b = _arms(dirs, spec["subtrahend"], _folder(spec, "subtrahend"))
    _check_steps(spec, a)
    _check_steps(spec, b)
    seeds = sorted(set(a) & set(b))
    lasts = {alg: {s: _ends(arms[s], spec["key"])[1] for s in seeds}
             for alg, arms in ((spec["minuend"], a), (spec["subtrahend"], b))}
    res.detail["last_window_mean"] = {alg: {str(s): v for s, v in d.items()} for alg, d in lasts.items()}
    per_seed = {s: lasts[spec["minuend"]][s] - lasts[spec["subtrahend"]][s] for s in seeds}
    res = _seed_test(res, per_seed, spec)
    if spec.get("exceeds_seed_spread") and res.verdict == "reproduced":
        sds = [float(np.nanstd(list(d.values()), ddof=1)) for d in lasts.values()]
        spread = max(sds)
        res.detail["seed_spread"] = spread
        if not res.value > spread:
            res.verdict = "inconclusive"
            res.reason = f"the difference {res.value:.4g} is not larger than the seed spread (sd {spread:.4g})"
        else:
            res.reason += f"; and larger than the seed spread (sd {spread:.4g})"
    return res


# --------------------------------------------------------------------------- stage tests


def _heldout(dirs: RunDirs, name: str, spec: Mapping[str, Any]) -> tuple[float, int]:
    s = _json(dirs.folder(name) / "summary.json")
    p, n = _num(s.get(spec["key"])), _num(s.get(spec["n_key"]))
    if not (math.isfinite(p) and math.isfinite(n)):
        raise Missing(f"{dirs.folder(name) / 'summary.json'} lacks {spec['key']!r} or {spec['n_key']!r}")
    if n < spec.get("min_n", 1):
        raise Missing(f"{name}: {int(n)} held-out problems, the test needs at least {spec['min_n']}")
    return p, int(n)


def _heldout_outcomes(dirs: RunDirs, name: str) -> tuple[list[str], list[int]] | None:
    """``(problem ids, 0/1 per problem)`` of a summary's sampled held-out evaluation
    (``heldout_problems`` / ``heldout_sampled_correct``, written since issue #42), None without them."""
    s = _json(dirs.folder(name) / "summary.json")
    ids, correct = s.get("heldout_problems"), s.get("heldout_sampled_correct")
    if not isinstance(ids, list) or not isinstance(correct, list) or len(ids) != len(correct):
        return None
    return [str(i) for i in ids], [int(c) for c in correct]


def _heldout_diff(dirs: RunDirs, before: str, after: str, spec: Mapping[str, Any]) -> tuple[float, float, float, str]:
    """``after - before`` held-out accuracy with its interval: a paired bootstrap over the problems when both
    summaries list the same problems' outcomes (the held-out set is the same at every stage), else
    Newcombe's interval for two independent proportions (a run written before issue #42)."""
    p0, n0 = _heldout(dirs, before, spec)
    p1, n1 = _heldout(dirs, after, spec)
    a, b = _heldout_outcomes(dirs, before), _heldout_outcomes(dirs, after)
    if a is not None and b is not None and a[0] == b[0]:
        d, lo, hi = bootstrap_mean(np.asarray(b[1], dtype=float) - np.asarray(a[1], dtype=float))
        return d, lo, hi, f"paired bootstrap over {len(a[0])} held-out problems (one seed)"
    d, lo, hi = newcombe(p0, n0, p1, n1)
    return d, lo, hi, f"Newcombe, {n0} and {n1} held-out problems, unpaired (no per-problem outcomes; one seed)"


def stat_heldout_rise(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``after`` minus ``before`` of a held-out proportion (summary.json); paired bootstrap over problems
    (Newcombe for runs without per-problem outcomes)."""
    p0, n0 = _heldout(dirs, spec["before"], spec)
    p1, n1 = _heldout(dirs, spec["after"], spec)
    res.value, lo, hi, res.interval = _heldout_diff(dirs, spec["before"], spec["after"], spec)
    res.ci95, res.n = (lo, hi), min(n0, n1)
    res.detail = {spec["before"]: p0, spec["after"]: p1}
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


def stat_heldout_no_drop(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """No consecutive pair of ``chain`` shows a drop whose interval lies entirely below 0 (each pair's
    interval as :func:`stat_heldout_rise`'s)."""
    vals = {name: _heldout(dirs, name, spec) for name in spec["chain"]}
    pairs = []
    for a, b in zip(spec["chain"], spec["chain"][1:], strict=False):
        d, lo, hi, how = _heldout_diff(dirs, a, b, spec)
        pairs.append((d, lo, hi, f"{a}->{b}", how))
    worst = min(pairs, key=lambda p: p[0])
    res.value, res.ci95, res.n = worst[0], (worst[1], worst[2]), min(n for _, n in vals.values())
    res.interval = f"{worst[4]} per pair ({worst[3]} shown)"
    res.detail = {"values": {k: v[0] for k, v in vals.items()},
                  "pairs": {p[3]: {"diff": p[0], "ci95": [p[1], p[2]]} for p in pairs}}
    drops = [p[3] for p in pairs if p[2] <= 0]
    if drops:
        res.verdict, res.reason = "not reproduced", f"accuracy drops with the interval below 0 at {', '.join(drops)}"
    else:
        res.verdict, res.reason = "reproduced", "no stage shows a drop whose interval lies below 0"
    return res


def stat_heldout_non_inferior(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Paired non-inferiority of each consecutive pair of ``chain`` (issue #45): the later stage's held-out
    outcomes minus the earlier's, per problem, with a paired bootstrap over the problems. The statistic is the
    smallest pair difference with its interval; reproduced when every pair's interval lies above the
    threshold (minus the margin), not reproduced when some pair's lies at or below it.

    Raises:
        Missing: a summary lacks the held-out proportion, has fewer than ``min_n`` problems, or has no
            per-problem outcomes (``heldout_sampled_correct``, written since issue #42), or two summaries list
            different problems.
    """
    thr = float(spec["threshold"])
    outcomes = {}
    for name in spec["chain"]:
        _heldout(dirs, name, spec)
        got = _heldout_outcomes(dirs, name)
        if got is None:
            raise Missing(f"{name}/summary.json has no per-problem held-out outcomes (written since issue #42)")
        outcomes[name] = got
    pairs = []
    for a, b in zip(spec["chain"], spec["chain"][1:], strict=False):
        if outcomes[a][0] != outcomes[b][0]:
            raise Missing(f"{a} and {b} were scored on different held-out problems")
        d, lo, hi = bootstrap_mean(np.asarray(outcomes[b][1], dtype=float) - np.asarray(outcomes[a][1], dtype=float))
        pairs.append((d, lo, hi, f"{a}->{b}"))
    worst = min(pairs, key=lambda p: p[0])
    res.value, res.ci95, res.n = worst[0], (worst[1], worst[2]), len(outcomes[spec["chain"][0]][0])
    res.interval = f"paired bootstrap over {res.n} held-out problems per pair ({worst[3]} shown, one seed)"
    res.detail = {"pairs": {p[3]: {"diff": p[0], "ci95": [p[1], p[2]]} for p in pairs}}
    below = [p[3] for p in pairs if p[2] <= thr]
    unclear = [p[3] for p in pairs if not p[1] > thr]
    if below:
        res.verdict, res.reason = "not reproduced", f"{', '.join(below)}: the interval lies at or below {thr:g}"
    elif unclear:
        res.verdict, res.reason = "inconclusive", f"{', '.join(unclear)}: the interval contains {thr:g}"
    else:
        res.verdict, res.reason = "reproduced", f"every pair's interval lies above {thr:g}"
    return res


def stat_stage_length_change(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Mean of ``key`` over the steps of stage ``after`` minus over ``before``; Welch over batch means
    (:func:`kit.claims.stats.batch_means_welch`: consecutive steps are autocorrelated)."""
    def stage_rows(name):
        rows = [r for r in read_jsonl(dirs.folder(name) / "metrics.jsonl") if r.get("stage", name) == name]
        if len(rows) < spec.get("min_steps", 1):
            raise Missing(f"{name}: {len(rows)} steps, the test needs at least {spec['min_steps']}")
        return np.array([_num(r.get(spec["key"])) for r in rows], dtype=float)

    if spec.get("requires_budget_increase"):
        budgets = {}
        for name in (spec["before"], spec["after"]):
            cfg = _json(dirs.folder(name) / "config.json")
            tables = cfg.get("stages") or []  # config.json: a list of [[stages]] tables (a dict before)
            table = next((t for t in tables if t.get("name") == name), {}) if isinstance(tables, list) else tables.get(name)
            budgets[name] = _num((table or {}).get("max_response_tokens"))
        res.detail["budgets"] = budgets
        if not budgets[spec["after"]] > budgets[spec["before"]]:
            raise Missing(f"the response budget does not grow from {spec['before']} to {spec['after']}: {budgets}")
    a, b = stage_rows(spec["before"]), stage_rows(spec["after"])
    res.value, lo, hi = batch_means_welch(a, b)
    res.ci95, res.n = (lo, hi), int(min(len(a), len(b)))
    res.interval = f"Welch over {STEP_BATCHES} batch means of {len(a)} and {len(b)} steps (one seed)"
    res.detail.update({spec["before"]: float(np.nanmean(a)), spec["after"]: float(np.nanmean(b))})
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


# --------------------------------------------------------------------------- pass@k and cold start


def label_key(label: str) -> str:
    """File-name key of a pass@k policy label, as :func:`kit.chain.passk_boundary` writes it."""
    return "_".join("".join(c if c.isalnum() else " " for c in label).lower().split())


def _passk_results(dirs: RunDirs, folder: str = "passk") -> tuple[list[dict], list[dict], str]:
    """(per_problem of the first label, per_problem of the last label, source) of ``eval/<folder>/``
    (``passk``: the held-out curves; ``passk_hard``: the hard subset, issue #45)."""
    base = dirs.eval / folder
    meta = _json(base / "passk_curves.json")
    labels = meta.get("labels") or []
    if len(labels) < 2:
        raise Missing(f"{base / 'passk_curves.json'} names {len(labels)} policies; the test needs two")
    out = []
    for label in (labels[0], labels[-1]):
        d = _json(base / f"{meta['source']}_{label_key(label)}.json")
        out.append(d.get("per_problem") or [])
    return out[0], out[-1], f"{labels[0]} vs {labels[-1]}"


def _check_problems(spec, per_problem: list[dict]) -> int:
    n = len(per_problem[0]["correct"]) if per_problem else 0
    if len(per_problem) < spec.get("min_problems", 1):
        raise Missing(f"{len(per_problem)} problems, the test needs at least {spec['min_problems']}")
    if n < spec.get("min_n", 1):
        raise Missing(f"{n} samples per problem, the test needs at least {spec['min_n']}")
    return n


def _pass_at(correct: Sequence[int], k: int) -> float:
    return pass_at_k_one(len(correct), int(sum(correct)), k)


def _paired_problems(spec, res: TestResult, dirs: RunDirs) -> tuple[list, list, int]:
    sft, rl, what = _passk_results(dirs, spec.get("folder", "passk"))
    by_id = {p["id"]: p for p in sft}
    pairs = [(by_id[p["id"]], p) for p in rl if p["id"] in by_id]
    n = _check_problems(spec, [q for _, q in pairs])
    res.detail["policies"] = what
    return [a for a, _ in pairs], [b for _, b in pairs], n


def stat_passk_gap(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Per problem pass@k (unbiased) of RL minus SFT, mean; bootstrap over problems. ``k``: a number, or
    ``"n"`` for the samples per problem (pass@n: solved at least once, the coverage)."""
    sft, rl, n = _paired_problems(spec, res, dirs)
    k = n if str(spec["k"]) == "n" else int(spec["k"])
    gaps = [_pass_at(b["correct"], k) - _pass_at(a["correct"], k) for a, b in zip(sft, rl, strict=True)]
    return _bootstrap_test(res, spec, gaps, f"bootstrap over {len(gaps)} problems (n = {n}, one seed)")


def stat_passk_gap_closing(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """Per problem (gap at k=1) - (gap at k=n); bootstrap over problems."""
    sft, rl, n = _paired_problems(spec, res, dirs)
    diffs = []
    for a, b in zip(sft, rl, strict=True):
        g1 = _pass_at(b["correct"], 1) - _pass_at(a["correct"], 1)
        gn = _pass_at(b["correct"], n) - _pass_at(a["correct"], n)
        diffs.append(g1 - gn)
    return _bootstrap_test(res, spec, diffs, f"bootstrap over {len(diffs)} problems (n = {n}, one seed)")


def _bootstrap_test(res: TestResult, spec, values: Sequence[float], how: str) -> TestResult:
    res.value, lo, hi = bootstrap_mean(values)
    res.ci95, res.n, res.interval = (lo, hi), len(values), how
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


def stat_sft_samples(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """A share over the SFT policy's pass@k samples (first label); bootstrap over problems."""
    sft, _, what = _passk_results(dirs)
    _check_problems(spec, sft)
    res.detail["policy"] = what.split(" vs ")[0]
    num, den = [], []
    for p in sft:
        calls = np.asarray(p.get("tool_calls") or [0] * len(p["correct"]), dtype=float)
        errs = np.asarray(p.get("tool_errors") or [0] * len(p["correct"]), dtype=float)
        correct = np.asarray(p["correct"], dtype=float)
        measure = spec["measure"]
        if measure == "answered":
            num.append(sum(a is not None for a in p.get("answers") or []))
            den.append(len(correct))
        elif measure == "tool_use":
            num.append(float((calls > 0).sum()))
            den.append(len(correct))
        elif measure == "call_success":
            num.append(float(calls.sum() - errs.sum()))
            den.append(float(calls.sum()))
        elif measure == "accuracy_without_tool":
            num.append(float(correct[calls == 0].sum()))
            den.append(float((calls == 0).sum()))
        else:
            raise SpecError(f"sft_samples: unknown measure {measure!r}")
    need = spec.get("min_samples", 1)
    if sum(den) < need:
        raise Missing(f"{int(sum(den))} samples (or calls) count for {spec['measure']}; the test needs at least {need}")
    res.value, lo, hi = bootstrap_ratio(num, den)
    res.ci95, res.n = (lo, hi), len(sft)
    res.interval = f"bootstrap over {len(sft)} problems ({int(sum(den))} units, one seed)"
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


# --------------------------------------------------------------------------- entropy tests


def _entropy_rows(dirs: RunDirs, checkpoint: str, spec) -> list[dict]:
    rows = [r for r in read_jsonl(dirs.analysis / "entropy_tokens.jsonl") if r.get("checkpoint") == checkpoint]
    if len(rows) < spec.get("min_trajectories", 1):
        raise Missing(f"{checkpoint}: {len(rows)} trajectories, the test needs at least {spec['min_trajectories']}")
    high = sum(int(r.get("high", 0)) for r in rows)
    if high < spec.get("min_high_tokens", 1):
        raise Missing(f"{checkpoint}: {high} high-entropy tokens, the test needs at least {spec['min_high_tokens']}")
    den = spec.get("denominator", "high")
    if den != "high":
        if any(den not in r for r in rows):
            raise Missing(f"{checkpoint}: entropy_tokens.jsonl rows have no {den!r} (written since issue #45)")
        total = sum(int(r[den]) for r in rows)
        if total < spec.get(f"min_{den}", 1):
            raise Missing(f"{checkpoint}: {total} {den}, the test needs at least {spec[f'min_{den}']}")
    return rows


def stat_entropy_share(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``label`` tokens / high-entropy tokens of one checkpoint; bootstrap over trajectories."""
    rows = _entropy_rows(dirs, spec["checkpoint"], spec)
    res.value, lo, hi = bootstrap_ratio([r.get(spec["label"], 0) for r in rows], [r.get("high", 0) for r in rows])
    res.ci95, res.n = (lo, hi), len(rows)
    res.interval = f"bootstrap over {len(rows)} trajectories (one seed)"
    res.detail = {"count": int(sum(r.get(spec["label"], 0) for r in rows)), "high": int(sum(r.get("high", 0) for r in rows))}
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


def stat_entropy_share_diff(dirs: RunDirs, spec: Mapping[str, Any], res: TestResult) -> TestResult:
    """``label`` share of ``minuend`` minus that of ``subtrahend``; paired bootstrap over problems (each
    checkpoint sampled one trajectory on each of the same held-out problems). The share is over the
    high-entropy tokens, or over ``denominator`` (a per-row count, e.g. ``window_tokens``: the model
    tokens after tool responses, issue #45)."""
    a = _entropy_rows(dirs, spec["minuend"], spec)
    b = _entropy_rows(dirs, spec["subtrahend"], spec)
    lab, den = spec["label"], spec.get("denominator", "high")
    by_a, by_b = {r.get("problem"): r for r in a}, {r.get("problem"): r for r in b}
    common = sorted(set(by_a) & set(by_b), key=str)
    if len(common) < spec.get("min_trajectories", 1):
        raise Missing(f"{len(common)} problems sampled by both {spec['minuend']} and {spec['subtrahend']}, the test "
                      f"needs at least {spec.get('min_trajectories', 1)}")
    res.value, lo, hi = bootstrap_ratio_diff_paired([by_a[p].get(lab, 0) for p in common],
                                                    [by_a[p].get(den, 0) for p in common],
                                                    [by_b[p].get(lab, 0) for p in common],
                                                    [by_b[p].get(den, 0) for p in common])
    res.ci95, res.n = (lo, hi), len(common)
    res.interval = f"paired bootstrap over {len(common)} problems (one seed)"
    res.verdict, res.reason = decide(lo, hi, spec["comparison"], float(spec["threshold"]))
    return res


KINDS: dict[str, Callable[[RunDirs, Mapping[str, Any], TestResult], TestResult]] = {
    "ablation_drop": stat_ablation_drop,
    "ablation_paired_last": stat_ablation_paired_last,
    "ablation_rise": stat_ablation_rise,
    "ablation_last": stat_ablation_last,
    "heldout_rise": stat_heldout_rise,
    "heldout_no_drop": stat_heldout_no_drop,
    "heldout_non_inferior": stat_heldout_non_inferior,
    "stage_length_change": stat_stage_length_change,
    "passk_gap": stat_passk_gap,
    "passk_gap_closing": stat_passk_gap_closing,
    "sft_samples": stat_sft_samples,
    "entropy_share": stat_entropy_share,
    "entropy_share_diff": stat_entropy_share_diff,
}


def all_kinds() -> dict[str, Callable[[RunDirs, Mapping[str, Any], TestResult], TestResult]]:
    """:data:`KINDS` and every registered study's own kinds (:attr:`kit.studies.Study.claim_kinds`, e.g. Agent-R's
    ``agent_r_diff``), resolved now (a study's kinds module is imported only when claims are judged).

    Raises:
        ValueError: a study's kinds are not a dict, one reuses a kind name already taken (names both), or its
            ``paired_kinds`` name a kind it does not define.
        ImportError, AttributeError: a study's ``claim_kinds`` names no module or attribute.
    """
    out = dict(KINDS)
    owner = dict.fromkeys(KINDS, "kit.claims.kinds")
    for study in studies.STUDIES:
        if not study.claim_kinds:
            continue
        own = studies.resolve(study.claim_kinds)
        if not isinstance(own, Mapping):
            raise ValueError(f"study {study.key!r}: claim_kinds {study.claim_kinds!r} is {type(own).__name__}, not a dict")
        for name, fn in own.items():
            if name in out:
                raise ValueError(f"study {study.key!r}: claim kind {name!r} is already {owner[name]}'s")
            out[name], owner[name] = fn, study.claim_kinds
    for study in studies.STUDIES:
        stray = sorted(k for k in study.paired_kinds if owner.get(k) != study.claim_kinds or not study.claim_kinds)
        if stray:
            raise ValueError(f"study {study.key!r}: paired_kinds {stray} are not kinds of its claim_kinds "
                             f"{study.claim_kinds or '(none)'}")
    return out
