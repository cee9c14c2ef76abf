"""kit.models.decode: the lean decode step computes the transformers forward's logits bitwise."""

import asyncio
import copy

import pytest
import torch
from transformers import DynamicCache

from kit import prompts
from kit.models.decode import Qwen3DecodeStep, supports
from kit.rollout.engine import ContinuousBatchingEngine
from kit.rollout.kv_cache import use_gqa_attention


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    """Every test here with one torch thread (``conftest.one_torch_thread``)."""


@pytest.fixture(scope="module")
def model(product_model):
    use_gqa_attention(product_model)  # as every engine does
    return product_model


def _prefill(model, lengths, seed=0):
    """Left-padded prompts of ``lengths`` prefilled by transformers: (kv, mask (B, L), next pos (B, 1))."""
    g = torch.Generator().manual_seed(seed)
    L = max(lengths)
    ids = torch.zeros((len(lengths), L), dtype=torch.long)
    mask = torch.zeros((len(lengths), L), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, L - n:] = torch.randint(5, model.config.vocab_size, (n,), generator=g)
        mask[i, L - n:] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    kv = [(layer.keys.clone(), layer.values.clone()) for layer in out.past_key_values.layers]
    return kv, mask, torch.tensor([[n] for n in lengths])


@pytest.mark.parametrize("lengths", [[7, 19, 12, 3], [11, 11, 11]], ids=["padded", "no padding"])
def test_decode_step_equals_the_transformers_forward_bitwise(model, lengths):
    kv, mask, pos = _prefill(model, lengths)
    step = Qwen3DecodeStep(model)
    ref_cache = DynamicCache(ddp_cache_data=kv)
    new_layers = DynamicCache(ddp_cache_data=kv).layers  # update() appends and returns the layer's KV
    ids = torch.tensor([[9], [40], [77], [5]][:len(lengths)])
    with torch.inference_mode():
        for _ in range(6):  # several steps: positions advance, the buffers fill in place
            mask = torch.cat([mask, torch.ones((len(lengths), 1), dtype=torch.long)], dim=1)
            ref = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                        past_key_values=ref_cache, use_cache=True).logits[:, -1, :]
            got = step(ids, pos, mask, new_layers)
            assert got.shape == (len(lengths), model.config.vocab_size)
            assert torch.equal(got, ref)
            for a, b in zip(ref_cache.layers, new_layers, strict=True):
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            ids, pos = ref.argmax(-1, keepdim=True), pos + 1


def test_engine_tokens_and_logprobs_are_the_same_with_and_without_the_lean_step(model, product_tok):
    ps = [product_tok(prompts.render_prompt(f"What is {100 + 7 * i} * {3 + i * i}?"))["input_ids"] for i in range(5)]
    reqs = [(p, 12 + 5 * i, 1.0, 0.95 if i % 2 else 1.0, []) for i, p in enumerate(ps)]

    def run(lean):
        eng = ContinuousBatchingEngine(model, product_tok, slots=3, seed=3, lean_decode=lean)
        assert (eng.decode is not None) == lean
        return asyncio.run(_all(eng, reqs))

    fast, slow = run(True), run(False)
    assert [g.token_ids for g in fast] == [g.token_ids for g in slow]
    assert [g.logprobs for g in fast] == [g.logprobs for g in slow]  # exact: the same float ops


async def _all(eng, reqs):
    return await asyncio.gather(*(eng.generate(*r) for r in reqs))


def test_unsupported_models_and_positions_are_refused(model):
    other = copy.deepcopy(model)
    other.config.attention_bias = True
    assert supports(model) and not supports(other)
    with pytest.raises(ValueError, match="unsupported model"):
        Qwen3DecodeStep(other)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    assert not supports(eager)
    kv, _, _ = _prefill(model, [4])
    far = torch.tensor([[model.config.max_position_embeddings]])
    with pytest.raises(ValueError, match="beyond the rotary table"):
        Qwen3DecodeStep(model)(torch.tensor([[5]]), far, torch.ones((1, 5), dtype=torch.long),
                               DynamicCache(ddp_cache_data=kv).layers)


@pytest.mark.parametrize("lengths, past", [([7, 19, 12, 3], 0), ([9, 9], 0), ([7, 19, 12], 5), ([6, 6], 4)],
                         ids=["fresh padded", "fresh unpadded", "after a cache, padded", "after a cache, unpadded"])
def test_prefill_equals_the_transformers_forward_bitwise(model, lengths, past):
    # T new tokens per row after ``past`` cached columns (the engine's prefix-reuse layout when past > 0)
    if past:
        kv, mask, pos = _prefill(model, [past] * len(lengths), seed=1)
        if len(lengths) > 2:
            mask[0, :2] = 0  # padding inside the cached part too
    else:
        kv, mask, pos = None, torch.zeros((len(lengths), 0), dtype=torch.long), torch.zeros((len(lengths), 1), dtype=torch.long)
    T = max(lengths)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, model.config.vocab_size, (len(lengths), T), generator=g)
    new = torch.zeros((len(lengths), T), dtype=torch.long)
    for i, n in enumerate(lengths):
        new[i, T - n:] = 1
    mask = torch.cat([mask, new], dim=1)
    positions = pos + (new.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                    past_key_values=DynamicCache(ddp_cache_data=kv) if kv else None)
        layers = DynamicCache(ddp_cache_data=kv).layers if kv else DynamicCache(config=model.config).layers
        got = Qwen3DecodeStep(model)(ids, positions, mask, layers)
    assert torch.equal(got, ref.logits[:, -1])
    for a, b in zip(ref.past_key_values.layers, layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_a_group_prefilled_once_samples_what_each_row_prefilled_alone_samples(model, product_tok):
    # the lean engine prefills a group's identical first turns once (kit.rollout.batch_rows); the
    # transformers path prefills every row: the same tokens, log-probs and entropies bitwise
    ps = [product_tok(prompts.render_prompt(f"What is {100 + 7 * i} * {3 + i * i}?"))["input_ids"] for i in range(3)]
    reqs = [(ps[i % 3] if i < 9 else ps[0], 10, 1.0, 1.0, []) for i in range(12)]

    def run(lean):
        eng = ContinuousBatchingEngine(model, product_tok, slots=16, seed=5, lean_decode=lean)
        return asyncio.run(_all(eng, reqs))

    fast, slow = run(True), run(False)
    assert len({tuple(g.token_ids) for g in fast}) > 3  # the copies sample apart
    assert [g.token_ids for g in fast] == [g.token_ids for g in slow]
    assert [g.logprobs for g in fast] == [g.logprobs for g in slow]
    assert [g.entropy for g in fast] == [g.entropy for g in slow]


def test_the_lean_step_follows_weight_updates_in_place_and_replaced(model):
    # its fused q|k|v and gate|up weights are copies: they must be rebuilt after an optimizer step
    other = copy.deepcopy(model)
    step = Qwen3DecodeStep(other)
    kv, mask, pos = _prefill(other, [5, 8])
    ids, mask = torch.tensor([[9], [40]]), torch.cat([mask, torch.ones((2, 1), dtype=torch.long)], dim=1)

    def check():
        with torch.inference_mode():
            ref = other(input_ids=ids, attention_mask=mask, position_ids=pos,
                        past_key_values=DynamicCache(ddp_cache_data=kv), use_cache=True).logits[:, -1, :]
            assert torch.equal(step(ids, pos, mask, DynamicCache(ddp_cache_data=kv).layers), ref)
        return ref

    before = check()
    opt = torch.optim.SGD(other.parameters(), lr=0.5)
    other.train()
    other(input_ids=ids).logits.sum().backward()
    opt.step()  # in place
    other.eval()
    assert not torch.equal(check(), before)
    other.model.layers[0].mlp.up_proj.weight = torch.nn.Parameter(other.model.layers[0].mlp.up_proj.weight * 2)
    check()  # replaced
