"""The VERL 0.9.x agent loop (kit.bridge.agent_loop) with VERL's real classes on CPU.

VERL's ``AgentLoopWorker`` builds agent loops with ``hydra.utils.instantiate`` from the registry
and awaits ``run``; here a mock server stands in for the SGLang replica (``generate`` returns
``TokenOutput``), as VERL 0.9's ``AsyncLLMServerManager`` does.
"""

from __future__ import annotations

import hydra
import pytest
from doubles import FakeExecutor, Res, call, pair
from omegaconf import OmegaConf

pytest.importorskip("verl.experimental.agent_loop")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from kit import prompts  # noqa: E402
from kit.bridge.agent_loop import AGENT_NAME, KitAgentLoop  # noqa: E402
from kit.config import RolloutConfig  # noqa: E402
from kit.rollout import ScriptedBackend, run_trajectory  # noqa: E402

ANSWER = "done</reason> <answer> \\boxed{42} </answer>"
PROBLEM = "What is 6 * 7?"


class MockServer:
    """LLMServerClient stand-in: replays texts as TokenOutput, ignores the stop id it is told about
    for one turn to check the adapter cuts at the stop id itself."""

    def __init__(self, tok, texts):
        self.tok, self.texts, self.requests = tok, list(texts), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
        ids = self.tok.encode(self.texts.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def _config(response_length=300, turns=3):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 256, "response_length": response_length,
                                          "multi_turn": {"max_assistant_turns": turns}}},
        "data": {},
    })


def _make(tok, server, executor, cfg=None):
    cfg = cfg or _config()
    return hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME], trainer_config=DictConfigWrap(cfg), server_manager=server,
        tokenizer=tok, processor=None, hf_model_type=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]), executor=executor, tool_response_max_tokens=64,
    )


async def test_registered_and_built_like_verl_does(tok):
    assert _agent_loop_registry[AGENT_NAME]["_target_"] == "kit.bridge.agent_loop.KitAgentLoop"
    loop = _make(tok, MockServer(tok, []), FakeExecutor())
    assert isinstance(loop, KitAgentLoop)
    assert (loop.kit_cfg.max_response_tokens, loop.kit_cfg.max_turns, loop.kit_cfg.max_prompt_tokens) == (300, 3, 256)


async def test_output_matches_the_kit_loop_and_carries_counters(tok):
    turns = ["try " + call("print(6*7)") + prompts.IM_END + " junk after stop",
             call("1/0") + '<tool_call>{"bad json</tool_call>' + prompts.IM_END, ANSWER + prompts.IM_END]

    def fn(code, stdin):
        return Res("ok", stdout="42\n") if "6*7" in code else Res("error", stderr="ZeroDivisionError: division by zero")

    server = MockServer(tok, turns)
    loop = _make(tok, server, FakeExecutor(fn))
    out = await loop.run({"temperature": 0.9, "top_p": 0.95, "logprobs": True, "top_k": -1},
                         raw_prompt=[{"role": "user", "content": "What is 6 * 7?"}])
    assert isinstance(out, AgentLoopOutput)

    # the same rollout through the engine-agnostic loop gives the same ids and mask
    ref = await run_trajectory(ScriptedBackend(tok, [t.split(prompts.IM_END)[0] for t in turns], logprob=-0.25), tok,
                               "What is 6 * 7?", FakeExecutor(fn), RolloutConfig(max_response_tokens=300, max_turns=3,
                               tool_response_max_tokens=64), call_factory=pair)
    assert out.prompt_ids == ref.prompt_ids and out.response_ids == ref.response_ids
    assert out.response_mask == ref.response_mask and out.response_logprobs == ref.logprobs
    assert out.num_turns == 3 + 2 + 1
    ef = out.extra_fields
    assert (ef["tool_calls"], ef["tool_error_exception"], ef["tool_error_malformed"], ef["tool_errors"]) == (3, 1, 1, 2)
    assert (ef["infra_errors"], ef["answer_tags"], ef["truncated"], ef["finish_reason"]) == (0, 1, False, "answer")
    assert ef["answered"] is True  # RoC's p_format reads it (issue #30)

    # every turn of the trajectory went to one request id, with the shared budget and the stop ids
    rids = {r[0] for r in server.requests}
    assert len(rids) == 1
    first, second = server.requests[0][2], server.requests[1][2]
    assert first["max_new_tokens"] == 300 and first["temperature"] == 0.9 and first["top_p"] == 0.95
    assert first["logprobs"] is True and first["top_k"] == -1
    assert second["max_new_tokens"] == 300 - (len(server.requests[1][1]) - len(out.prompt_ids))
    assert tok.convert_tokens_to_ids(prompts.IM_END) in first["stop_token_ids"]

    d = out.as_dict()  # what AgentLoopWorker pads and hands to the trainer
    assert d["response_mask"].tolist() == ref.response_mask and d["rollout_log_probs"].shape == d["responses"].shape


async def test_budget_from_verl_response_length(tok):
    server = MockServer(tok, [call("print(1)") + prompts.IM_END, "word " * 200])
    loop = _make(tok, server, FakeExecutor(), _config(response_length=90))
    out = await loop.run({"temperature": 1.0, "top_p": 1.0}, raw_prompt=[{"role": "user", "content": "q"}])
    assert len(out.response_ids) == 90 and out.extra_fields["truncated"] and out.extra_fields["finish_reason"] == "length"


async def test_empty_server_reply_keeps_the_trajectory_logprobs(tok):
    """SGLang answers an aborted request, or one whose max_new_tokens it clamped to 0, with
    token_ids == log_probs == []; the rollout ends "length" and keeps the log-probs it has
    (None for one row would break VERL's torch.cat of rollout_log_probs over the batch)."""

    class EmptySecond(MockServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            if self.requests:
                self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
                return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted")
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)

    loop = _make(tok, EmptySecond(tok, [call("print(1)") + prompts.IM_END]), FakeExecutor())
    out = await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=[{"role": "user", "content": "q"}])
    assert out.extra_fields["finish_reason"] == "length" and out.extra_fields["truncated"]
    assert out.response_logprobs is not None and len(out.response_logprobs) == len(out.response_ids)
    assert [lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m] == [-0.25] * sum(
        out.response_mask)

    class AlwaysEmpty(MockServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted")

    out = await _make(tok, AlwaysEmpty(tok, []), FakeExecutor()).run(
        {"temperature": 1.0, "logprobs": True}, raw_prompt=[{"role": "user", "content": "q"}])
    assert out.response_ids == [] and out.response_logprobs == []  # [], not None: the batch stays concatenable
    assert out.as_dict()["rollout_log_probs"].shape == (0,)


async def test_row_without_user_message_is_a_clear_error(tok):
    loop = _make(tok, MockServer(tok, []), FakeExecutor())
    with pytest.raises(ValueError, match="no user message"):
        await loop.run({"temperature": 1.0}, raw_prompt=[{"role": "system", "content": "x"}])


def _fixed_42_tool():
    """A VERL BaseTool with the kit's schema that answers every call with "42"."""
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    class Tool(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text="42"), 0.0, {}

    return Tool({}, OpenAIFunctionToolSchema.model_validate(prompts.TOOL_SCHEMA))


@pytest.mark.parametrize("hf_model_type, same", [("qwen3", True), (None, False)])
async def test_token_layout_equals_verl_tool_agent_loop(tok, hf_model_type, same):
    """VERL's own ToolAgentLoop with its Qwen3 Continuous Token builder lays out exactly the kit's
    ids and mask. Its generic builder (unknown model type) drops the template newline after
    <|im_end|>, as the release did; the audit flags that sequence."""
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from kit.rollout import Trajectory, audit_trajectory

    turns = ["try " + call("print(6*7)") + prompts.IM_END, ANSWER + prompts.IM_END]
    cfg = _config()
    cfg.actor_rollout_ref.rollout.multi_turn.update({"max_user_turns": None, "max_parallel_calls": 1,
                                                     "max_tool_response_length": 256,
                                                     "tool_response_truncate_side": "middle", "format": "hermes"})
    cfg.actor_rollout_ref.rollout.full_determinism = False
    verl_loop = ToolAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=MockServer(tok, turns), tokenizer=tok,
                              processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data),
                              hf_model_type=hf_model_type, tools=ToolListWrap([_fixed_42_tool()]))
    theirs = await verl_loop.run({"temperature": 1.0}, raw_prompt=[{"role": "user", "content": PROBLEM}])
    ours = await run_trajectory(ScriptedBackend(tok, [t.split(prompts.IM_END)[0] for t in turns]), tok, PROBLEM,
                                FakeExecutor(), RolloutConfig(max_response_tokens=300), call_factory=pair)
    assert theirs.prompt_ids == ours.prompt_ids
    assert (theirs.response_ids == ours.response_ids and theirs.response_mask == ours.response_mask) is same
    as_traj = Trajectory(problem=PROBLEM, prompt_ids=theirs.prompt_ids, response_ids=theirs.response_ids,
                         response_mask=theirs.response_mask, model_texts=ours.model_texts,
                         feedback_texts=ours.feedback_texts)
    rep = audit_trajectory(as_traj, tok)
    assert rep.ok is same and rep.text_ok is same



async def test_verl_agent_loop_runs_a_call_whose_code_holds_the_closing_tag(tok):
    """Issue #17 on the VERL path: the rstar2_kit loop parses with kit.rollout.protocol, so code
    holding '</tool_call>' in a string runs whole (it was answered "not valid JSON")."""
    code = "tag = '</tool_call>'\nprint(len(tag) * 3)"
    ran: list[str] = []

    def fn(c, stdin):
        ran.append(c)
        return Res("ok", stdout="36\n")

    server = MockServer(tok, ["count " + call(code) + prompts.IM_END, ANSWER + prompts.IM_END])
    out = await _make(tok, server, FakeExecutor(fn)).run({"temperature": 1.0, "top_p": 1.0},
                                                         raw_prompt=[{"role": "user", "content": PROBLEM}])
    assert ran == [code]
    assert (out.extra_fields["tool_calls"], out.extra_fields["tool_error_malformed"]) == (1, 0)
