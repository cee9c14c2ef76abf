"""One local RL step after the rollout: RoC selection, token log-probs and the clipped policy update.

rStar2-Agent §2.2 on the local CPU engine (:mod:`kit.train.rl` runs the stages): :func:`select`
keeps G of 2G rollouts per prompt with RoC (§2.2.2-2.2.3, :func:`kit.algo.roc_step`) or all G
for plain GRPO (the ablation's baseline, §5.3); :func:`policy_update` is one optimizer step of
the Clip-Higher token-mean loss (§2.2.1, :func:`kit.algo.policy_loss`) on the kept rows, in
micro-batches of similar lengths, with :func:`token_logprobs` computing the LM head on
response-mask positions only; rows whose advantage is 0 (a group with one reward) run no
forward or backward there, which leaves the step unchanged. Shapes: B kept trajectories, T
tokens. :mod:`kit.train.rl` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from kit.algo import RocParams, compute_advantage, counters, p_format, policy_loss, roc_metrics, roc_step
from kit.config import KitConfig
from kit.reward.pool import INFRA_ERROR
from kit.train.batching import micro_batches, pad_rows, place_response
from kit.train.rollouts import Batch

#: ``algorithm.selection`` values: RoC's 2G -> G selection, or every row kept
SELECTIONS = ("roc", "all")
MICRO_TOKENS = 16384  # the no-grad forwards' micro-batch; the update's is algorithm.update_micro_tokens (same default)


def token_logprobs(model, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) log-prob of each token given its prefix (column 0 is 0: it has no prefix).

    With ``mask`` (B, T), only the positions where it is non-zero are computed (the LM head and
    the log-softmax over the vocabulary run on those rows only; prompt, tool-feedback and padding
    positions, about half of an RL batch's columns, are skipped) and the others are 0.
    """
    if mask is None:
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
        lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    hidden = model.model(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]  # (B, T-1, H)
    sel = mask[:, 1:] > 0
    logits = model.lm_head(hidden[sel]).float()  # (N, V): the masked positions only
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:][sel][:, None]).squeeze(-1)
    body = torch.zeros(sel.shape, dtype=picked.dtype).masked_scatter(sel, picked)  # differentiable in picked
    return torch.cat([torch.zeros_like(body[:, :1]), body], dim=1)


def sampling_neg_logp(cfg: KitConfig, trajectory: Any) -> float | None:
    """Sum over the response-mask tokens of ``-log p`` from the rollout's own sampling log-probs,
    or ``None`` when they are not the training policy's: logprobs missing or of another length,
    or sampling that was not plain (``rollout.temperature != 1`` or ``rollout.top_p < 1``).
    On-policy they equal the training forward's log-probs up to float rounding (~1e-6)."""
    lps, mask = trajectory.logprobs, trajectory.response_mask
    if lps is None or len(lps) != len(mask) or cfg.rollout.temperature != 1.0 or cfg.rollout.top_p < 1.0:
        return None
    return float(-sum(lp for lp, m in zip(lps, mask, strict=True) if m))


def policy_update(cfg: KitConfig, model, optimizer, trajectories: Sequence[Any], advantages: torch.Tensor,
                  pad_id: int, lr: float, recompute_old: bool | None = None,
                  skip_zero_advantage: bool = True) -> dict[str, float]:
    """One optimizer step of the clipped policy loss on the kept trajectories.

    Rows whose advantage is exactly 0 (every row of a group with one reward: all correct or all
    wrong) add nothing to the loss or its gradient: the clipped objective is ``-A * ratio``, and
    the token-mean and sequence denominators stay those of the whole batch (``batch_num_tokens``,
    ``batch_num_seqs``). So they run no forward or backward here; the gradient is that of the
    full batch up to float summation order. With no row left the optimizer still steps on a zero
    gradient (AdamW's moments move the weights as they would). ``neg_logp`` still covers every
    kept token: skipped rows take theirs from the rollout's sampling log-probs
    (:func:`sampling_neg_logp`) or, where those are not the policy's, from a no-grad forward.

    Args:
        trajectories: B kept ``Trajectory`` objects (prompt ids + response ids + response mask).
        advantages: (B,) from :func:`kit.algo.group_advantage`, or (B, T) per response token (PPO's
            GAE, :func:`kit.train.critic.ppo_advantages`; T at least the longest response).
        lr: learning rate of this step.
        recompute_old: run a separate no-grad forward for the old log-probs. Default: only when
            ``ppo_epochs > 1``; with one pass the old policy is the current one, so the old
            log-probs are the current ones detached (the same numbers, one forward pass fewer).
        skip_zero_advantage: ``False`` runs every row (the same step; for checks and
            ``benchmarks/rl_step_profile.py``'s before/after).
    Returns:
        ``loss`` and ``clipfrac`` (means over the ``ppo_epochs`` passes; ``grad_norm`` is the last
        pass's), ``entropy`` proxy (``-mean logp`` of kept tokens),
        ``update_tokens`` (every kept row's response-mask tokens), ``update_rows_skipped`` (rows
        with advantage 0, not run).
    Raises:
        ValueError: ``advantages`` does not have one entry per trajectory.
    """
    a = cfg.algorithm
    per_token = advantages.dim() == 2  # PPO's GAE: one advantage per response token (kit.train.critic)
    if advantages.shape[0] != len(trajectories) or advantages.dim() > 2 or (
            per_token and advantages.shape[1] < max((len(t.response_ids) for t in trajectories), default=0)):
        raise ValueError(f"advantages: shape {tuple(advantages.shape)}, expected ({len(trajectories)},) or "
                         f"({len(trajectories)}, >= the longest response)")
    rows = [(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + list(t.response_mask)) for t in trajectories]
    n_tok = float(sum(sum(m) for _, m in rows))
    zero = [skip_zero_advantage and bool((advantages[i] == 0).all()) for i in range(len(rows))]
    active = [i for i in range(len(rows)) if not zero[i]]
    skipped = [i for i in range(len(rows)) if zero[i]]
    chunks = [[active[j] for j in c] for c in micro_batches([len(rows[i][0]) for i in active], a.update_micro_tokens)]
    tensors = [pad_rows([rows[i] for i in c], pad_id) for c in chunks]
    if recompute_old is None:
        recompute_old = a.ppo_epochs > 1
    old: list[torch.Tensor | None] = [None] * len(tensors)
    if recompute_old:
        with torch.no_grad():
            old = [token_logprobs(model, ids, att, msk) for ids, att, msk in tensors]
    for g in optimizer.param_groups:
        g["lr"] = lr
    stats = {"loss": 0.0, "clipfrac": 0.0, "neg_logp": skipped_neg_logp(cfg, model, [trajectories[i] for i in skipped],
                                                                       [rows[i] for i in skipped], pad_id) / max(n_tok, 1.0)}
    gn = 0.0
    for epoch in range(max(1, a.ppo_epochs)):
        optimizer.zero_grad(set_to_none=True)
        for c, (ids, att, msk), old_lp in zip(chunks, tensors, old, strict=True):
            lp = token_logprobs(model, ids, att, msk)  # response-mask positions only: the loss reads no others
            if old_lp is None:
                old_lp = lp.detach()
            adv_c = place_response(advantages[c], [len(trajectories[i].prompt_ids) for i in c], lp.shape[1]) \
                if per_token else advantages[c]
            loss, m = policy_loss(lp, old_lp, adv_c, msk, a.clip_ratio_low, a.clip_ratio_high,
                                  a.clip_ratio_c, a.loss_agg_mode, batch_num_tokens=n_tok, batch_num_seqs=float(len(rows)))
            loss.backward()
            w = float(msk.sum()) / n_tok
            stats["loss"] += float(loss.detach())
            stats["clipfrac"] += float(m.get("clipfrac", 0.0)) * w
            if epoch == 0:  # the entropy proxy of the policy that sampled the batch
                stats["neg_logp"] += float(-(lp.detach() * msk).sum()) / n_tok
        for p in model.parameters():  # rows skipped (or none run): a zero gradient, not a skipped step
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip))
        optimizer.step()
    epochs = max(1, a.ppo_epochs)  # loss and clipfrac: means over the epochs (VERL averages its per-mini-batch metrics)
    return {"loss": stats["loss"] / epochs, "grad_norm": gn, "clipfrac": stats["clipfrac"] / epochs,
            "neg_logp": stats["neg_logp"],
            "update_tokens": n_tok, "update_rows_skipped": float(len(skipped))}


def skipped_neg_logp(cfg: KitConfig, model, trajectories: Sequence[Any], rows: Sequence[Any], pad_id: int) -> float:
    """Summed ``-log p`` (nats) over the response-mask tokens of the rows an update does not run
    (advantage 0), under the current policy: from each row's sampling log-probs where those are
    the policy's (:func:`sampling_neg_logp`), else from one no-grad forward of those rows.

    Args:
        trajectories: the skipped ``Trajectory`` objects.
        rows: their ``(prompt + response ids, response mask over the same positions)``.
    """
    total, need = 0.0, []
    for t, row in zip(trajectories, rows, strict=True):
        v = sampling_neg_logp(cfg, t)
        if v is None:
            need.append(row)
        else:
            total += v
    if need:
        with torch.no_grad():
            for c in micro_batches([len(ids) for ids, _ in need], MICRO_TOKENS):
                ids, att, msk = pad_rows([need[i] for i in c], pad_id)
                total += float(-(token_logprobs(model, ids, att, msk) * msk).sum())
    return total


def advantages(cfg: KitConfig, batch: Batch, kept: np.ndarray) -> torch.Tensor:
    """(K,) float32 advantages of the kept rows ``kept`` (indices into ``batch.flat()``), grouped by
    prompt, with the estimator ``cfg.algorithm.adv_estimator`` names (:func:`kit.algo.compute_advantage`).

    Raises:
        ValueError: an unregistered ``algorithm.adv_estimator`` (names the key, lists the registered ones).
    """
    n = batch.rewards.shape[1]
    gids = np.repeat(np.arange(len(batch.groups)), n)
    return compute_advantage(cfg.algorithm, torch.tensor(batch.rewards.reshape(-1)[kept]), gids[kept].tolist())


def _reasons(batch: Batch, size: int) -> list[str]:
    """The (P*n,) verdict reasons, problem-major; "" for rows a test double left without one."""
    flat = [r for g in batch.verdict_reasons for r in g]
    return flat if len(flat) == size else [""] * size


def select(cfg: KitConfig, batch: Batch, selection: str, seed: int) -> tuple[np.ndarray, dict[str, float]]:
    """Rows kept for the update and the selection metrics (``selection``: ``algorithm.selection``).

    ``roc``: :func:`kit.algo.roc_step` (2G -> G, penalties from the structured counters).
    ``all``: every row kept; the same metrics computed with ``kept = all``.
    Rows the verifier could not grade (reason ``infra_error``, :mod:`kit.reward.pool`: never the
    model's fault, like the sandbox's ``infra_error`` calls RoC leaves out of ``p_err``) are left
    out before either: they are never kept, so they enter neither their group's advantage
    statistics nor the loss; a group short of rows is kept whole (:func:`kit.algo.roc_select`).

    Returns:
        ``(kept, metrics)``: (K,) row indices into ``batch.flat()``; metrics include
        ``tool_error_ratio_correct_before/after``, ``p_format_mean``, ``kept``.
    """
    flat = batch.flat()
    n = batch.rewards.shape[1]
    rewards = batch.rewards.reshape(-1)
    gids = np.repeat(np.arange(len(batch.groups)), n)
    cnt = counters(flat)
    graded = np.flatnonzero([r != INFRA_ERROR for r in _reasons(batch, rewards.size)])  # issue #44
    if selection == "roc":
        if graded.size == rewards.size:
            sel, m = roc_step(rewards, gids, cnt, RocParams.from_config(cfg.algorithm), seed=seed)
            return sel.kept, m
        sel, m = roc_step(rewards[graded], gids[graded], {k: v[graded] for k, v in cnt.items()},
                          RocParams.from_config(cfg.algorithm), seed=seed)
        return graded[sel.kept], m
    if selection != "all":
        raise ValueError(f"unknown selection {selection!r}; expected one of {SELECTIONS}")
    kept = graded
    pf = p_format(cnt["answer_tags"], cnt["turns"], cnt["answered"])
    m = roc_metrics(rewards, kept, cnt["tool_calls"] - cnt["infra_errors"], cnt["tool_failures"], pf, cnt["answer_tags"])
    return kept, m
