"""RL stages of the recipe on the local CPU engine (rStar2-Agent §4.3); the RoC ablation that runs
them per arm is :mod:`kit.train.ablation`.

Entry points (the stage notebooks call them through :mod:`kit.chain`)::

    summary = run_stage(cfg, "stage1", policy_dir=sft_dir / "policy", run_dir=..., progress=print)
    summary = kit.train.ablation.run_ablation(cfg, policy_dir=sft_dir / "policy", run_dir=..., seeds=(0, 1, 2))

One RL step (:func:`kit.train.step.rl_step`, the loop body of :func:`run_stage`; selection and
update in :mod:`kit.train.update`), with the kit's shared pieces only:
    1. P problems of the stage's pool (``cfg.algorithm.prompts_per_step``), a fixed permutation
       per seed walked in order;
    2. rollouts with the agent loop (:mod:`kit.train.rollouts`): n = 2G per problem for
       ``grpo_roc`` (``cfg.algorithm.oversample``), G for ``grpo``;
    3. binary reward (:func:`kit.reward.verify_batch`). A trajectory cut by the budget
       (``finish_reason`` ``length`` or ``budget``, ``truncated``) stays in the batch as a failure:
       reward 0 and reason ``no_answer`` whatever it had boxed before the cut
       (:func:`kit.reward.verdict.cut_off`; no overlong filtering, report §4.3). VERL's reward
       function does the same from the agent loop's ``truncated`` field
       (:func:`kit.reward.compute_score`). The release graded a cut response like any other
       (research note ``rstar2_agent_release.md`` §5), so a box before the cut could earn 1 there;
    4. ``grpo_roc``: :func:`kit.algo.roc_step` keeps G per group (RoC, report §2.2.2);
       ``grpo``: all G are kept (the ablation's baseline, report §5.3);
    5. the advantage of the kept rows (:func:`kit.train.update.advantages`, ``algorithm.adv_estimator``),
       :func:`kit.algo.policy_loss` (Clip-Higher, token-mean, response mask), one optimizer step
       (``ppo_epochs`` passes over the batch; old log-probs recomputed by the policy before the
       update, as VERL does).
    PPO (``algorithm.adv_estimator = "gae"``, ReTool): G sampled and all kept, per-token GAE from a
    critic trained beside the policy and saved as ``critic/`` (:mod:`kit.train.critic`).

Stages (``cfg.stages``, the profile's ``[[stages]]`` list): response budget, turn limit, task
level and step count from the profile. A stage starts from ``policy_dir`` (the latest policy); its reference policy is
that same latest policy (recorded in the summary; the report trains without a KL term, so it
enters no loss, and ``kl_coef > 0`` is rejected). ``reset_optimizer`` starts AdamW afresh;
otherwise the optimizer state saved with the previous stage's policy (``optimizer.pt``) is
loaded. ``problems = "hard"`` (the paper's stage 3) first samples ``hard_filter_samples`` trajectories per
candidate problem with the latest policy and drops the problems solved every time.

Run directory: ``metrics.jsonl`` (keys declared in kit.metrics), ``samples.jsonl`` (a few
trajectories per step), ``rollouts/`` (the rollout records of :mod:`kit.records`, ``[logging]``
``records_every`` / ``records_max_prompts``; :mod:`kit.train.recording`), ``checkpoints/step_<n>/``, ``hard_subset.json`` (stage 3),
``policy/`` (+ ``optimizer.pt``), ``summary.json``. A run killed mid-stage and started again
with the same arguments resumes from its last checkpoint and writes the same metrics.

Does not: train with KL, run several mini-batches per step, or overlap rollout and update.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kit import jsonio
from kit.config import KitConfig, StageConfig, save
from kit.data import pool as data_pool
from kit.data.curate import build_hard_subset
from kit.data.tasks import task_split
from kit.models import load_policy, save_policy
from kit.rollout import run_coroutine
from kit.sandbox import SandboxPool
from kit.train import common, recording, tracking
from kit.train.critic import CRITIC_DIR, open_critic, sampling
from kit.train.rollouts import Batch, collect, evaluate_policy
from kit.train.step import rl_step, step_problems
from kit.train.update import MICRO_TOKENS, SELECTIONS, policy_update, select, token_logprobs

__all__ = [
    "MICRO_TOKENS", "SELECTIONS", "RL_STATE", "SAMPLES_PER_STEP", "STAGE_GREEDY_PROBLEMS",
    "policy_update", "prepare_hard_subset", "run_stage", "select", "stage_config", "stage_pool", "step_problems",
    "token_logprobs",
]

SAMPLES_PER_STEP = 4  # trajectories written to samples.jsonl per step
#: greedy held-out accuracy at a stage's end on this many problems (+-0.1 at 95%): a progress readout
#: no claim reads; the sampled reward, which the Figure 8 claim compares, uses every held-out problem
STAGE_GREEDY_PROBLEMS = 128
RL_STATE = "rl_state.json"  # in a policy folder: RL steps done so far (global_step offset of the next stage)


def stage_config(cfg: KitConfig, stage_name: str) -> StageConfig:
    """``cfg.stages[stage_name]``.

    Raises:
        ValueError: an unknown stage name (the message lists the profile's stages).
    """
    if stage_name not in cfg.stages.names:
        raise ValueError(f"unknown stage {stage_name!r}; expected one of {cfg.stages.names}")
    return cfg.stages[stage_name]


def stage_pool(cfg: KitConfig, stage: StageConfig, data_dir: str | Path | None = None) -> list[data_pool.Problem]:
    """The stage's problems from ``data.source`` (:func:`kit.data.pool.pool`; ``data_dir`` for ``curated``)."""
    return data_pool.pool(cfg, stage, data_dir)


# --------------------------------------------------------------------------- one stage


def run_stage(cfg: KitConfig, stage_name: str, policy_dir: str | Path, run_dir: str | Path,
              progress: Callable[[dict], None] | None = None, *, evaluate: bool = True,
              data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run one RL stage of ``cfg`` from the policy in ``policy_dir``; resumable, and a finished run
    with the same stage, algorithm, seed, steps, budget and init returns its ``summary.json``
    without running.

    Args:
        cfg: resolved config: ``cfg.seed``, ``cfg.algorithm`` (its ``label``: ``grpo_roc`` or
            ``grpo``), ``cfg.rollout``, ``cfg.stages[stage_name]`` (steps, budget, turns, level);
            an ablation arm is such a config (:func:`kit.plan.ablation_arms`).
        stage_name: a name of ``cfg.stages``.
        policy_dir: a ``save_policy`` folder (SFT's or the previous stage's ``policy/``).
        run_dir: this stage's run directory.
        progress: called with every metrics row and finally with ``{"summary": ...}``.
        evaluate: evaluate the final policy on the held-out problems (greedy and sampled).
        data_dir: the ``01_data_curation`` run folder, read when ``data.source`` is ``curated``.
    Returns:
        Summary: ``stage, algorithm, seed, steps, max_response_tokens, reward_first, reward_last``
        (mean reward over the first/last ``min(5, steps)`` steps), ``tool_error_ratio_correct_first/last``,
        ``hard_subset`` info (a ``hard`` stage), ``reference_dir``, ``policy_dir``, ``seconds`` and the
        held-out evaluation keys of :func:`kit.train.rollouts.evaluate_policy`.
    Raises:
        ValueError: unknown stage or algorithm, ``kl_coef > 0``, or an empty problem pool.
        ImportError: a tracker of ``logging.backends`` is not installed (names the package).
    """
    return run_coroutine(_run_stage(cfg, stage_name, Path(policy_dir), Path(run_dir), progress, evaluate, data_dir))


async def _run_stage(cfg: KitConfig, stage_name: str, policy_dir: Path, run_dir: Path,
                     progress: Callable[[dict], None] | None, evaluate: bool,
                     data_dir: str | Path | None = None) -> dict[str, Any]:
    stage = stage_config(cfg, stage_name)
    algorithm, seed, steps = cfg.algorithm.label, cfg.seed, stage.steps
    if cfg.algorithm.kl_coef > 0:
        raise ValueError("algorithm.kl_coef > 0 is not supported by the local engine (the report trains without KL)")
    identity = {"stage": stage_name, "algorithm": sampling(cfg)[2], "seed": seed, "steps": steps, "init_dir": str(policy_dir),
                "max_response_tokens": stage.max_response_tokens}
    done = common.finished_summary(run_dir, identity)
    if done is not None:  # finished before with the same arguments: not run again
        return done
    run_dir.mkdir(parents=True, exist_ok=True)
    save(cfg, run_dir)
    threads = common.set_threads(cfg.model.torch_threads)  # adaptive when torch_threads < 0
    t_start = time.perf_counter()
    model, tok, opt, start = _policy_and_optimizer(cfg, stage, policy_dir, run_dir)
    critic = open_critic(cfg, policy_dir, run_dir, reset_optimizer=stage.reset_optimizer)  # PPO ("gae") only
    writer = common.MetricsWriter(run_dir)
    writer.truncate(lambda r: not (r.get("stage") == stage_name and r.get("step", 0) > start))
    tracker = tracking.open_tracker(cfg, run_dir, stage_name)  # [logging] backends
    samples = run_dir / "samples.jsonl"
    if samples.exists():
        keep = [ln for ln in samples.read_text().splitlines() if ln and json.loads(ln)["step"] <= start]
        samples.write_text("".join(ln + "\n" for ln in keep))
    pool = stage_pool(cfg, stage, data_dir)  # the stage's problems (data.source): the one call site of the pool
    offset = json.loads((policy_dir / RL_STATE).read_text())["global_step"] if (policy_dir / RL_STATE).exists() else 0
    summary: dict[str, Any] = {**identity, "reference_dir": str(policy_dir)}
    recorder = recording.open_recorder(cfg, run_dir, tokenizer_dir=policy_dir)  # rollouts/ ([logging] records_*)
    async with SandboxPool(cfg.sandbox) as executor:
        if stage.problems == "hard":
            model.eval()
            pool, info = await _hard_subset_async(cfg, model, tok, stage, pool, run_dir, seed, executor)
            summary["hard_subset"] = info
            if not pool:
                raise ValueError(f"{stage_name}: every candidate problem was solved {stage.hard_filter_samples}/"
                                 f"{stage.hard_filter_samples} times; the hard subset is empty")
        for step in range(start, steps):
            if threads is not None:
                threads.update()
            res = await rl_step(cfg, stage, model, tok, opt, pool, step, executor, global_offset=offset,
                                threads=threads.threads if threads is not None else None, recorder=recorder,
                                critic=critic)
            writer.write(res.row)
            tracker.log_rl(res.row, res.selection, res.batch.flat(), res.batch.rewards.reshape(-1), res.kept)
            _write_samples(samples, step + 1, res.batch)
            if progress is not None:
                progress(res.row)
            if stage.checkpoint_every and (step + 1) % stage.checkpoint_every == 0 and step + 1 < steps:
                ckpt = common.save_checkpoint(run_dir, step + 1, model, tok, opt, {"stage": stage_name, "algorithm": algorithm})
                if critic is not None:
                    critic.save(ckpt / CRITIC_DIR)
    tracker.finish()
    policy_dir = save_policy(model, tok, run_dir / "policy")
    torch.save(opt.state_dict(), policy_dir / "optimizer.pt")
    jsonio.write_json(policy_dir / RL_STATE, {"global_step": offset + steps, "stage": stage_name})
    if critic is not None:  # next to policy/: the next PPO stage starts from it
        critic.save(run_dir / CRITIC_DIR)
    summary.update(policy_dir=str(policy_dir), **_first_last([r for r in writer.rows() if r.get("stage") == stage_name]))
    if evaluate:
        model.eval()
        summary.update(evaluate_policy(cfg, model, tok, list(task_split(cfg).heldout), seed=seed,
                                       greedy_problems=STAGE_GREEDY_PROBLEMS))
    summary["seconds"] = time.perf_counter() - t_start
    summary = jsonio.jsonable(summary)  # returned as written: an undefined value is None, as in the file
    jsonio.write_json(run_dir / "summary.json", summary)
    if progress is not None:
        progress({"stage": stage_name, "summary": summary})
    return summary


def _policy_and_optimizer(cfg: KitConfig, stage: StageConfig, policy_dir: Path, run_dir: Path):
    """``(model, tokenizer, optimizer, first step)``: from the run's last checkpoint when there is one,
    else from ``policy_dir`` (its ``optimizer.pt`` loaded unless the stage resets the optimizer)."""
    a = cfg.algorithm
    model, tok = load_policy(policy_dir)
    opt = common.make_optimizer(model, a.lr, a.weight_decay)
    if not stage.reset_optimizer and (policy_dir / "optimizer.pt").exists():
        opt.load_state_dict(torch.load(policy_dir / "optimizer.pt", weights_only=False))
    ckpt = common.latest_checkpoint(run_dir)
    if ckpt is None:
        return model, tok, opt, 0
    model, tok = load_policy(ckpt)
    opt = common.make_optimizer(model, a.lr, a.weight_decay)
    st = common.load_trainer_state(ckpt)
    opt.load_state_dict(st["optimizer"])
    return model, tok, opt, int(st["step"])


def _first_last(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward and tool-error ratio over the first and the last ``min(5, steps)`` rows."""
    k = min(5, len(rows))
    if not rows:
        return dict.fromkeys(("reward_first", "reward_last", "tool_error_ratio_correct_first",
                              "tool_error_ratio_correct_last"))
    return {"reward_first": float(np.mean([r["reward_mean"] for r in rows[:k]])),
            "reward_last": float(np.mean([r["reward_mean"] for r in rows[-k:]])),
            "tool_error_ratio_correct_first": common.nanmean([r["tool_error_ratio_correct_before"] for r in rows[:k]]),
            "tool_error_ratio_correct_last": common.nanmean([r["tool_error_ratio_correct_before"] for r in rows[-k:]])}


def prepare_hard_subset(cfg: KitConfig, stage_name: str, policy_dir: str | Path, run_dir: str | Path, *,
                      seed: int | None = None, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Stage 3's problem pool, built before the stage trains (report §4.3): the policy in
    ``policy_dir`` samples ``hard_filter_samples`` trajectories per candidate problem of the
    stage's pool and the problems it solves every time are dropped
    (:func:`kit.data.curate.build_hard_subset`). Writes
    ``run_dir/hard_subset.json`` (``kept_ids``, ``info``), which :func:`run_stage` then reads;
    a run directory that has it already returns its ``info`` without sampling.

    Args:
        cfg: resolved config (``cfg.stages.<stage_name>``, ``cfg.rollout``, ``cfg.sandbox``).
        stage_name: a stage with ``problems = "hard"`` (``stage3``).
        policy_dir: a ``save_policy`` folder (the previous stage's ``policy/``).
        run_dir: the stage's run directory.
        seed: default ``cfg.seed`` (must equal the one :func:`run_stage` gets).
        data_dir: as in :func:`run_stage`.
    Returns:
        ``{"candidates", "samples", "solved_all", "kept", "solve_rate", "seconds"}``.
    Raises:
        ValueError: an unknown stage, a stage whose ``problems`` is not ``"hard"``, or a subset
            left empty (every candidate solved every time).
    """
    stage = stage_config(cfg, stage_name)
    if stage.problems != "hard":
        raise ValueError(f"{stage_name}: problems = {stage.problems!r}; only a 'hard' stage filters its pool")
    seed = cfg.seed if seed is None else seed
    run_dir = Path(run_dir)
    path = run_dir / "hard_subset.json"
    if path.exists():
        return json.loads(path.read_text())["info"]
    run_dir.mkdir(parents=True, exist_ok=True)
    common.set_threads(cfg.model.torch_threads)
    model, tok = load_policy(Path(policy_dir))
    model.eval()

    async def go():
        async with SandboxPool(cfg.sandbox) as executor:
            return await _hard_subset_async(cfg, model, tok, stage, stage_pool(cfg, stage, data_dir), run_dir, seed, executor)

    kept, info = run_coroutine(go())
    if not kept:
        raise ValueError(f"{stage_name}: every candidate problem was solved {stage.hard_filter_samples}/"
                         f"{stage.hard_filter_samples} times; the hard subset is empty")
    return info


async def _hard_subset_async(cfg, model, tok, stage, pool, run_dir, seed, executor):
    """Stage 3's hard problems: drop candidates the latest policy solves ``hard_filter_samples``
    times out of as many (report §4.3); cached in ``run_dir/hard_subset.json``."""
    path = run_dir / "hard_subset.json"
    if path.exists():
        d = json.loads(path.read_text())
        by_id = {p.id: p for p in pool}
        return [by_id[i] for i in d["kept_ids"] if i in by_id], d["info"]
    P = cfg.algorithm.prompts_per_step
    n_cand = min(len(pool), max(2 * P, P * stage.steps // 2))  # the stage sees each hard problem about twice
    cand = step_problems(pool, 0, n_cand, common.step_seed(seed, "hard-candidates"))
    k = stage.hard_filter_samples
    batch = await collect(cfg, model, tok, cand, k, executor, seed=common.step_seed(seed, "hard-filter"),
                          max_response_tokens=stage.max_response_tokens, max_turns=stage.max_turns,
                          temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
    solved = batch.rewards.sum(axis=1)
    kept, counts = build_hard_subset(cand, [int(s) for s in solved], n=k)  # the builder curation shares
    info = {"candidates": len(cand), "samples": k, "solved_all": counts["solved_all"], "kept": len(kept),
            "solve_rate": float(batch.rewards.mean()), "seconds": batch.time_generate_s + batch.time_verify_s}
    jsonio.write_json(path, {"kept_ids": [p.id for p in kept], "info": info})
    return kept, info


def _write_samples(path: Path, step: int, batch: Batch) -> None:
    with path.open("a") as fh:
        for p, g, r in list(zip(batch.problems, batch.groups, batch.rewards, strict=True))[:1]:
            for t, rew in list(zip(g, r, strict=True))[:SAMPLES_PER_STEP]:
                rec = {"step": step, "problem_id": p.id, "answer": p.answer, "reward": float(rew),
                       "response_text": t.response_text, "spans": t.spans(), "turns": t.turns,
                       "tool_calls": t.tool_calls, "tool_errors": t.tool_errors, "truncated": t.truncated}
                fh.write(jsonio.dumps(rec) + "\n")
