"""The rollout engine's KV cache and attention (rStar2-Agent report §3.2, the tiny model on CPU).

The continuous-batching engine (:mod:`kit.rollout.engine`) keeps one left-padded cache for its
running rows (:mod:`kit.rollout.batch_rows`), held here in buffers with free columns
(:class:`BufferLayer`): a decode step writes its token's keys and values in place instead of
concatenating (a copy of the whole cache per step), and attention reads the grouped KV heads
directly (:func:`gqa_sdpa_attention`; transformers' ``sdpa`` repeats them per query head, another
copy per step). Measured on a stage-1 rollout of the tiny policy (6 prompts x 16, 2 cores): decode
step 8.9 -> 5.0 ms, collect 2.92 -> 2.17 s. :func:`as_cache` wraps per-layer ``(keys, values)``
in a transformers ``DynamicCache`` without copying them.

Shapes: keys and values are (B, kv_heads, L, head_dim) per layer, L cache columns (tokens).
Importing this module registers :data:`GQA_ATTENTION` with transformers' attention registries.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask


def gqa_sdpa_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention for the engine: ``torch`` SDPA with grouped KV heads passed as they are.

    Transformers' ``sdpa`` path copies each KV head ``heads / kv_heads`` times (``repeat_kv``)
    whenever a mask is given, i.e. at every padded decode step: a copy of the whole cache per
    layer per step. ``enable_gqa=True`` (torch >= 2.5) reads the grouped heads directly; the
    output is the same (checked in tests/rollout/test_engine.py). Registered with transformers'
    ``AttentionInterface`` as :data:`GQA_ATTENTION`.

    Args:
        query: (B, heads, T, head_dim); key, value: (B, kv_heads, L, head_dim).
        attention_mask: boolean (B, 1, T, L) from transformers' ``sdpa_mask``, or None (causal).
    Returns:
        ``(output (B, T, heads, head_dim), None)`` as transformers' attention functions do.
    """
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


#: Name of :func:`gqa_sdpa_attention` in transformers' attention registry.
GQA_ATTENTION = "kit_gqa_sdpa"
AttentionInterface.register(GQA_ATTENTION, gqa_sdpa_attention)
AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)


def use_gqa_attention(model: Any) -> None:
    """Switch a model on transformers' ``sdpa`` attention to :func:`gqa_sdpa_attention` (in place;
    other implementations, e.g. eager or flash-attention on a GPU, and models without grouped KV
    heads, e.g. GPT-2's config has no ``num_key_value_heads``, are left alone)."""
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None)
    if getattr(cfg, "_attn_implementation", None) == "sdpa" and kv_heads is not None \
            and kv_heads != getattr(cfg, "num_attention_heads", kv_heads):
        model.set_attn_implementation(GQA_ATTENTION)


#: Cache columns a decode buffer is allocated beyond the rows' current length (a new buffer, and a
#: copy of the cache into it, is made only when they run out or the rows are rearranged).
KV_HEADROOM = 64


class BufferLayer(DynamicLayer):
    """A cache layer over preallocated ``(B, kv_heads, capacity, head_dim)`` buffers.

    ``update`` writes the new keys and values in place after the first ``length`` columns and
    returns views of the filled part; ``DynamicLayer`` instead concatenates, which copies the
    whole cache at every decode step. ``keys``/``values`` are always those views.
    """

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, length: int):
        super().__init__()
        self.kbuf, self.vbuf, self.length = kbuf, vbuf, length
        self.dtype, self.device = kbuf.dtype, kbuf.device
        self.keys, self.values = kbuf[:, :, :length], vbuf[:, :, :length]
        self.is_initialized = True

    @classmethod
    def around(cls, k: torch.Tensor, v: torch.Tensor, headroom: int = KV_HEADROOM) -> BufferLayer:
        """A layer holding a copy of ``k``/``v`` (B, kv_heads, L, head_dim) with ``headroom`` free columns."""
        B, H, L, D = k.shape
        kbuf, vbuf = k.new_empty((B, H, L + headroom, D)), v.new_empty((B, H, L + headroom, D))
        kbuf[:, :, :L], vbuf[:, :, :L] = k, v
        return cls(kbuf, vbuf, L)

    @classmethod
    def stacked(cls, blocks: list[tuple[torch.Tensor, torch.Tensor]], width: int,
                headroom: int = KV_HEADROOM) -> BufferLayer:
        """A layer over row blocks stacked on the batch axis: ``blocks`` ``[(k, v)]``, each
        (B_i, kv_heads, L_i, head_dim) with L_i <= ``width``, right-aligned in ``width`` columns after
        zeros (left padding), with ``headroom`` free columns. One copy of the cache, where
        ``around(torch.cat(...))`` makes two; the same columns."""
        k0 = blocks[0][0]
        B, H, D = sum(k.shape[0] for k, _ in blocks), k0.shape[1], k0.shape[3]
        kbuf, vbuf = k0.new_empty((B, H, width + headroom, D)), k0.new_empty((B, H, width + headroom, D))
        b = 0
        for k, v in blocks:
            n, pad = k.shape[0], width - k.shape[2]
            kbuf[b:b + n, :, :pad], vbuf[b:b + n, :, :pad] = 0, 0
            kbuf[b:b + n, :, pad:width], vbuf[b:b + n, :, pad:width] = k, v
            b += n
        return cls(kbuf, vbuf, width)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        """Write ``key_states``/``value_states`` (B, kv_heads, n, head_dim) after the filled columns
        (into a larger buffer when they do not fit); return views of all filled columns."""
        n = key_states.shape[-2]
        if self.length + n > self.kbuf.shape[-2]:
            grown = BufferLayer.around(self.keys, self.values, max(KV_HEADROOM, n))
            self.kbuf, self.vbuf = grown.kbuf, grown.vbuf
        self.kbuf[:, :, self.length:self.length + n] = key_states
        self.vbuf[:, :, self.length:self.length + n] = value_states
        self.length += n
        self.keys, self.values = self.kbuf[:, :, :self.length], self.vbuf[:, :, :self.length]
        return self.keys, self.values


def as_cache(kv: list[tuple[torch.Tensor, torch.Tensor]], layers: list[BufferLayer] | None = None) -> DynamicCache:
    """A ``DynamicCache`` over the per-layer ``(keys, values)`` without copying them.

    (``DynamicCache(ddp_cache_data=kv)`` concatenates each layer onto an empty tensor: a copy of
    the whole cache at every decode step.) With ``layers`` (buffer layers whose views are ``kv``)
    the cache writes new tokens into their free columns instead of concatenating.
    """
    cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in kv])
    if layers is not None:
        cache.layers = list(layers)
        return cache
    for layer, (k, v) in zip(cache.layers, kv, strict=True):
        layer.keys, layer.values = k, v
    return cache
