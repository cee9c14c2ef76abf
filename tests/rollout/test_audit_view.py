"""The audit catches token drift and mask errors; the view colors spans."""

from __future__ import annotations

import copy

from doubles import FakeExecutor, call, pair

from kit import prompts
from kit.config import RolloutConfig
from kit.rollout import ScriptedBackend, audit_trajectory, run_trajectory, trajectory_html

ANSWER = "so</reason> <answer> \\boxed{42} </answer>"


async def _traj(tok):
    cfg = RolloutConfig(max_prompt_tokens=256, max_response_tokens=400, max_turns=4)
    return await run_trajectory(ScriptedBackend(tok, ["compute " + call("print(6*7)"), ANSWER]), tok,
                                "What is 6 * 7?", FakeExecutor(), cfg, call_factory=pair)


def _split_token(tok, tr, want_mask):
    """Replace one multi-character token of a span with mask ``want_mask`` by its single characters
    (same text, a non-canonical tokenization). Returns the position."""
    for t, (i, m) in enumerate(zip(tr.response_ids, tr.response_mask, strict=True)):
        piece = tok.convert_ids_to_tokens(i)
        if m == want_mask and len(piece) > 1 and i not in tok.all_special_ids and piece not in tok.get_added_vocab():
            parts = tok.convert_tokens_to_ids(list(piece))
            tr.response_ids[t:t + 1] = parts
            tr.response_mask[t:t + 1] = [m] * len(parts)
            tr.logprobs[t:t + 1] = [tr.logprobs[t]] * len(parts)
            return t
    raise AssertionError("no multi-character token found")


async def test_clean_trajectory_passes(tok):
    rep = audit_trajectory(await _traj(tok), tok)
    assert rep.ok and rep.ids_ok and rep.text_ok and rep.masked_ok and rep.drift_at is None and not rep.problems


async def test_audit_uses_the_kit_template_not_the_tokenizers_own(tok):
    """A hub tokenizer keeps its own chat template (kit.models.load_policy does not replace it), but
    the loop renders from kit.prompts: a clean trajectory must still pass."""
    other = copy.deepcopy(tok)
    other.chat_template = ("{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + "
                           "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}"
                           "{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    rep = audit_trajectory(await _traj(tok), other)
    assert rep.ok and rep.ids_ok and not rep.problems, rep.problems


async def test_dropped_newline_at_the_join_is_caught(tok):
    tr = await _traj(tok)
    (m0, s, e) = [sp for sp in tr.spans() if sp[0] == 0][0]
    assert tok.decode(tr.response_ids[s:s + 1]) == "\n"
    for seq in (tr.response_ids, tr.response_mask, tr.logprobs):
        del seq[s]
    rep = audit_trajectory(tr, tok)
    assert not rep.ok and not rep.text_ok and not rep.masked_ok
    assert rep.drift_at == len(tr.prompt_ids) + s


async def test_retokenized_tool_block_is_drift_not_model_noise(tok):
    tr = await _traj(tok)
    t = _split_token(tok, tr, 0)
    rep = audit_trajectory(tr, tok)
    assert rep.text_ok and rep.masked_ok and not rep.ids_ok
    assert rep.drift_at == len(tr.prompt_ids) + t and rep.noncanonical_turns == [] and not rep.ok
    assert any("join between turns" in p for p in rep.problems)


async def test_noncanonical_model_sample_is_reported_not_failed(tok):
    tr = await _traj(tok)
    _split_token(tok, tr, 1)
    rep = audit_trajectory(tr, tok)
    assert not rep.ids_ok and rep.noncanonical_turns == [0] and rep.ok


async def test_wrong_mask_is_caught(tok):
    tr = await _traj(tok)
    bad = copy.deepcopy(tr)
    (m0, s, e) = [sp for sp in bad.spans() if sp[0] == 0][0]
    bad.response_mask[s + 3] = 1
    rep = audit_trajectory(bad, tok)
    assert not rep.masked_ok and not rep.ok


async def test_view_colors_model_tool_and_answer(tok):
    tr = await _traj(tok)
    html = trajectory_html(tr, tok, show_prompt=True)
    assert html.count("background:#e3ecfa") == 1  # one tool block
    assert "background:#fff3bf" in html and "background:#c8f0c8" in html  # the call and the answer
    assert "&lt;tool_response&gt;" in html and "<tool_response>" not in html  # escaped
    assert "answer</b>" in html and "1 tool calls" in html
    per_token = trajectory_html(tr, tok, token_boundaries=True)
    assert per_token.count("outline:1px") == len(tr.response_ids)
    assert prompts.SYSTEM_PROMPT[:20] not in per_token
