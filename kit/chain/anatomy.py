"""Anatomy of one GRPO-RoC step on one prompt, for notebook 03 (rStar2-Agent §2.2.2-2.2.3).

:func:`roc_step_anatomy` replays the first step of an RL stage from the policy the stage started
from by calling the trainer's own step (:func:`kit.train.step.rl_step`, without its update), so
the 2G trajectories shown are the ones that step sampled (a group's trajectories are
reproducible from ``(seed, stage, step)``; see :mod:`kit.train.step`). For one prompt of that step it returns every trajectory with its
reward, its RoC counters, ``p_err``, ``p_format``, ``p_total``, whether RoC kept it and its GRPO
advantage among the kept ones. Selection runs over the whole step, as in training, so the kept
rows are exactly those the stage trained on.

Composes :mod:`kit.train.rl` (the stage's pool), :mod:`kit.train.step` (sampling through the
real sandbox, grading, selection, advantages) and :mod:`kit.algo` (the penalties shown); nothing
here samples, scores or selects by itself. The group is shown as one view of the rollout explorer
(:meth:`RocAnatomy.group_view`: the step's records, :mod:`kit.records`, in ``kit.explore``'s table).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kit.algo import RocParams, counters, p_err, p_format, p_total
from kit.chain.display import TrajectoryView
from kit.chain.policies import load_run_policy
from kit.config import KitConfig
from kit.explore.render import GroupView
from kit.rollout import run_coroutine
from kit.sandbox import SandboxPool
from kit.train import recording, rl
from kit.train.step import rl_step


@dataclass
class RocAnatomy:
    """Output of :func:`roc_step_anatomy`.

    Attributes:
        problem: the prompt's ``kit.data.pools.Problem``.
        table: DataFrame, one row per sampled trajectory (2G rows): ``reward, tool_calls,
            tool_failures, answer_tags, turns, p_err, p_format, p_total, kept, advantage``
            (NaN when not kept), ``tokens`` and ``ending`` (the last characters of the response).
        trajectories: the 2G ``kit.rollout.Trajectory`` objects, in table order.
        tokenizer: the policy's tokenizer (for :class:`kit.chain.TrajectoryView`).
        stage, step, group: where this came from (``group`` indexes the step's P prompts).
        note: one sentence on what was kept and why.
        step_kept: trajectories RoC kept over the whole step (all P prompts), as the stage's
            ``metrics.jsonl`` row of that step records in ``kept``.
        step_reward_mean: mean reward over the step's P x 2G trajectories (``reward_mean``).
        records: the group's 2G rollout records (:mod:`kit.records`, as the stage's ``rollouts/``
            holds them: :func:`kit.train.recording.step_records`), shown by :meth:`group_view`.
    """

    problem: Any
    table: Any
    trajectories: list
    tokenizer: Any
    stage: str
    step: int
    group: int
    note: str
    step_kept: int = 0
    step_reward_mean: float = float("nan")
    records: list = dataclasses.field(default_factory=list)

    def group_view(self, selected: int | None = None) -> GroupView:
        """The group as the rollout explorer shows it (``kit.explore``: header, prompt, the table of
        reward, p_err / p_format / p_total, RoC's decision, advantage, tool errors); :attr:`table`
        as plain text where HTML does not show (the PDF)."""
        return GroupView(self.records, self.tokenizer, selected, text=self.table.round(3).to_string())

    def view(self, index: int | None = None) -> TrajectoryView:
        """The coloured view of trajectory ``index`` of :attr:`table`; default the first one RoC kept
        that got a tool response (called the tool, more than one turn), else the first that got one,
        else trajectory 0."""
        if index is None:
            answered = (self.table.tool_calls > 0) & (self.table.turns > 1)
            order = [*self.table.index[self.table.kept & answered], *self.table.index[answered], 0]
            index = int(order[0])
        row = self.table.loc[index]
        return TrajectoryView(self.trajectories[index], self.tokenizer,
                              title=f"trajectory {index}: reward {row.reward:.0f}, {'kept' if row.kept else 'dropped'} by RoC")


def pick_group(rewards: np.ndarray, failures: np.ndarray) -> int:
    """The prompt to show: the first whose group has both correct and wrong trajectories and a
    correct one with a failed tool call (RoC's case), else the first with mixed rewards, else 0.

    Args:
        rewards: (P, n) 0/1 rewards.
        failures: (P, n) failed tool calls per trajectory.
    """
    mixed = [(r > 0).any() and (r == 0).any() for r in rewards]
    for p, (r, f) in enumerate(zip(rewards, failures, strict=True)):
        if mixed[p] and ((r > 0) & (f > 0)).any():
            return p
    return mixed.index(True) if any(mixed) else 0


def roc_step_anatomy(cfg: KitConfig, init_dir: str | os.PathLike, *, stage_name: str | None = None,
                     seed: int | None = None, step: int = 0, group: int | None = None) -> RocAnatomy:
    """Replay step ``step`` of ``stage_name`` from the policy in ``init_dir`` and dissect one prompt.

    Args:
        cfg: the stage's config (``algorithm``: P, G, 2G, RoC settings; ``stages.<stage_name>``).
        init_dir: the ``policy/`` folder the stage started from (e.g. the SFT run's).
        stage_name: which stage's budget, turns and problem pool (default the first of ``cfg.stages``).
        seed: the stage's seed (default ``cfg.seed``).
        step: 0-based step to replay (0 = the stage's first step, taken from ``init_dir``'s policy;
            later steps were sampled by a policy that has moved, so they are not reproduced).
        group: which of the step's P prompts; default :func:`pick_group`.
    Returns:
        A :class:`RocAnatomy`.
    Raises:
        FileNotFoundError: ``init_dir`` holds no policy.
        ValueError: an unknown stage, or ``group`` outside the step's prompts.
    """
    seed = cfg.seed if seed is None else seed
    stage_name = stage_name or cfg.stages[0].name
    stage = rl.stage_config(cfg, stage_name)
    a = cfg.algorithm
    # the stage's GRPO-RoC step as the trainer runs it: the same function, config and seeds
    data = cfg.data if cfg.data.split_seed >= 0 else dataclasses.replace(cfg.data, split_seed=cfg.seed)  # the run's problems
    cfg = dataclasses.replace(cfg, seed=seed, algorithm=dataclasses.replace(a, selection="roc"), data=data)
    model, tok = load_run_policy(Path(init_dir))

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            return await rl_step(cfg, stage, model, tok, None, rl.stage_pool(cfg, stage), step, pool, update=False)

    res = run_coroutine(go())
    batch, kept, problems, n = res.batch, res.kept, res.problems, a.oversample
    flat = batch.flat()
    cnt = counters(flat)
    P = len(problems)
    if group is None:
        group = pick_group(batch.rewards, cnt["tool_failures"].reshape(P, n))
    if not 0 <= group < P:
        raise ValueError(f"group {group} is outside the step's {P} prompts")
    rows = np.arange(group * n, (group + 1) * n)
    rewards = batch.rewards.reshape(-1)
    pe = p_err(cnt["tool_calls"], cnt["tool_failures"], cnt["infra_errors"])
    pf = p_format(cnt["answer_tags"], cnt["turns"], cnt["answered"])
    params = RocParams.from_config(a)
    pt = p_total(pe, pf, params.use_error_ratio, params.use_answer_format)
    adv = np.full(rewards.shape, np.nan)
    if kept.size:
        adv[kept] = res.advantages.numpy()
    kept_mask = np.zeros(rewards.shape, dtype=bool)
    kept_mask[kept] = True
    table = pd.DataFrame({
        "reward": rewards[rows], "tool_calls": cnt["tool_calls"][rows], "tool_failures": cnt["tool_failures"][rows],
        "answer_tags": cnt["answer_tags"][rows], "turns": cnt["turns"][rows], "p_err": pe[rows], "p_format": pf[rows],
        "p_total": pt[rows], "kept": kept_mask[rows], "advantage": adv[rows],
        "tokens": [len(flat[i].response_ids) for i in rows],
        "ending": [flat[i].response_text[-48:].replace("\n", " ") for i in rows],
    }, index=pd.RangeIndex(n, name="trajectory"))
    pos, k = int((table.reward > 0).sum()), int(table.kept.sum())
    kp = int((table.kept & (table.reward > 0)).sum())
    note = (f"{stage_name} step {step + 1}, prompt {group + 1} of {P}: {n} sampled (2G), {pos} correct; RoC kept {k} "
            f"(G = {a.group_size}): {kp} correct, drawn preferring low p_total ({params.mode}), and {k - kp} wrong, "
            "drawn uniformly" if k else
            f"{stage_name} step {step + 1}, prompt {group + 1} of {P}: {n} sampled, {pos} correct; the group was dropped "
            "(all rewards equal: no GRPO signal)")
    records = [r for r in recording.step_records(cfg, res) if r["prompt_index"] == group]
    return RocAnatomy(problems[group], table, [flat[i] for i in rows], tok, stage_name, step, group, note,
                      int(kept.size), float(rewards.mean()), records)
