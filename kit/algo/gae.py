"""PPO's critic side as pure tensor functions: GAE advantages and returns, the clipped value loss.

ReTool (Feng et al. 2025, arXiv 2504.11536, §3.2) trains with PPO in VERL: a value model, GAE
(Schulman et al. 2015, arXiv 1506.02438) over the response tokens with the outcome reward on the
last one, no KL term, interpreter output masked from the loss. The functions below are VERL 0.9.1's
``core_algos.compute_gae_advantage_return`` and ``core_algos.compute_value_loss`` (with ``agg_loss``
on one data-parallel rank), number for number (``tests/algo/test_gae.py`` checks them on random
masked inputs), so the local trainer's critic (:mod:`kit.train.critic`) and VERL's critic worker
optimise the same objective.

Masked positions (``response_mask == 0``: interpreter feedback inside a response, and padding)
are treated as VERL treats them: the backward recursion passes *through* them, carrying the next
model token's value and GAE unchanged, so a feedback block between two model turns neither adds a
TD error nor breaks the credit from the later turn to the earlier one; their advantages and
returns are whatever the carry leaves there, and no loss reads them (both losses count only
mask-1 tokens). A reward placed on a masked position is lost (VERL's recursion drops it); the
outcome reward goes on the last response token (:func:`outcome_token_rewards`, VERL's reward
managers' ``valid_response_length - 1``), which is a model token except for a trajectory cut off
inside a tool output, which has no answer and reward 0 anyway.

Symbols (STYLE.md): ``B`` trajectories, ``T`` response tokens (tool feedback included, masked).
What this module does NOT do: KL-in-reward, per-token (process) rewards, value normalisation.
"""

from __future__ import annotations

import torch

from kit.algo.grpo import LossAggMode, aggregate_loss


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over ``mask == 1`` (VERL ``torch_functional.masked_mean``: ``+1e-8`` in the denominator)."""
    return (values * mask).sum() / (mask.sum() + 1e-8)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(values - mean) / sqrt(var + 1e-8)`` with the mean and the unbiased variance over ``mask == 1``
    (VERL ``torch_functional.masked_whiten``); every position is whitened, masked ones included.

    Raises:
        ValueError: fewer than two mask-1 positions (the unbiased variance is undefined).
    """
    n = mask.sum()
    if n < 2:
        raise ValueError(f"masked_whiten: {int(n)} mask-1 tokens; whitening needs at least 2")
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask) * (n / (n - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def outcome_token_rewards(rewards: torch.Tensor, lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) token-level rewards: each trajectory's outcome reward on its last response token.

    Args:
        rewards: (B,) outcome rewards (0/1).
        lengths: (B,) response lengths in tokens (feedback included), each in ``1..T``.
        T: the padded response length.
    Returns:
        (B, T) float32, zero except ``[b, lengths[b] - 1] = rewards[b]`` (VERL's reward managers).
    Raises:
        ValueError: mismatched lengths, or a length outside ``1..T``.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    lengths = torch.as_tensor(lengths, dtype=torch.long).flatten()
    if rewards.shape != lengths.shape:
        raise ValueError(f"outcome_token_rewards: {rewards.numel()} rewards but {lengths.numel()} lengths")
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > T):
        raise ValueError(f"outcome_token_rewards: response lengths must be in 1..{T}, got {lengths.tolist()}")
    out = torch.zeros(rewards.numel(), T)
    out[torch.arange(rewards.numel()), lengths - 1] = rewards
    return out


def gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                         gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and returns over the response tokens (VERL ``compute_gae_advantage_return``).

    Backwards over ``t``: ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``,
    where ``V_next`` and ``A_next`` are those of the next mask-1 token (0 after the last): on a mask-0
    token the carry is kept, not updated. ``returns = A + V`` (before whitening; the critic's
    regression target); the advantages are then whitened over the mask-1 tokens of the batch.

    Args:
        token_level_rewards: (B, T) rewards per token (:func:`outcome_token_rewards`).
        values: (B, T) the critic's values of the rollout (no grad).
        response_mask: (B, T) 1 on model-sampled tokens, 0 on tool feedback and padding.
        gamma: discount (``algorithm.gamma``; VERL's default and ReTool's 1.0).
        lam: GAE lambda (``algorithm.lam``; 1.0: Monte-Carlo returns minus the value baseline).
    Returns:
        ``(advantages, returns)``, both (B, T) float32 (advantages whitened, :func:`masked_whiten`).
    Raises:
        ValueError: mismatched shapes, or fewer than two mask-1 tokens in the batch.
    """
    if token_level_rewards.shape != values.shape or values.shape != response_mask.shape or values.dim() != 2:
        raise ValueError(f"gae_advantage_return: rewards {tuple(token_level_rewards.shape)}, values "
                         f"{tuple(values.shape)}, response_mask {tuple(response_mask.shape)} must all be (B, T)")
    with torch.no_grad():
        mask = response_mask.to(values.dtype)
        next_v = torch.zeros_like(values[:, 0])
        last = torch.zeros_like(values[:, 0])
        out = []
        for t in reversed(range(values.shape[1])):
            delta = token_level_rewards[:, t] + gamma * next_v - values[:, t]
            gae = delta + gamma * lam * last
            m = mask[:, t]
            next_v = values[:, t] * m + (1 - m) * next_v  # feedback tokens: keep the carry
            last = gae * m + (1 - m) * last
            out.append(last)
        adv = torch.stack(out[::-1], dim=1)
        returns = adv + values
        return masked_whiten(adv, mask), returns


def value_loss(vpreds: torch.Tensor, returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
               cliprange_value: float = 0.5, loss_agg_mode: LossAggMode = "token-mean",
               batch_num_tokens: float | None = None, batch_num_seqs: float | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss (VERL ``compute_value_loss``; from TRL's PPO trainer).

    ``v_clip = clamp(vpred, V_old - c, V_old + c)``; per token ``max((vpred - R)^2, (v_clip - R)^2)``,
    aggregated with ``loss_agg_mode`` over ``response_mask == 1`` tokens and halved.

    Args:
        vpreds: (B, T) values of the critic being trained (grad flows).
        returns: (B, T) targets (:func:`gae_advantage_return`'s returns).
        values: (B, T) the values the rollout was scored with (the clip's centre).
        response_mask: (B, T) 1 on model-sampled tokens; feedback and padding get no value loss.
        cliprange_value: ``c`` (``critic.cliprange_value``; VERL's default 0.5).
        loss_agg_mode: see :func:`kit.algo.aggregate_loss`.
        batch_num_tokens, batch_num_seqs: the whole batch's counts when it is split into micro-batches
            (:func:`kit.algo.aggregate_loss`; VERL's ``batch_num_tokens`` / ``global_batch_size``).
    Returns:
        ``(loss, clipfrac)``: the scalar loss and the share of mask-1 tokens where the clipped term won
        (VERL's ``critic/vf_clipfrac``), both tensors.
    Raises:
        ValueError: mismatched shapes or an unknown ``loss_agg_mode``.
    """
    if not (vpreds.shape == returns.shape == values.shape == response_mask.shape):
        raise ValueError(f"value_loss: vpreds {tuple(vpreds.shape)}, returns {tuple(returns.shape)}, values "
                         f"{tuple(values.shape)}, response_mask {tuple(response_mask.shape)} must all be (B, T)")
    mask = response_mask.to(vpreds.dtype)
    clipped = torch.max(torch.min(vpreds, values + cliprange_value), values - cliprange_value)
    l1 = (vpreds - returns) ** 2
    l2 = (clipped - returns) ** 2
    loss = 0.5 * aggregate_loss(torch.max(l1, l2), mask, loss_agg_mode, batch_num_tokens, batch_num_seqs)
    clipfrac = masked_mean(torch.gt(l2, l1).to(mask.dtype), mask).detach()
    return loss, clipfrac


def explained_variance(returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor) -> float:
    """``1 - Var(R - V) / (Var(R) + 1e-5)`` over the mask-1 tokens (unbiased variances; VERL's
    ``critic/vf_explained_var`` in ``metric_utils.compute_data_metrics``): 1 for a perfect critic,
    0 for one no better than the returns' mean; NaN with fewer than two mask-1 tokens.

    Args:
        returns, values, response_mask: (B, T).
    """
    sel = response_mask.bool()
    r, v = returns[sel], values[sel]
    if r.numel() < 2:
        return float("nan")
    return float(1.0 - torch.var(r - v) / (torch.var(r) + 1e-5))
