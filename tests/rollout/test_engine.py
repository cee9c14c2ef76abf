"""kit.rollout.engine: continuous batching gives the same tokens as plain generation, refills slots, stops."""

import asyncio

import pytest
import torch

from kit import prompts
from kit.config import RolloutConfig
from kit.rollout.backends import HFBackend
from kit.rollout.engine import BatchLoopBackend, ContinuousBatchingEngine, make_backend, rollout_plain
from kit.rollout.kv_cache import GQA_ATTENTION, KV_HEADROOM, gqa_sdpa_attention, use_gqa_attention


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    """Every test here with one torch thread (``conftest.one_torch_thread``)."""


@pytest.fixture(scope="module")
def tok(product_tok):
    return product_tok


@pytest.fixture(scope="module")
def model(product_model):
    return product_model


def _prompts(tok, n):
    return [tok(prompts.render_prompt(f"What is {100 + 7 * i} * {3 + i * i}?"))["input_ids"] for i in range(n)]


async def _all(backend, reqs):
    return await asyncio.gather(*(backend.generate(p, m, t, 1.0, s) for p, m, t, s in reqs))


def _reference_greedy(model, ids, max_new):
    """Greedy decoding with no KV cache and no batching: the full context at every step."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new):
            x = torch.tensor([seq])
            logits = model(input_ids=x, position_ids=torch.arange(len(seq))[None], use_cache=False).logits
            seq.append(int(logits[0, -1].argmax()))
    return seq[len(ids):]


def test_greedy_equals_plain_generation_with_slot_refill(tok, model):
    # 6 requests of different prompt lengths and budgets through 3 slots: rows leave and join
    ps = _prompts(tok, 6)
    ps[2] = ps[2] + ps[0][-9:]  # a longer prompt joins a running batch (left-padding merge)
    budgets = [5, 14, 3, 9, 2, 11]
    eng = ContinuousBatchingEngine(model, tok, slots=3)
    outs = asyncio.run(_all(eng, [(p, m, 0.0, []) for p, m in zip(ps, budgets, strict=True)]))
    for p, m, g in zip(ps, budgets, outs, strict=True):
        assert g.token_ids == _reference_greedy(model, p, m)
        assert g.finish_reason == "length" and len(g.logprobs) == m
    assert max(eng.occupancy) == 3 and eng.stats["prefills"] >= 3  # slots were refilled


def test_sampled_tokens_match_hf_backend_and_batch_loop(tok, model):
    ps = _prompts(tok, 6)
    reqs = [(p, 15 + 3 * i, 1.0, []) for i, p in enumerate(ps)]
    cont = asyncio.run(_all(ContinuousBatchingEngine(model, tok, slots=2, seed=5), reqs))
    hf = asyncio.run(_all(HFBackend(model, tok, batch_size=6, seed=5), reqs))
    plain = asyncio.run(_all(BatchLoopBackend(model, tok, batch_size=4, seed=5), reqs))
    assert [g.token_ids for g in cont] == [g.token_ids for g in hf] == [g.token_ids for g in plain]
    for a, b in zip(cont, hf, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    other = asyncio.run(_all(ContinuousBatchingEngine(model, tok, slots=2, seed=6), reqs))
    assert [g.token_ids for g in other] != [g.token_ids for g in cont]


def test_stop_ids_end_a_row_and_are_kept(tok, model):
    p = _prompts(tok, 1)[0]
    free = _reference_greedy(model, p, 12)
    stop = free[4]  # a token the model emits at position 4 (maybe earlier too)
    first = free.index(stop)
    eng = ContinuousBatchingEngine(model, tok, slots=2)
    g, h = asyncio.run(_all(eng, [(p, 12, 0.0, [stop]), (p, 12, 0.0, [])]))
    assert g.token_ids == free[:first + 1] and g.finish_reason == "stop"
    assert h.token_ids == free and h.finish_reason == "length"


def test_kv_budget_limits_concurrency_and_frees_on_finish(tok, model):
    p = _prompts(tok, 1)[0]
    budgets = [4, 12, 12, 6]
    eng = ContinuousBatchingEngine(model, tok, slots=4, kv_budget_tokens=2 * (len(p) + 12))
    outs = asyncio.run(_all(eng, [(p, m, 0.0, []) for m in budgets]))
    assert [len(g.token_ids) for g in outs] == budgets
    assert max(eng.occupancy) == 2
    # the third request takes the first one's reservation as soon as it ends (after 3 decode
    # steps; it ends after 3 + 11), the fourth the second's (after 11; it ends after 11 + 5)
    assert eng.stats["steps"] == 16


def test_plain_loop_cohort_waits_for_slowest_row(tok, model):
    class NoTools:
        async def run_batch(self, calls):
            raise AssertionError("no tool calls expected with max_turns=1")

    eng = BatchLoopBackend(model, tok, batch_size=3)
    cfg = RolloutConfig(max_response_tokens=12, max_turns=1, temperature=1.0)
    out = asyncio.run(rollout_plain(eng, tok, ["What is 2 * 3?", "What is 4 * 5?"], NoTools(), 2, cfg))
    assert [len(g) for g in out] == [2, 2]
    # 4 trajectories in cohorts of 3 and 1: two batches, each decoding to its slowest row
    lens = [len(t.response_ids) for g in out for t in g]
    assert eng.stats["prefills"] == 2
    assert eng.stats["row_steps"] == 3 * (max(lens[:3]) - 1) + (lens[3] - 1)
    assert isinstance(make_backend(model, tok, RolloutConfig(scheduler="static")), HFBackend)
    assert isinstance(make_backend(model, tok, RolloutConfig(scheduler="dynamic", batch_size=5)), ContinuousBatchingEngine)


def test_next_turns_reuse_the_finished_rows_kv(tok, model):
    # turn 1, then a "next turn" prompt = context + turn + feedback, as the agent loop builds it;
    # three conversations of different lengths, so cached prefixes of different sizes share a prefill
    ps = _prompts(tok, 3)
    ps[1] = ps[1] + ps[0][-11:]
    feedback = tok("<tool_response>42</tool_response>")["input_ids"]
    budgets = [6, 6, 6]  # all first turns end at one step, so the second turns share one prefill
    cuts = [2, 5, 9]  # feedback lengths differ: suffixes of different sizes

    async def two_turns(eng, p, m, cut):
        first = await eng.generate(p, m, 0.0, 1.0, [])
        return first, await eng.generate(p + first.token_ids + feedback[:cut], 7, 0.0, 1.0, [])

    async def run(eng):
        return await asyncio.gather(*(two_turns(eng, p, m, c) for p, m, c in zip(ps, budgets, cuts, strict=True)))

    eng = ContinuousBatchingEngine(model, tok, slots=3)
    with_cache = asyncio.run(run(eng))
    assert eng.stats["prefix_hits"] == 3
    assert eng.stats["reused_tokens"] == sum(len(p) + m - 1 for p, m in zip(ps, budgets, strict=True))
    without = asyncio.run(run(ContinuousBatchingEngine(model, tok, slots=3, prefix_cache=False)))
    assert eng.stats["prefills"] == 2  # one prefill per turn for all three rows
    for (a1, a2), (b1, b2), p, c in zip(with_cache, without, ps, cuts, strict=True):
        assert a1.token_ids == b1.token_ids and a2.token_ids == b2.token_ids
        assert a2.token_ids == _reference_greedy(model, p + a1.token_ids + feedback[:c], 7)


def test_fresh_row_finished_at_prefill_is_not_overwritten_by_a_cached_row(tok, model):
    # Regression: one admission with a fresh request that ends on its first sampled token and a
    # request whose prefix is cached. The cached row used to be placed into the fresh row's slot
    # before that row was reported, so the fresh request's future never resolved (a hang).
    ps = _prompts(tok, 2)

    async def scenario():
        eng = ContinuousBatchingEngine(model, tok, slots=4)
        first = await eng.generate(ps[0], 3, 0.0, 1.0, [])  # its KV is kept for the next turn
        cached = eng.generate(ps[0] + first.token_ids + ps[1][-4:], 3, 0.0, 1.0, [])
        fresh = eng.generate(ps[1], 1, 0.0, 1.0, [])  # done on the prefill's sampled token
        return eng, await asyncio.wait_for(asyncio.gather(cached, fresh), timeout=60)

    eng, (cached, fresh) = asyncio.run(scenario())
    assert eng.stats["prefix_hits"] == 1
    assert len(fresh.token_ids) == 1 and len(cached.token_ids) == 3
    assert fresh.token_ids == _reference_greedy(model, ps[1], 1)


def test_long_rows_outgrow_the_kv_buffer_and_stay_exact(tok, model):
    # budgets past KV_HEADROOM: the decode buffer is reallocated mid-row, and a row that joins
    # later (slot refill) rebuilds it; greedy tokens still equal uncached generation
    ps = _prompts(tok, 4)
    budgets = [KV_HEADROOM + 40, 7, KV_HEADROOM * 2 + 5, 20]
    eng = ContinuousBatchingEngine(model, tok, slots=2)
    outs = asyncio.run(_all(eng, [(p, m, 0.0, []) for p, m in zip(ps, budgets, strict=True)]))
    for p, m, g in zip(ps, budgets, outs, strict=True):
        assert g.token_ids == _reference_greedy(model, p, m)
    assert eng.stats["prefills"] >= 2


def test_gqa_attention_equals_repeated_kv_heads():
    from transformers.integrations.sdpa_attention import repeat_kv

    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 8, generator=g)
    k, v = torch.randn(3, 2, 9, 8, generator=g), torch.randn(3, 2, 9, 8, generator=g)
    mask = torch.rand(3, 1, 5, 9, generator=g) > 0.3
    mask[..., -1] = True  # every query sees at least one key
    module = torch.nn.Module()
    for m in (mask, None):
        got, _ = gqa_sdpa_attention(module, q, k, v, m, scaling=0.3)
        want = torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=m,
                                                                scale=0.3, is_causal=m is None)
        assert torch.allclose(got, want.transpose(1, 2), atol=1e-6)
        assert got.shape == (3, 5, 4, 8)


def test_gqa_switch_keeps_training_and_saving_and_leaves_other_models_alone(tok, model, tmp_path):
    # the switch is in place on the policy that RL then trains and saves: same logits and
    # gradients as ``sdpa`` on a padded batch in train mode, and config.json never names it
    import copy
    import json

    from transformers import GPT2Config, GPT2LMHeadModel, Qwen3Config, Qwen3ForCausalLM

    from kit.models import save_policy

    gqa, plain = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    plain.set_attn_implementation("sdpa")
    use_gqa_attention(gqa)
    assert gqa.config._attn_implementation == GQA_ATTENTION and plain.config._attn_implementation == "sdpa"
    ps = _prompts(tok, 2)
    n = min(len(p) for p in ps)
    ids = torch.tensor([[tok.pad_token_id] * 4 + ps[0][:n - 4], ps[1][:n]])
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    losses = [m(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss for m in (gqa, plain)]
    for loss in losses:
        loss.backward()
    assert torch.allclose(losses[0], losses[1], atol=1e-6)
    for a, b in zip(gqa.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
    save_policy(gqa, tok, tmp_path)
    assert GQA_ATTENTION not in (tmp_path / "config.json").read_text()
    assert json.loads((tmp_path / "config.json").read_text()).get("_attn_implementation") in (None, "sdpa")

    # no grouped KV heads (GPT-2's config has no num_key_value_heads), eager attention: untouched
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, bos_token_id=0, eos_token_id=0,
                                      attn_implementation="sdpa"))
    ContinuousBatchingEngine(gpt2, tok, slots=1)
    assert gpt2.config._attn_implementation == "sdpa"
    for kv, impl in ((2, "eager"), (4, "sdpa")):
        q = Qwen3ForCausalLM(Qwen3Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=kv, head_dim=4,
                                         attn_implementation=impl))
        use_gqa_attention(q)
        assert q.config._attn_implementation == impl


def test_a_cancelled_request_frees_its_row_and_a_queued_one_never_starts(tok, model):
    """A caller that goes away (the served policy's client disconnecting) must not keep a row
    decoding up to its budget for nobody: it stops at the next step, and one still queued is dropped."""
    p = _prompts(tok, 1)[0]
    eng = ContinuousBatchingEngine(model, tok, slots=1, max_steps_per_call=1)

    async def run():
        running = asyncio.ensure_future(eng.generate(p, 500, 1.0, 1.0, []))
        queued = asyncio.ensure_future(eng.generate(p, 500, 1.0, 1.0, []))
        while eng.stats["steps"] < 3:
            await asyncio.sleep(0)
        steps = eng.stats["steps"]
        running.cancel()
        queued.cancel()
        last = await eng.generate(p, 4, 0.0, 1.0, [])  # the engine keeps serving
        return steps, last

    steps, last = asyncio.run(run())
    assert len(last.token_ids) == 4
    assert eng.stats["prefills"] == 2  # the queued request was never prefilled
    assert eng.stats["steps"] <= steps + 2 + 3  # the cancelled row's step in flight, then the 4-token request
    assert eng.stats["tokens"] < 20  # not 2 x 500 + 4


def _reference_entropy(model, ids, new, temperature):
    """Entropy (nats) of softmax(logits / T) before each new token, from full-context forwards."""
    seq, out = list(ids), []
    with torch.inference_mode():
        for t in new:
            logits = model(input_ids=torch.tensor([seq]), position_ids=torch.arange(len(seq))[None],
                           use_cache=False).logits[0, -1].double()
            p = torch.softmax(logits / temperature, -1)
            out.append(float(-(p * torch.log(p)).sum()))
            seq.append(t)
    return out


def test_every_backend_returns_each_tokens_sampling_entropy(tok, model):
    """Issue #32: the rollout carries the per-token entropy of the tempered distribution it sampled from."""
    ps = _prompts(tok, 3)
    reqs = [(p, 6, 0.7, []) for p in ps]
    cont = asyncio.run(_all(ContinuousBatchingEngine(model, tok, slots=2, seed=5), reqs))
    hf = asyncio.run(_all(HFBackend(model, tok, batch_size=3, seed=5), reqs))
    for p, a, b in zip(ps, cont, hf, strict=True):
        assert len(a.entropy) == len(a.token_ids)
        want = _reference_entropy(model, p, a.token_ids, 0.7)
        assert a.entropy == pytest.approx(want, abs=2e-3) and b.entropy == pytest.approx(want, abs=2e-3)
        assert all(h > 0 for h in a.entropy)
