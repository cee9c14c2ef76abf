"""RoC's selection: keep G of a group's rollouts, positives by penalty (rStar2-Agent §2.2.2-2.2.3).

Per group (prompt) of more than G rows: :func:`allocate` splits G between positives (reward
> 0) and negatives in proportion, with minimum counts (the release's rule); :func:`select_positives`
draws the positives by their ``p_total`` (:mod:`kit.algo.roc_penalties`): without replacement
with probability proportional to ``1 / p_total`` (``mode="sample"``, the report) or the lowest
first (``"rank"``, the release); negatives are drawn uniformly at random or taken in rollout
order. :func:`roc_select` applies it to a whole oversampled batch and returns a
:class:`RocSelection`. Differences from the public release are tabulated in :mod:`kit.algo.roc`,
exported by :mod:`kit.algo`. Pure functions on (N,) arrays, ``N = P * 2G``; all randomness comes
from one numpy Generator.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kit.config import AlgorithmConfig, check_minimums  # the one minimums check lives beside the config

RocMode = Literal["sample", "rank"]
NegativeOrder = Literal["random", "rollout"]


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


def allocate(n_pos: int, n_neg: int, group_size: int, min_positive: int = AlgorithmConfig.min_positive,
             min_negative: int = AlgorithmConfig.min_negative) -> tuple[int, int]:
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
    mode: RocMode = AlgorithmConfig.roc_mode,
    min_positive: int = AlgorithmConfig.min_positive,
    min_negative: int = AlgorithmConfig.min_negative,
    drop_equal_reward_groups: bool = AlgorithmConfig.drop_equal_reward_groups,
    seed: int | np.random.Generator = 0,
    negative_order: NegativeOrder = AlgorithmConfig.roc_negative_order,
) -> RocSelection:
    """GRPO-RoC down-sampling of an oversampled batch (rStar2-Agent §2.2.3, Algorithm in §2.2).

    For every group (prompt): optionally drop it when all rewards are equal (DAPO-style, as
    released); keep it whole when it has at most G rows; else keep ``G`` rows: ``k_pos``
    positives chosen by :func:`select_positives` and ``k_neg`` negatives (uniformly at random,
    or the first ones in rollout order), with counts from :func:`allocate`. Groups are visited in order of first appearance and all
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
        negative_order: ``"random"`` (report: uniform down-sampling) or ``"rollout"`` (the
            release since PR #50: the first ``k_neg`` negatives by row index).
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
    if negative_order not in ("random", "rollout"):
        raise ValueError(f"roc_select: negative_order must be 'random' or 'rollout', got {negative_order!r}")
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
        chosen_neg = neg[:k_neg] if negative_order == "rollout" else rng.permutation(neg)[:k_neg]
        kept.extend([chosen_pos, chosen_neg])
        n_pos_kept += k_pos
        n_neg_kept += k_neg
    out = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return RocSelection(out.astype(np.int64), dropped, short, len(groups), n_pos_kept, n_neg_kept)
