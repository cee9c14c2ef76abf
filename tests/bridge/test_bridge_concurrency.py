"""Two defects of the VERL bridge that only a real VERL run had shown (issue #15).

1. Every trajectory from the kit's agent loop carries ``min_global_steps`` / ``max_global_steps``
   in ``extra_fields`` (VERL 0.9.1's v1 trainer reads them for every trajectory,
   ``trainer/ppo/v1/trainer_base.py:1897``, and crashed after step 1 without them).
2. One sandbox pool per worker event loop even when many trajectories (agent loop) or tool
   calls (tool) start at once; before, each concurrent first caller created its own.
"""

from __future__ import annotations

import asyncio
import json

import hydra
import numpy as np
import pytest
from omegaconf import OmegaConf

pytest.importorskip("verl.experimental.agent_loop")

from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from kit import prompts  # noqa: E402
from kit.bridge import agent_loop as bridge_loop  # noqa: E402
from kit.bridge import tool as bridge_tool  # noqa: E402
from kit.bridge.tool import KitSandboxTool  # noqa: E402
from kit.models import train_tokenizer  # noqa: E402

ANSWER = "so</reason> <answer> \\boxed{42} </answer>"
CALL = "<tool_call>\n" + json.dumps({"name": prompts.TOOL_NAME, "arguments": {"code": "print(6*7)", "input": ""}}) \
    + "\n</tool_call>"


@pytest.fixture(scope="module")
def tok():
    corpus = [prompts.render_prompt("What is 6 times 7?") + CALL + prompts.IM_END + ANSWER + prompts.IM_END,
              prompts.feedback_block(["42"])] * 20
    return train_tokenizer(corpus, 400)


class StepServer:
    """LLMServerClient stand-in: one tool call, then the answer; reports the weight version the
    way VERL's client does (``global_steps`` plus ``min``/``max`` set from it)."""

    def __init__(self, tok, steps):
        self.tok, self.steps, self.turn = tok, list(steps), {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        k = self.turn[request_id] = self.turn.get(request_id, 0) + 1
        await asyncio.sleep(0)
        text = (CALL if k == 1 else ANSWER) + prompts.IM_END
        ids = self.tok.encode(text, add_special_tokens=False)
        g = self.steps[min(k, len(self.steps)) - 1]
        return TokenOutput(token_ids=ids, log_probs=[-0.1] * len(ids), stop_reason="completed",
                           extra_fields={"global_steps": g, "min_global_steps": g, "max_global_steps": g})


class CountingPool:
    """kit.sandbox.SandboxPool stand-in: counts how many are made; start takes a while."""

    made: list = []

    def __init__(self, cfg=None, **kwargs):
        CountingPool.made.append(self)
        self.closed = False

    async def start(self):
        await asyncio.sleep(0.05)
        return self

    async def __aenter__(self):
        return await self.start()

    async def close(self):
        self.closed = True

    async def run(self, call):
        from kit.sandbox import ToolResult

        return ToolResult(status="ok", stdout="42\n", stderr="", value="", exit_code=0, wall_s=0.01)

    async def run_batch(self, calls):
        return [await self.run(c) for c in calls]


@pytest.fixture
def counting_pool(monkeypatch):
    CountingPool.made = []
    # bound at import in both bridge modules (imports at the top, #14)
    monkeypatch.setattr(bridge_loop, "SandboxPool", CountingPool)
    monkeypatch.setattr(bridge_tool, "SandboxPool", CountingPool)
    monkeypatch.setattr(bridge_loop, "_POOLS", {})
    return CountingPool


def _loop(tok, server, executor=None):
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 256, "response_length": 200,
                                                             "multi_turn": {"max_assistant_turns": 3}}}, "data": {}})
    return hydra.utils.instantiate(
        config=_agent_loop_registry[bridge_loop.AGENT_NAME], trainer_config=DictConfigWrap(cfg), server_manager=server,
        tokenizer=tok, processor=None, hf_model_type=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]), executor=executor, tool_response_max_tokens=64)


ROW = {"raw_prompt": [{"role": "user", "content": "What is 6 times 7?"}]}


async def test_every_trajectory_carries_its_weight_versions(tok, counting_pool):
    # turn 1 sampled with weights of step 3, turn 2 after a weight update (step 4)
    out = await _loop(tok, StepServer(tok, [3, 4])).run({"temperature": 1.0, "top_p": 1.0}, **ROW)
    assert out.extra_fields["tool_calls"] == 1
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 4)
    # what VERL's v1 trainer does with them (trainer_base.py:1897) must not raise
    assert np.array([out.extra_fields["max_global_steps"]], dtype=int).tolist() == [4]


async def test_output_without_versions_still_has_both_keys(tok):
    out = bridge_loop.trajectory_to_output(
        await _run_kit_trajectory(tok), response_length=100)
    assert {"min_global_steps", "max_global_steps"} <= set(out.extra_fields)


async def _run_kit_trajectory(tok):
    from kit.config import RolloutConfig
    from kit.rollout import ScriptedBackend, run_trajectory

    class Ex:
        async def run_batch(self, calls):
            return []

    return await run_trajectory(ScriptedBackend(tok, [ANSWER + prompts.IM_END]), tok, "What is 6 times 7?", Ex(),
                                RolloutConfig(max_response_tokens=100))


async def test_concurrent_trajectories_share_one_sandbox_pool(tok, counting_pool):
    server = StepServer(tok, [1])
    outs = await asyncio.gather(*(_loop(tok, server).run({"temperature": 1.0, "top_p": 1.0}, **ROW)
                                  for _ in range(32)))
    assert all(o.extra_fields["tool_calls"] == 1 for o in outs)
    assert len(counting_pool.made) == 1
    outs = await asyncio.gather(*(_loop(tok, server).run({"temperature": 1.0, "top_p": 1.0}, **ROW)
                                  for _ in range(8)))
    assert len(counting_pool.made) == 1  # a later batch reuses it


async def test_a_failed_pool_start_is_retried_not_cached(tok, monkeypatch, counting_pool):
    calls = []

    class FailingOnce(CountingPool):
        async def start(self):
            calls.append(1)
            await asyncio.sleep(0.01)
            if len(calls) == 1:
                raise OSError("bwrap missing")
            return self

    monkeypatch.setattr(bridge_loop, "SandboxPool", FailingOnce)
    with pytest.raises(OSError, match="bwrap"):
        await asyncio.gather(*(bridge_loop._shared_pool(None) for _ in range(4)))
    pools = await asyncio.gather(*(bridge_loop._shared_pool(None) for _ in range(4)))
    assert len({id(p) for p in pools}) == 1 and len(calls) == 2


async def test_tool_concurrent_first_calls_share_one_pool(counting_pool):
    from verl.experimental.agent_loop.tool_agent_loop import AgentData

    tool = KitSandboxTool({"type": "native", "num_workers": 1})

    async def one():
        agent = AgentData(messages=[], image_data=[], video_data=[], audio_data=None, mm_processor_kwargs=None,
                          metrics={}, request_id="r", tools_kwargs={})
        resp, _, metrics = await tool.execute("i", {"code": "print(6*7)"}, agent_data=agent)
        return resp.text, metrics["status"]

    results = await asyncio.gather(*(one() for _ in range(16)))
    assert results == [("42", "ok")] * 16
    assert len(counting_pool.made) == 1
    await tool.close()
    assert counting_pool.made[0].closed
