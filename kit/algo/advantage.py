"""Advantage estimators by name: the registry ``algorithm.adv_estimator`` picks from.

rStar2-Agent §2.2.1 trains with GRPO's group-relative outcome advantage (``"grpo"``,
:func:`kit.algo.grpo.group_advantage`); ReTool's PPO uses GAE with a critic (``"gae"``,
:func:`kit.algo.gae.gae_advantage_return`; the local critic is :mod:`kit.train.critic`). The names are VERL 0.9.1's ``algorithm.adv_estimator``
values, so the key means the same on both runtimes: the local trainer computes the advantage
with the registered function (:func:`compute_advantage`, called by :mod:`kit.train.update`), and
the VERL overrides pass the same name to VERL's own implementation
(:mod:`kit.bridge.overrides`, after :func:`adv_estimator` checked it is registered here).

A new estimator (e.g. PPO's GAE of the ReTool comparison) is one function decorated with
``@register_adv_estimator("<VERL name>")`` plus ``algorithm.adv_estimator = "<VERL name>"`` in a
profile. Its inputs are the step's kept rows: ``rewards`` (B,) float outcome rewards,
``group_ids`` (B,) prompt labels, ``algo`` the ``AlgorithmConfig``; it returns (B,) float32
advantages, which :func:`kit.algo.policy_loss` broadcasts over the response tokens. An estimator
that needs more (a value model's (B, T) values) takes them as keyword arguments of its own and may
return per-token (B, T) advantages, as ``"gae"`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch

from kit.algo.gae import gae_advantage_return, outcome_token_rewards
from kit.algo.grpo import group_advantage

#: ``fn(rewards (B,), group_ids (B,), algo: AlgorithmConfig) -> (B,) float32 advantages``.
AdvEstimator = Callable[..., torch.Tensor]
#: The registered estimators by VERL name, in registration order.
ADV_ESTIMATORS: dict[str, AdvEstimator] = {}
#: What each registered estimator needs besides the rewards: ``"group"`` (a baseline over the prompt's
#: group, so G >= 2), ``"critic"`` (a value model the trainer keeps beside the policy: PPO's)
ADV_NEEDS: dict[str, frozenset[str]] = {}
NEEDS = frozenset({"group", "critic"})


def register_adv_estimator(name: str, *, needs: tuple[str, ...] = ("group",)) -> Callable[[AdvEstimator], AdvEstimator]:
    """Register ``fn`` as the advantage estimator ``name`` (a VERL ``algorithm.adv_estimator`` value) with
    what it ``needs`` (:data:`NEEDS`; :func:`needs_critic` reads it).

    Raises:
        ValueError: ``name`` is already registered, or ``needs`` names something not in :data:`NEEDS`.
    """
    if not set(needs) <= NEEDS:
        raise ValueError(f"advantage estimator {name!r}: needs {sorted(set(needs) - NEEDS)} unknown; known: {sorted(NEEDS)}")

    def add(fn: AdvEstimator) -> AdvEstimator:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice")
        ADV_ESTIMATORS[name], ADV_NEEDS[name] = fn, frozenset(needs)
        return fn
    return add


def adv_estimator(name: str) -> AdvEstimator:
    """The registered estimator ``name``.

    Raises:
        ValueError: ``name`` is not registered; the message names the key ``algorithm.adv_estimator``
            and lists the registered names.
    """
    try:
        return ADV_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"algorithm.adv_estimator: {name!r} is not a registered advantage estimator; "
                         f"registered: {', '.join(ADV_ESTIMATORS)} (kit.algo.advantage)") from None


def compute_advantage(algo: Any, rewards: torch.Tensor | Sequence[float] | np.ndarray,
                      group_ids: Sequence[Hashable] | np.ndarray | torch.Tensor, **inputs: Any) -> torch.Tensor:
    """Advantages of the kept rows with the estimator ``algo.adv_estimator`` names.

    Args:
        algo: the ``AlgorithmConfig`` (``adv_estimator``, ``adv_eps``, ...).
        rewards: (B,) outcome rewards of the kept rows.
        group_ids: (B,) prompt labels of the kept rows.
        inputs: extra inputs an estimator needs (none for ``grpo``).
    Returns:
        (B,) float32 advantages.
    Raises:
        ValueError: an unregistered ``algo.adv_estimator`` (see :func:`adv_estimator`).
    """
    return adv_estimator(algo.adv_estimator)(rewards, group_ids, algo, **inputs)


def needs_critic(algo: Any) -> bool:
    """Whether ``algo`` (an ``AlgorithmConfig``) trains a critic: its estimator was registered with
    ``needs=("critic",)`` (PPO's ``"gae"``).

    Raises:
        ValueError: an unregistered ``algo.adv_estimator`` (see :func:`adv_estimator`).
    """
    adv_estimator(algo.adv_estimator)
    return "critic" in ADV_NEEDS[algo.adv_estimator]


def sampling_plan(algo: Any) -> tuple[int, str, str]:
    """``(n sampled per prompt, selection, arm label)`` of a step, on both runtimes.

    ``algo.selection = "roc"``: 2G sampled, RoC keeps G (:func:`kit.train.update.select`); ``"all"``: G
    sampled, every row kept. The label is ``algo.label`` (``grpo_roc``, ``grpo``, ``ppo``, ``ppo_roc``).
    """
    return (algo.oversample if algo.selection == "roc" else algo.group_size), algo.selection, algo.label


@register_adv_estimator("grpo")
def grpo_advantage(rewards: torch.Tensor | Sequence[float] | np.ndarray,
                   group_ids: Sequence[Hashable] | np.ndarray | torch.Tensor, algo: Any) -> torch.Tensor:
    """GRPO (report §2.2.1; VERL ``compute_grpo_outcome_advantage`` with ``norm_adv_by_std_in_grpo``):
    ``(r - mean_g) / (std_g + algo.adv_eps)`` per group (:func:`kit.algo.grpo.group_advantage`)."""
    return group_advantage(torch.as_tensor(rewards, dtype=torch.float32), group_ids, algo.adv_eps, norm_by_std=True)


@register_adv_estimator("gae", needs=("critic",))
def gae_advantage(rewards: torch.Tensor | Sequence[float] | np.ndarray,
                  group_ids: Sequence[Hashable] | np.ndarray | torch.Tensor, algo: Any, *,
                  values: torch.Tensor, response_mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """GAE (PPO with a critic; ReTool §3.2; VERL ``compute_gae_advantage_return``): the outcome reward on
    each row's last response token (:func:`kit.algo.gae.outcome_token_rewards`), ``algo.gamma``,
    ``algo.lam``; ``group_ids`` are not used (the critic is the baseline, not the group).

    Args:
        rewards: (B,) outcome rewards.
        values: (B, T) the critic's values of the response tokens (:mod:`kit.train.critic`).
        response_mask: (B, T) 1 on model tokens, 0 on tool feedback and padding.
        lengths: (B,) response lengths (feedback included).
    Returns:
        (B, T) float32 advantages, whitened over the mask-1 tokens (mask-0 tokens hold the recursion's
        carry, which no loss reads).
    """
    token_rewards = outcome_token_rewards(torch.as_tensor(rewards, dtype=torch.float32), lengths, values.shape[1])
    return gae_advantage_return(token_rewards, values, response_mask, algo.gamma, algo.lam)[0]
