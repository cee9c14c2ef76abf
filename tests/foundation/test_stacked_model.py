"""kit.models.stacked: K arms' forwards batched over an arm axis equal each arm's own forward."""

import pytest
import torch
from transformers import Qwen3ForCausalLM
from transformers.cache_utils import DynamicLayer

from kit.config import load
from kit.models.decode import Qwen3DecodeStep
from kit.models.stacked import StackedQwen3
from kit.models.tiny import tiny_qwen3_config
from kit.rollout.kv_cache import use_gqa_attention
from kit.train.update import token_logprobs

K, VOCAB, PAD = 3, 300, 0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    """K tiny-profile models with different weights (pad id 0: the embedding's padding_idx)."""
    cfg = load("tiny", write=False).model
    out = []
    for k in range(K):
        torch.manual_seed(k)
        m = Qwen3ForCausalLM(tiny_qwen3_config(cfg, VOCAB, PAD, [1])).eval()
        use_gqa_attention(m)
        out.append(m)
    return out


def test_stacked_decode_equals_each_arms_lean_decode_over_prefill_and_steps(models):
    B, T = 4, 9
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, VOCAB, (K, B, T), generator=g)
    mask = torch.ones((K, B, T), dtype=torch.long)
    mask[:, 1, :4] = 0  # left padding in one row of every arm, another length in arm 2
    mask[2, 3, :2] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    stacked = StackedQwen3(models)
    sep_layers = [[DynamicLayer() for _ in range(2)] for _ in range(K)]
    st_layers = [DynamicLayer() for _ in range(2)]
    steps = [Qwen3DecodeStep(m) for m in models]
    with torch.inference_mode():
        for _ in range(4):  # the prefill, then three decode steps after it
            got = stacked.decode(ids, pos, mask, st_layers)
            assert got.shape == (K, B, VOCAB)
            for a in range(K):
                ref = steps[a](ids[a], pos[a], mask[a], sep_layers[a])
                torch.testing.assert_close(got[a], ref, rtol=0, atol=1e-5)
            ids = got.argmax(-1, keepdim=True)
            pos = pos[:, :, -1:] + 1
            mask = torch.cat([mask, torch.ones((K, B, 1), dtype=torch.long)], dim=2)
    for a in range(K):  # the stacked cache holds each arm's keys, arm-major
        torch.testing.assert_close(st_layers[0].keys[a * B:(a + 1) * B], sep_layers[a][0].keys, rtol=0, atol=1e-5)


def test_stacked_token_logprobs_and_gradients_equal_each_arms_update_forward(models):
    B, T = 3, 14
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 40, (K, B, T), generator=g)  # small ids: the pad id 0 occurs inside rows too
    lens = torch.tensor([[14, 9, 11], [6, 14, 14], [10, 12, 7]])
    att = (torch.arange(T)[None, None] < lens[..., None]).long()
    msk = ((torch.arange(T)[None, None] >= 4) & att.bool()).float()
    ids = ids * att  # right padding with the pad id
    leaves = {n: p.clone().requires_grad_(True) for n, p in StackedQwen3(models).params.items()}
    lp = StackedQwen3(models, leaves).token_logprobs(ids, att, msk)
    (-(lp * msk).sum()).backward()
    for a, m in enumerate(models):
        m.zero_grad(set_to_none=True)
        ref = token_logprobs(m, ids[a], att[a], msk[a])
        torch.testing.assert_close(lp[a].detach(), ref.detach(), rtol=0, atol=1e-5)
        (-(ref * msk[a]).sum()).backward()
        for name, p in m.named_parameters():  # tied embeddings: embed_tokens carries the LM head's gradient too
            torch.testing.assert_close(leaves[name].grad[a], p.grad, rtol=1e-4, atol=1e-6, msg=name)
        m.zero_grad(set_to_none=True)


def test_models_of_different_shapes_are_refused(models):
    other = Qwen3ForCausalLM(tiny_qwen3_config(load("tiny", write=False).model, VOCAB + 8, PAD, [1]))
    with pytest.raises(ValueError, match="differ"):
        StackedQwen3([models[0], other])
    with pytest.raises(ValueError, match="no models"):
        StackedQwen3([])
