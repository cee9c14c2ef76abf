"""Curation of the RL problem pools (rStar2-Agent §4.2) with a counted funnel.

The report keeps integer-answer problems only (so a rule verifier grades them reliably), drops
answers too large for the verifier (it cites 6.5e27330467), problems that need files the model
cannot see, duplicates and anything overlapping the evaluation benchmarks, then a consistency
filter keeps a problem when at least 2 of 16 model answers match its label; 17K DAPO + 93K AoPS
+ 937 Project Euler became 42K. :func:`curate` applies the same filters in this order and counts
every removal per pool:

1. ``missing_answer``      the row has no answer.
2. ``decontaminated``      shares an n-gram with a benchmark (:mod:`kit.data.decontam`), or is an
                           AIME-history row from a benchmark contest year (2024/2025 when
                           aime24/aime25 are benchmarks). Checked early, so every benchmark copy
                           is counted here whatever else is wrong with it.
3. ``needs_file``          the statement links a data file the pool does not hold (Project Euler).
4. ``answer_unconfirmed``  Project Euler answers whose md5 does not match the statement's hash.
5. ``non_integer``         :func:`parse_integer_answer` rejects the answer (fractions, LaTeX
                           expressions, units, decimals with a fractional part).
6. ``too_large``           more than ``max_answer_digits`` digits (also 1.9e31-style answers).
7. ``duplicate``           the same normalised problem text seen earlier (first kept, pools in the
                           order given).

``in - sum(removed) == out`` holds for every pool; :func:`funnel_table` renders it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from kit.data.decontam import NgramIndex, benchmark_index, normalize_tokens
from kit.data.pools import Problem, load_pools
from kit.reward import extract_final_answer
from kit.rollout import rollout_batch

FILTERS = ("missing_answer", "decontaminated", "needs_file", "answer_unconfirmed", "non_integer",
           "too_large", "duplicate")
#: Contest year of benchmarks that have an AIME-history counterpart (report §5 benchmarks).
BENCHMARK_YEARS = {"aime24": 2024, "aime25": 2025}

_WRAPPERS = [(r"^\$+(.*?)\$+$", r"\1"), (r"^\\\((.*)\\\)$", r"\1"), (r"^\\\[(.*)\\\]$", r"\1"),
             (r"^\\boxed\{(.*)\}$", r"\1"), (r"^\\text\{(.*)\}$", r"\1")]
_INT = re.compile(r"^[+-]?\d+$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}((,|\\,|\{,\}|\s)\d{3})+$")
_DEC_ZERO = re.compile(r"^([+-]?\d+)\.0+$")
_SCI = re.compile(r"^[+-]?\d+(\.\d+)?[eE][+-]?\d+$")


class AnswerTooLarge(ValueError):
    """An integer answer with more digits than the verifier limit."""


def parse_integer_answer(text: str, max_digits: int = 18) -> int | None:
    """Parse a reference answer as an integer, or None if it is not one.

    Accepted: ``"42"``, ``"+5"``, ``"-3"`` (also with the Unicode minus U+2212), ``"05"`` (leading zeros), ``"1,000"``, ``"1\\,000"``,
    ``"1{,}000"``, ``"1 000"`` (thousands separators in groups of 3), ``"$42$"``,
    ``"\\boxed{42}"``, ``"\\(42\\)"``, ``"104924.0"`` (a decimal with only zeros after the point)
    and scientific notation whose value is an integer (``"1e3"``).
    Rejected (None): fractions (``"3/4"``, ``"\\frac{1}{2}"``), expressions (``"2^{10}"``,
    ``"\\sqrt{2}"``), units or words (``"336^\\circ"``, ``"12 cm"``), decimals (``"0.5"``),
    comma lists (``"1,13717420,8"``), empty strings.

    Args:
        text: the answer string as the source file gives it.
        max_digits: ``DataConfig.max_answer_digits``; longer integers raise.
    Returns:
        The integer value, or None when the answer is not an integer.
    Raises:
        AnswerTooLarge: the answer is an integer (or a scientific-notation number) with more
            than ``max_digits`` digits, e.g. ``"6.5e27330467"`` (report §4.2).
    """
    s = text.strip().replace("\u2212", "-")  # U+2212 MINUS SIGN, as in "−5"
    for pat, rep in _WRAPPERS:
        s = re.sub(pat, rep, s, flags=re.S).strip()
    if _SCI.match(s):
        mantissa, exp = re.split(r"[eE]", s)
        if int(exp) > max_digits:  # never materialise 10**27330467
            raise AnswerTooLarge(f"answer {text!r} has about {int(exp) + 1} digits (> {max_digits})")
        try:
            value = Decimal(mantissa).scaleb(int(exp))
        except InvalidOperation:
            return None
        if value != value.to_integral_value():
            return None
        s = str(int(value))
    if _THOUSANDS.match(s):
        s = re.sub(r"\\,|\{,\}|,|\s", "", s)
    m = _DEC_ZERO.match(s)
    if m:
        s = m.group(1)
    if not _INT.match(s):
        return None
    digits = len(s.lstrip("+-").lstrip("0") or "0")
    if digits > max_digits:
        raise AnswerTooLarge(f"answer {text!r} has {digits} digits (> {max_digits})")
    return int(s)


def problem_key(text: str) -> str:
    """Duplicate key: normalised tokens joined by one space (see :mod:`kit.data.decontam`)."""
    return " ".join(normalize_tokens(text))


@dataclass
class CurationResult:
    """Output of :func:`curate`.

    Attributes:
        problems: kept problems; ``answer`` replaced by the canonical integer string and the file's
            string kept in ``meta["raw_answer"]``.
        counts: ``{pool: {"in": n, <filter>: removed, ..., "out": n}}``.
        removed: ``[(uid, filter, detail)]`` for every dropped row (detail names the benchmark
            item and shared n-gram for decontamination, the duplicate's first uid and whether
            the two labels differ, ...).
    """

    problems: list[Problem]
    counts: dict[str, dict[str, int]]
    removed: list[tuple[str, str, str]] = field(default_factory=list)


def curate(pools: Mapping[str, Sequence[Problem]], *, max_answer_digits: int = 18,
           index: NgramIndex | None = None, benchmark_years: Sequence[int] = ()) -> CurationResult:
    """Apply the §4.2 filters in the order of :data:`FILTERS`, counting removals per pool.

    Each row is counted under the first filter it fails (so the columns add up).

    Args:
        pools: ``{pool name: problems}`` from :func:`kit.data.pools.load_pools`; order decides
            which copy of a duplicate is kept.
        max_answer_digits: ``DataConfig.max_answer_digits``.
        index: benchmark n-grams (:func:`kit.data.decontam.benchmark_index`); None skips the
            n-gram test.
        benchmark_years: AIME-history rows (``meta["year"]``) from these years are removed as
            benchmark contests (use :func:`benchmark_years_for`).
    Returns:
        A :class:`CurationResult`; ``counts[p]["in"] - sum(removed) == counts[p]["out"]``.
    """
    kept: list[Problem] = []
    counts: dict[str, dict[str, int]] = {}
    removed: list[tuple[str, str, str]] = []
    seen: dict[str, tuple[str, int]] = {}
    years = set(benchmark_years)
    for pool, problems in pools.items():
        c = counts.setdefault(pool, {"in": 0, **{f: 0 for f in FILTERS}, "out": 0})
        for p in problems:
            c["in"] += 1
            reason, detail, value = _first_failure(p, max_answer_digits, index, years, seen)
            if reason:
                c[reason] += 1
                removed.append((p.uid, reason, detail))
                continue
            seen[problem_key(p.problem)] = (p.uid, value)
            c["out"] += 1
            kept.append(Problem(p.source, p.id, p.problem, str(value), {**p.meta, "raw_answer": p.answer}))
    return CurationResult(kept, counts, removed)


def _first_failure(p: Problem, max_digits: int, index: NgramIndex | None, years: set[int],
                   seen: dict[str, tuple[str, int]]) -> tuple[str, str, int | None]:
    if not p.answer.strip():
        return "missing_answer", "", None
    if index is not None:
        hit = index.match(p.problem)
        if hit:
            return "decontaminated", f"{hit.benchmark}:{hit.item_id} '{hit.ngram}'", None
    if p.meta.get("year") in years:
        return "decontaminated", f"benchmark contest year {p.meta['year']}", None
    if p.meta.get("needs_file"):
        return "needs_file", "", None
    if p.meta.get("md5_ok") is False:
        return "answer_unconfirmed", "md5 unknown" if not p.meta.get("md5_known", True) else "md5 mismatch", None
    try:
        value = parse_integer_answer(p.answer, max_digits)
    except AnswerTooLarge as exc:
        return "too_large", str(exc), None
    if value is None:
        return "non_integer", p.answer[:80], None
    key = problem_key(p.problem)
    if key in seen:
        first_uid, first_value = seen[key]
        note = "" if first_value == value else f" (label differs: {first_value} kept, {value} dropped)"
        return "duplicate", first_uid + note, None
    return "", "", value


def benchmark_years_for(benchmarks: Sequence[str]) -> tuple[int, ...]:
    """Contest years whose AIME-history rows are benchmark problems (aime24 -> 2024, ...)."""
    return tuple(sorted({BENCHMARK_YEARS[b] for b in benchmarks if b in BENCHMARK_YEARS}))


def curate_from_config(data_cfg: Any, max_df: int = 10) -> CurationResult:
    """Load ``data_cfg.train_pools`` and curate them with the config's limits and benchmarks.

    Args:
        data_cfg: a :class:`kit.config.DataConfig`.
        max_df: boilerplate threshold of :meth:`kit.data.decontam.NgramIndex.drop_common`
            (0 = literal any-shared-n-gram rule).
    """
    pools = load_pools(data_cfg.train_pools, data_cfg.data_dir or None)
    index = benchmark_index(data_cfg.decontam_benchmarks, data_cfg.decontam_ngram, data_cfg.data_dir or None)
    index.drop_common((p.problem for ps in pools.values() for p in ps), max_df)
    return curate(pools, max_answer_digits=data_cfg.max_answer_digits, index=index,
                  benchmark_years=benchmark_years_for(data_cfg.decontam_benchmarks))


def funnel_table(counts: Mapping[str, Mapping[str, int]]):
    """The funnel as a pandas DataFrame: one row per pool plus ``total``; columns ``in``, one
    per filter (rows removed), ``out``.

    Raises:
        ValueError: if a pool's counts do not add up (in - removed != out).
    """
    rows = {}
    for pool, c in counts.items():
        if c["in"] - sum(c[f] for f in FILTERS) != c["out"]:
            raise ValueError(f"funnel counts of pool {pool!r} do not add up: {dict(c)}")
        rows[pool] = {k: c[k] for k in ("in", *FILTERS, "out")}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.loc["total"] = df.sum()
    return df


# ----------------------------------------------------------------- consistency filter


def answers_match(label: str, answer: str | None, max_digits: int = 18) -> bool:
    """Integer equality of a model answer and the label (None or a non-integer never matches)."""
    if answer is None:
        return False
    try:
        a, b = parse_integer_answer(answer, max_digits), parse_integer_answer(label, max_digits)
    except AnswerTooLarge:
        return False
    return a is not None and a == b


def consistency_filter(problems: Sequence[Problem], sampled_answers: Mapping[str, Sequence[str | None]],
                       min_matches: int = 2, match: Callable[[str, str | None], bool] = answers_match,
                       ) -> tuple[list[Problem], dict[str, int]]:
    """Keep a problem when at least ``min_matches`` sampled answers match its label (report §4.2:
    2 of 16), a guard against wrong labels.

    Args:
        problems: curated problems.
        sampled_answers: ``{uid: [extracted answer or None, ...]}``, n answers per problem from any
            backend (``DataConfig.consistency_samples`` = 16).
        min_matches: ``DataConfig.consistency_min_matches``.
        match: ``match(label, answer) -> bool``; default integer equality; pass a wrapper of
            ``kit.reward.verify`` for LaTeX answers.
    Returns:
        ``(kept, {"in", "no_samples", "inconsistent", "out"})``.
    Raises:
        ValueError: ``min_matches < 1``.
    """
    if min_matches < 1:
        raise ValueError(f"min_matches must be >= 1, got {min_matches}")
    kept, stats = [], {"in": len(problems), "no_samples": 0, "inconsistent": 0, "out": 0}
    for p in problems:
        answers = sampled_answers.get(p.uid)
        if not answers:
            stats["no_samples"] += 1
            continue
        if sum(match(p.answer, a) for a in answers) >= min_matches:
            kept.append(p)
        else:
            stats["inconsistent"] += 1
    stats["out"] = len(kept)
    return kept, stats


async def sample_answers(backend: Any, problems: Sequence[Problem], *, tokenizer: Any, executor: Any,
                         n: int = 16, temperature: float = 1.0, top_p: float = 1.0, max_tokens: int = 8192,
                         max_turns: int = 10, rollout_cfg: Any = None, max_concurrency: int | None = None,
                         rollout_kwargs: Mapping[str, Any] | None = None) -> dict[str, list[str | None]]:
    """Sample ``n`` agent rollouts per problem with any backend and extract their final answers,
    the input of :func:`consistency_filter` ("run with whatever model the profile has").

    Uses the training agent loop (:func:`kit.rollout.rollout_batch`) and the reward's extractor
    (:func:`kit.reward.extract_final_answer`, strict: no box means None).

    Args:
        backend / tokenizer / executor: as in :func:`kit.rollout.rollout_batch`.
        n: samples per problem (``DataConfig.consistency_samples`` = 16).
        temperature, top_p: sampling (the report does not say; training uses 1.0).
        max_tokens: response budget in tokens; max_turns: model turns.
        rollout_kwargs: more keywords for ``run_trajectory`` (``call_factory``, ``stop_ids``).
    Returns:
        ``{problem uid: [answer or None] * n}``.
    """
    groups = await rollout_batch(backend, tokenizer, [p.problem for p in problems], executor, n, rollout_cfg,
                                 max_concurrency=max_concurrency, max_response_tokens=max_tokens,
                                 max_turns=max_turns, temperature=temperature, top_p=top_p,
                                 **dict(rollout_kwargs or {}))
    return {p.uid: [extract_final_answer(tr.response_text) for tr in row]
            for p, row in zip(problems, groups, strict=True)}


# ------------------------------------------------------------------- stage-3 hard subset

T = TypeVar("T")


def build_hard_subset(problems: Sequence[T], solve_counts: Sequence[int] | Callable[[Sequence[T], int], Sequence[int]],
                      n: int = 8) -> tuple[list[T], dict[str, int]]:
    """Stage-3 difficulty filter (report §4.3): drop the problems the latest policy solves n/n.

    Args:
        problems: any problem objects (training pool items or tiny tasks).
        solve_counts: (N,) correct-rollout counts out of ``n`` aligned with ``problems``, or a
            function ``f(problems, n) -> counts`` that samples n rollouts per problem with the
            latest policy (``StageConfig.hard_filter_samples`` = 8).
        n: rollouts per problem.
    Returns:
        ``(hard problems in input order, {"in", "solved_all", "out", "solved_none"})``;
        ``solved_none`` counts kept problems with 0/n (still kept: the report drops only n/n).
    Raises:
        ValueError: a count outside [0, n] or a length mismatch.
    """
    counts = list(solve_counts(problems, n) if callable(solve_counts) else solve_counts)
    if len(counts) != len(problems):
        raise ValueError(f"{len(counts)} solve counts for {len(problems)} problems")
    bad = [(i, c) for i, c in enumerate(counts) if not 0 <= c <= n]
    if bad:
        raise ValueError(f"solve count outside [0, {n}] at index {bad[0][0]}: {bad[0][1]}")
    hard = [p for p, c in zip(problems, counts, strict=True) if c < n]
    stats = {"in": len(problems), "solved_all": len(problems) - len(hard), "out": len(hard),
             "solved_none": sum(1 for c in counts if c == 0)}
    return hard, stats


# ------------------------------------------------------------------------------ output


def write_curated(run_dir: str | Path, result: CurationResult, name: str = "curated") -> dict[str, Path]:
    """Write ``run_dir/data/<name>.parquet``, ``<name>_funnel.csv`` and ``<name>_removed.jsonl``.

    The parquet has flat columns (``source, id, problem, answer, raw_answer``) and the VERL RL
    schema used by the release (``data_source, prompt [{role, content}], ability,
    reward_model {style, ground_truth}, extra_info {index, source, id}``).
    Returns:
        ``{"parquet": path, "funnel": path, "removed": path}``.
    """
    out = Path(run_dir) / "data"
    out.mkdir(parents=True, exist_ok=True)
    rows = [{
        "source": p.source, "id": p.id, "problem": p.problem, "answer": p.answer,
        "raw_answer": str(p.meta.get("raw_answer", p.answer)),
        "data_source": f"rstar2_kit/{p.source}", "prompt": [{"role": "user", "content": p.problem}],
        "ability": "math", "reward_model": {"style": "rule", "ground_truth": p.answer},
        "extra_info": {"index": i, "source": p.source, "id": p.id},
    } for i, p in enumerate(result.problems)]
    paths = {"parquet": out / f"{name}.parquet", "funnel": out / f"{name}_funnel.csv",
             "removed": out / f"{name}_removed.jsonl"}
    pd.DataFrame(rows).to_parquet(paths["parquet"], index=False)
    funnel_table(result.counts).to_csv(paths["funnel"])
    with paths["removed"].open("w") as fh:
        for uid, reason, detail in result.removed:
            fh.write(json.dumps({"uid": uid, "filter": reason, "detail": detail}) + "\n")
    return paths


def write_hard_subset(run_dir: str | Path, solve_counts: Sequence[int], n: int = 8, source: str = "curated",
                      name: str = "hard") -> tuple[Path, dict[str, int]]:
    """Stage-3 training file: ``run_dir/data/<name>.parquet`` holding the rows of
    ``run_dir/data/<source>.parquet`` that the latest policy did not solve ``n``/``n`` times.

    Args:
        solve_counts: (N,) correct rollouts out of ``n`` per row of the source parquet, in row order
            (e.g. from 8 rollouts of the stage-2 policy per problem).
        n: rollouts per problem (``StageConfig.hard_filter_samples``).
    Returns:
        ``(path, stats)`` with the stats of :func:`build_hard_subset`.
    Raises:
        FileNotFoundError: the source parquet is missing. ValueError: see :func:`build_hard_subset`.
    """
    data = Path(run_dir) / "data"
    src = data / f"{source}.parquet"
    if not src.exists():
        raise FileNotFoundError(f"{src} not found: write it first with write_curated()")
    df = pd.read_parquet(src)
    keep, stats = build_hard_subset(list(range(len(df))), solve_counts, n)
    out = data / f"{name}.parquet"
    df.iloc[keep].reset_index(drop=True).to_parquet(out, index=False)
    return out, stats
