"""GRPO pieces as pure tensor functions: group-relative advantage and the Clip-Higher policy loss.

rStar2-Agent §2.2.1 trains with GRPO without a KL term and without an entropy bonus, with the
asymmetric "Clip-Higher" ratio clip of DAPO (eps_low 0.2, eps_high 0.28) and token-level
averaging over the whole batch. The functions below reproduce, number for number, what VERL
0.9.1 computes for the same settings (``core_algos.compute_grpo_outcome_advantage``,
``core_algos.compute_policy_loss_vanilla`` + ``agg_loss``), which ``tests/algo`` checks on random
inputs, so the local CPU trainer and the paper-scale VERL run optimise the same objective.

Symbols (STYLE.md): ``P`` prompts, ``G`` trajectories kept per prompt, ``B = P*G``, ``T``
response tokens (prompt excluded, tool-feedback tokens included but masked).

What this module does NOT do: no KL penalty, no entropy bonus, no value function, no sequence
packing. The caller computes token log-probabilities and broadcasts nothing by hand: pass a
``(B,)`` advantage and :func:`policy_loss` broadcasts it over the response tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
import torch

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]

#: VERL clamps the log-ratio to this range before exponentiating (core_algos, "for stability").
LOG_RATIO_CLAMP = 20.0


def group_ids_to_index(group_ids: Sequence[Hashable] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """Map arbitrary group labels (uids, prompt ids) to dense ``0..n_groups-1`` integers.

    Args:
        group_ids: (B,) labels; equal labels mean "same prompt". Strings, ints or a tensor.
    Returns:
        (B,) long tensor of dense group numbers in order of first appearance.
    """
    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.detach().cpu().numpy()
    seen: dict[Hashable, int] = {}
    out = [seen.setdefault(g.item() if isinstance(g, np.generic) else g, len(seen)) for g in group_ids]
    return torch.tensor(out, dtype=torch.long)


def group_advantage(
    rewards: torch.Tensor | Sequence[float],
    group_index: Sequence[Hashable] | np.ndarray | torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """GRPO outcome advantage, normalised within each prompt's group (rStar2-Agent §2.2.1).

    ``A_i = (r_i - mean_g) / (std_g + eps)`` with the unbiased standard deviation of the group,
    as ``torch.std`` and VERL 0.9.1 ``compute_grpo_outcome_advantage`` compute it. A group of
    one trajectory gets mean 0 and std 1 (VERL's convention), so its advantage is
    ``r / (1 + eps)``. A group whose rewards are all equal gets advantage 0 (no signal), which
    is why GRPO-RoC may drop such groups before the update.

    Args:
        rewards: (B,) outcome rewards (0/1 in rStar2-Agent), float.
        group_index: (B,) group labels; trajectories of one prompt share a label (uid strings,
            ints or a long tensor). Call this on the KEPT trajectories, after RoC.
        eps: added to the group std to avoid division by zero.
        norm_by_std: divide by the std (GRPO); False gives Dr.GRPO's ``r - mean``.
    Returns:
        (B,) float32 tensor of advantages; broadcast it over tokens with the response mask
        (:func:`policy_loss` does that).
    Raises:
        ValueError: if the two inputs differ in length or are empty.

    Example:
        >>> group_advantage([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0]).tolist()  # doctest: +ELLIPSIS
        [1.4999..., -0.4999..., -0.4999..., -0.4999...]
    """
    r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    idx = group_ids_to_index(group_index)
    if r.numel() != idx.numel():
        raise ValueError(f"group_advantage: {r.numel()} rewards but {idx.numel()} group labels")
    if r.numel() == 0:
        raise ValueError("group_advantage: empty batch")
    n_groups = int(idx.max()) + 1
    count = torch.zeros(n_groups).index_add_(0, idx, torch.ones_like(r))
    total = torch.zeros(n_groups).index_add_(0, idx, r)
    mean = total / count
    sq = torch.zeros(n_groups).index_add_(0, idx, (r - mean[idx]) ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    centred = r - mean[idx]
    return centred / (std[idx] + eps) if norm_by_std else centred


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode = "token-mean",
    batch_num_tokens: float | None = None,
    batch_num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar, counting only ``mask == 1`` tokens.

    Args:
        loss_mat: (B, T) per-token loss.
        mask: (B, T) 0/1 response mask; 0 for prompt padding and tool-feedback tokens.
        mode: ``token-mean`` (sum over all kept tokens of the batch / their number; rStar2-Agent
            §2.2.1 and VERL's default), ``seq-mean-token-mean`` or ``seq-mean-token-sum``.
        batch_num_tokens: denominator for ``token-mean`` when the batch is split into
            micro-batches: pass the number of mask-1 tokens in the WHOLE batch so the summed
            micro-batch losses equal the full-batch token mean. None: this micro-batch's count.
        batch_num_seqs: the same for the ``seq-mean-*`` modes (sequences with >= 1 kept token).
    Returns:
        scalar tensor (differentiable).
    Raises:
        ValueError: unknown mode or mismatched shapes.
    """
    if loss_mat.shape != mask.shape:
        raise ValueError(f"aggregate_loss: loss {tuple(loss_mat.shape)} vs mask {tuple(mask.shape)}")
    m = mask.to(loss_mat.dtype)
    masked = torch.where(m.bool(), loss_mat, torch.zeros_like(loss_mat)) * m
    if mode == "token-mean":
        denom = m.sum() if batch_num_tokens is None else torch.as_tensor(batch_num_tokens, dtype=loss_mat.dtype)
        return masked.sum() / denom
    tokens = m.sum(-1)
    if mode == "seq-mean-token-mean":
        seq = masked.sum(-1) / (tokens + 1e-8)
    elif mode == "seq-mean-token-sum":
        seq = masked.sum(-1)
    else:
        raise ValueError(f"aggregate_loss: unknown mode {mode!r}")
    has = (tokens > 0).to(loss_mat.dtype)
    denom = has.sum() if batch_num_seqs is None else torch.as_tensor(batch_num_seqs, dtype=loss_mat.dtype)
    return (seq * has).sum() / denom


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_c: float | None = 3.0,
    loss_agg_mode: LossAggMode = "token-mean",
    batch_num_tokens: float | None = None,
    batch_num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate with Clip-Higher, masked token-mean, no KL and no entropy term.

    Per token, with ``rho = exp(clamp(logp - old_logp, -20, 20))``::

        l = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))
        l = min(l, -A * c)      only where A < 0 (dual clip, VERL's default c = 3)

    then aggregated with ``loss_agg_mode`` over ``response_mask == 1`` tokens (rStar2-Agent
    §2.2.1; DAPO arXiv 2503.14476 for Clip-Higher and token-level averaging; dual clip from
    arXiv 1912.09729). Equal to VERL 0.9.1 ``compute_policy_loss_vanilla`` with the same clip
    settings and ``agg_loss`` on one data-parallel rank.

    Tool-feedback tokens must carry ``response_mask == 0``: they then contribute neither to the
    loss nor to the denominator, and receive exactly zero gradient.

    Args:
        logprobs: (B, T) log-probs of the sampled tokens under the current policy (grad flows).
        old_logprobs: (B, T) log-probs under the policy that sampled them (no grad needed).
        advantages: (B,) per-trajectory advantages (broadcast over T) or (B, T).
        response_mask: (B, T) 1 for model-sampled tokens, 0 for tool feedback and padding.
        clip_ratio_low: eps_low (0.2).
        clip_ratio_high: eps_high (0.28, Clip-Higher).
        clip_ratio_c: dual-clip constant (> 1) applied to negative advantages; None disables it.
        loss_agg_mode: see :func:`aggregate_loss`.
        batch_num_tokens: see :func:`aggregate_loss` (for micro-batching).
        batch_num_seqs: see :func:`aggregate_loss`.
    Returns:
        ``(loss, metrics)``: the scalar loss to ``backward()``, and floats ``clipfrac``
        (fraction of kept tokens where the clip was active), ``clipfrac_lower`` (dual clip
        active), ``approx_kl`` (mean of ``old_logp - logp`` over kept tokens).
    Raises:
        ValueError: mismatched shapes, or ``clip_ratio_c <= 1``.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != response_mask.shape:
        raise ValueError(
            f"policy_loss: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, "
            f"response_mask {tuple(response_mask.shape)} must all be (B, T)"
        )
    if advantages.dim() == 1:
        if advantages.shape[0] != logprobs.shape[0]:
            raise ValueError(f"policy_loss: {advantages.shape[0]} advantages for {logprobs.shape[0]} rows")
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    elif advantages.shape != logprobs.shape:
        raise ValueError(f"policy_loss: advantages {tuple(advantages.shape)} vs logprobs {tuple(logprobs.shape)}")
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"policy_loss: clip_ratio_c must be > 1, got {clip_ratio_c}")
    advantages = advantages.to(logprobs.dtype)
    mask = response_mask.to(logprobs.dtype)

    log_ratio = torch.clamp(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss1 = torch.maximum(unclipped, clipped)
    per_token = loss1
    lower = torch.zeros_like(loss1)
    if clip_ratio_c is not None:
        dual = -advantages * clip_ratio_c
        per_token = torch.where(advantages < 0, torch.minimum(dual, loss1), loss1)
        lower = ((loss1 > dual) & (advantages < 0)).to(loss1.dtype)

    loss = aggregate_loss(per_token, mask, loss_agg_mode, batch_num_tokens, batch_num_seqs)
    with torch.no_grad():
        n = mask.sum() + 1e-8
        metrics = {
            "clipfrac": float(((clipped > unclipped).to(mask.dtype) * mask).sum() / n),
            "clipfrac_lower": float((lower * mask).sum() / n),
            "approx_kl": float(torch.where(mask.bool(), -log_ratio * mask, torch.zeros_like(log_ratio)).sum() / n),
        }
    return loss, metrics
