"""Resample-on-Correct (RoC): keep G of 2G rollouts per prompt (rStar2-Agent §2.2.2-2.2.3).

Per prompt the trainer samples ``2G`` trajectories and keeps ``G`` for the update; the reward
stays binary. Positives (reward > 0) and negatives keep their proportion; negatives are kept
uniformly (at random, or in rollout order as released), positives preferring fewer tool errors
and a cleaner answer format:

* ``p_err = failed tool calls / tool calls`` (0.5 without any call). "Failed" is the sandbox's
  structured status: an exception, a timeout, a memory or output limit, a malformed call.
  Failures of the execution service itself (``infra_errors``) are not the model's fault and are
  excluded from both counts.
* ``p_format = 1`` without an ``<answer>`` tag or without an extractable final answer (its
  final box unclosed, empty or cut off), else ``min(1, (answer_tags - 1) / turns)``, where
  ``turns`` counts every assistant turn, the first one included.
* ``p_total = p_err + p_format``; positives are drawn without replacement with probability
  proportional to ``1 / p_total`` (mode ``"sample"``, the report) or the lowest ``p_total`` first
  (mode ``"rank"``, the public release). Negatives are drawn uniformly at random
  (``negative_order="random"``) or the first ``k_neg`` in rollout order (``"rollout"``, the
  release since its PR #50).

The release's kept set, exactly: ``mode="rank"``, ``negative_order="rollout"``, the release's
text reading of the penalties (``penalties=(release_p_err(texts), release_p_format(texts))`` in
:func:`roc_step`; in the VERL hook ``AlgorithmConfig.roc_reading="text"``) and an even G, on groups of more than G
rollouts (``tests/algo/test_roc.py`` checks this against a re-implementation of the release's loop).

Everything here is a pure function on per-trajectory arrays (``N = P * 2G`` rows before
selection), so the local CPU trainer and the VERL hook (``kit.bridge.roc_hook``) share it. The
penalties and their counters are :mod:`kit.algo.roc_penalties`, the selection
:mod:`kit.algo.roc_selection`; this module holds the trainers' one call (:class:`RocParams`,
:func:`roc_step`) and the step metrics (:func:`roc_metrics`); :mod:`kit.algo` exports the names of all three.

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
truncated last turn            not a turn (no ``<|im_end|>``       counted as a turn
                               closes it)                          (:func:`release_p_format`)
unbalanced ``<answer>`` tags   1.0 (e.g. two ``<answer>``, one     tags counted as written: two
                               ``</answer>``)                      ``<answer>`` over 2 turns is 0.5
                                                                   (:func:`release_p_format`)
positives                      lowest penalty first                ``mode="sample"`` (``"rank"``)
negatives                      first k in rollout order (PR #50;   uniform at random
                               lowest penalty before it)           (``negative_order="rollout"``)
counts                         ``round()`` each side separately    ``k_pos = round(...)``,
                                                                   ``k_neg = G - k_pos``: equal to
                                                                   the release for every even G,
                                                                   whatever the group's size n > G
                                                                   (round(G-x) = G-round(x) when G
                                                                   is even); with G odd a .5 tie
                                                                   (3 of 6 rows, G = 5) fails the
                                                                   release's ``assert`` or differs
groups with < G rollouts       dropped                             kept whole
=============================  ==================================  ===============================

``round`` is Python's (half to even), as released. Minimum counts (``min_positive``,
``min_negative``; released as ``min_non_zero_reward_trace_num`` / ``min_zero_reward_trace_num``)
raise a side to ``min(minimum, available)``. Like the release, ``min_positive + min_negative > G``
is rejected up front; the release's fallback that keeps a whole group when both sides fall
below their minimums is therefore not needed, and exactly ``G`` rows are kept per group.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.algo.roc_penalties import (
    p_err,
    p_format,
    p_total,
)
from kit.algo.roc_selection import (
    NegativeOrder,
    RocMode,
    RocSelection,
    roc_select,
)
from kit.config import AlgorithmConfig, check_minimums  # the one minimums check lives beside the config

__all__ = ["RocParams", "roc_metrics", "roc_step"]


def roc_metrics(
    rewards: Sequence[float] | np.ndarray,
    kept: np.ndarray,
    n_tool_calls: Sequence[int] | np.ndarray,
    n_tool_failures: Sequence[int] | np.ndarray,
    p_format_values: Sequence[float] | np.ndarray,
    answer_tags: Sequence[int] | np.ndarray | None = None,
) -> dict[str, float]:
    """Step metrics of a RoC selection (keys of ``metrics.jsonl``, declared in :mod:`kit.metrics`).

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
    negative_order: NegativeOrder = AlgorithmConfig.roc_negative_order

    def __post_init__(self) -> None:
        """Reject settings that would only fail at the first selection (after a whole rollout)."""
        if self.mode not in ("sample", "rank"):
            raise ValueError(f"RocParams.mode must be 'sample' or 'rank', got {self.mode!r}")
        if self.negative_order not in ("random", "rollout"):
            raise ValueError(f"RocParams.negative_order must be 'random' or 'rollout', got {self.negative_order!r}")
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
            negative_order=algorithm.roc_negative_order,
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
    pf_struct = p_format(counts["answer_tags"], counts["turns"], counts.get("answered"))
    pe, pf = penalties if penalties is not None else (pe_struct, pf_struct)
    pt = p_total(pe, pf, params.use_error_ratio, params.use_answer_format)
    sel = roc_select(
        rewards, group_ids, pt, group_size=params.group_size, mode=params.mode,
        min_positive=params.min_positive, min_negative=params.min_negative,
        drop_equal_reward_groups=params.drop_equal_reward_groups, seed=seed, negative_order=params.negative_order,
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
