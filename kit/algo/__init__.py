"""GRPO-RoC as pure functions (rStar2-Agent §2.2): advantage and loss in ``grpo``, the advantage estimators
by name in ``advantage`` (``algorithm.adv_estimator``), Resample-on-Correct in ``roc``; PPO's GAE and value
loss (ReTool's comparison) in ``gae``."""

from kit.algo.advantage import (
    ADV_ESTIMATORS,
    adv_estimator,
    compute_advantage,
    needs_critic,
    register_adv_estimator,
    sampling_plan,
)
from kit.algo.grpo import aggregate_loss, group_advantage, policy_loss
from kit.algo.roc import RocParams, roc_metrics, roc_step
from kit.algo.roc_penalties import counters, p_err, p_format, p_total, release_p_err, release_p_format
from kit.algo.roc_selection import RocSelection, allocate, roc_select

__all__ = [
    "ADV_ESTIMATORS", "adv_estimator", "compute_advantage", "needs_critic", "register_adv_estimator", "sampling_plan",
    "RocParams", "RocSelection", "aggregate_loss", "allocate", "counters", "group_advantage", "p_err",
    "p_format", "p_total", "policy_loss", "release_p_err", "release_p_format", "roc_metrics", "roc_select",
    "roc_step",
]
