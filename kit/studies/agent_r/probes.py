"""Agent-R's forced-error probes (issue #46): recovery measured on identical failure states.

Recovery compared on whatever failures each policy happens to make compares different states (a damaged
policy fails differently, on other problems). A probe places the *same* failing tool call into every policy's
context instead: for each held-out problem, a first assistant turn written by the task family's own error
generator (:func:`kit.data.tasks.failing_call`: the cold start's ``tool_error`` demos fail the same ways),
opened like a demo (:func:`kit.data.tasks.opening`), drawn from a stream of the run seed and the problem alone.
The sandbox runs that call for real, so the policy reads the real error, and then continues
(:func:`kit.rollout.loop.run_trajectory`'s ``forced_turn``; the forced tokens carry no loss and no log-prob).
A probe *recovers* when the trajectory ends with the correct answer. Every policy gets the same probes and the
same sampling streams, so policies are compared problem by problem (:mod:`kit.studies.agent_r.kinds`).

``probe_eval.jsonl`` (notebook 11's run folder): one row per trajectory ``{policy, iteration, problem, correct,
tool_calls, tokens}``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kit.data.tasks import TaskProblem, failing_call, opening, tool_call_text
from kit.train import common
from kit.train.rollouts import collect_sync

PROBE_FILE = "probe_eval.jsonl"


def probe_turns(problems: Sequence[TaskProblem], seed: int) -> list[str]:
    """The forced first turn of each problem (text after the prefilled ``<reason>``): an opener and a failing
    ``<tool_call>``, drawn from ``Random(step_seed(seed, "agent_r-probe", problem id))``: the same for every
    policy and iteration of a run."""
    out = []
    for p in problems:
        rng = random.Random(common.step_seed(seed, "agent_r-probe", p.id))
        out.append(f"{opening(rng)}\n{tool_call_text(failing_call(p, rng))}")
    return out


def sample_heldout(cfg, model, tok, problems: Sequence[TaskProblem], n: int, *, seed: int,
                   forced_turns: Sequence[str] | None = None):
    """``n`` trajectories per problem at T = 1 with notebook 11's evaluation budget (``eval.max_tokens``,
    ``eval.max_turns``) through the sandbox: a :class:`kit.train.rollouts.Batch`. The one sampler of the held-out
    evaluation and the probes (``forced_turns``)."""
    return collect_sync(cfg, model, tok, problems, n, seed=seed, max_response_tokens=cfg.eval.max_tokens,
                        max_turns=cfg.eval.max_turns, temperature=1.0, forced_turns=forced_turns)


def evaluate_probes(cfg, model, tok, problems: Sequence[TaskProblem], turns: Sequence[str], *, policy: str,
                    iteration: int, seed: int) -> list[dict[str, Any]]:
    """Sample ``agent_r.probe_samples`` continuations of each probe at T = 1 with ``model``: rows of
    :data:`PROBE_FILE` (``correct``: the trajectory ended with the right answer after the forced failure)."""
    batch = sample_heldout(cfg, model, tok, problems, cfg.agent_r.probe_samples, seed=seed, forced_turns=turns)
    return [{"policy": policy, "iteration": iteration, "problem": p.id, "correct": int(r > 0),
             "tool_calls": tr.tool_calls, "tokens": len(tr.response_ids)}
            for p, group, rewards in zip(batch.problems, batch.groups, batch.rewards, strict=True)
            for tr, r in zip(group, rewards, strict=True)]
