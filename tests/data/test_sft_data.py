"""Cold-start SFT data: real loaders, the kit chat format, assistant-only loss masks."""

import json
import random

import pytest

from kit import prompts
from kit.data import sft, tasks
from kit.models import train_tokenizer


@pytest.fixture(scope="module")
def fc():
    return {name: sft.LOADERS[name](sft.paths.data_file(sft.SFT_FILES[name])) for name in sft.LOADERS}


@pytest.fixture(scope="module")
def demo_convs():
    rng = random.Random(0)
    split = tasks.make_split(40, 0, seed=0)
    kinds = tasks.demo_kinds(40, 0.5, 0.25, 0)
    demos = [tasks.make_demo(p, k, rng) for p, k in zip(split.train, kinds, strict=True)]
    fb = [["NameError: name 'pritn' is not defined"] * (len(d.turns) - 1) + [d.problem.answer] if d.turns else []
          for d in demos]
    return [sft.demo_conversation(d, f) for d, f in zip(demos, fb, strict=True)]


@pytest.fixture(scope="module")
def tok(fc, demo_convs):
    convs = demo_convs + [c for cs in fc.values() for c in cs[:20]]
    return train_tokenizer(sft.tokenizer_corpus(convs), 512)


def test_loaders_read_every_row(fc):
    assert {k: len(v) for k, v in fc.items()} == {"glaive": 300, "toolace": 100, "xlam": 5, "reason_tool_use": 50}
    for convs in fc.values():
        for c in convs:
            assert c.messages[0]["role"] == "system"
            assert c.messages[0]["content"].startswith(prompts.SYSTEM_PREAMBLE + "\n\n# Tools")
            assert any(m["role"] == "assistant" for m in c.messages)
            for m in c.messages:
                if m["role"] == "assistant":
                    assert m["content"].startswith(prompts.ASSISTANT_PREFILL)


def test_glaive_function_call_becomes_tool_call_block_and_observation_a_tool_turn(fc):
    c = fc["glaive"][0]
    roles = [m["role"] for m in c.messages]
    assert roles[:6] == ["system", "user", "assistant", "user", "assistant", "tool"]
    call = c.messages[4]["content"]
    body = call[call.index(prompts.TOOL_CALL_OPEN) + len(prompts.TOOL_CALL_OPEN):call.index(prompts.TOOL_CALL_CLOSE)]
    obj = json.loads(body)
    assert obj["name"] == "search_recipes" and obj["arguments"]["ingredients"][0] == "chicken"
    assert '"name": "search_recipes"' in c.messages[0]["content"]  # its schema is in the tools block
    assert c.messages[2]["content"].endswith(prompts.ANSWER_CLOSE)


def test_toolace_truncated_names_are_recovered(fc):
    first_call = next(m["content"] for m in fc["toolace"][0].messages if prompts.TOOL_CALL_OPEN in m["content"])
    assert '"name": "Market Trends API"' in first_call


def test_reason_tool_use_keeps_reasoning_inside_reason(fc):
    c = fc["reason_tool_use"][0]
    a = c.messages[-1]["content"]
    assert a.startswith(prompts.REASON_OPEN + "Okay, the user is asking")
    assert a.index(prompts.REASON_CLOSE) < a.index(prompts.ANSWER_OPEN)


def test_bad_rows_name_file_and_row(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}], "tools": "[]"},
                             {"conversations": [{"from": "robot", "value": "x"}], "tools": "[]"}]))
    with pytest.raises(sft.SFTDataError, match=r"g\.json row 1 turn 0: unknown 'from' 'robot'"):
        sft.load_glaive(p)
    q = tmp_path / "x.jsonl"
    q.write_text('{"responses_create_params": {"input": []}}\n')
    with pytest.raises(sft.SFTDataError, match=r"x\.jsonl row 0"):
        sft.load_xlam(q)
    with pytest.raises(ValueError, match="unknown SFT set"):
        sft.load_function_calling(["nope"])


def test_mask_covers_exactly_the_assistant_text(tok, fc, demo_convs):
    for c in demo_convs[:10] + fc["glaive"][:5] + fc["reason_tool_use"][:5]:
        ids, mask = sft.encode_conversation(tok, c.messages)
        assert ids == tok.encode(c.text(), add_special_tokens=False)  # pieces join losslessly
        trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=False)
        want = "".join(m["content"][len(prompts.ASSISTANT_PREFILL):] + prompts.IM_END
                       for m in c.messages if m["role"] == "assistant")
        assert trained == want
        # tool responses and the system prompt never carry loss
        assert prompts.TOOL_RESPONSE_OPEN not in trained and prompts.SYSTEM_PREAMBLE[:40] not in trained


def test_max_tokens_cuts_from_the_right(tok, fc):
    c = fc["glaive"][3]
    ids, mask = sft.encode_conversation(tok, c.messages)
    cut_ids, cut_mask = sft.encode_conversation(tok, c.messages, max_tokens=50)
    assert cut_ids == ids[:50] and cut_mask == mask[:50]


def test_demo_conversation_layout(demo_convs):
    err = next(c for c in demo_convs if c.source == "task:tool_error")
    roles = [m["role"] for m in err.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert err.messages[0]["content"] == prompts.SYSTEM_PROMPT
    direct = next(c for c in demo_convs if c.source == "task:direct")
    assert [m["role"] for m in direct.messages] == ["system", "user", "assistant"]
    with pytest.raises(ValueError, match="feedback"):
        sft.demo_conversation(tasks.make_demo(tasks.make_split(1, 0, 0).train[0], "tool", random.Random(0)), [])
