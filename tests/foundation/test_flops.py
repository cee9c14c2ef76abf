"""kit.models.flops against torch's own FLOP counter on a small Qwen3 (SDPA's math kernel, whose matmuls it counts)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from transformers import Qwen3Config, Qwen3ForCausalLM

from kit.models.flops import Shapes, decode_flops, forward_flops, train_flops


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                                        max_position_embeddings=128, attn_implementation="sdpa"))


def counted(fn) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


def test_forward_and_training_flops_match_torchs_counter(model):
    ids = torch.randint(0, 300, (3, 20))
    rope = 2 * 20 * 8  # the rotary table's bmm (positions x inverse frequencies, K = 1): no model FLOP
    s = Shapes.of(model)
    assert s.linear_params == sum(p.numel() for n, p in model.named_parameters() if n.endswith("proj.weight"))
    assert counted(lambda: model(input_ids=ids).logits) - rope == forward_flops(s, [20] * 3)
    assert counted(lambda: model(input_ids=ids).logits.sum().backward()) - rope == train_flops(s, [20] * 3)


def test_decode_flops_are_one_new_token_over_a_cache(model):
    ids = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        past = model(input_ids=ids[:, :8], use_cache=True).past_key_values
        n = counted(lambda: model(input_ids=ids[:, 8:], past_key_values=past, use_cache=True))
    assert n - 2 * 1 * 8 == decode_flops(Shapes.of(model), [9, 9])
    assert forward_flops(Shapes.of(model), [5], head_positions=0) < forward_flops(Shapes.of(model), [5])
    with pytest.raises(ValueError, match=">= 0"):
        forward_flops(Shapes.of(model), [-1])
