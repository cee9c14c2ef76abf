"""Phase I of Agent-R: MCTS over assistant turns with the kit's agent loop, sandbox and verifier.

Per task a :class:`kit.studies.agent_r.tree.Node` tree. Each round, in every tree at once:

1. **selection** (:func:`kit.studies.agent_r.tree.select`, UCT) picks a node;
2. **expansion + simulation**: ``width`` trajectories continue from that node's prefix through
   :func:`kit.rollout.run_trajectory` (the prefix replayed, :mod:`kit.studies.agent_r.replay`; new turns
   sampled from the current policy on the continuous-batching engine, tool calls in the
   sandbox) to the end;
3. each is graded by the verifier (:func:`kit.train.rollouts.grade`), inserted as a path
   (identical turns merged) and its final reward **backpropagated** along it.

Selection never stops on a finished path (a node whose children are all terminal is expanded
again), so every round spends ``width`` rollouts per task. All trees' simulations of a round run
concurrently, so the engine batches them; siblings reuse their node's KV
(:class:`kit.studies.agent_r.replay.SharedPrefixEngine`).

Determinism: the engine seeds each request from ``(seed, prompt ids, repeat count)``; a round's
new trajectories are inserted sorted by their response ids, so the tree is a function of the
multiset of trajectories (as :mod:`kit.train.rollouts` canonicalises a group).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.algo.roc_penalties import tool_failure_count
from kit.rollout import run_trajectory
from kit.rollout.cohort import gather_trajectories
from kit.rollout.loop import Trajectory
from kit.studies.agent_r.replay import (
    ReplayBackend,
    ReplayExecutor,
    SharedPrefixEngine,
    failed_turns,
    turn_generations,
)
from kit.studies.agent_r.tree import Node, backpropagate, insert, select
from kit.train.rollouts import grade


@dataclass(frozen=True)
class SearchParams:
    """One search's settings (from ``[agent_r]`` and ``[rollout]``; :func:`params_from_config`).

    Attributes:
        simulations: rollouts per task (the sampling budget), spent ``width`` per round.
        width: children sampled per expansion.
        c_uct: UCT exploration constant.
        max_response_tokens: budget shared by all turns, tokens; max_turns: model turns.
        temperature, top_p: sampling.
        timeout_s: the sandbox's limit, quoted in timeout feedback.
    """

    simulations: int = 8
    width: int = 2
    c_uct: float = 1.0
    max_response_tokens: int = 384
    max_turns: int = 6
    temperature: float = 1.0
    top_p: float = 1.0
    timeout_s: float = 5.0

    @property
    def rounds(self) -> int:
        """Selection rounds per task: ``ceil(simulations / width)``."""
        return math.ceil(self.simulations / self.width)


def params_from_config(cfg: Any) -> SearchParams:
    """:class:`SearchParams` of a resolved ``KitConfig`` (``cfg.agent_r``, ``cfg.rollout``, ``cfg.sandbox``)."""
    a, r = cfg.agent_r, cfg.rollout
    return SearchParams(a.simulations, a.width, a.c_uct, a.max_response_tokens or r.max_response_tokens,
                        a.max_turns or r.max_turns, a.temperature, r.top_p, cfg.sandbox.timeout_s)


def score(tr: Trajectory, reward: float) -> float:
    """Agent-R's trajectory score on 0/1 tool tasks: ``reward * (1 - failed calls / calls)``
    (calls without infra errors; 1 - 0 without calls), so a correct trajectory that needed failed
    calls scores below a clean one and ``alpha`` has something to select (a deviation, see
    :mod:`kit.studies.agent_r`)."""
    calls = tr.tool_calls - tr.infra_errors
    fails = tool_failure_count(tr.tool_errors)
    return float(reward) * (1.0 - fails / calls if calls > 0 else 1.0)


@dataclass
class TaskTree:
    """One task's tree and every trajectory it holds.

    Attributes:
        problem: the task (``question``, ``answer``, ``id``).
        root: the tree (the prompt).
        trajectories: every simulated trajectory, in insertion order.
        rewards: their verifier rewards (0/1); scores: :func:`score` of each.
        leaves: the leaf node of each trajectory.
    """

    problem: Any
    root: Node = field(default_factory=Node)
    trajectories: list[Trajectory] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    leaves: list[Node] = field(default_factory=list)


async def _simulate(engine, tokenizer, tree: TaskTree, node: Node, executor, memo, counts, p: SearchParams,
                    cfg_rollout) -> Trajectory:
    prefix = turn_generations(tree.trajectories[node.via])[:node.depth] if node.depth else []
    backend = ReplayBackend(engine, prefix)
    ex = ReplayExecutor(executor, memo, backend, counts)
    tr = await run_trajectory(backend, tokenizer, tree.problem.question, ex, cfg_rollout,
                              max_response_tokens=p.max_response_tokens, max_turns=p.max_turns,
                              temperature=p.temperature, top_p=p.top_p, timeout_s=p.timeout_s)
    counts["live_turns"] = counts.get("live_turns", 0) + backend.live_turns
    counts["replayed_turns"] = counts.get("replayed_turns", 0) + backend.replayed
    return tr


async def search(engine, tokenizer, problems: Sequence[Any], executor, p: SearchParams, cfg_rollout,
                 graded=None) -> tuple[list[TaskTree], dict[str, float]]:
    """Build one MCTS tree per problem (Agent-R Phase I).

    Args:
        engine: a backend; a :class:`~kit.studies.agent_r.replay.SharedPrefixEngine` shares siblings' prefix KV.
        tokenizer: the policy's tokenizer.
        problems: P tasks (``question``, ``answer``).
        executor: a started ``kit.sandbox.SandboxPool`` (or a test double).
        p: :class:`SearchParams`.
        cfg_rollout: ``cfg.rollout`` (prompt limit, calls per turn, feedback truncation).
        graded: ``async (pairs) -> verdicts`` (default :func:`kit.train.rollouts.grade`).
    Returns:
        ``(trees, cost)``: the P trees and the search's cost: ``rollouts`` (simulations run),
        ``live_turns`` / ``replayed_turns`` (model turns sampled / replayed from a prefix),
        ``live_calls`` / ``replayed_calls`` (sandbox calls run / answered from the record),
        ``rounds``, ``wall_s``, ``cpu_s`` (this process) and the engine's counters
        (``tokens``, ``prefill_tokens``, ``reused_tokens``, ``prefix_hits``).
    """
    graded = graded or grade
    trees = [TaskTree(q) for q in problems]
    memo: dict = {}
    counts = dict.fromkeys(("live_turns", "replayed_turns", "live_calls", "replayed_calls"), 0)
    t0, c0 = time.perf_counter(), time.process_time()
    max_depth = p.max_turns - 1
    for _ in range(p.rounds):
        jobs = []
        for tree in trees:
            node = select(tree.root, p.c_uct, p.width, max_depth)
            node.expansions += p.width
            jobs += [(tree, node)] * p.width
        trs = await gather_trajectories(engine, [  # one cohort: batches by the engine's clock (issue #41)
            (lambda t=t, n=n: _simulate(engine, tokenizer, t, n, executor, memo, counts, p, cfg_rollout)) for t, n in jobs])
        verdicts = await graded([(t.problem.answer, tr.response_text) for (t, _), tr in zip(jobs, trs, strict=True)])
        new: dict[int, list] = {}
        for (tree, _), tr, v in zip(jobs, trs, verdicts, strict=True):
            new.setdefault(id(tree), []).append((tr, 1.0 if v.correct else 0.0))
        for tree in trees:
            for tr, r in sorted(new.get(id(tree), []), key=lambda x: x[0].response_ids):
                idx = len(tree.trajectories)
                tree.trajectories.append(tr)
                tree.rewards.append(r)
                tree.scores.append(score(tr, r))
                leaf = insert(tree.root, [g.token_ids for g in turn_generations(tr)], failed_turns(tr), idx)
                tree.leaves.append(leaf)
                backpropagate(leaf, r)
    cost: dict[str, float] = {"rollouts": float(sum(len(t.trajectories) for t in trees)), "rounds": float(p.rounds),
                              **{k: float(v) for k, v in counts.items()},
                              "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    for k in ("tokens", "prefill_tokens", "reused_tokens", "prefix_hits"):
        if k in getattr(engine, "stats", {}):
            cost[k] = float(engine.stats[k])
    return trees, cost


def make_engine(model, tokenizer, cfg_rollout, seed: int) -> SharedPrefixEngine:
    """The search's engine: ``rollout.batch_size`` slots, seeded by ``seed``."""
    return SharedPrefixEngine(model, tokenizer, slots=cfg_rollout.batch_size, seed=seed)


def stop_engine(engine) -> None:
    """Cancel the engine's batching task (it outlives a search)."""
    worker = getattr(engine, "_worker", None)
    if worker is not None and not worker.done():
        worker.cancel()
