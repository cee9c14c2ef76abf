"""Rollouts and rewards for the local trainers: the kit's agent loop, sandbox and verifier.

One code path with the paper-scale recipe: trajectories come from
:func:`kit.rollout.rollout_batch` (multi-turn, tool calls sent to :class:`kit.sandbox.SandboxPool`)
on the tiny model's continuous-batching engine (:func:`kit.rollout.engine.make_backend`), rewards from :func:`kit.reward.verify_batch`.
Nothing here samples, runs code or grades by itself.

Determinism: the backend seeds each row from ``(seed, prompt ids, repeat count)``; which of
several identical requests gets which repeat count depends on arrival order (tool latency), so
each group is put in a canonical order (sorted by response ids) before anything looks at
indices. A group's *multiset* of trajectories is reproducible; so is everything computed from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.algo.roc_penalties import tool_failure_count
from kit.config import KitConfig
from kit.data.tasks import TaskProblem
from kit.reward import averify_batch
from kit.reward.verdict import cut_off
from kit.rollout import rollout_batch, run_coroutine
from kit.rollout.engine import make_backend
from kit.sandbox import SandboxPool
from kit.sandbox.step_cache import StepCache


@dataclass
class Batch:
    """Rollouts of P problems x n samples with their rewards.

    Attributes:
        problems: the P problems.
        groups: ``groups[p][g]`` a ``kit.rollout.Trajectory`` (canonical order within a group).
        rewards: (P, n) float array of 0/1 rewards; 0 for every trajectory the budget cut
            (``truncated``), whatever it boxed (rStar2-Agent §4.3, :func:`kit.reward.verdict.cut_off`).
        verdict_reasons: (P, n) verifier reasons (``correct``, ``wrong``, ``no_answer``, ...);
            ``no_answer`` for a truncated trajectory.
        time_generate_s: wall seconds of the rollout phase (generation and tool calls overlap).
        time_tool_s: summed sandbox wall seconds of all calls (they run concurrently with
            generation, so this is work, not added wall time).
        time_verify_s: wall seconds of verification.
        cpu_generate_s: CPU seconds of this process (all its threads) in the rollout phase
            (sandbox workers are other processes); unlike wall time it hardly moves with load.
        engine: the backend's counters for this batch (``tokens`` sampled, ``steps`` decode
            forwards, ``row_steps`` rows x steps, ``prefills``, ``busy_s``, ...; empty for a
            backend without them).
        tool_cache: with ``sandbox.step_cache``, the batch's :class:`kit.sandbox.step_cache.StepCache`
            counts (``hits`` answered from an identical call of this batch, ``misses``, ``uncached``); else empty.
    """

    problems: list[TaskProblem]
    groups: list[list[Any]]
    rewards: np.ndarray
    verdict_reasons: list[list[str]]
    time_generate_s: float
    time_tool_s: float
    time_verify_s: float
    cpu_generate_s: float = 0.0
    engine: dict[str, float] = field(default_factory=dict)
    tool_cache: dict[str, int] = field(default_factory=dict)

    def flat(self) -> list[Any]:
        """All trajectories, problem-major (index ``p * n + g``)."""
        return [t for g in self.groups for t in g]


async def collect(cfg: KitConfig, model, tokenizer, problems: Sequence[TaskProblem], n: int, executor, *,
                  seed: int, max_response_tokens: int, max_turns: int, temperature: float,
                  top_p: float = 1.0, forced_turns: Sequence[str | None] | None = None) -> Batch:
    """Roll out ``problems`` x ``n`` with the agent loop and grade them.

    Args:
        cfg: config (``cfg.rollout`` for prompt limits, calls per turn, feedback truncation).
        model, tokenizer: the policy (eval mode; no gradients are taken here).
        problems: P problems.
        n: samples per problem (G, or 2G with RoC oversampling).
        executor: a started ``kit.sandbox.SandboxPool``.
        seed: backend seed (use a fresh one per step).
        max_response_tokens: budget shared by all turns (tokens).
        max_turns: model turns.
        temperature, top_p: sampling (temperature 0 = greedy).
        forced_turns: per problem, a first model turn written into every sample's context instead of sampled
            (:func:`kit.rollout.loop.rollout_batch`; Agent-R's forced-error probes).
    Returns:
        A :class:`Batch`.
    """
    backend = make_backend(model, tokenizer, cfg.rollout, seed)
    if cfg.sandbox.step_cache:  # one cache per batch: nothing is reused across steps or evaluations
        executor = StepCache(executor, cfg.sandbox.timeout_s)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        groups = await rollout_batch(backend, tokenizer, [p.question for p in problems], executor, n, cfg.rollout,
                                     max_response_tokens=max_response_tokens, max_turns=max_turns,
                                     temperature=temperature, top_p=top_p, timeout_s=cfg.sandbox.timeout_s,
                                     forced_turns=forced_turns)
    finally:
        worker = getattr(backend, "_worker", None)  # the backend's batching task outlives the batch
        if worker is not None and not worker.done():
            worker.cancel()
    t_gen, c_gen = time.perf_counter() - t0, time.process_time() - c0
    groups = [sorted(g, key=lambda t: t.response_ids) for g in groups]
    t1 = time.perf_counter()
    pairs = [(p.answer, t.response_text) for p, g in zip(problems, groups, strict=True) for t in g]
    verdicts = cut_truncated(await grade(pairs), [t for g in groups for t in g])
    t_ver = time.perf_counter() - t1
    rewards = np.array([1.0 if v.correct else 0.0 for v in verdicts]).reshape(len(problems), n)
    reasons = [[v.reason for v in verdicts[i * n:(i + 1) * n]] for i in range(len(problems))]
    t_tool = sum(c.wall_s for g in groups for t in g for c in t.calls)
    engine = {k: float(v) for k, v in getattr(backend, "stats", {}).items()}
    return Batch(list(problems), groups, rewards, reasons, t_gen, t_tool, t_ver, c_gen, engine,
                 dict(executor.stats) if isinstance(executor, StepCache) else {})


def collect_sync(cfg: KitConfig, model, tokenizer, problems: Sequence[TaskProblem], n: int, *, seed: int,
                 max_response_tokens: int, max_turns: int, temperature: float,
                 forced_turns: Sequence[str | None] | None = None) -> Batch:
    """:func:`collect` from synchronous code (a notebook, a study's loop) with a sandbox pool of its own
    (``cfg.sandbox``), started and stopped around the batch: the one synchronous sampler of the held-out
    evaluations, probes and self-training loops. Arguments and return as :func:`collect`.

    Raises:
        RuntimeError: the sandbox pool could not start (:class:`kit.sandbox.SandboxPool`).
    """
    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            return await collect(cfg, model, tokenizer, problems, n, pool, seed=seed,
                                 max_response_tokens=max_response_tokens, max_turns=max_turns,
                                 temperature=temperature, forced_turns=forced_turns)

    return run_coroutine(go())


def cut_truncated(verdicts: Sequence[Any], trajectories: Sequence[Any]) -> list[Any]:
    """(B,) verdicts with every trajectory the budget cut (``truncated``) scored 0, reason ``no_answer``,
    whatever it boxed before the cut (:func:`kit.reward.verdict.cut_off`; rStar2-Agent §4.3: no
    overlong filtering, a truncated trajectory stays in as a failure).

    A trajectory that ends at ``max_turns`` with a tool call pending (``finish_reason``
    ``max_turns``) is not truncated: it ran out of turns, not of tokens, and every token it wrote
    is complete, so it is graded from its box like any other (a box before the pending call can
    earn 1). The same holds in evaluation (:func:`kit.eval.evaluate.evaluate_async`) and on VERL,
    whose agent loop (:mod:`kit.bridge.agent_loop`) passes this loop's ``truncated`` on.

    Raises:
        ValueError: the two sequences differ in length.
    """
    return [cut_off(v) if t.truncated else v for v, t in zip(verdicts, trajectories, strict=True)]


async def grade(pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """Verdicts for ``(gold, response_text)`` pairs: :func:`kit.reward.averify_batch`.

    The one place the trainers grade; tests may replace it with a test double.
    """
    return await averify_batch(list(pairs))


def batch_stats(batch: Batch) -> dict[str, float]:
    """Means over all trajectories of a batch (before any selection).

    Returns floats: ``reward_mean``, ``accuracy`` (same, binary reward), ``response_len_mean``
    (tokens, feedback included), ``model_tokens_mean`` (mask-1 tokens), ``truncation_ratio``,
    ``tool_calls_per_traj``, ``tool_use_rate`` (share with at least one call),
    ``tool_error_ratio_correct`` (failed calls / calls over correct trajectories; NaN when no
    correct trajectory made a call),
    ``correct_with_error_frac`` (share of correct trajectories with at least one failed call).
    """
    flat = batch.flat()
    r = batch.rewards.reshape(-1)
    calls = np.array([t.tool_calls - t.infra_errors for t in flat], dtype=float)
    fails = np.array([tool_failure_count(t.tool_errors) for t in flat], dtype=float)
    ok = r > 0
    return {
        "reward_mean": float(r.mean()) if r.size else 0.0,
        "accuracy": float(ok.mean()) if r.size else 0.0,
        "response_len_mean": float(np.mean([len(t.response_ids) for t in flat])) if flat else 0.0,
        "model_tokens_mean": float(np.mean([sum(t.response_mask) for t in flat])) if flat else 0.0,
        "truncation_ratio": float(np.mean([t.truncated for t in flat])) if flat else 0.0,
        "tool_calls_per_traj": float(calls.mean()) if flat else 0.0,
        "tool_use_rate": float((calls > 0).mean()) if flat else 0.0,
        "tool_error_ratio_correct": float(fails[ok].sum() / calls[ok].sum()) if calls[ok].sum() > 0 else float("nan"),
        "correct_with_error_frac": float((fails[ok] > 0).mean()) if ok.any() else 0.0,
    }


def evaluate_policy(cfg: KitConfig, model, tokenizer, problems: Sequence[TaskProblem], *, seed: int = 0,
                    prefix: str = "heldout", greedy_problems: int = 0) -> dict[str, Any]:
    """Greedy and sampled accuracy of the policy on ``problems`` with the tool available.

    Greedy (temperature 0) is the "tool-assisted accuracy" of the issue's target; sampled
    (temperature 1, one sample each) is the RL reward the policy would get (what the Figure 8
    claim of ``kit/reference/claims.yaml`` compares across stages). Limits:
    ``cfg.eval.max_tokens`` and ``cfg.eval.max_turns``.

    Args:
        greedy_problems: greedy on the first this many of ``problems`` only (0 = all); the
            sampled reward always uses all of them.
    Returns:
        ``{prefix}_accuracy``, ``{prefix}_tool_rate``, ``{prefix}_tool_error_ratio_correct``
        (greedy, over ``{prefix}_greedy_n`` problems) and ``{prefix}_sampled_reward``,
        ``{prefix}_sampled_tool_rate``, ``{prefix}_sampled_tool_error_ratio_correct``,
        ``{prefix}_n`` (sampled problems), ``{prefix}_greedy_n``, ``{prefix}_seconds``, and per sampled
        problem in order ``{prefix}_problems`` (ids) and ``{prefix}_sampled_correct`` (0/1): the same
        held-out set scores every stage, so a claim can pair two stages problem by problem (issue #42).
    """
    t0 = time.perf_counter()
    greedy_set = list(problems)[:greedy_problems] if greedy_problems > 0 else list(problems)

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            kw = dict(seed=seed, max_response_tokens=cfg.eval.max_tokens, max_turns=cfg.eval.max_turns)
            # both at once: a collect is latency-bound (its longest trajectory), so two overlap well
            return await asyncio.gather(collect(cfg, model, tokenizer, greedy_set, 1, pool, temperature=0.0, **kw),
                                        collect(cfg, model, tokenizer, problems, 1, pool, temperature=1.0, **kw))

    greedy, sampled = run_coroutine(go())
    g, s = batch_stats(greedy), batch_stats(sampled)
    return {
        f"{prefix}_accuracy": g["accuracy"], f"{prefix}_tool_rate": g["tool_use_rate"],
        f"{prefix}_tool_error_ratio_correct": g["tool_error_ratio_correct"],
        f"{prefix}_sampled_reward": s["reward_mean"], f"{prefix}_sampled_tool_rate": s["tool_use_rate"],
        f"{prefix}_sampled_tool_error_ratio_correct": s["tool_error_ratio_correct"],
        f"{prefix}_n": float(len(problems)), f"{prefix}_greedy_n": float(len(greedy_set)),
        f"{prefix}_seconds": time.perf_counter() - t0,
        f"{prefix}_problems": [p.id for p in problems],
        f"{prefix}_sampled_correct": [int(x > 0) for x in sampled.rewards[:, 0]],
    }
