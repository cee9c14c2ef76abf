"""The agent loop driven by scripted model turns: feedback text, counters and mask spans."""

from __future__ import annotations

import json

import pytest
from doubles import FakeExecutor, Res, call, pair

from kit import prompts
from kit.config import RolloutConfig
from kit.rollout import ScriptedBackend, audit_trajectory, rollout_batch, run_trajectory

CFG = RolloutConfig(max_prompt_tokens=256, max_response_tokens=400, max_turns=4, max_calls_per_turn=4,
                    tool_response_max_tokens=64)
ANSWER = "so</reason> <answer> \\boxed{42} </answer>"
TB = 'Traceback (most recent call last):\n  File "<code>", line 1, in <module>\nZeroDivisionError: division by zero'


async def roll(tok, script, executor=None, cfg=CFG, **kw):
    ex = executor or FakeExecutor()
    tr = await run_trajectory(ScriptedBackend(tok, script), tok, "What is 6 * 7?", ex, cfg, call_factory=pair, **kw)
    return tr, ex


def check_spans(tr, tok):
    """Mask-1 spans are exactly the sampled turns, mask-0 spans exactly the feedback blocks."""
    dec = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    spans = tr.spans()
    model = [dec(tr.response_ids[s:e]) for m, s, e in spans if m == 1]
    masked = [dec(tr.response_ids[s:e]) for m, s, e in spans if m == 0]
    assert model == tr.model_texts
    assert masked == [prompts.feedback_block(t) for t in tr.feedback_texts]
    assert len(tr.response_ids) == len(tr.response_mask) == len(tr.logprobs)
    assert all(lp == 0.0 for lp, m in zip(tr.logprobs, tr.response_mask, strict=True) if m == 0)
    assert all(lp == -0.5 for lp, m in zip(tr.logprobs, tr.response_mask, strict=True) if m == 1)
    rep = audit_trajectory(tr, tok)
    assert rep.text_ok and rep.ids_ok and rep.masked_ok, rep.problems


async def test_success_then_answer(tok):
    tr, ex = await roll(tok, ["let me compute " + call("print(6*7)"), ANSWER])
    assert ex.batches == [[("print(6*7)", "")]]
    assert tr.finish_reason == "answer" and not tr.truncated
    assert (tr.turns, tr.tool_calls, tr.n_tool_errors, tr.infra_errors, tr.answer_tags) == (2, 1, 0, 0, 1)
    assert tr.feedback_texts == [["42"]]
    assert tr.call_statuses == ["ok"]
    assert [m for m, _, _ in tr.spans()] == [1, 0, 1]
    assert tr.response_text.endswith(ANSWER + prompts.IM_END)
    rec = json.loads(json.dumps(tr.to_record()))  # samples.jsonl row
    assert rec["spans"] == [list(sp) for sp in tr.spans()] and rec["call_statuses"] == ["ok"]
    assert "<tool_response>\n42\n</tool_response>" in tr.response_text
    check_spans(tr, tok)


async def test_exception_feedback_is_the_traceback(tok):
    ex = FakeExecutor(lambda c, i: Res("error", stdout="partial\n", stderr=TB, exit_code=1))
    tr, _ = await roll(tok, [call("print('partial'); 1/0"), ANSWER], ex)
    assert tr.feedback_texts == [["partial\n" + TB]]
    assert tr.tool_errors == {"exception": 1, "timeout": 0, "memory": 0, "output": 0, "malformed": 0}
    check_spans(tr, tok)


async def test_malformed_json_is_answered_and_not_run(tok):
    bad = '<tool_call>\n{"name": "TOOL", "arguments": {"code": "print(1)",}}\n</tool_call>'.replace("TOOL", prompts.TOOL_NAME)
    tr, ex = await roll(tok, [bad, ANSWER])
    assert ex.batches == []
    (fb,) = tr.feedback_texts[0]
    assert fb.startswith("Error: invalid tool call: the tool call is not valid JSON (")
    assert '"arguments": {"code": "...", "input": "..."}' in fb
    assert tr.tool_errors["malformed"] == 1 and tr.tool_calls == 1 and tr.call_statuses == ["malformed"]
    check_spans(tr, tok)


async def test_unknown_tool(tok):
    tr, ex = await roll(tok, [call("1+1", name="calculator"), ANSWER])
    assert ex.batches == []
    assert f"unknown tool 'calculator'; the only tool is '{prompts.TOOL_NAME}'" in tr.feedback_texts[0][0]
    assert tr.tool_errors["malformed"] == 1
    check_spans(tr, tok)


async def test_alias_name_runs(tok):
    tr, ex = await roll(tok, [call("print(6*7)", name="python_code_with_standard_io"), ANSWER])
    assert ex.batches == [[("print(6*7)", "")]] and tr.n_tool_errors == 0


async def test_timeout(tok):
    ex = FakeExecutor(lambda c, i: Res("timeout", stdout="", exit_code=None, wall_s=5.0))
    tr, _ = await roll(tok, [call("while True: pass"), ANSWER], ex, timeout_s=5.0)
    assert tr.feedback_texts == [["Timeout: the program did not finish within 5 s and was stopped."]]
    assert tr.tool_errors["timeout"] == 1 and tr.n_tool_errors == 1
    check_spans(tr, tok)


async def test_memory_output_limit_and_infra_are_counted_apart(tok):
    res = {"a": Res("memory_limit", stderr="MemoryError"), "b": Res("output_limit", stdout="x" * 20),
           "c": Res("infra_error", stderr="worker died")}
    ex = FakeExecutor(lambda c, i: res[c])
    tr, _ = await roll(tok, [call("a") + call("b") + call("c"), ANSWER], ex)
    assert tr.tool_errors == {"exception": 0, "timeout": 0, "memory": 1, "output": 1, "malformed": 0}
    assert tr.infra_errors == 1 and tr.call_statuses == ["memory_limit", "output_limit", "infra_error"]
    assert "execution service failed" in tr.feedback_texts[0][2]
    check_spans(tr, tok)


async def test_executor_failure_becomes_infra_error(tok):
    class Broken:
        async def run_batch(self, calls):
            raise ConnectionError("pool closed")

    tr, _ = await roll(tok, [call("print(1)"), ANSWER], Broken())
    assert tr.infra_errors == 1 and tr.n_tool_errors == 0 and tr.calls[0].detail == "ConnectionError: pool closed"
    assert tr.finish_reason == "answer"


async def test_two_calls_in_one_turn_run_in_order_and_share_one_block(tok):
    ex = FakeExecutor(lambda c, i: Res("ok", stdout=f"out:{c}:{i}\n"))
    tr, _ = await roll(tok, ["two " + call("A", "1") + " and " + call("B", "2"), ANSWER], ex)
    assert ex.batches == [[("A", "1"), ("B", "2")]]
    assert tr.feedback_texts == [["out:A:1", "out:B:2"]]
    assert tr.tool_calls == 2
    (block,) = [tok.decode(tr.response_ids[s:e]) for m, s, e in tr.spans() if m == 0]
    assert block.count("<tool_response>") == 2 and block.count("<|im_start|>user") == 1
    check_spans(tr, tok)


async def test_calls_past_the_limit_are_answered_not_run(tok):
    cfg = RolloutConfig(**{**CFG.__dict__, "max_calls_per_turn": 1})
    tr, ex = await roll(tok, [call("A") + call("B"), ANSWER], cfg=cfg)
    assert ex.batches == [[("A", "")]]
    assert tr.call_statuses == ["ok", "skipped"] and tr.n_tool_errors == 0
    assert tr.feedback_texts[0][1] == "Not run: at most 1 tool calls are run per turn."
    check_spans(tr, tok)


async def test_budget_exhaustion_mid_turn(tok):
    long = "thinking " * 200
    tr, _ = await roll(tok, [call("print(6*7)"), long], max_response_tokens=120)
    assert tr.finish_reason == "length" and tr.truncated
    assert len(tr.response_ids) == 120 and tr.response_mask[-1] == 1
    assert tr.response_ids[-1] != tok.convert_tokens_to_ids(prompts.IM_END)
    assert tr.turns == 2 and tr.tool_calls == 1
    check_spans(tr, tok)


async def test_feedback_that_does_not_fit_ends_the_rollout_without_a_tool_turn(tok):
    ex = FakeExecutor(lambda c, i: Res("ok", stdout="9" * 60))
    first = call("print(9)")
    n_first = len(tok.encode(first, add_special_tokens=False)) + 1
    tr, _ = await roll(tok, [first, ANSWER], ex, max_response_tokens=n_first + 20)
    assert tr.finish_reason == "budget" and tr.truncated
    assert tr.response_mask == [1] * n_first  # nothing masked was appended
    assert tr.tool_calls == 1 and tr.calls[0].shown is False
    check_spans(tr, tok)


async def test_max_turns_stops_before_running_the_last_calls(tok):
    tr, ex = await roll(tok, [call("A"), call("B"), call("C")], max_turns=2)
    assert tr.finish_reason == "max_turns" and not tr.truncated
    assert ex.batches == [[("A", "")]] and tr.turns == 2 and tr.tool_calls == 1
    assert [m for m, _, _ in tr.spans()] == [1, 0, 1]
    check_spans(tr, tok)


async def test_feedback_truncated_by_tokens_with_marker(tok):
    big = "\n".join(f"line {i}: value {i * i}" for i in range(200))
    ex = FakeExecutor(lambda c, i: Res("ok", stdout=big))
    tr, _ = await roll(tok, [call("big()"), ANSWER], ex)
    (fb,) = tr.feedback_texts[0]
    assert len(tok.encode(fb, add_special_tokens=False)) <= CFG.tool_response_max_tokens
    assert "tokens cut]..." in fb and fb.startswith("line 0") and fb.endswith(big[-5:])
    assert tr.calls[0].cut_tokens > 0
    check_spans(tr, tok)


async def test_endoftext_ends_the_trajectory(tok):
    tr, ex = await roll(tok, [call("A") + prompts.ENDOFTEXT])
    assert tr.finish_reason == "eos" and ex.batches == [] and tr.tool_calls == 0


async def test_answer_tags_count_only_model_text(tok):
    ex = FakeExecutor(lambda c, i: Res("ok", stdout="<answer> 1 </answer>"))
    tr, _ = await roll(tok, ["<answer> 0 </answer>" + call("A"), ANSWER], ex)
    assert tr.answer_tags == 2  # one per model turn; the tool's echo is not counted


async def test_abandoned_final_box_is_no_answer_for_roc(tok):
    """Issue #30: an <answer> whose final box is left open is no answer (RoC's p_format reads it)."""
    tr, _ = await roll(tok, ["so</reason> <answer> \\boxed{42}. No: \\boxed{41 </answer>"])
    assert tr.answer_tags == 1 and tr.answered is False
    done, _ = await roll(tok, [ANSWER])
    assert done.answered is True


async def test_budget_is_shared_across_turns(tok):
    be = ScriptedBackend(tok, [call("A"), ANSWER])
    tr = await run_trajectory(be, tok, "q", FakeExecutor(), CFG, call_factory=pair, max_response_tokens=300)
    first, second = be.calls
    assert first["max_new_tokens"] == 300
    assert second["max_new_tokens"] == 300 - (len(second["prompt_ids"]) - len(tr.prompt_ids))


async def test_rollout_batch_groups_by_problem(tok):
    def script(context: str) -> str:
        problem = context.split("This is the problem:\n")[1].split("<|im_end|>")[0]
        return ANSWER.replace("42", problem[-1]) if "<tool_response>" in context else call(f"print('{problem}')")

    out = await rollout_batch(ScriptedBackend(tok, script), tok, ["p1", "p2", "p3"], FakeExecutor(), 2, CFG,
                              call_factory=pair, max_concurrency=4)
    assert [len(g) for g in out] == [2, 2, 2]
    for p, group in zip("123", out, strict=True):
        for tr in group:
            assert tr.problem == f"p{p}" and tr.finish_reason == "answer" and f"\\boxed{{{p}}}" in tr.response_text


async def test_prompt_too_long_raises(tok):
    cfg = RolloutConfig(**{**CFG.__dict__, "max_prompt_tokens": 5})
    with pytest.raises(ValueError, match="max_prompt_tokens=5"):
        await roll(tok, [ANSWER], cfg=cfg)
