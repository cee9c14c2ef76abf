"""End to end: the tiny Qwen3 (HFBackend, KV cache) drives the loop against the real sandbox.

A randomly initialised model almost never writes a tool call, so the model is first fitted for
80 steps to one tool-use trajectory (loss on its own tokens only). Greedy decoding then
writes the call; the sandbox really runs it; its output comes back as feedback; the model
answers. The rollout is audited (ids, text, masks).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from doubles import call, fit_masked

from kit import prompts
from kit.config import RolloutConfig, load
from kit.models import build_tiny_model
from kit.rollout import HFBackend, audit_trajectory, rollout_batch, trajectory_html

pytestmark = pytest.mark.slow

PROBLEM = "What is 6 * 7?"
TURN1 = "use python " + call("print(6*7)") + prompts.IM_END
TURN2 = "the tool says 42</reason> <answer> \\boxed{42} </answer>" + prompts.IM_END


def _fit(tok, steps=80):
    cfg = load("tiny", write=False)
    torch.manual_seed(0)
    model = build_tiny_model(cfg.model, tok, seed=0)
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    p, a, f, b = enc(prompts.render_prompt(PROBLEM)), enc(TURN1), enc(prompts.feedback_block(["42"])), enc(TURN2)
    ids = torch.tensor([p + a + f + b])
    mask = torch.tensor([[0] * len(p) + [1] * len(a) + [0] * len(f) + [1] * len(b)])
    return fit_masked(model, ids, mask, steps)


async def test_tiny_model_and_real_sandbox(tok):
    from kit.sandbox import SandboxPool

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared 2-core box, 2 spinning threads are ~20x slower than 1
    try:
        model, loss = _fit(tok)
    finally:
        torch.set_num_threads(threads)
    assert loss < 0.05, loss
    sandbox_cfg = dataclasses.replace(load("tiny", write=False).sandbox, num_workers=1)
    rcfg = RolloutConfig(max_prompt_tokens=256, max_response_tokens=200, max_turns=4, temperature=0.0,
                         tool_response_max_tokens=64)
    async with SandboxPool(sandbox_cfg) as pool:
        groups = await rollout_batch(HFBackend(model, tok, batch_size=8), tok, [PROBLEM], pool, 3, rcfg)
    for tr in groups[0]:
        assert tr.finish_reason == "answer", tr.response_text
        assert tr.call_statuses == ["ok"] and tr.feedback_texts == [["42"]]  # really printed by the sandbox
        assert (tr.turns, tr.tool_calls, tr.n_tool_errors, tr.infra_errors, tr.answer_tags) == (2, 1, 0, 0, 1)
        assert tr.model_texts == [TURN1, TURN2]
        rep = audit_trajectory(tr, tok)
        assert rep.ok and rep.ids_ok, rep.problems
        assert len(tr.logprobs) == len(tr.response_ids) and max(tr.logprobs) <= 0.0
        assert "\\boxed{42}" in trajectory_html(tr, tok)
