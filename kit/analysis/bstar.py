"""B-STaR balance score: exploration vs exploitation of a sampling step (Zeng et al., ICLR 2025,
"B-STaR: Monitoring and Balancing Exploration and Exploitation in Self-Taught Reasoners", §4).

Per query with n samples, ``c`` of them correct and ``u`` distinct correct responses:

    balance = min(u / n_star, 1) * (c / n)

The first factor rewards exploration (enough *different* correct solutions, saturating at
``n_star``), the second exploitation (a high share of correct samples). The step score is the
mean over queries. Here it is a monitoring metric of RL steps (logged beside accuracy), not a
knob: B-STaR itself tunes temperature and reward thresholds to maximise it.

"Distinct" compares responses by a key (default: the response text with whitespace removed),
since math answers of correct samples are all equal by construction.

Two variants (issue #47): :func:`balance_score` is the kit's monitor above (all samples, n* = 4,
whitespace-blind distinctness); :func:`balance_score_selected` / :func:`balance_score_authors` compute
it as the authors' code does (hkust-nlp/B-STaR, ``determine_hyper.py``, read 2026-12-06): per query
only the *selected* samples count (score above the reward threshold, the best ``cap`` of them by score),
exact-text duplicates are removed, with ``c`` correct of ``s`` selected the score is
``min(c / n*, 1) * c / s`` with n* = 8, and the mean is over the queries with at least one selected
sample. The authors also add the reference solution to every pool with score 1 (``reference``: off by
default here, since it lifts every query's score).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd


def _default_key(response: str) -> str:
    return "".join(str(response).split())


def balance_score(correct: Sequence[bool], responses: Sequence[str], n_star: int = 4,
                  key: Callable[[str], object] = _default_key) -> float:
    """Balance score of one query's ``n`` samples.

    Args:
        correct: (n,) correctness of each sample.
        responses: (n,) response texts (or any value ``key`` maps to a hashable).
        n_star: distinct correct responses at which exploration saturates (B-STaR's n*).
        key: maps a response to its identity for "distinct".
    Returns:
        A float in [0, 1]; 0 when nothing is correct or n = 0.
    Raises:
        ValueError: lengths differ or n_star < 1.
    Example:
        >>> balance_score([1, 1, 0, 1], ["a", "b", "c", "a"], n_star=4)
        0.375
    """
    if len(correct) != len(responses):
        raise ValueError(f"{len(correct)} correctness flags but {len(responses)} responses")
    if n_star < 1:
        raise ValueError(f"n_star must be >= 1, got {n_star}")
    n = len(correct)
    if n == 0:
        return 0.0
    good = [key(r) for c, r in zip(correct, responses, strict=True) if c]
    return min(len(set(good)) / n_star, 1.0) * (len(good) / n)


def balance_score_step(correct: Sequence[Sequence[bool]], responses: Sequence[Sequence[str]], n_star: int = 4,
                       key: Callable[[str], object] = _default_key) -> float:
    """Mean balance score over the P queries of one RL step.

    Args:
        correct: (P, G) correctness.
        responses: (P, G) response texts.
    Returns:
        The mean over queries (NaN when P = 0).
    Raises:
        ValueError: P differs between the two arguments.
    """
    if len(correct) != len(responses):
        raise ValueError(f"{len(correct)} correctness rows but {len(responses)} response rows")
    if not correct:
        return float("nan")
    return float(np.mean([balance_score(c, r, n_star, key) for c, r in zip(correct, responses, strict=True)]))


def balance_by_step(records, n_star: int = 4, key: Callable[[str], object] = _default_key):
    """Balance score per RL step from sample records (e.g. the rows of ``samples.jsonl``).

    Args:
        records: dicts with ``step``, ``problem_id``, ``reward`` (> 0 = correct) and
            ``response_text``; samples of one (step, problem) form one query.
        n_star: B-STaR's n*; scale it with the samples per query present (the tiny trainer
            writes only a few samples of one problem per step to ``samples.jsonl``, so compute
            it on full batches in the trainer for a faithful monitor).
    Returns:
        pandas DataFrame indexed by step: ``balance`` (mean over queries), ``queries``,
        ``accuracy`` (share of correct samples), ``distinct_correct`` (mean per query).
    Raises:
        KeyError: a record lacks one of the four keys (the message names the record index).
    """
    groups: dict[tuple, list[tuple[bool, str]]] = {}
    for i, r in enumerate(records):
        missing = [k for k in ("step", "problem_id", "reward", "response_text") if k not in r]
        if missing:
            raise KeyError(f"record {i} lacks {missing}")
        groups.setdefault((r["step"], r["problem_id"]), []).append((float(r["reward"]) > 0, r["response_text"]))
    rows = []
    for (step, _pid), samples in groups.items():
        correct = [c for c, _ in samples]
        texts = [t for _, t in samples]
        rows.append({"step": step, "balance": balance_score(correct, texts, n_star, key),
                     "accuracy": float(np.mean(correct)),
                     "distinct_correct": len({key(t) for c, t in samples if c})})
    if not rows:
        return pd.DataFrame(columns=["balance", "queries", "accuracy", "distinct_correct"])
    df = pd.DataFrame(rows).groupby("step")
    out = df[["balance", "accuracy", "distinct_correct"]].mean()
    out.insert(1, "queries", df.size())
    return out


def balance_score_selected(correct: Sequence[bool], responses: Sequence[str], scores: Sequence[float],
                           threshold: float, n_star: int = 8, cap: int | None = None,
                           reference: str | None = None) -> float | None:
    """The authors' balance score of one query (see the module docstring).

    Args:
        correct: (n,) correctness of each sample.
        responses: (n,) response texts; duplicates are exact-text (no normalisation).
        scores: (n,) the reward each sample is selected by (a verifier's 0/1, or a reward model's score).
        threshold: a sample is selected when its score is strictly above it.
        n_star: correct selected samples at which exploration saturates (the authors' 8).
        cap: at most this many selected samples per query, the highest scores first (None: all).
        reference: a reference solution joined to the pool as correct with score 1.0 (the authors' code).
    Returns:
        ``min(c / n_star, 1) * c / s`` over the ``s`` distinct selected samples of which ``c`` are
        correct; None when nothing is selected (the query drops out of the mean).
    Raises:
        ValueError: lengths differ, ``n_star < 1`` or ``cap < 1``.
    """
    if not len(correct) == len(responses) == len(scores):
        raise ValueError(f"{len(correct)} correctness flags, {len(responses)} responses, {len(scores)} scores")
    if n_star < 1 or (cap is not None and cap < 1):
        raise ValueError(f"n_star and cap must be >= 1, got {n_star} and {cap}")
    ok, texts, sc = [bool(c) for c in correct], [str(r) for r in responses], [float(x) for x in scores]
    if reference is not None:
        ok, texts, sc = [*ok, True], [*texts, str(reference)], [*sc, 1.0]
    kept = selected_indices(texts, sc, threshold, cap)
    if not kept:
        return None
    c, s = sum(ok[i] for i in kept), len(kept)
    return min(c / n_star, 1.0) * c / s


def selected_indices(responses: Sequence[str], scores: Sequence[float], threshold: float,
                     cap: int | None = None) -> list[int]:
    """The samples the authors' selection keeps (``determine_hyper.py``): those scored strictly above
    ``threshold``, the highest ``cap`` first (sample order among equal scores), then exact-text duplicates
    dropped (the first kept). B-STaR trains on exactly these (:mod:`kit.studies.bstar`).

    Args:
        responses: (n,) response texts.
        scores: (n,) the reward each is selected by.
        threshold: the reward threshold.
        cap: at most this many before deduplication (None: all).
    Returns:
        Indices into ``responses``, highest score first.
    Raises:
        ValueError: the lengths differ.
    """
    if len(responses) != len(scores):
        raise ValueError(f"{len(responses)} responses but {len(scores)} scores")
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))  # stable: sample order in ties
    chosen = [i for i in order if float(scores[i]) > threshold][:cap]
    seen: set[str] = set()
    return [i for i in chosen if not (str(responses[i]) in seen or seen.add(str(responses[i])))]


def balance_score_authors(correct: Sequence[Sequence[bool]], responses: Sequence[Sequence[str]],
                          scores: Sequence[Sequence[float]], threshold: float, n_star: int = 8,
                          cap: int | None = None, references: Sequence[str] | None = None) -> float:
    """Mean of :func:`balance_score_selected` over the P queries that select at least one sample.

    Args:
        correct, responses, scores: (P, n_p) per query.
        references: (P,) reference solutions, or None.
    Returns:
        The mean; NaN when no query selects anything.
    Raises:
        ValueError: P differs between the arguments, or as :func:`balance_score_selected`.
    """
    refs = [None] * len(correct) if references is None else list(references)
    if not len(correct) == len(responses) == len(scores) == len(refs):
        raise ValueError("correct, responses, scores and references must have one entry per query")
    vals = [balance_score_selected(c, r, s, threshold, n_star, cap, ref)
            for c, r, s, ref in zip(correct, responses, scores, refs, strict=True)]
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else float("nan")
