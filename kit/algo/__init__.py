"""GRPO-RoC as pure functions (rStar2-Agent §2.2): advantage and loss in ``grpo``, Resample-on-Correct in ``roc``."""

from kit.algo.grpo import aggregate_loss, group_advantage, policy_loss
from kit.algo.roc import (
    RocParams,
    RocSelection,
    allocate,
    counters,
    p_err,
    p_format,
    p_total,
    release_p_err,
    release_p_format,
    roc_metrics,
    roc_select,
    roc_step,
)

__all__ = [
    "RocParams", "RocSelection", "aggregate_loss", "allocate", "counters", "group_advantage", "p_err",
    "p_format", "p_total", "policy_loss", "release_p_err", "release_p_format", "roc_metrics", "roc_select",
    "roc_step",
]
