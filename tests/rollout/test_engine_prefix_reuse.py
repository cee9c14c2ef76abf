"""kit.rollout.engine: a turn that reuses the KV of a turn that itself reused a cached prefix.

Issue #15's step-2 rollout/actor log-prob correlation flake (0.908 in one VERL run): a row
prefilled from a cached prefix is laid out ``[pad | cached c_i | pad | suffix s_i]``; when it
finished, its KV was kept as the last ``n`` columns, which for a row with a shorter prefix or
suffix than its batch-mates keeps padding and drops the prefix's start. The third turn of such a
trajectory then sampled from a corrupted context, and its log-probs disagreed with a plain
forward pass over the same tokens (what VERL's actor recomputes). Whether rows of different
prefix lengths shared one cached prefill depended on timing: hence a flake.
"""

import asyncio

import torch

from kit import prompts
from kit.rollout.engine import ContinuousBatchingEngine


def _teacher_forced_logprobs(model, context, out):
    """log softmax of a single uncached forward over ``context + out``: the actor's recomputation."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([context + out]), use_cache=False).logits[0].float()
    lp = torch.log_softmax(logits, -1)[len(context) - 1: len(context) - 1 + len(out)]
    return lp.gather(-1, torch.tensor(out)[:, None])[:, 0]


def test_third_turn_after_a_cached_second_turn_has_exact_logprobs(product_tok, product_model):
    tok, model = product_tok, product_model  # the engine tests\' pair (tests/rollout/conftest.py)
    torch.manual_seed(0)
    ps = [tok(prompts.render_prompt(f"What is {100 + 7 * i} * {3 + i * i * i}?"))["input_ids"] for i in range(3)]
    ps[1] = ps[1] + ps[0][-9:]  # prompts of different lengths: cached prefixes of different sizes
    feedback = tok("<tool_response>42</tool_response>")["input_ids"]
    cuts = [2, 5, 9]  # suffixes of different sizes: padding between prefix and suffix in the cached prefill

    async def three_turns(eng, p, cut):
        ctx, turns = list(p), []
        for budget in (6, 7, 8):  # every row of a turn ends at the same step: the next turn is one prefill
            g = await eng.generate(ctx, budget, 1.0, 1.0, [])
            turns.append((list(ctx), list(g.token_ids), list(g.logprobs)))
            ctx = ctx + list(g.token_ids) + feedback[:cut]
        return turns

    async def run():
        eng = ContinuousBatchingEngine(model, tok, slots=3)
        return eng, await asyncio.gather(*(three_turns(eng, p, c) for p, c in zip(ps, cuts, strict=True)))

    eng, runs = asyncio.run(run())
    assert eng.stats["prefills"] == 3 and eng.stats["prefix_hits"] == 6  # turns 2 and 3 reuse the previous KV
    for turns in runs:
        for context, out, lps in turns:
            ref = _teacher_forced_logprobs(model, context, out)
            assert torch.allclose(torch.tensor(lps), ref, atol=1e-4), (len(context), (torch.tensor(lps) - ref).abs().max())


def test_clear_prefix_cache_drops_the_kept_kv(product_tok, product_model):
    tok, model = product_tok, product_model  # the engine tests\' pair (tests/rollout/conftest.py)
    p = tok(prompts.render_prompt("What is 12 * 34?"))["input_ids"]

    async def two_turns(eng):
        first = await eng.generate(p, 4, 0.0, 1.0, [])
        eng.clear_prefix_cache()  # e.g. new weights: KV computed with the old ones must not be reused
        await eng.generate(p + first.token_ids, 3, 0.0, 1.0, [])

    eng = ContinuousBatchingEngine(model, tok, slots=2)
    asyncio.run(two_turns(eng))
    assert eng.stats["prefix_hits"] == 0 and eng.stats["prefills"] == 2
