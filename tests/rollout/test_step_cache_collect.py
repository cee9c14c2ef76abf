"""sandbox.step_cache through the local trainers' rollouts (kit.train.rollouts.collect): identical calls of one
step run once and are marked in the call records; the next step runs them again; the trajectories are those
of a run without the cache."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from doubles import FakeExecutor, call

from kit.config import load
from kit.data.tasks import TaskProblem
from kit.rollout import ScriptedBackend
from kit.sandbox import ToolResult
from kit.train import rollouts


def test_identical_calls_of_a_step_run_once_and_never_across_steps(tok, monkeypatch):
    answer = "so</reason> <answer> \\boxed{42} </answer>"

    def script(context: str) -> str:  # every trajectory: the same call, then the answer
        return answer if "<tool_response>" in context else "compute " + call("print(6*7)")

    monkeypatch.setattr(rollouts, "make_backend", lambda *a, **k: ScriptedBackend(tok, script))

    async def grade(pairs):
        return [SimpleNamespace(correct=True, reason="correct") for _ in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    problems = [TaskProblem(f"p{i}", "product", 1, "What is 6 * 7?", "42", "print(6*7)") for i in range(2)]

    def steps(cache: bool):
        cfg = load("smoke", {"sandbox.step_cache": cache}, write=False)
        ex = FakeExecutor(lambda code, stdin: ToolResult("ok", stdout="42\n", wall_s=0.01))
        batches = [asyncio.run(rollouts.collect(cfg, None, tok, problems, 4, ex, seed=s, max_response_tokens=200,
                                                max_turns=3, temperature=1.0)) for s in range(2)]
        return batches, ex

    (b0, b1), ex = steps(cache=True)
    assert sum(len(b) for b in ex.batches) == 2  # one run per step: 8 trajectories, 2 prompts, 1 distinct call
    for b in (b0, b1):
        assert b.tool_cache == {"hits": 7, "misses": 1, "uncached": 0}
        flags = sorted(c.cached for t in b.flat() for c in t.calls)
        assert flags == [False] + [True] * 7
        assert all(t.to_record()["calls"][0]["cached"] == c.cached for t in b.flat() for c in t.calls)
    (p0, _), plain = steps(cache=False)
    assert sum(len(b) for b in plain.batches) == 16 and p0.tool_cache == {}
    assert [t.response_ids for t in b0.flat()] == [t.response_ids for t in p0.flat()]
    assert [[c.feedback for c in t.calls] for t in b0.flat()] == [[c.feedback for c in t.calls] for t in p0.flat()]
