"""A lean Qwen3 forward for the rollout engine's decode steps and prefills (KV in place).

The continuous-batching engine (:mod:`kit.rollout.engine`) runs ~230-300 decode forwards per
tiny RL step (the longest trajectory plus tool round trips), each for ~30 rows of the 0.5M
model. At that size ``Qwen3ForCausalLM.forward`` spends about half of each call in
transformers' per-call machinery (output capture, config look-ups, mask building, rotary
recomputation, module hooks), not in arithmetic. :class:`Qwen3DecodeStep` does the same
arithmetic as that forward (new tokens after a cache, last position's logits) with the same
torch ops in the same order, reading
the model's own parameters (so it follows every weight update without a copy):

    embed -> per layer: RMSNorm, q/k/v projections, per-head q/k RMSNorm, RoPE, KV write,
    SDPA over the grouped KV heads (causal and padding mask), o_proj, residual, RMSNorm, SiLU
    MLP, residual -> final RMSNorm -> LM head (last position).

The rotary cos/sin come from a table computed once with transformers' formula (an outer product
of positions and inverse frequencies, whose single products are the ones its matmul computes).
Fewer ops than the model's forward, each output element computed by the same float operations:
``q|k|v`` and ``gate|up`` as one linear each (weights concatenated, rebuilt when the model's change),
the q and k head norms and RoPE in one pass over both, ``rotate_half`` as one roll against a sin
table with the first half's sign folded in (issue #35: 3.25 -> 3.15 CPU ms a decode forward at 40
rows x 300 columns, 1 thread).
The output equals the transformers forward's logits bitwise on the tiny model (checked in
tests/rollout/test_decode_step.py, with padding, GQA and tied embeddings). Only the plain
architecture is handled (:func:`supports`): default RoPE, no sliding window, no attention
bias, SiLU, float32 on the CPU, SDPA attention; the engine uses the transformers forward for
anything else.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def supports(model: Any) -> bool:
    """Whether :class:`Qwen3DecodeStep` computes exactly what ``model``'s forward computes.

    True for a ``Qwen3ForCausalLM`` with default RoPE, no sliding-window layers, no attention
    bias, no attention dropout, SiLU activation, float32 CPU weights and an SDPA attention
    implementation (transformers' ``sdpa`` or the engine's grouped ``kit_gqa_sdpa``).
    """
    cfg = getattr(model, "config", None)
    if cfg is None or type(model).__name__ != "Qwen3ForCausalLM":
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    return (rope.get("rope_type", "default") == "default"
            and "sliding_attention" not in (getattr(cfg, "layer_types", None) or [])
            and not getattr(cfg, "attention_bias", False)
            and getattr(cfg, "hidden_act", "") == "silu"
            and getattr(cfg, "_attn_implementation", None) in ("sdpa", "kit_gqa_sdpa")
            and not getattr(cfg, "attention_dropout", 0.0)
            and all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters()))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm on float32 input: ``weight * (x * rsqrt(mean(x^2) + eps))``."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' ``rotate_half``: ``cat(-x2, x1)`` over the last axis (:mod:`kit.models.stacked`'s RoPE)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Fused:
    """One decoder layer's weights fused for the decode forward: ``q|k|v`` and ``gate|up`` as one
    linear each (rows concatenated: each output column is the same dot product as in its own
    linear), the per-head q and k RMSNorm weights as one (heads + kv_heads, head_dim) table.
    Rebuilt when a source parameter is replaced, gets new storage (``p.data = ...``) or changes in place
    (an optimizer step, a ``load_state_dict``: ``Tensor._version``), so the forward reads the current
    weights. Not seen: a write through ``p.data`` in place (``p.data.copy_(...)`` bumps no version);
    nothing in the kit updates weights that way (the local trainers build a new engine per batch)."""

    def __init__(self, layer: Any, heads: int, kv_heads: int):
        att, mlp = layer.self_attn, layer.mlp
        self.src = (att.q_proj.weight, att.k_proj.weight, att.v_proj.weight, att.q_norm.weight, att.k_norm.weight,
                    mlp.gate_proj.weight, mlp.up_proj.weight)
        self.key = tuple((id(p), p._version, p.data_ptr()) for p in self.src)
        wq, wk, wv, nq, nk, wg, wu = (p.detach() for p in self.src)
        with torch.inference_mode(False), torch.no_grad():  # plain tensors, usable in and out of inference mode
            self.qkv = torch.cat([wq, wk, wv])  # ((heads + 2 kv_heads) * head_dim, hidden)
            self.qk_norm = torch.cat([nq.expand(heads, -1), nk.expand(kv_heads, -1)])  # (heads + kv_heads, head_dim)
            self.gate_up = torch.cat([wg, wu])  # (2 * intermediate, hidden)

    def current(self, layer: Any) -> bool:
        att, mlp = layer.self_attn, layer.mlp
        now = (att.q_proj.weight, att.k_proj.weight, att.v_proj.weight, att.q_norm.weight, att.k_norm.weight,
               mlp.gate_proj.weight, mlp.up_proj.weight)
        return all((id(p), p._version, p.data_ptr()) == k for p, k in zip(now, self.key, strict=True))


class Qwen3DecodeStep:
    """A forward of a ``Qwen3ForCausalLM`` over new tokens after a KV cache, last position's logits
    only, without transformers' per-call overhead: the engine's decode steps (``T = 1``) and its
    prefills (``T`` prompt tokens, after a kept prefix or none).

    Args:
        model: the policy (:func:`supports` must be True; raises ValueError otherwise).
    Call:
        ``step(ids, pos, mask, layers) -> logits``: ``ids`` (B, T) long tokens, ``pos`` (B, T)
        long position ids, ``mask`` (B, L + T) long, 1 where a column (the T new ones last) holds
        a real token, ``layers`` one cache layer per decoder layer holding the L cached columns
        (a fresh ``DynamicLayer()`` when L = 0) whose ``update(keys, values)`` appends
        (B, kv_heads, T, head_dim) and returns the layer's (B, kv_heads, L + T, head_dim) keys and
        values; ``rows`` (R,) long, optional: the logits of these rows, in this order (a prefill of
        distinct prompts expanded to the requests that share them; the LM head then multiplies R
        rows, as it would have for the R requests, so the logits are bitwise theirs). Returns (B, V)
        (or (R, V)) float32 logits of the last new position, the same as
        ``model(..., logits_to_keep=1).logits[:, -1]`` with that cache. The attention mask is
        transformers' SDPA mask: none when no column is padding and ``T = 1`` or ``L = 0``
        (then causal when ``T > 1``), else (B, 1, T, L + T) booleans ``col <= L + row`` and
        not padding.
    Raises:
        ValueError: a model :func:`supports` rejects; a position beyond the rotary table
            (``max_position_embeddings``).
    """

    def __init__(self, model: Any):
        if not supports(model):
            raise ValueError(f"Qwen3DecodeStep: unsupported model {type(model).__name__} "
                             "(needs plain Qwen3, float32 on the CPU, SDPA attention)")
        cfg = model.config
        self.model = model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.scaling = self.head_dim ** -0.5
        rot = model.model.rotary_emb
        with torch.no_grad():
            positions = torch.arange(cfg.max_position_embeddings, dtype=torch.float32)
            freqs = positions[:, None] * rot.inv_freq.float()[None, :]  # (P, D/2): transformers' matmul, K=1
            emb = torch.cat((freqs, freqs), dim=-1)
            self.cos = emb.cos() * rot.attention_scaling  # (P, D)
            self.sin = emb.sin() * rot.attention_scaling
            half = self.head_dim // 2
            # rotate_half(x) * sin = cat(-x2, x1) * sin = roll(x, half) * cat(-sin1, sin2), bitwise (a sign flip
            # is exact and commutes with the product): one roll instead of two slices, a negation and a cat
            self.sin_signed = torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1)
        self._fused: list[_Fused | None] = [None] * len(model.model.layers)

    def _weights(self, i: int, layer: Any) -> _Fused:
        f = self._fused[i]
        if f is None or not f.current(layer):
            f = self._fused[i] = _Fused(layer, self.heads, self.kv_heads)
        return f

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, layers: list,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
        m = self.model.model
        B, T = ids.shape
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        if int(pos.max()) >= self.cos.shape[0]:
            raise ValueError(f"Qwen3DecodeStep: position {int(pos.max())} beyond the rotary table of {self.cos.shape[0]}")
        cos, sin = self.cos[pos][:, :, None], self.sin_signed[pos][:, :, None]  # (B, T, 1, D)
        past = mask.shape[1] - T
        causal = False
        if bool(mask.all()) and (T == 1 or past == 0):
            attn_mask, causal = None, T > 1
        elif T == 1:  # the one new column sees every real column: the padding mask alone
            attn_mask = mask.bool()[:, None, None, :]  # (B, 1, 1, L + 1)
        else:
            seen = torch.arange(past, past + T)[:, None] >= torch.arange(mask.shape[1])[None, :]  # (T, L + T)
            attn_mask = seen[None, None] & mask.bool()[:, None, None, :]  # (B, 1, T, L + T)
        gqa = KV != H
        h = F.embedding(ids, m.embed_tokens.weight)  # (B, T, hidden)
        for i, (layer, cache) in enumerate(zip(m.layers, layers, strict=True)):
            att, w = layer.self_attn, self._weights(i, layer)
            x = _rms(h, layer.input_layernorm.weight, self.eps)
            qkv = F.linear(x, w.qkv)  # (B, T, (H + 2 KV) * D): q, k, v side by side
            qk = _rms(qkv[..., :(H + KV) * D].view(B, T, H + KV, D), w.qk_norm, self.eps)  # per-head q and k norms
            qk = qk * cos + qk.roll(D // 2, -1) * sin  # RoPE on q and k at once
            q, k = qk[:, :, :H].transpose(1, 2), qk[:, :, H:].transpose(1, 2)  # (B, H, T, D), (B, KV, T, D)
            v = qkv[..., (H + KV) * D:].view(B, T, KV, D).transpose(1, 2)
            keys, values = cache.update(k, v, att.layer_idx)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask, scale=self.scaling,
                                               is_causal=causal, enable_gqa=gqa)
            h = h + F.linear(o.transpose(1, 2).reshape(B, T, -1), att.o_proj.weight)
            x = _rms(h, layer.post_attention_layernorm.weight, self.eps)
            gate, up = F.linear(x, w.gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight)
        last = h[:, -1] if rows is None else h[rows, -1]  # (B, hidden) or (R, hidden)
        return F.linear(_rms(last, m.norm.weight, self.eps), self.model.lm_head.weight)
