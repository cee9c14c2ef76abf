"""K tiny Qwen3 policies of one architecture as one stacked model: their forwards as batched matmuls.

issue #35 part 1 (the RoC ablation's arms trained together). The ablation trains K arms of the
same architecture (:func:`kit.plan.ablation_arms`); each arm's forward is ~100 small ops whose
per-op cost (dispatch, allocation) dominates at the tiny shapes. :class:`StackedQwen3` holds the
K arms' weights stacked on a leading arm axis (``torch.func.stack_module_state``: (K, ...) per
parameter) and runs all arms' rows in one pass: every linear layer is one ``torch.bmm`` over the
arm axis, every norm one broadcast, attention one SDPA over all arms' rows. The ops and their order
are :class:`kit.models.decode.Qwen3DecodeStep`'s (decode and prefill after a KV cache) and
transformers' ``Qwen3Model`` forward (training, right-padded rows); ``bmm`` over the arm axis
gives each arm the bits ``F.linear`` gives it alone at these shapes (checked in
``tests/foundation/test_stacked_model.py``), so an arm's logits equal its own model's up to the float
summation order of attention over a longer padded cache.

Shapes: K arms, B rows per arm (arms with fewer rows are padded), T new tokens, L cached columns,
H hidden, V vocabulary; keys and values (K * B, kv_heads, L, head_dim), arm-major.

Measured (``benchmarks/stacked_arms.py``, 10 arms, 1 thread, 2026-12-03): it does not pay at the
tiny shapes, so no trainer uses it. The decode forward's time is in its kernels (SDPA and small
GEMMs, which ``bmm`` runs one arm at a time), not in per-op dispatch: 1.32x at 36 rows an arm, 1.03x
once the GRPO arms' ~20 rows are padded to the GRPO-RoC arms' 36; the update's forward + backward
is slower stacked (0.62x: ten times the activations, no dispatch to save).

Does not: handle anything :func:`kit.models.decode.supports` rejects, or models that differ in
shape (:class:`StackedQwen3` raises ValueError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import stack_module_state

from kit.models.decode import Qwen3DecodeStep, _rms, _rotate_half, supports


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per-arm ``F.linear``: ``x`` (K, ..., I) with ``w`` (K, O, I) -> (K, ..., O), one ``bmm``."""
    K = x.shape[0]
    return torch.bmm(x.reshape(K, -1, x.shape[-1]), w.transpose(1, 2)).view(*x.shape[:-1], w.shape[1])


def _arm(w: torch.Tensor, dims: int) -> torch.Tensor:
    """A (K, H) norm weight shaped to broadcast over an activation of ``dims`` dims (arm axis first)."""
    return w.view(w.shape[0], *([1] * (dims - 2)), w.shape[-1])


class StackedQwen3:
    """The forwards of K ``Qwen3ForCausalLM`` of one architecture, batched over an arm axis.

    Args:
        models: K models (:func:`kit.models.decode.supports` True for each, equal shapes).
        params: optional (K, ...) tensors by parameter name (``stack_module_state``'s names) to run
            with instead of a stacked copy of ``models``' weights (e.g. leaves an optimizer owns).
    Attributes:
        params: the stacked weights, ``{name: (K, ...) tensor}``; tied embeddings are one entry
            (``model.embed_tokens.weight`` doubles as the LM head).
    Raises:
        ValueError: no models, a model :func:`supports` rejects, or models of different shapes.
    """

    def __init__(self, models: Sequence[Any], params: dict[str, torch.Tensor] | None = None):
        if not models:
            raise ValueError("StackedQwen3: no models")
        steps = [Qwen3DecodeStep(m) for m in models]  # raises ValueError on an unsupported model
        shapes = {tuple((n, tuple(p.shape)) for n, p in m.named_parameters()) for m in models}
        if len(shapes) != 1 or not all(supports(m) for m in models):
            raise ValueError("StackedQwen3: the models differ in their parameters' names or shapes")
        one = steps[0]
        self.K, self.config = len(models), models[0].config
        self.heads, self.kv_heads, self.head_dim = one.heads, one.kv_heads, one.head_dim
        self.eps, self.scaling, self.cos, self.sin = one.eps, one.scaling, one.cos, one.sin
        self.layers = self.config.num_hidden_layers
        if params is None:
            params, _ = stack_module_state(list(models))
            params = {n: p.detach() for n, p in params.items()}
        self.params = params
        self.tied = "lm_head.weight" not in params
        self.padding_idx = models[0].model.embed_tokens.padding_idx

    def _w(self, name: str) -> torch.Tensor:
        return self.params[name]

    def _head(self) -> torch.Tensor:
        return self._w("model.embed_tokens.weight" if self.tied else "lm_head.weight")

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(K, B, T) ids -> (K, B, T, H): each arm's own table (one gather over the K tables)."""
        E = self._w("model.embed_tokens.weight")  # (K, V, H)
        K, V = E.shape[:2]
        offset = (torch.arange(K) * V).view(K, *([1] * (ids.dim() - 1)))
        h = F.embedding(ids + offset, E.reshape(K * V, -1))
        if self.padding_idx is not None and torch.is_grad_enabled() and E.requires_grad:
            # nn.Embedding(padding_idx=...): the pad row gets no gradient from the input side
            h = torch.where((ids == self.padding_idx)[..., None], h.detach(), h)
        return h

    def _layer(self, i: int, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend) -> torch.Tensor:
        """One decoder layer on (K, B, T, H); ``attend(q, k, v)`` on (K*B, heads, T, D) tensors."""
        K, B, T, _ = h.shape
        p = f"model.layers.{i}."
        D = self.head_dim
        x = _rms(h, _arm(self._w(p + "input_layernorm.weight"), 4), self.eps)
        q = _linear(x, self._w(p + "self_attn.q_proj.weight")).view(K, B, T, -1, D)
        k = _linear(x, self._w(p + "self_attn.k_proj.weight")).view(K, B, T, -1, D)
        v = _linear(x, self._w(p + "self_attn.v_proj.weight")).view(K * B, T, -1, D).transpose(1, 2)
        q = _rms(q, _arm(self._w(p + "self_attn.q_norm.weight"), 5), self.eps).view(K * B, T, -1, D).transpose(1, 2)
        k = _rms(k, _arm(self._w(p + "self_attn.k_norm.weight"), 5), self.eps).view(K * B, T, -1, D).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        o = attend(q, k, v)  # (K*B, heads, T, D)
        h = h + _linear(o.transpose(1, 2).reshape(K, B, T, -1), self._w(p + "self_attn.o_proj.weight"))
        x = _rms(h, _arm(self._w(p + "post_attention_layernorm.weight"), 4), self.eps)
        up = F.silu(_linear(x, self._w(p + "mlp.gate_proj.weight"))) * _linear(x, self._w(p + "mlp.up_proj.weight"))
        return h + _linear(up, self._w(p + "mlp.down_proj.weight"))

    def decode(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, layers: list) -> torch.Tensor:
        """:class:`kit.models.decode.Qwen3DecodeStep` for every arm at once: new tokens after a KV cache.

        Args:
            ids: (K, B, T) long new tokens; pos: (K, B, T) long position ids.
            mask: (K, B, L + T) long, 1 where a column holds a real token (the T new ones last).
            layers: one cache layer per decoder layer over (K*B, kv_heads, L, head_dim) keys and values
                (``update(k, v)`` appends the T new columns and returns all of them).
        Returns:
            (K, B, V) float32 logits of the last new position of each row.
        Raises:
            ValueError: a position beyond the rotary table.
        """
        K, B, T = ids.shape
        if int(pos.max()) >= self.cos.shape[0]:
            raise ValueError(f"StackedQwen3: position {int(pos.max())} beyond the rotary table of {self.cos.shape[0]}")
        flat_pos, flat_mask = pos.reshape(K * B, T), mask.reshape(K * B, -1)
        cos, sin = self.cos[flat_pos][:, None], self.sin[flat_pos][:, None]  # (K*B, 1, T, D)
        past = flat_mask.shape[1] - T
        causal = False
        if bool(flat_mask.all()) and (T == 1 or past == 0):
            attn_mask, causal = None, T > 1
        else:
            rows = torch.arange(past, past + T)[:, None] >= torch.arange(flat_mask.shape[1])[None, :]  # (T, L + T)
            attn_mask = rows[None, None] & flat_mask.bool()[:, None, None, :]  # (K*B, 1, T, L + T)
        gqa = self.kv_heads != self.heads
        h = self._embed(ids)
        for i, cache in enumerate(layers):
            def attend(q, k, v, cache=cache, i=i):
                keys, values = cache.update(k, v, i)
                return F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask, scale=self.scaling,
                                                      is_causal=causal, enable_gqa=gqa)
            h = self._layer(i, h, cos, sin, attend)
        last = _rms(h[:, :, -1], _arm(self._w("model.norm.weight"), 3), self.eps)  # (K, B, H)
        return _linear(last, self._head())

    def hidden(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """Transformers' ``Qwen3Model`` forward (no cache) for every arm's right-padded rows.

        Args:
            ids: (K, B, T) long tokens; att: (K, B, T) long attention mask (1 on real tokens, a
                prefix of each row: right padding).
        Returns:
            (K, B, T, H) final hidden states (after the last RMSNorm), differentiable in ``params``.
        """
        K, B, T = ids.shape
        pos = torch.arange(T)
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]  # (1, 1, T, D)
        causal = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
        attn_mask = causal[None, None] & att.reshape(K * B, T).bool()[:, None, None, :]  # (K*B, 1, T, T)
        gqa = self.kv_heads != self.heads

        def attend(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=self.scaling, enable_gqa=gqa)

        h = self._embed(ids)
        for i in range(self.layers):
            h = self._layer(i, h, cos, sin, attend)
        return _rms(h, _arm(self._w("model.norm.weight"), 4), self.eps)

    def token_logprobs(self, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:func:`kit.train.update.token_logprobs` for every arm: (K, B, T) log-prob of each token
        given its prefix on the positions where ``mask`` (K, B, T) is non-zero, 0 elsewhere (column 0
        is always 0). The LM head runs on the masked positions only, one ``bmm`` over arms padded to
        the arm with the most."""
        K = ids.shape[0]
        hidden = self.hidden(ids, att)[:, :, :-1]  # (K, B, T-1, H)
        sel = mask[:, :, 1:] > 0
        counts = sel.reshape(K, -1).sum(1)
        N = int(counts.max()) if K else 0
        slot = sel.reshape(K, -1).cumsum(1).reshape(sel.shape) - 1  # each selected position's index in its arm
        arm = torch.arange(K).view(K, 1, 1).expand_as(sel)
        packed = hidden.new_zeros((K, max(N, 1), hidden.shape[-1]))
        packed = packed.index_put((arm[sel], slot[sel]), hidden[sel])  # (K, N, H)
        logits = torch.bmm(packed, self._head().transpose(1, 2)).float()  # (K, N, V)
        targets = ids.new_zeros((K, max(N, 1))).index_put((arm[sel], slot[sel]), ids[:, :, 1:][sel])
        picked = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)  # (K, N)
        body = torch.zeros(sel.shape, dtype=picked.dtype).masked_scatter(sel, picked[arm[sel], slot[sel]])
        return torch.cat([torch.zeros_like(body[:, :, :1]), body], dim=2)
