"""The VERL tool and reward function, called the way VERL 0.9.1 calls them."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from kit import prompts
from kit.models import train_tokenizer
from kit.sandbox import isolation


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [prompts.render_prompt("What is 6 times 7?"), "<reason>6*7</reason> <answer>\\boxed{42}</answer>",
              "<tool_call>{}</tool_call><tool_response>\n42\n</tool_response> print(6*7)"] * 20
    return train_tokenizer(corpus, 400)


def _reward_fn():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://kit.bridge.reward_fn", "name": "compute_score", "reward_kwargs": {"timeout_s": 5.0}}}})
    return get_custom_reward_fn(cfg)


def _item(tokenizer, response: str, gold):
    from verl import DataProto

    prompt = tokenizer.encode(prompts.render_prompt("What is 6 times 7?"), add_special_tokens=False)
    resp = tokenizer.encode(response, add_special_tokens=False)
    return DataProto.from_dict(
        tensors={"responses": torch.tensor([resp]), "attention_mask": torch.ones(1, len(prompt) + len(resp),
                                                                                   dtype=torch.long)},
        non_tensors={"data_source": np.array(["aime"], dtype=object),
                     "reward_model": np.array([{"ground_truth": gold}], dtype=object),
                     "extra_info": np.array([{"index": 0}], dtype=object),
                     "tool_extra_fields": np.array([{"tool_calls": 1, "answer_tags": 1, "turns": 2}], dtype=object)},
    )


async def test_reward_fn_through_verls_naive_reward_manager(tokenizer):
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    manager = NaiveRewardManager(OmegaConf.create({}), tokenizer, _reward_fn())
    right = "<tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>" \
            "\n<|im_start|>assistant\n<reason>so</reason> <answer>\\boxed{42}</answer><|im_end|>"
    out = await manager.run_single(_item(tokenizer, right, "42"))
    assert out["reward_score"] == 1.0 and out["reward_extra_info"]["reason"] == "correct"
    wrong = right.replace("\\boxed{42}", "\\boxed{41}")
    assert (await manager.run_single(_item(tokenizer, wrong, np.int64(42))))["reward_score"] == 0.0
    # a boxed value printed by the tool is not the model's answer
    decoy = "<tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n\\boxed{42}\n</tool_response>"
    assert (await manager.run_single(_item(tokenizer, decoy, "42")))["reward_score"] == 0.0
    # issue #30: a final box left open does not let an earlier box count
    taken_back = right.replace("\\boxed{42}</answer>", "\\boxed{42}. No, \\boxed{41")
    out = await manager.run_single(_item(tokenizer, taken_back, "42"))
    assert out["reward_score"] == 0.0 and out["reward_extra_info"]["reason"] == "no_answer"


def test_count_into_matches_the_rollout_counters():
    from kit.bridge.tool import count_into

    extra: dict = {}
    for status in ("ok", "error", "timeout", "infra_error", None):
        count_into(extra, status)
    assert extra["tool_calls"] == 5 and extra["tool_errors"] == 3 and extra["infra_errors"] == 1
    assert extra["tool_error_exception"] == extra["tool_error_timeout"] == extra["tool_error_malformed"] == 1


def test_tool_config_rejects_unknown_keys(tmp_path):
    from verl.tools.tool_registry import initialize_tools_from_config

    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: kit.bridge.tool.KitSandboxTool\n    config: {type: native, timeout: 3}\n")
    with pytest.raises(ValueError, match="unknown key 'timeout'"):
        initialize_tools_from_config(str(path))


@pytest.mark.slow  # starts a bubblewrap worker and waits out a 1 s timeout
@pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")
async def test_tool_loaded_from_yaml_runs_code_in_the_sandbox_and_counts(tmp_path):
    from verl.experimental.agent_loop.tool_agent_loop import AgentData
    from verl.tools.tool_registry import initialize_tools_from_config

    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: kit.bridge.tool.KitSandboxTool\n"
                    "    config: {type: native, timeout_s: 1.0, cpu_s: 1.0, num_workers: 1, send_workers: 2}\n")
    (tool,) = initialize_tools_from_config(str(path))
    assert tool.name == prompts.TOOL_NAME
    agent = AgentData(messages=[], image_data=[], video_data=[], audio_data=None, mm_processor_kwargs=None,
                      metrics={}, request_id="r", tools_kwargs={})
    try:
        async def call(params):
            iid, _ = await tool.create(create_kwargs={})
            resp, reward, metrics = await tool.execute(iid, params, agent_data=agent)
            await tool.release(iid)
            return resp.text, metrics["status"]

        assert await call({"code": "n = int(input())\nprint(n * 6)", "input": "7"}) == ("42", "ok")
        text, status = await call({"code": "1/0", "input": ""})
        assert status == "error" and "ZeroDivisionError" in text
        text, status = await call({"code": "while True: pass"})
        assert status == "timeout" and "Timeout" in text
        text, status = await call({"cmd": "ls"})
        assert status == "malformed" and "invalid tool call" in text
    finally:
        await tool.close()
    ef = agent.extra_fields
    assert (ef["tool_calls"], ef["tool_errors"], ef.get("infra_errors", 0)) == (4, 3, 0)
    assert (ef["tool_error_exception"], ef["tool_error_timeout"], ef["tool_error_malformed"]) == (1, 1, 1)


async def test_kit_hermes_parser_keeps_tags_inside_json_and_forwards_malformed_calls(tokenizer):
    """Issue #17: VERL's tool_agent path can use the kit parser; a closing tag inside the code string
    no longer cuts the call, and a malformed call reaches the tool as a counted 'malformed' answer."""
    import json

    from verl.experimental.agent_loop.tool_parser import ToolParser

    from kit.bridge.tool import MALFORMED_KEY, KitSandboxTool

    code = "end = '</tool_call>'\nprint(len(end))"
    good = prompts.TOOL_CALL_OPEN + json.dumps({"name": prompts.TOOL_NAME, "arguments": {"code": code, "input": ""}})
    text = "count it " + good + prompts.TOOL_CALL_CLOSE + " and " + prompts.TOOL_CALL_OPEN + '{"name": 1' + \
        prompts.TOOL_CALL_CLOSE
    parser = ToolParser.get_tool_parser("kit_hermes", tokenizer)
    content, calls = await parser.extract_tool_calls(tokenizer.encode(text, add_special_tokens=False))
    assert [c.name for c in calls] == [prompts.TOOL_NAME] * 2
    assert json.loads(calls[0].arguments) == {"code": code, "input": ""}
    assert "not valid JSON" in json.loads(calls[1].arguments)[MALFORMED_KEY]
    assert "len(end)" not in content and "count it" in content

    class Agent:
        extra_fields: dict = {}

    agent = Agent()
    tool = KitSandboxTool({}, executor=object())  # a malformed call never reaches the executor
    resp, _, metrics = await tool.execute("i", json.loads(calls[1].arguments), agent_data=agent)
    assert metrics["status"] == "malformed" and resp.text.startswith("Error: invalid tool call: the tool call is not")
    assert agent.extra_fields["tool_error_malformed"] == 1
