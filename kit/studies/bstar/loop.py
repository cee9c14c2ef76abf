"""B-STaR's loop as pure functions over sampled pools (Zeng et al., ICLR 2025 §4; the authors' code,
hkust-nlp/B-STaR ``determine_hyper.py``): the reward a sample is selected by, the sweep over (temperature,
threshold), the choice of the pair, the selected samples and the pool's exploration and exploitation.

Symbols: ``P`` queries, ``n`` samples per query (``bstar.samples``). A :class:`Pool` is one query's ``n`` samples
at one temperature; the reward of each is its vote share (:func:`vote_shares`); "correct" is the verifier's
grade against the gold answer, read only to score a selection and to report it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kit.analysis.bstar import balance_score_authors, selected_indices


@dataclass(frozen=True)
class Pool:
    """One query's ``n`` samples at one temperature.

    Attributes:
        problem: the task id.
        texts: (n,) response texts (exact text decides "distinct").
        answers: (n,) extracted final answers (None: none).
        correct: (n,) the verifier's grade.
        scores: (n,) the selection reward (:func:`vote_shares` of ``answers``).
        reference: the gold solution's text, joined to the pool by the authors' code (``bstar.reference``).
    """

    problem: str
    texts: tuple[str, ...]
    answers: tuple[str | None, ...]
    correct: tuple[bool, ...]
    scores: tuple[float, ...]
    reference: str | None = None


def vote_shares(answers: Sequence[str | None]) -> list[float]:
    """Per sample, the share of its query's ``n`` samples whose final answer equals its own (self-consistency;
    answers compared as stripped strings, the tiny tasks' answers are integers); 0.0 for a sample without one.

    Example:
        >>> vote_shares(["3", "3", "4", None])
        [0.5, 0.5, 0.25, 0.0]
    """
    keys = [None if a is None else str(a).strip() for a in answers]
    counts = Counter(k for k in keys if k is not None)
    n = len(keys)
    return [0.0 if k is None else counts[k] / n for k in keys]


def make_pool(problem: str, texts: Sequence[str], answers: Sequence[str | None], correct: Sequence[bool],
              reference: str | None = None) -> Pool:
    """A :class:`Pool` with its vote-share scores.

    Raises:
        ValueError: the three sequences differ in length.
    """
    if not len(texts) == len(answers) == len(correct):
        raise ValueError(f"{problem}: {len(texts)} texts, {len(answers)} answers, {len(correct)} grades")
    return Pool(problem, tuple(map(str, texts)), tuple(answers), tuple(map(bool, correct)), tuple(vote_shares(answers)),
                reference)


def balance(pools: Sequence[Pool], threshold: float, n_star: int) -> float:
    """The authors' balance score of ``pools`` at ``threshold`` (:func:`kit.analysis.bstar.balance_score_authors`):
    the mean over queries that select a sample of ``min(c / n_star, 1) * c / s``; NaN when none does."""
    refs = [p.reference for p in pools]
    return balance_score_authors([p.correct for p in pools], [p.texts for p in pools], [p.scores for p in pools],
                                 threshold, n_star=n_star, references=None if all(r is None for r in refs) else refs)


def selection(pools: Sequence[Pool], threshold: float) -> list[tuple[Pool, int]]:
    """The samples trained on: per pool, :func:`kit.analysis.bstar.selected_indices` (vote share above
    ``threshold``, exact-text duplicates dropped); ``(pool, sample index)`` each, pools in order."""
    return [(p, i) for p in pools for i in selected_indices(p.texts, p.scores, threshold)]


def pool_stats(pools: Sequence[Pool], threshold: float, n_star: int) -> dict[str, float]:
    """What a pool shows at one threshold (one row of the sweep and of ``iterations.jsonl``).

    Returns:
        ``balance`` (:func:`balance`), ``selected`` (samples kept per query), ``precision`` (correct share of the
        kept: exploitation), ``accuracy`` (correct share of all samples), ``pass_at_n`` (share of queries with a
        correct sample), ``distinct_correct`` (distinct correct texts per query: exploration); NaN where a
        share has no denominator.
    """
    kept = selection(pools, threshold)
    n_all = sum(len(p.correct) for p in pools)
    return {"balance": balance(pools, threshold, n_star),
            "selected": len(kept) / len(pools) if pools else math.nan,
            "precision": sum(p.correct[i] for p, i in kept) / len(kept) if kept else math.nan,
            "accuracy": sum(sum(p.correct) for p in pools) / n_all if n_all else math.nan,
            "pass_at_n": sum(any(p.correct) for p in pools) / len(pools) if pools else math.nan,
            "distinct_correct": (sum(len({t for t, c in zip(p.texts, p.correct, strict=True) if c}) for p in pools)
                                 / len(pools)) if pools else math.nan}


def sweep(pools_by_temperature: Mapping[float, Sequence[Pool]], thresholds: Sequence[float],
          n_star: int) -> list[dict[str, float]]:
    """One :func:`pool_stats` row per (temperature, threshold), temperatures and thresholds in the order given."""
    return [{"temperature": t, "threshold": th, **pool_stats(pools, th, n_star)}
            for t, pools in pools_by_temperature.items() for th in thresholds]


def choose(rows: Sequence[Mapping[str, float]]) -> Mapping[str, float] | None:
    """The row with the highest balance score; ties go to the lower temperature, then the lower threshold (a
    rule, so the choice is a function of the samples only). None when no row has a balance score (no query
    selected anything at any pair; a missing score is NaN, or None in rows read back from ``sweep.jsonl``)."""
    scored = [r for r in rows if r["balance"] is not None and not math.isnan(r["balance"])]  # None: read back from JSON
    if not scored:
        return None
    # rounded: two pairs equal in exact arithmetic may differ in the last bits of a float sum
    return min(scored, key=lambda r: (-round(r["balance"], 12), r["temperature"], r["threshold"]))
