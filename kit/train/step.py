"""One RL step on the local CPU engine (rStar2-Agent §2.2, §4.3): sample, verify, select, update.

:func:`rl_step` is the one place a step happens: :func:`kit.train.rl.run_stage` loops over it and
the anatomy view of notebook 03 (:mod:`kit.chain.anatomy`) calls it with ``update=False``, so the
trajectories the anatomy shows are the ones the stage trained on (same seeds, same selection).

The step's seeds are functions of ``(cfg.seed, stage name, step)`` only (:func:`kit.train.common.step_seed`):
    * torch and ``random``: ``step_seed(seed, stage, algorithm, "torch", step)``;
    * the step's problems: a permutation of the pool seeded by ``step_seed(seed, stage, "problems")``;
    * the rollouts: ``step_seed(seed, stage, "rollout", step)``, the same for both algorithms (at a
      given policy GRPO's G samples are the first G of GRPO-RoC's 2G: the paired ablation);
    * RoC's selection: ``step_seed(seed, stage, "roc", step)``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kit.analysis import code_behaviour
from kit.analysis.bstar import balance_score_step
from kit.config import KitConfig, StageConfig
from kit.data.tasks import TaskProblem
from kit.train import common, recording
from kit.train import critic as ppo
from kit.train.rollouts import Batch, batch_stats, collect
from kit.train.update import advantages, policy_update, select

#: the update's keys of a metrics row when nothing was kept (or ``update=False``)
NO_UPDATE = {"loss": 0.0, "grad_norm": 0.0, "clipfrac": 0.0, "neg_logp": 0.0, "update_tokens": 0.0,
             "update_rows_skipped": 0.0}


@dataclass
class StepResult:
    """What one RL step did.

    Attributes:
        problems: the step's P problems.
        batch: the (P, n) rollouts with rewards (``n = 2G`` for ``grpo_roc``, G for ``grpo``).
        kept: (K,) row indices into ``batch.flat()`` the update trained on.
        selection: the selection metrics (:func:`kit.train.update.select`).
        advantages: (K,) group advantages of the kept rows (empty when K = 0); PPO: each row's mean
            GAE advantage over its model tokens (the per-token ones are ``token_advantages``).
        row: the step's ``metrics.jsonl`` row (without the update's keys when ``update=False``:
            those are :data:`NO_UPDATE`'s zeros then).
    """

    problems: list[TaskProblem]
    batch: Batch
    kept: np.ndarray
    selection: dict[str, float]
    advantages: torch.Tensor
    row: dict[str, Any] = field(default_factory=dict)
    #: PPO (``algorithm.adv_estimator = "gae"``): (K, T) GAE advantages per response token; else None
    token_advantages: torch.Tensor | None = None


def step_problems(pool: Sequence[TaskProblem], step: int, per_step: int, seed: int) -> list[TaskProblem]:
    """The ``per_step`` problems of step ``step``: a seeded permutation of ``pool`` walked in
    order (a new permutation each pass). Pure function of its arguments.

    Raises:
        ValueError: ``pool`` is empty.
    """
    if not pool:
        raise ValueError("the stage's problem pool is empty (check data.task_train_size and the stage difficulty)")
    out = []
    for k in range(step * per_step, (step + 1) * per_step):
        epoch, i = divmod(k, len(pool))
        perm = list(range(len(pool)))
        random.Random(common.step_seed(seed, "perm", epoch)).shuffle(perm)
        out.append(pool[perm[i]])
    return out


async def rl_step(cfg: KitConfig, stage: StageConfig, model: Any, tok: Any, optimizer: Any, pool: Sequence[TaskProblem],
                  step: int, executor: Any, *, update: bool = True, global_offset: int = 0,
                  threads: int | None = None, recorder: Any = None, critic: ppo.Critic | None = None) -> StepResult:
    """Step ``step`` (0-based) of ``stage``: P problems of ``pool``, n rollouts each through the
    sandbox, binary rewards, selection (RoC keeps G of 2G; GRPO keeps all G), then one clipped
    policy update on the kept rows (report §2.2.1-2.2.2).

    Args:
        cfg: the run's resolved config: ``cfg.seed`` and ``cfg.algorithm.label`` (``grpo_roc`` or
            ``grpo``) pick the seeds and the selection; ``cfg.algorithm`` P, G, 2G, lr.
        stage: the stage (its name seeds the step; budget and turn limit of the rollouts; its
            ``steps`` set the learning-rate schedule's length).
        model, tok: the policy (``kit.models.load_policy``) and its tokenizer.
        optimizer: the policy's optimizer (unused when ``update`` is False).
        pool: the stage's problems (after the hard filter for a ``hard`` stage).
        step: 0-based step within the stage.
        executor: the sandbox (``kit.sandbox.SandboxPool``).
        update: run the policy update (False: sample, verify and select only; the anatomy view).
        global_offset: RL steps done before this stage (the row's ``global_step`` is ``global_offset + step + 1``).
        threads: torch threads now (recorded as ``perf_threads``; default torch's).
        recorder: a ``kit.records.RolloutRecorder`` (:func:`kit.train.recording.open_recorder`): the
            step's trajectories, RoC's decision and the advantages used are written after the update
            (when it wants the step); None records nothing.
        critic: PPO's value model (:func:`kit.train.critic.open_critic`), required when
            ``algorithm.adv_estimator = "gae"``: GAE advantages from its values, its update after the
            policy's, G sampled and all kept (:func:`kit.train.critic.sampling`), ``algorithm = "ppo"``.
    Returns:
        A :class:`StepResult`.
    Raises:
        ValueError: an unknown algorithm, an empty pool, or ``"gae"`` without a critic.
    """
    a, seed, algorithm, name = cfg.algorithm, cfg.seed, cfg.algorithm.label, stage.name
    if ppo.uses_critic(cfg) and critic is None:
        raise ValueError("algorithm.adv_estimator = 'gae' (PPO) needs the stage's critic: rl_step(..., "
                         "critic=kit.train.critic.open_critic(cfg, policy_dir, run_dir))")
    n, selection, label = ppo.sampling(cfg)  # GRPO-RoC: 2G then RoC; GRPO and PPO: G, all kept
    common.seed_everything(common.step_seed(seed, name, algorithm, "torch", step))
    problems = step_problems(pool, step, a.prompts_per_step, common.step_seed(seed, name, "problems"))
    model.eval()
    batch = await collect(cfg, model, tok, problems, n, executor,
                          # same seed for both algorithms: at a given policy GRPO's G samples
                          # are the first G of GRPO-RoC's 2G (paired ablation)
                          seed=common.step_seed(seed, name, "rollout", step),
                          max_response_tokens=stage.max_response_tokens, max_turns=stage.max_turns,
                          temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    kept, sel_m = select(cfg, batch, selection, common.step_seed(seed, name, "roc", step))
    t_up, c_up = time.perf_counter(), time.process_time()
    upd: dict[str, float] = dict(NO_UPDATE)
    adv, token_adv = torch.zeros(0), None
    if critic is not None:
        upd.update(dict.fromkeys(ppo.CRITIC_KEYS, 0.0), vf_explained_var=float("nan"), values_mean=float("nan"))
    if kept.size:
        flat = batch.flat()
        if critic is not None:  # PPO: per-token GAE from the critic's values (the registry's "gae")
            token_adv, ppo_in = ppo.ppo_advantages(cfg, critic, [flat[i] for i in kept],
                                                   torch.tensor(batch.rewards.reshape(-1)[kept]), tok.pad_token_id)
            adv = (token_adv * ppo_in["mask"]).sum(1) / ppo_in["mask"].sum(1).clamp(min=1)
        else:
            adv = advantages(cfg, batch, kept)  # the estimator algorithm.adv_estimator names (kit.algo.advantage)
        if update:
            model.train()
            lr = common.lr_at(step, a.lr, a.warmup_steps, stage.steps, "constant")
            upd = policy_update(cfg, model, optimizer, [flat[i] for i in kept],
                                adv if token_adv is None else token_adv, tok.pad_token_id, lr)
            if critic is not None:  # the same rows; the two models share nothing (VERL updates the critic first)
                upd.update(critic.update([flat[i] for i in kept], **ppo_in, pad_id=tok.pad_token_id, lr=cfg.critic.lr))
    row = {"stage": name, "step": step + 1, "global_step": global_offset + step + 1,
           **batch_stats(batch),
           "tool_error_ratio_correct_before": sel_m["tool_error_ratio_correct_before"],
           "tool_error_ratio_correct_after": sel_m["tool_error_ratio_correct_after"],
           "p_format_mean": sel_m["p_format_mean"],
           # B-STaR exploration/exploitation balance of this step's samples (monitoring only)
           "bstar_balance": balance_score_step((batch.rewards > 0).tolist(),
                                               [[t.response_text for t in g] for g in batch.groups]),
           "p_format_mean_before": sel_m["p_format_mean_before"],
           "kept": int(kept.size), "sampled": int(batch.rewards.size),
           "time_generate_s": batch.time_generate_s, "time_tool_s": batch.time_tool_s,
           "time_verify_s": batch.time_verify_s, "time_update_s": time.perf_counter() - t_up,
           # load-insensitive profile of the step (time_* and perf_* vary with the machine and
           # with tool latency, not with the seed): CPU seconds of this process, engine counts
           "time_cpu_generate_s": batch.cpu_generate_s, "time_cpu_update_s": time.process_time() - c_up,
           "perf_decode_steps": batch.engine.get("steps", 0.0), "perf_decoded_tokens": batch.engine.get("tokens", 0.0),
           "perf_row_steps": batch.engine.get("row_steps", 0.0),
           "perf_threads": threads if threads is not None else torch.get_num_threads(),
           "tool_calls_total": float(sum(t.tool_calls for t in batch.flat())),
           # ReTool §3.3's code-interpreter behaviour over the sampled rollouts (kit.analysis.code_behaviour)
           **code_behaviour.trajectory_metrics(batch.flat(), (batch.rewards.reshape(-1) > 0).tolist(), tok),
           "algorithm": label, "seed": seed, **upd}
    res = StepResult(problems, batch, kept, sel_m, adv, row, token_adv)
    recording.record_step(recorder, cfg, res)  # rollout records (kit.records), issue #32
    return res
