"""PPO's critic on the local CPU engine (ReTool §3.2: PPO with a value model in VERL).

``algorithm.adv_estimator = "gae"`` alone turns a local stage or arm into PPO: :func:`open_critic`
gives :func:`kit.train.rl.run_stage` a :class:`Critic`, and :func:`kit.train.step.rl_step` then
    1. scores the kept rows with the critic (:meth:`Critic.values`: one value per response token,
       from the hidden state before it, as VERL's critic does),
    2. computes per-token GAE advantages through the registry (:func:`kit.algo.compute_advantage`,
       ``"gae"``: outcome reward on the last response token, ``algorithm.gamma``, ``algorithm.lam``)
       and the returns (:func:`kit.algo.gae.gae_advantage_return`),
    3. updates the policy with the unchanged Clip-Higher token-mean loss on those advantages
       (:func:`kit.train.update.policy_update`) and the critic with VERL's clipped value loss
       (:meth:`Critic.update`, ``critic.cliprange_value``, ``critic.ppo_epochs``, its own AdamW at
       ``critic.lr``). Interpreter-feedback tokens (response mask 0) get no advantage, no policy
       loss and no value loss; GAE passes through them as VERL's does (:mod:`kit.algo.gae`).

The critic is the policy's architecture with a scalar head: ``Qwen3ForTokenClassification`` with one
label and no dropout, its backbone loaded from the policy the first PPO stage starts from and its head
freshly initialised (VERL: ``AutoModelForTokenClassification.from_pretrained(<actor path>)``, with
``classifier_dropout = 0``). It is saved next to the policy, ``run_dir/critic/`` (model and
``optimizer.pt``), and in each checkpoint (``checkpoints/step_<n>/critic/``); a later stage starts
from the previous stage's (``<init run>/critic/``; a fresh optimizer with ``reset_optimizer``).

Sampling and RoC (:func:`sampling`): ReTool samples G per prompt and trains on all of them
(``algorithm.selection = "all"``: ``algorithm.group_size`` sampled, every row kept); ``selection = "roc"``
gives PPO RoC's selection too (2G sampled, RoC keeps G). The metrics rows carry ``algorithm = "ppo"``
(or ``"ppo_roc"``), ``algorithm.label``. The reference policy and KL stay off (``algorithm.kl_coef = 0``, ReTool).

Does not: share the policy's trunk (a separate model, as VERL's critic), warm up the critic before the
policy (VERL's ``trainer.critic_warmup = 0``), or normalise values.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoConfig, AutoModelForTokenClassification

from kit.algo import compute_advantage, needs_critic, sampling_plan
from kit.algo.gae import (
    explained_variance,
    gae_advantage_return,
    masked_mean,
    outcome_token_rewards,
    value_loss,
)
from kit.config import KitConfig
from kit.train import common
from kit.train.batching import micro_batches, pad_rows, place_response

CRITIC_DIR = "critic"  # next to policy/ in a run folder, and inside each checkpoint folder
MICRO_TOKENS = 16384  # padded tokens per micro-batch (as the policy update's)
#: the metrics row keys of the critic's update (declared in kit.metrics)
CRITIC_KEYS = ("value_loss", "vf_clipfrac", "vf_explained_var", "values_mean", "critic_grad_norm")


def uses_critic(cfg: KitConfig) -> bool:
    """Whether ``cfg`` trains with PPO's critic (``algorithm.adv_estimator = "gae"``; :func:`kit.algo.needs_critic`)."""
    return needs_critic(cfg.algorithm)


def sampling(cfg: KitConfig) -> tuple[int, str, str]:
    """``(n per prompt, selection, row label)`` of a step: :func:`kit.algo.sampling_plan` of ``cfg.algorithm``
    (``algorithm.selection`` decides the sampling; PPO's label is ``"ppo"`` or ``"ppo_roc"``)."""
    return sampling_plan(cfg.algorithm)


@dataclass
class Critic:
    """The value model and its optimiser (see the module docstring)."""

    model: Any
    optimizer: torch.optim.Optimizer
    cfg: KitConfig

    def save(self, path: str | Path) -> Path:
        """``save_pretrained`` plus ``optimizer.pt`` into ``path`` (created)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        return path

    def _rows(self, trajectories: Sequence[Any]) -> list[tuple[list[int], list[int]]]:
        return [(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + list(t.response_mask)) for t in trajectories]

    def _forward(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """(b, L) value of each position's token from the hidden state before it (column 0: 0)."""
        out = self.model(input_ids=ids, attention_mask=att).logits[..., 0].float()  # (b, L)
        return torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)

    def values(self, trajectories: Sequence[Any], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The critic's values of the rows' response tokens (no grad).

        Returns:
            ``(values, response_mask, lengths)``: (B, T) float32 values and 0/1 mask over the response
            tokens (T the longest response, right-padded with mask 0), (B,) response lengths.
        """
        T = max(len(t.response_ids) for t in trajectories)
        values = torch.zeros(len(trajectories), T)
        mask = torch.zeros(len(trajectories), T)
        for k, t in enumerate(trajectories):
            mask[k, :len(t.response_mask)] = torch.tensor(list(t.response_mask), dtype=torch.float32)
        rows = self._rows(trajectories)
        self.model.eval()
        with torch.no_grad():
            for c in micro_batches([len(r[0]) for r in rows], MICRO_TOKENS):
                ids, att, _ = pad_rows([rows[i] for i in c], pad_id)
                full = self._forward(ids, att)
                for j, i in enumerate(c):
                    p, n = len(trajectories[i].prompt_ids), len(trajectories[i].response_ids)
                    values[i, :n] = full[j, p:p + n]
        lengths = torch.tensor([len(t.response_ids) for t in trajectories])
        return values, mask, lengths

    def update(self, trajectories: Sequence[Any], values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               pad_id: int, lr: float) -> dict[str, float]:
        """``critic.ppo_epochs`` optimiser steps of the clipped value loss on the rows (one mini-batch).

        Args:
            trajectories: the B rows the policy trained on.
            values, returns, mask: (B, T) from :meth:`values` and :func:`ppo_advantages`.
            lr: the critic's learning rate this step.
        Returns:
            ``value_loss`` (mean over the epochs), ``vf_clipfrac`` (the same), ``vf_explained_var`` and
            ``values_mean`` (of the rollout's values against the returns, before the update: VERL's data
            metrics), ``critic_grad_norm`` (the last epoch's, before clipping).
        """
        c_cfg = self.cfg.critic
        rows = self._rows(trajectories)
        n_tok = float(mask.sum())
        prompt = [len(t.prompt_ids) for t in trajectories]
        chunks = micro_batches([len(r[0]) for r in rows], MICRO_TOKENS)
        tensors = [pad_rows([rows[i] for i in c], pad_id) for c in chunks]
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.model.train()
        loss_sum = clip_sum = gn = 0.0
        epochs = max(1, c_cfg.ppo_epochs)
        for _ in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for c, (ids, att, msk) in zip(chunks, tensors, strict=True):
                L = ids.shape[1]
                old = place_response(values[c], [prompt[i] for i in c], L)
                ret = place_response(returns[c], [prompt[i] for i in c], L)
                loss, cf = value_loss(self._forward(ids, att), ret, old, msk, c_cfg.cliprange_value,
                                      c_cfg.loss_agg_mode, batch_num_tokens=n_tok, batch_num_seqs=float(len(rows)))
                loss.backward()
                loss_sum += float(loss.detach())
                clip_sum += float(cf) * float(msk.sum()) / max(n_tok, 1.0)
            gn = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c_cfg.grad_clip))
            self.optimizer.step()
        self.model.eval()
        return {"value_loss": loss_sum / epochs, "vf_clipfrac": clip_sum / epochs,
                "vf_explained_var": explained_variance(returns, values, mask),
                "values_mean": float(masked_mean(values, mask)), "critic_grad_norm": gn}


def ppo_advantages(cfg: KitConfig, critic: Critic, trajectories: Sequence[Any], rewards: torch.Tensor,
                   pad_id: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token GAE advantages of the kept rows and what the critic's update needs.

    Args:
        trajectories: the B kept rows.
        rewards: (B,) their outcome rewards.
    Returns:
        ``(advantages, inputs)``: (B, T) advantages through the registry (``"gae"``) and
        ``{"values", "returns", "mask"}``, each (B, T) (:meth:`Critic.update`'s arguments).
    """
    values, mask, lengths = critic.values(trajectories, pad_id)
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    adv = compute_advantage(cfg.algorithm, rewards, list(range(len(trajectories))), values=values,
                            response_mask=mask, lengths=lengths)
    token_rewards = outcome_token_rewards(rewards, lengths, values.shape[1])
    _, returns = gae_advantage_return(token_rewards, values, mask, cfg.algorithm.gamma, cfg.algorithm.lam)
    return adv, {"values": values, "returns": returns, "mask": mask}


def critic_from(path: str | Path, cfg: KitConfig, *, optimizer: bool = True, seed: int = 0) -> Critic:
    """A :class:`Critic` from a saved critic folder (its ``optimizer.pt`` when ``optimizer``) or, for a
    policy folder, the policy's backbone under a fresh value head (seeded by ``seed``)."""
    path = Path(path)
    c = cfg.critic
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # "newly initialized: score.weight" is the point here
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            config = AutoConfig.from_pretrained(str(path), num_labels=1, local_files_only=True)
            config.classifier_dropout = 0.0  # VERL's critic: no dropout on the value head
            model = AutoModelForTokenClassification.from_pretrained(str(path), config=config, dtype=torch.float32,
                                                                    local_files_only=True)
    finally:
        transformers.logging.set_verbosity(level)
    model.eval()
    opt = common.make_optimizer(model, c.lr, c.weight_decay)
    if optimizer and (path / "optimizer.pt").exists():
        opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    return Critic(model, opt, cfg)


def open_critic(cfg: KitConfig, policy_dir: str | Path, run_dir: str | Path, *, reset_optimizer: bool = False
                ) -> Critic | None:
    """The stage's critic, or None when ``cfg`` does not train one (:func:`uses_critic`).

    In order: the run's latest checkpoint's ``critic/`` (a resumed stage); the upstream run's
    ``critic/`` beside ``policy_dir`` (a later PPO stage; optimizer state unless ``reset_optimizer``);
    else the policy in ``policy_dir`` under a fresh value head (the first PPO stage, VERL's init).
    """
    if not uses_critic(cfg):
        return None
    ckpt = common.latest_checkpoint(run_dir)
    if ckpt is not None and (ckpt / CRITIC_DIR / "config.json").exists():
        return critic_from(ckpt / CRITIC_DIR, cfg)
    upstream = Path(policy_dir).parent / CRITIC_DIR
    if (upstream / "config.json").exists():
        return critic_from(upstream, cfg, optimizer=not reset_optimizer)
    logging.getLogger(__name__).info("critic: fresh value head on the policy in %s", policy_dir)
    return critic_from(policy_dir, cfg, optimizer=False, seed=common.step_seed(cfg.seed, "critic-init"))
