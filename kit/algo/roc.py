"""Resample-on-Correct (RoC): keep G of 2G rollouts per prompt (rStar2-Agent §2.2.2-2.2.3).

Per prompt the trainer samples ``2G`` trajectories and keeps ``G`` for the update; the reward
stays binary. Positives (reward > 0) and negatives keep their proportion; negatives are kept
uniformly at random, positives preferring fewer tool errors and a cleaner answer format:

* ``p_err = failed tool calls / tool calls`` (0.5 without any call). "Failed" is the sandbox's
  structured status: an exception, a timeout, a memory or output limit, a malformed call.
  Failures of the execution service itself (``infra_errors``) are not the model's fault and are
  excluded from both counts.
* ``p_format = 1`` without an ``<answer>`` tag, else ``min(1, (answer_tags - 1) / turns)``,
  where ``turns`` counts every assistant turn, the first one included.
* ``p_total = p_err + p_format``; positives are drawn without replacement with probability
  proportional to ``1 / p_total`` (mode ``"sample"``, the report) or the lowest ``p_total`` first
  (mode ``"rank"``, the public release).

Everything here is a pure function on per-trajectory arrays (``N = P * 2G`` rows before
selection), so the local CPU trainer and the VERL hook (``kit.bridge.roc_hook``) share it.

Differences from the public release (microsoft/rStar ``rstar2_agent/down_sample/roc.py``) and
how to get the release's behaviour here:

=============================  ==================================  ===============================
topic                          release                             kit default (release option)
=============================  ==================================  ===============================
what counts as a tool error    ``"error"`` substring in each       structured sandbox status
                               ``<tool_response>`` (misses          (:func:`release_p_err` reads
                               timeouts and bad JSON, flags a       the text the release's way)
                               program that prints "error")
turns in ``p_format``          assistant turns found in the        all assistant turns
                               *response* text: the first turn's   (:func:`release_p_format`)
                               header sits in the prompt, so a
                               no-tool answer scores 1.0
positives                      lowest penalty first                ``mode="sample"`` (``"rank"``)
negatives                      rollout order (after PR #50;        uniform at random
                               lowest penalty before it)
counts                         ``round()`` each side separately    ``k_pos = round(...)``,
                                                                   ``k_neg = G - k_pos`` (equal
                                                                   to the release when G is even
                                                                   and there are 2G rollouts)
groups with < G rollouts       dropped                             kept whole
=============================  ==================================  ===============================

``round`` is Python's (half to even), as released. Minimum counts (``min_positive``,
``min_negative``; released as ``min_non_zero_reward_trace_num`` / ``min_zero_reward_trace_num``)
raise a side to ``min(minimum, available)``. Like the release, ``min_positive + min_negative > G``
is rejected up front; the release's fallback that keeps a whole group when both sides fall
below their minimums is therefore not needed, and exactly ``G`` rows are kept per group.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kit.config import AlgorithmConfig

RocMode = Literal["sample", "rank"]

#: Tool-error kinds that are the model's fault (keys of ``kit.rollout`` ``Trajectory.tool_errors``):
#: a raised exception, a wall/CPU timeout, the memory limit, the output limit, a malformed call.
FAILURE_KINDS = ("exception", "timeout", "memory", "output", "malformed")
#: Kinds that are the execution service's fault; never counted against the model.
INFRA_KINDS = ("infra", "infra_error")
#: p_err of a trajectory without any (attributable) tool call, as in the report and release.
NO_CALL_P_ERR = 0.5


def _as_int_array(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.equal(np.mod(a, 1), 0)):
            raise ValueError(f"{name}: expected integer counts, got {a[:5]}")
        a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError(f"{name}: negative count at row {int(np.argmin(a))}")
    return a.astype(np.int64)


def p_err(
    n_tool_calls: Sequence[int] | np.ndarray,
    n_tool_failures: Sequence[int] | np.ndarray,
    n_infra_errors: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Tool-error ratio of each trajectory (rStar2-Agent §2.2.3, "p_err").

    ``p_err = failures / (calls - infra)``, or 0.5 when ``calls - infra == 0``.

    Args:
        n_tool_calls: (N,) tool calls the trajectory made, every attempt counted (malformed
            calls and calls the service failed to run included).
        n_tool_failures: (N,) calls that failed by the model's fault: exception, timeout,
            memory limit, output limit, malformed call (:data:`FAILURE_KINDS`).
        n_infra_errors: (N,) calls lost to the execution service (``infra_error``); removed
            from the denominator. None means zero.
    Returns:
        (N,) float64 array in [0, 1].
    Raises:
        ValueError: different lengths, negative counts, or more failures than attributable
            calls (the message names the first bad row).
    """
    calls = _as_int_array(n_tool_calls, "n_tool_calls")
    fails = _as_int_array(n_tool_failures, "n_tool_failures")
    infra = np.zeros_like(calls) if n_infra_errors is None else _as_int_array(n_infra_errors, "n_infra_errors")
    if not (calls.shape == fails.shape == infra.shape):
        raise ValueError(f"p_err: lengths differ: calls {calls.shape}, failures {fails.shape}, infra {infra.shape}")
    attributable = calls - infra
    bad = np.flatnonzero((attributable < 0) | (fails > np.maximum(attributable, 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"p_err: row {i} has {fails[i]} failures, {infra[i]} infra errors but only {calls[i]} calls"
        )
    out = np.full(calls.shape, NO_CALL_P_ERR, dtype=np.float64)
    has = attributable > 0
    out[has] = fails[has] / attributable[has]
    return out


def p_format(answer_tags: Sequence[int] | np.ndarray, turns: Sequence[int] | np.ndarray) -> np.ndarray:
    """Answer-format penalty of each trajectory (rStar2-Agent §2.2.3, "p_format").

    1 when the model wrote no ``<answer>`` tag, else ``min(1, (answer_tags - 1) / turns)``: one
    answer costs nothing, repeated answers cost in proportion to the turns they are spread over.

    Args:
        answer_tags: (N,) ``<answer>`` tags in the model's own text (tool feedback excluded).
        turns: (N,) assistant turns, the first one counted (>= 1 whenever there is an answer).
    Returns:
        (N,) float64 array in [0, 1].
    Raises:
        ValueError: different lengths, negative counts, or an answer with ``turns < 1``.
    """
    tags = _as_int_array(answer_tags, "answer_tags")
    t = _as_int_array(turns, "turns")
    if tags.shape != t.shape:
        raise ValueError(f"p_format: lengths differ: answer_tags {tags.shape}, turns {t.shape}")
    bad = np.flatnonzero((tags > 0) & (t < 1))
    if bad.size:
        raise ValueError(f"p_format: row {int(bad[0])} has {tags[bad[0]]} answer tags but 0 turns")
    out = np.ones(tags.shape, dtype=np.float64)
    has = tags > 0
    out[has] = np.minimum(1.0, (tags[has] - 1) / t[has])
    return out


def p_total(
    p_err_values: np.ndarray, p_format_values: np.ndarray, use_error_ratio: bool = True, use_answer_format: bool = True
) -> np.ndarray:
    """``p_total = p_err + p_format`` with either term switchable (release ``roc_error_ratio`` /
    ``roc_answer_format``). Shapes (N,) -> (N,), values in [0, 2]."""
    pe, pf = np.asarray(p_err_values, dtype=np.float64), np.asarray(p_format_values, dtype=np.float64)
    if pe.shape != pf.shape:
        raise ValueError(f"p_total: p_err {pe.shape} vs p_format {pf.shape}")
    return pe * float(use_error_ratio) + pf * float(use_answer_format)


# ------------------------------------------------------------------ the release's text reading

_TOOL_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
_ANSWER_SPAN = re.compile(r"<answer>.*?</answer>", re.DOTALL)
_ASSISTANT_TURN = re.compile(r"<\|im_start\|>assistant.*?<\|im_end\|>", re.DOTALL)


def release_p_err(texts: Iterable[str]) -> np.ndarray:
    """p_err read from decoded response text the way the public release does, for comparison.

    Ratio of ``<tool_response>...</tool_response>`` blocks whose text contains "error" (any
    case); 0.5 without a block. Known flaws, kept on purpose: timeouts and malformed calls are
    not errors, a correct program printing "error" is one. Shapes: N strings -> (N,).
    """
    out = []
    for text in texts:
        blocks = _TOOL_RESPONSE.findall(text)
        out.append(NO_CALL_P_ERR if not blocks else sum("error" in b.lower() for b in blocks) / len(blocks))
    return np.asarray(out, dtype=np.float64)


def release_p_format(texts: Iterable[str]) -> np.ndarray:
    """p_format read from decoded response text the way the public release does, for comparison.

    1.0 if ``<answer>`` or ``</answer>`` is missing or unbalanced; else
    ``min(1, (closed answer spans - 1) / turns)`` where turns are the
    ``<|im_start|>assistant ... <|im_end|>`` spans IN THE RESPONSE. The first assistant turn's
    header belongs to the prompt, so it is never counted and a single-turn answer scores 1.0.
    Shapes: N strings -> (N,).
    """
    out = []
    for text in texts:
        if "<answer>" not in text or "</answer>" not in text:
            out.append(1.0)
            continue
        closed = len(_ANSWER_SPAN.findall(text))
        if text.count("<answer>") != closed or text.count("</answer>") != closed:
            out.append(1.0)
            continue
        turns = len(_ASSISTANT_TURN.findall(text))
        out.append(1.0 if turns == 0 else min((closed - 1) / turns, 1.0))
    return np.asarray(out, dtype=np.float64)


# ------------------------------------------------------------------ counters from trajectories


def tool_failure_count(tool_errors: Mapping[str, int] | int | None) -> int:
    """Number of model-caused tool failures in a ``Trajectory.tool_errors`` value.

    Args:
        tool_errors: dict kind -> count (every kind counts except :data:`INFRA_KINDS`; the
            usual kinds are :data:`FAILURE_KINDS`), or an already summed int, or None (0).
    Raises:
        ValueError: a negative count.
    """
    if tool_errors is None:
        return 0
    if isinstance(tool_errors, Mapping):
        total = 0
        for kind, value in tool_errors.items():
            if kind in INFRA_KINDS:
                continue
            v = int(value or 0)
            if v < 0:
                raise ValueError(f"tool_errors[{kind!r}] is negative: {v}")
            total += v
        return total
    v = int(tool_errors)
    if v < 0:
        raise ValueError(f"tool_errors is negative: {v}")
    return v


def counters(items: Iterable[Any]) -> dict[str, np.ndarray]:
    """Per-trajectory RoC counters from ``Trajectory`` objects or mappings (VERL extra_fields).

    Reads ``tool_calls``, ``tool_errors`` (dict kind -> count, or int), ``infra_errors``,
    ``answer_tags`` and ``turns`` from attributes or keys; a missing ``infra_errors`` or
    ``tool_errors`` is 0, the others are required.

    Returns:
        dict of (N,) int64 arrays: ``tool_calls``, ``tool_failures``, ``infra_errors``,
        ``answer_tags``, ``turns``.
    Raises:
        KeyError: a required counter is missing; the message names the row and the key.
    """
    cols: dict[str, list[int]] = {k: [] for k in ("tool_calls", "tool_failures", "infra_errors", "answer_tags", "turns")}
    for row, item in enumerate(items):
        def get(key: str, required: bool, _item: Any = item, _row: int = row) -> Any:
            if isinstance(_item, Mapping):
                if key in _item:
                    return _item[key]
            elif hasattr(_item, key):
                return getattr(_item, key)
            if required:
                raise KeyError(f"RoC counters: trajectory {_row} has no {key!r} (have: {_keys(_item)})")
            return None

        cols["tool_calls"].append(int(get("tool_calls", True)))
        cols["tool_failures"].append(tool_failure_count(get("tool_errors", False)))
        cols["infra_errors"].append(int(get("infra_errors", False) or 0))
        cols["answer_tags"].append(int(get("answer_tags", True)))
        cols["turns"].append(int(get("turns", True)))
    return {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}


def _keys(item: Any) -> list[str]:
    if isinstance(item, Mapping):
        return sorted(map(str, item))
    return sorted(k for k in vars(item) if not k.startswith("_")) if hasattr(item, "__dict__") else []


# ------------------------------------------------------------------ selection


@dataclass(frozen=True)
class RocSelection:
    """What :func:`roc_select` keeps.

    Attributes:
        kept: (K,) int64 row indices into the input arrays, ascending; ``K = G`` per kept group
            (fewer only for groups that had at most G rows).
        dropped_equal_reward: group labels dropped because all their rewards were equal.
        short_groups: group labels with at most G rows, kept whole.
        n_groups: number of distinct groups in the input.
        positives_kept, negatives_kept: totals over kept rows.
    """

    kept: np.ndarray
    dropped_equal_reward: list[Hashable] = field(default_factory=list)
    short_groups: list[Hashable] = field(default_factory=list)
    n_groups: int = 0
    positives_kept: int = 0
    negatives_kept: int = 0


def check_minimums(group_size: int, min_positive: int, min_negative: int) -> None:
    """The one check that G rows can hold both minimum counts (release: ``min_non_zero_reward_trace_num``
    + ``min_zero_reward_trace_num`` <= n).

    Raises:
        ValueError: ``min_positive + min_negative > group_size`` (names the three numbers).
    """
    if min_positive + min_negative > group_size:
        raise ValueError(
            f"RoC: min_positive ({min_positive}) + min_negative ({min_negative}) exceeds group_size ({group_size})"
        )


def allocate(n_pos: int, n_neg: int, group_size: int, min_positive: int = 2, min_negative: int = 2) -> tuple[int, int]:
    """How many positives and negatives to keep from one group (release's proportional rule).

    ``k_pos = round(n_pos * G / n)`` (Python rounding, half to even, as released), then
    ``k_neg = G - k_pos``; a side below ``min(minimum, available)`` is raised to it and the other
    side gets the rest. A group with ``n <= G`` rows is kept whole. With G even and ``n = 2G`` this
    equals rounding each side separately (the release); with G odd a tie such as 3 of 10 correct
    (G = 5) keeps ``round(1.5) = 2`` positives.

    Args:
        n_pos, n_neg: positives and negatives in the group (n = n_pos + n_neg rows).
        group_size: G, rows to keep.
        min_positive, min_negative: minimum counts (released defaults 2 and 2).
    Returns:
        ``(k_pos, k_neg)`` with ``k_pos + k_neg == min(G, n)``, ``k_pos <= n_pos``, ``k_neg <= n_neg``.
    Raises:
        ValueError: ``min_positive + min_negative > G`` or negative inputs.

    Example:
        >>> allocate(3, 29, 16)  # 3 of 32 correct: 1.5 rounds to 2, minimum 2
        (2, 14)
    """
    if min(n_pos, n_neg, min_positive, min_negative) < 0 or group_size < 1:
        raise ValueError(f"allocate: bad counts n_pos={n_pos} n_neg={n_neg} G={group_size}")
    check_minimums(group_size, min_positive, min_negative)
    n = n_pos + n_neg
    if n <= group_size:
        return n_pos, n_neg
    k_pos = round(n_pos * group_size / n)
    k_neg = group_size - k_pos
    if k_neg < min(min_negative, n_neg):
        k_neg = min(min_negative, n_neg)
        k_pos = group_size - k_neg
    if k_pos < min(min_positive, n_pos):
        k_pos = min(min_positive, n_pos)
        k_neg = group_size - k_pos
    return k_pos, k_neg


def select_positives(p_total_values: np.ndarray, k: int, mode: RocMode, rng: np.random.Generator) -> np.ndarray:
    """Choose ``k`` of the positives by their penalties.

    ``"rank"``: the k lowest ``p_total``, ties in input order (stable sort; the release).
    ``"sample"``: k draws without replacement, each draw picking a remaining trajectory with
    probability proportional to ``1 / p_total`` (the report). Implemented with exponential
    keys ``E_i * p_total_i``, ``E_i ~ Exp(1)``, keeping the k smallest (Efraimidis-Spirakis),
    which is exactly that sequential draw. ``p_total = 0`` means infinite weight: such
    trajectories are taken before any other, uniformly at random among themselves (the limit
    of ``1 / (p_total + e)`` as e -> 0).

    Args:
        p_total_values: (n_pos,) non-negative penalties.
        k: how many to keep, ``0 <= k <= n_pos``.
        mode: ``"sample"`` or ``"rank"``.
        rng: numpy Generator (used in ``"sample"`` mode only).
    Returns:
        (k,) int64 positions into ``p_total_values``.
    Raises:
        ValueError: negative or NaN penalties, k out of range, unknown mode.
    """
    p = np.asarray(p_total_values, dtype=np.float64)
    if not 0 <= k <= p.size:
        raise ValueError(f"select_positives: k={k} with {p.size} positives")
    if np.isnan(p).any() or (p < 0).any():
        raise ValueError(f"select_positives: penalties must be >= 0, got {p}")
    if mode == "rank":
        return np.argsort(p, kind="stable")[:k].astype(np.int64)
    if mode == "sample":
        keys = rng.exponential(size=p.size) * p
        tiebreak = rng.random(p.size)
        return np.lexsort((tiebreak, keys))[:k].astype(np.int64)
    raise ValueError(f"select_positives: unknown mode {mode!r} (expected 'sample' or 'rank')")


def roc_select(
    rewards: Sequence[float] | np.ndarray,
    group_ids: Sequence[Hashable] | np.ndarray,
    p_total_values: Sequence[float] | np.ndarray,
    *,
    group_size: int,
    mode: RocMode = "sample",
    min_positive: int = 2,
    min_negative: int = 2,
    drop_equal_reward_groups: bool = True,
    seed: int | np.random.Generator = 0,
) -> RocSelection:
    """GRPO-RoC down-sampling of an oversampled batch (rStar2-Agent §2.2.3, Algorithm in §2.2).

    For every group (prompt): optionally drop it when all rewards are equal (DAPO-style, as
    released); keep it whole when it has at most G rows; else keep ``G`` rows: ``k_pos``
    positives chosen by :func:`select_positives` and ``k_neg`` negatives uniformly at random,
    with counts from :func:`allocate`. Groups are visited in order of first appearance and all
    randomness comes from one Generator, so a seed fixes the result.

    Args:
        rewards: (N,) outcome rewards, N = P * 2G; positive means reward > 0.
        group_ids: (N,) group labels (uids); any hashable.
        p_total_values: (N,) penalties from :func:`p_total` (or the release's text reading).
        group_size: G, rows kept per group.
        mode: ``"sample"`` (report) or ``"rank"`` (release) for positives.
        min_positive, min_negative: minimum kept counts per side (see :func:`allocate`).
        drop_equal_reward_groups: drop groups whose rewards are all equal (no GRPO signal).
        seed: int seed or a numpy Generator.
    Returns:
        :class:`RocSelection` with the kept row indices.
    Raises:
        ValueError: inputs of different lengths, a non-finite reward, bad penalties, or bad
            minimum counts.
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    pt = np.asarray(p_total_values, dtype=np.float64).reshape(-1)
    gids = list(group_ids.tolist() if isinstance(group_ids, np.ndarray) else group_ids)
    if not (r.size == pt.size == len(gids)):
        raise ValueError(f"roc_select: {r.size} rewards, {len(gids)} group ids, {pt.size} penalties")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise ValueError(f"roc_select: reward of row {int(bad[0])} is {r[bad[0]]} (rewards must be finite)")
    check_minimums(group_size, min_positive, min_negative)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    groups: dict[Hashable, list[int]] = {}
    for i, g in enumerate(gids):
        groups.setdefault(g, []).append(i)

    kept: list[np.ndarray] = []
    dropped, short = [], []
    n_pos_kept = n_neg_kept = 0
    for g, rows in groups.items():
        idx = np.asarray(rows, dtype=np.int64)
        gr = r[idx]
        if drop_equal_reward_groups and idx.size > 1 and np.allclose(gr, gr[0]):
            dropped.append(g)
            continue
        pos, neg = idx[gr > 0], idx[gr <= 0]
        if idx.size <= group_size:
            short.append(g)
            kept.append(idx)
            n_pos_kept += pos.size
            n_neg_kept += neg.size
            continue
        k_pos, k_neg = allocate(pos.size, neg.size, group_size, min_positive, min_negative)
        chosen_pos = pos[select_positives(pt[pos], k_pos, mode, rng)]
        chosen_neg = rng.permutation(neg)[:k_neg]
        kept.extend([chosen_pos, chosen_neg])
        n_pos_kept += k_pos
        n_neg_kept += k_neg
    out = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return RocSelection(out.astype(np.int64), dropped, short, len(groups), n_pos_kept, n_neg_kept)


def roc_metrics(
    rewards: Sequence[float] | np.ndarray,
    kept: np.ndarray,
    n_tool_calls: Sequence[int] | np.ndarray,
    n_tool_failures: Sequence[int] | np.ndarray,
    p_format_values: Sequence[float] | np.ndarray,
    answer_tags: Sequence[int] | np.ndarray | None = None,
) -> dict[str, float]:
    """Step metrics of a RoC selection (the keys of ``metrics.jsonl`` in DEVELOPERS.md).

    ``tool_error_ratio_correct_*`` is failed calls / calls summed over the correct
    trajectories, before (all sampled rows) and after (kept rows) selection; NaN when it is
    undefined (no correct trajectory, or none of them made a call), so that a plot or a mean
    skips the step instead of reading it as "no errors". Report Figure 5 plots this quantity.

    Args:
        rewards: (N,) rewards of all sampled rows.
        kept: (K,) kept row indices (``RocSelection.kept``).
        n_tool_calls, n_tool_failures: (N,) counts (infra errors already excluded if wanted).
        p_format_values: (N,) from :func:`p_format`.
        answer_tags: (N,) optional, for the share of kept rows with 0 / 1 / >1 answers.
    Returns:
        dict of floats: ``tool_error_ratio_correct_before``, ``tool_error_ratio_correct_after``,
        ``p_format_mean`` (kept rows), ``p_format_mean_before``, ``kept``, ``sampled``,
        ``accuracy_before``, ``accuracy_after`` and, with ``answer_tags``,
        ``answer_none_frac``, ``answer_one_frac``, ``answer_multi_frac`` (kept rows).
    """
    r = np.asarray(rewards, dtype=np.float64)
    calls, fails = np.asarray(n_tool_calls, dtype=np.float64), np.asarray(n_tool_failures, dtype=np.float64)
    pf = np.asarray(p_format_values, dtype=np.float64)
    kept = np.asarray(kept, dtype=np.int64)

    def err_ratio(rows: np.ndarray) -> float:
        rows = rows[r[rows] > 0]
        c = calls[rows].sum()
        return float(fails[rows].sum() / c) if c > 0 else float("nan")

    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if x.size else 0.0

    all_rows = np.arange(r.size)
    out = {
        "tool_error_ratio_correct_before": err_ratio(all_rows),
        "tool_error_ratio_correct_after": err_ratio(kept),
        "p_format_mean": mean(pf[kept]),
        "p_format_mean_before": mean(pf),
        "kept": float(kept.size),
        "sampled": float(r.size),
        "accuracy_before": mean((r > 0).astype(float)),
        "accuracy_after": mean((r[kept] > 0).astype(float)),
    }
    if answer_tags is not None:
        tags = np.asarray(answer_tags)[kept]
        out.update(
            answer_none_frac=mean((tags == 0).astype(float)),
            answer_one_frac=mean((tags == 1).astype(float)),
            answer_multi_frac=mean((tags > 1).astype(float)),
        )
    return out


# ------------------------------------------------------------------ one call for trainers


@dataclass(frozen=True)
class RocParams:
    """The RoC knobs, named as in ``kit.config.AlgorithmConfig``, whose defaults (the report's) they
    take; trainers build them with :meth:`from_config`."""

    group_size: int = AlgorithmConfig.group_size
    mode: RocMode = AlgorithmConfig.roc_mode
    use_error_ratio: bool = AlgorithmConfig.roc_use_error_ratio
    use_answer_format: bool = AlgorithmConfig.roc_use_answer_format
    min_positive: int = AlgorithmConfig.min_positive
    min_negative: int = AlgorithmConfig.min_negative
    drop_equal_reward_groups: bool = AlgorithmConfig.drop_equal_reward_groups

    def __post_init__(self) -> None:
        """Reject settings that would only fail at the first selection (after a whole rollout)."""
        if self.mode not in ("sample", "rank"):
            raise ValueError(f"RocParams.mode must be 'sample' or 'rank', got {self.mode!r}")
        if self.group_size < 1 or self.min_positive < 0 or self.min_negative < 0:
            raise ValueError(f"RocParams: bad counts group_size={self.group_size} min_positive={self.min_positive} "
                             f"min_negative={self.min_negative}")
        check_minimums(self.group_size, self.min_positive, self.min_negative)

    @classmethod
    def from_config(cls, algorithm: Any) -> RocParams:
        """Build from a ``kit.config.AlgorithmConfig`` (or any object with the same fields)."""
        return cls(
            group_size=int(algorithm.group_size),
            mode=algorithm.roc_mode,
            use_error_ratio=bool(algorithm.roc_use_error_ratio),
            use_answer_format=bool(algorithm.roc_use_answer_format),
            min_positive=int(algorithm.min_positive),
            min_negative=int(algorithm.min_negative),
            drop_equal_reward_groups=bool(algorithm.drop_equal_reward_groups),
        )


def roc_step(
    rewards: Sequence[float] | np.ndarray,
    group_ids: Sequence[Hashable] | np.ndarray,
    counts: Mapping[str, np.ndarray],
    params: RocParams,
    seed: int | np.random.Generator = 0,
    penalties: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[RocSelection, dict[str, float]]:
    """Scores, selection and metrics in one call: what a trainer runs after reward, before advantage.

    Args:
        rewards: (N,) outcome rewards of all P * 2G sampled rows.
        group_ids: (N,) prompt labels.
        counts: output of :func:`counters` (``tool_calls``, ``tool_failures``,
            ``infra_errors``, ``answer_tags``, ``turns``, each (N,)).
        params: :class:`RocParams`.
        seed: int or Generator for the random choices.
        penalties: optional ``(p_err, p_format)`` to use instead of the counters (e.g. the
            release's text reading, :func:`release_p_err` / :func:`release_p_format`).
    Returns:
        ``(selection, metrics)``; metrics as :func:`roc_metrics` plus ``groups``,
        ``groups_dropped_equal_reward``, ``groups_short``, ``positives_kept``,
        ``negatives_kept``, ``p_total_correct_mean_before`` / ``_after``.
    Raises:
        ValueError / KeyError: from the functions it calls, naming the bad row or key.
    """
    infra = counts.get("infra_errors")
    pe_struct = p_err(counts["tool_calls"], counts["tool_failures"], infra)
    pf_struct = p_format(counts["answer_tags"], counts["turns"])
    pe, pf = penalties if penalties is not None else (pe_struct, pf_struct)
    pt = p_total(pe, pf, params.use_error_ratio, params.use_answer_format)
    sel = roc_select(
        rewards, group_ids, pt, group_size=params.group_size, mode=params.mode,
        min_positive=params.min_positive, min_negative=params.min_negative,
        drop_equal_reward_groups=params.drop_equal_reward_groups, seed=seed,
    )
    calls = np.asarray(counts["tool_calls"]) - (np.asarray(infra) if infra is not None else 0)
    metrics = roc_metrics(rewards, sel.kept, calls, counts["tool_failures"], pf, counts["answer_tags"])
    r = np.asarray(rewards, dtype=np.float64)
    correct = r > 0
    kept_correct = sel.kept[correct[sel.kept]]
    metrics.update(
        groups=float(sel.n_groups),
        groups_dropped_equal_reward=float(len(sel.dropped_equal_reward)),
        groups_short=float(len(sel.short_groups)),
        positives_kept=float(sel.positives_kept),
        negatives_kept=float(sel.negatives_kept),
        p_total_correct_mean_before=float(pt[correct].mean()) if correct.any() else 0.0,
        p_total_correct_mean_after=float(pt[kept_correct].mean()) if kept_correct.size else 0.0,
    )
    return sel, metrics
