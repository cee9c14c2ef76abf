"""Continuous-batching rollout engine for the tiny model on CPU (rStar2-Agent report §3.2).

Two backends with the :class:`kit.rollout.backends.Backend` interface
(``async generate(prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> Generation``),
so the agent loop and the RL trainer take either as a drop-in:

* :class:`ContinuousBatchingEngine` (``rollout.scheduler = "dynamic"``): a fixed number of
  slots (``rollout.batch_size``); a row that ends its turn (a stop id, e.g. after a tool call,
  or its budget) frees its slot at once and the next pending request takes it at the next step
  while the other rows keep decoding; tool calls run in the event loop meanwhile. Optionally a
  KV budget in tokens: a request is admitted only when the ``prompt + max_new_tokens`` of all
  rows fits (the report's safe concurrency from free KV capacity and each request's maximum
  length; the release's ``budget = len(prompt_ids) + response_length``).
* :class:`BatchLoopBackend` (``rollout.scheduler = "static"``): the plain loop. A cohort of
  trajectories generates a whole batch; finished rows stay in the batch until the slowest row is
  done; the batch's tool calls all return before the next turn's batch starts
  (:func:`rollout_plain` declares the cohort; without one it micro-batches what is pending).

KV cache: one left-padded cache for the batch, held in buffers with free columns
(:class:`_BufferLayer`): a decode step writes its token's keys and values in place instead of
concatenating (a copy of the whole cache per step), and attention reads the grouped KV heads
directly (:func:`gqa_sdpa_attention`; transformers' ``sdpa`` repeats them per query head, another
copy per step). Measured on a stage-1 rollout of the tiny policy (6 prompts x 16, 2 cores): decode
step 8.9 -> 5.0 ms, collect 2.92 -> 2.17 s. The decode forward itself is
:class:`kit.models.decode.Qwen3DecodeStep` (the same logits bitwise without transformers' per-call
overhead; 5.2 -> 3.1 CPU ms per decode step at 32 rows), prefills too: a stage-1 RoC step of the
SFT policy (6 x 16 rollouts, 1 thread, benchmarks/rl_step_profile.py) went 1.67 -> 1.33 CPU s of
rollout, 2.15 -> 1.80 CPU s and 2.53 -> 2.12 s wall per step, same trajectories. Joining rows are prefilled together
and written in place into the slots of finished rows (left-padding the whole batch only when a
new row is longer than it); rows that no new request is waiting for are dropped with
``index_select`` and all-padding columns are trimmed. Padding is masked and every row has its
own position ids, so a row's logits do not depend on its neighbours (up to float summation
order). Row ``r`` samples with its own stream of uniforms seeded exactly as
:class:`kit.rollout.backends.HFBackend` seeds it (base seed, prompt ids, how many times that
prompt was requested), so both engines and the HF backend give the same tokens for the same
requests. Prefix reuse (continuous engine): a finished row's KV is kept (LRU, ``slots``
entries), and a request whose prompt starts with kept ids (a trajectory's next turn: context,
turn, tool feedback) prefills only its new tokens. The plain loop re-prefills every turn, as a
``model.generate`` loop does; ``prefix_cache=False`` gives the scheduling effect alone.

Not done: no chunked prefill, no preemption (admission never over-commits), one model forward at
a time per process, CPU float32 only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from kit.models.decode import Qwen3DecodeStep, supports
from kit.rollout.backends import Generation, HFBackend, check_request, sample_tokens, sampling_uniforms
from kit.rollout.loop import run_trajectory


def request_seed(base_seed: int, prompt_ids: Sequence[int], count: int) -> int:
    """Sampling seed of a request: the same function as ``HFBackend`` (so outputs agree).

    Args:
        base_seed: the backend's seed.
        prompt_ids: the request's prompt.
        count: how many times this exact prompt was requested before from this backend.
    Returns:
        A non-negative 63-bit int for ``torch.Generator().manual_seed``.
    """
    key = hashlib.blake2b(json.dumps(list(prompt_ids)).encode(), digest_size=8).digest()
    return int.from_bytes(hashlib.blake2b(key + f"{base_seed}:{count}".encode(), digest_size=8).digest(), "little") >> 1


@dataclass
class _Req:
    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop: frozenset[int]
    seed: int
    future: asyncio.Future | None = None
    out: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    done: bool = False
    reported: bool = False
    u: list[float] | None = None  # the request's sampling stream (one uniform per new token)

    def result(self) -> Generation:
        reason = "stop" if self.out and self.out[-1] in self.stop else "length"
        return Generation(list(self.out), list(self.lps), reason)


def gqa_sdpa_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention for the engine: ``torch`` SDPA with grouped KV heads passed as they are.

    Transformers' ``sdpa`` path copies each KV head ``heads / kv_heads`` times (``repeat_kv``)
    whenever a mask is given, i.e. at every padded decode step: a copy of the whole cache per
    layer per step. ``enable_gqa=True`` (torch >= 2.5) reads the grouped heads directly; the
    output is the same (checked in tests/train/test_engine.py). Registered with transformers'
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


class _BufferLayer(DynamicLayer):
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
    def around(cls, k: torch.Tensor, v: torch.Tensor, headroom: int = KV_HEADROOM) -> _BufferLayer:
        """A layer holding a copy of ``k``/``v`` (B, kv_heads, L, head_dim) with ``headroom`` free columns."""
        B, H, L, D = k.shape
        kbuf, vbuf = k.new_empty((B, H, L + headroom, D)), v.new_empty((B, H, L + headroom, D))
        kbuf[:, :, :L], vbuf[:, :, :L] = k, v
        return cls(kbuf, vbuf, L)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        n = key_states.shape[-2]
        if self.length + n > self.kbuf.shape[-2]:
            grown = _BufferLayer.around(self.keys, self.values, max(KV_HEADROOM, n))
            self.kbuf, self.vbuf = grown.kbuf, grown.vbuf
        self.kbuf[:, :, self.length:self.length + n] = key_states
        self.vbuf[:, :, self.length:self.length + n] = value_states
        self.length += n
        self.keys, self.values = self.kbuf[:, :, :self.length], self.vbuf[:, :, :self.length]
        return self.keys, self.values


def _as_cache(kv: list[tuple[torch.Tensor, torch.Tensor]], layers: list[_BufferLayer] | None = None) -> DynamicCache:
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


class _Rows:
    """Running rows with one left-padded KV cache: (B, heads, L, dim) per layer; mask (B, L)."""

    def __init__(self, model: Any, pad_id: int, decode: Qwen3DecodeStep | None = None):
        self.model, self.pad_id, self.decode = model, pad_id, decode
        self.reqs: list[_Req] = []
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.mask = torch.zeros((0, 0), dtype=torch.long)
        self.pos = torch.zeros((0, 1), dtype=torch.long)  # (B, 1) next position id
        self.last = torch.zeros((0, 1), dtype=torch.long)  # (B, 1) last sampled token
        # buffer layers of the last decode step; reused while ``self.kv`` is still their views
        self._layers: list[_BufferLayer] | None = None
        self._layers_kv: list | None = None

    def __len__(self) -> int:
        """Live rows (finished rows may still sit in the batch until their slot is reused)."""
        return sum(not r.done for r in self.reqs)

    @property
    def physical(self) -> int:
        """Rows in the batch tensors, finished ones included (they cost compute per step)."""
        return len(self.reqs)

    def _sample(self, logits: torch.Tensor, reqs: list[_Req]) -> torch.Tensor:
        """Append one token to every unfinished row of ``reqs``; return the (B, 1) tokens.

        Row ``r``'s ``t``-th token comes from the ``t``-th uniform of its stream
        (:func:`kit.rollout.backends.sample_tokens`), vectorised over the batch.
        """
        temps = torch.tensor([r.temperature for r in reqs])
        top_ps = torch.tensor([r.top_p for r in reqs])
        u = torch.tensor([0.0 if r.done else r.u[len(r.out)] for r in reqs], dtype=torch.float64)
        tok, logp = sample_tokens(logits.float(), temps, top_ps, u)
        toks, lps = tok.tolist(), logp.gather(-1, tok[:, None]).squeeze(-1).tolist()
        for i, r in enumerate(reqs):
            if r.done:
                toks[i] = self.pad_id
                continue
            t = toks[i]
            r.out.append(t)
            r.lps.append(lps[i])
            r.done = t in r.stop or len(r.out) >= r.max_new or r.future.cancelled()  # caller gone: free the row
        return torch.tensor(toks, dtype=torch.long)[:, None]

    def add(self, reqs: list[_Req], prefixes: list | None = None) -> None:
        """Prefill ``reqs`` and merge them into the running batch (first token sampled).

        ``prefixes[i]``, when not None, is the cached KV (per layer ``(1, heads, c, dim)``) of
        the first ``c`` prompt tokens of ``reqs[i]``: only the rest of its prompt is computed.
        Rows without a prefix are prefilled together, left-padded.
        """
        prefixes = prefixes or [None] * len(reqs)
        fresh = [r for r, p in zip(reqs, prefixes, strict=True) if p is None]
        cached = [(r, p) for r, p in zip(reqs, prefixes, strict=True) if p is not None]
        if fresh:
            self._place(fresh, *self._prefill(fresh))
        if cached:
            self._place([r for r, _ in cached], *self._prefill_cached(cached))

    def _prefill(self, reqs: list[_Req]):
        L = max(len(r.prompt_ids) for r in reqs)
        ids = torch.full((len(reqs), L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(reqs), L), dtype=torch.long)
        for i, r in enumerate(reqs):
            ids[i, L - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[i, L - len(r.prompt_ids):] = 1
            r.u = sampling_uniforms(r.seed, r.max_new)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, kv = self._forward(ids, mask, pos, None)
        return kv, mask, torch.tensor([[len(r.prompt_ids)] for r in reqs]), self._sample(logits, reqs)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, kv: list | None):
        """Prefill ``ids`` (B, T) after the cached ``kv`` (or none): last position's logits (B, V)
        and the per-layer ``(keys, values)`` of cache and new tokens."""
        if self.decode is not None:  # the same logits without transformers' per-call overhead
            layers = _as_cache(kv).layers if kv is not None else [DynamicLayer() for _ in self.model.model.layers]
            logits = self.decode(ids, pos, mask, layers)
            return logits, [(layer.keys, layer.values) for layer in layers]
        res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                         past_key_values=_as_cache(kv) if kv is not None else None)
        return res.logits[:, -1, :], [(layer.keys, layer.values) for layer in res.past_key_values.layers]

    def _prefill_cached(self, cached: list[tuple[_Req, list]]):
        """Prefill only the uncached suffixes. Layout per row: [pad | cached c_i | pad | suffix s_i]."""
        cs, sufs, pres = [], [], []
        for r, pre in cached:
            c = pre[0][0].shape[2]
            if c >= len(r.prompt_ids):  # the whole prompt is cached: recompute its last token for the logits
                c = len(r.prompt_ids) - 1
                pre = [(k[:, :, :c], v[:, :, :c]) for k, v in pre]
            cs.append(c)
            sufs.append(r.prompt_ids[c:])
            pres.append(pre)
            r.u = sampling_uniforms(r.seed, r.max_new)
        R, C, S = len(cached), max(cs), max(len(x) for x in sufs)
        kv = []
        for layer in range(len(pres[0])):
            k0, v0 = pres[0][layer]
            k = k0.new_zeros((R, k0.shape[1], C, k0.shape[3]))
            v = v0.new_zeros((R, v0.shape[1], C, v0.shape[3]))
            for i, pre in enumerate(pres):
                k[i, :, C - cs[i]:] = pre[layer][0][0]
                v[i, :, C - cs[i]:] = pre[layer][1][0]
            kv.append((k, v))
        ids = torch.full((R, S), self.pad_id, dtype=torch.long)
        mask = torch.zeros((R, C + S), dtype=torch.long)
        pos = torch.zeros((R, S), dtype=torch.long)
        for i, (c, suf) in enumerate(zip(cs, sufs, strict=True)):
            ids[i, S - len(suf):] = torch.tensor(suf)
            mask[i, C - c:C] = 1
            mask[i, C + S - len(suf):] = 1
            pos[i, S - len(suf):] = torch.arange(c, c + len(suf))
        reqs = [r for r, _ in cached]
        logits, kv = self._forward(ids, mask, pos, kv)
        return kv, mask, torch.tensor([[len(r.prompt_ids)] for r in reqs]), self._sample(logits, reqs)

    def _place(self, reqs: list[_Req], kv, mask: torch.Tensor, new_pos: torch.Tensor, last: torch.Tensor) -> None:
        """Put prefilled rows into the slots of finished rows (in place), the rest at the end."""
        # only rows already handed back: a row that finished on the token sampled by this very
        # admission's prefill is still waiting to be collected (its future is unresolved)
        free = [i for i, r in enumerate(self.reqs) if r.done and r.reported]
        n = min(len(free), len(reqs))
        if n:
            Lb = mask.shape[1]
            if Lb > self.mask.shape[1]:
                self._left_pad(Lb - self.mask.shape[1])
            L = self.mask.shape[1]
            for j, slot in enumerate(free[:n]):
                for (k, v), (kb, vb) in zip(self.kv, kv, strict=True):
                    k[slot, :, :L - Lb] = 0
                    v[slot, :, :L - Lb] = 0
                    k[slot, :, L - Lb:] = kb[j]
                    v[slot, :, L - Lb:] = vb[j]
                self.mask[slot] = 0
                self.mask[slot, L - Lb:] = mask[j]
                self.pos[slot] = new_pos[j]
                self.last[slot] = last[j]
                self.reqs[slot] = reqs[j]
        if n < len(reqs):
            self._merge(reqs[n:], [(k[n:], v[n:]) for k, v in kv], mask[n:], new_pos[n:], last[n:])

    def _left_pad(self, n: int) -> None:
        self.kv = [(torch.cat([k.new_zeros((*k.shape[:2], n, k.shape[3])), k], dim=2),
                    torch.cat([v.new_zeros((*v.shape[:2], n, v.shape[3])), v], dim=2)) for k, v in self.kv]
        self.mask = torch.cat([torch.zeros((self.mask.shape[0], n), dtype=torch.long), self.mask], dim=1)

    def _merge(self, reqs: list[_Req], kv, mask: torch.Tensor, new_pos: torch.Tensor, last: torch.Tensor) -> None:
        if not self.reqs:
            self.reqs, self.kv, self.mask, self.pos, self.last = list(reqs), kv, mask, new_pos, last
            return
        La, Lb = self.mask.shape[1], mask.shape[1]
        Lm = max(La, Lb)

        def lpad(t: torch.Tensor, n: int) -> torch.Tensor:  # left-pad the sequence axis (-2 for KV, -1 for mask)
            if n == 0:
                return t
            if t.dim() == 2:
                return torch.cat([torch.zeros((t.shape[0], n), dtype=t.dtype), t], dim=1)
            return torch.cat([t.new_zeros((*t.shape[:2], n, t.shape[3])), t], dim=2)

        self.kv = [(torch.cat([lpad(ka, Lm - La), lpad(kb, Lm - Lb)]), torch.cat([lpad(va, Lm - La), lpad(vb, Lm - Lb)]))
                   for (ka, va), (kb, vb) in zip(self.kv, kv, strict=True)]
        self.mask = torch.cat([lpad(self.mask, Lm - La), lpad(mask, Lm - Lb)])
        self.pos = torch.cat([self.pos, new_pos])
        self.last = torch.cat([self.last, last])
        self.reqs += reqs

    def row_cache(self, i: int) -> tuple[list[int], list]:
        """Token ids whose KV row ``i`` holds (prompt + all sampled but the last) and that KV.

        The row's columns are those its mask marks, in order; they need not be the last ``n``: a
        row prefilled from a cached prefix has padding between the prefix and the suffix
        (:meth:`_prefill_cached`), and slicing the last ``n`` columns then kept padding and lost
        the prefix's start (wrong KV, so wrong log-probs, on the next turn that reuses it).
        """
        r = self.reqs[i]
        cols = self.mask[i].nonzero().squeeze(-1)
        ids = (r.prompt_ids + r.out)[:len(cols)]
        return ids, [(k[i:i + 1, :, cols].clone(), v[i:i + 1, :, cols].clone()) for k, v in self.kv]

    def trim(self) -> None:
        """Drop leading columns that are padding for every row (views: the next step copies anyway)."""
        if self.mask.shape[1] and not bool(self.mask[:, 0].any()):
            first = int((self.mask.sum(0) > 0).nonzero()[0])
            self.mask = self.mask[:, first:]
            self.kv = [(k[:, :, first:], v[:, :, first:]) for k, v in self.kv]

    def step(self) -> None:
        """One decode step for every row (finished rows, if kept, decode padding)."""
        self.trim()
        if self._layers is None or self._layers_kv is not self.kv:  # rows were added, dropped or trimmed
            self._layers = [_BufferLayer.around(k, v) for k, v in self.kv]
        mask = torch.cat([self.mask, torch.ones((len(self.reqs), 1), dtype=torch.long)], dim=1)
        if self.decode is not None:  # the same logits without transformers' per-call overhead
            logits = self.decode(self.last, self.pos, mask, self._layers)
        else:
            logits = self.model(input_ids=self.last, attention_mask=mask, position_ids=self.pos,
                                past_key_values=_as_cache(self.kv, self._layers), use_cache=True).logits[:, -1, :]
        self.kv = self._layers_kv = [(layer.keys, layer.values) for layer in self._layers]
        self.mask = mask
        self.pos = self.pos + 1
        self.last = self._sample(logits, self.reqs)

    def collect_finished(self, keep_cache=None) -> list[_Req]:
        """Rows that finished since the last call; their slots become free for new rows.

        ``keep_cache(ids, kv)`` is called for each with :meth:`row_cache` (prefix reuse).
        """
        gone = []
        for i, r in enumerate(self.reqs):
            if r.done and not r.reported:
                r.reported = True
                gone.append(r)
                if keep_cache is not None:
                    keep_cache(*self.row_cache(i))
        return gone

    def compact(self) -> None:
        """Drop finished rows from the batch tensors and trim all-padding columns."""
        keep = [i for i, r in enumerate(self.reqs) if not r.done]
        if len(keep) == len(self.reqs):
            return
        self.reqs = [self.reqs[i] for i in keep]
        if not keep:
            self.kv, self.mask = [], torch.zeros((0, 0), dtype=torch.long)
            self.pos = self.last = torch.zeros((0, 1), dtype=torch.long)
            return
        idx = torch.tensor(keep, dtype=torch.long)
        mask = self.mask[idx]
        first = int((mask.sum(0) > 0).nonzero()[0])
        self.mask = mask[:, first:]
        self.kv = [(k[idx][:, :, first:], v[idx][:, :, first:]) for k, v in self.kv]
        self.pos, self.last = self.pos[idx], self.last[idx]


class _BackendBase:
    """Request bookkeeping shared by both backends (seeds, limits, statistics)."""

    def __init__(self, model: Any, tokenizer: Any, seed: int, max_context: int | None, lean_decode: bool = True):
        use_gqa_attention(model)  # in place: the same outputs without copying the KV heads
        self.model = model
        #: the lean decode forward (kit.models.decode) where it computes what the model's does
        self.decode = Qwen3DecodeStep(model) if lean_decode and supports(model) else None
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.seed = seed
        self.max_context = max_context or int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self._seen: dict[str, int] = {}
        self._pending: list[_Req] = []
        self._lock = threading.Lock()
        self._worker: asyncio.Task | None = None
        #: tokens: sampled tokens; steps: decode forwards; row_steps: rows x steps (padding rows
        #: included); kv_cols: cache columns (padding included) summed over steps; prefills;
        #: busy_s: seconds inside model forwards and sampling.
        self.stats = {"tokens": 0, "steps": 0, "row_steps": 0, "kv_cols": 0, "prefills": 0, "busy_s": 0.0}

    def _make(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> _Req | Generation:
        check_request(prompt_ids, max_new_tokens, temperature, top_p)
        room = self.max_context - len(prompt_ids)
        if room <= 0:
            raise ValueError(f"{type(self).__name__}: prompt of {len(prompt_ids)} tokens fills the context of {self.max_context}")
        key = json.dumps(list(prompt_ids))
        k = self._seen.get(key, 0)
        self._seen[key] = k + 1
        if min(max_new_tokens, room) == 0:
            return Generation([], [], "length")
        return _Req(list(prompt_ids), min(max_new_tokens, room), float(temperature), float(top_p), frozenset(stop_ids),
                    request_seed(self.seed, prompt_ids, k), asyncio.get_running_loop().create_future())

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._serve())

    async def generate(self, prompt_ids: list[int], max_new_tokens: int, temperature: float, top_p: float,
                       stop_ids: Sequence[int]) -> Generation:
        """Sample one turn (the ``Backend`` contract of :mod:`kit.rollout.backends`).

        Args:
            prompt_ids: the whole context so far, token ids.
            max_new_tokens: token budget of this turn (clipped to the model's context).
            temperature: 0 = greedy; top_p: nucleus mass in (0, 1].
            stop_ids: ids that end the turn (kept in the output).
        Returns:
            ``Generation(token_ids, logprobs, finish_reason)``; ``logprobs`` are
            ``log softmax(logits / T)`` of the sampled ids.
        Raises:
            ValueError: empty prompt, negative budget, bad sampling values, or a prompt that fills
                the context.
        """
        req = self._make(prompt_ids, max_new_tokens, temperature, top_p, stop_ids)
        if isinstance(req, Generation):
            return req
        self._pending.append(req)
        self._ensure_worker()
        return await req.future

    def _finish(self, reqs: list[_Req]) -> None:
        for r in reqs:
            self.stats["tokens"] += len(r.out)
            if not r.future.done():
                r.future.set_result(r.result())

    def _fail(self, reqs: list[_Req], exc: BaseException) -> None:
        for r in reqs:
            if not r.future.done():
                r.future.set_exception(exc)


class ContinuousBatchingEngine(_BackendBase):
    """Continuous batching over ``slots`` rows (report §3.2's load-balanced rollout, locally).

    Args:
        model: a causal LM (the tiny ``Qwen3ForCausalLM``), eval mode, CPU.
        tokenizer: its tokenizer (``pad_token_id``).
        slots: the most rows decoded together (``rollout.batch_size``).
        seed: base sampling seed (same scheme as ``HFBackend``).
        max_context: prompt + new tokens limit; default ``max_position_embeddings``.
        kv_budget_tokens: if set, admit a request only while the sum of ``prompt + max_new`` over
            the running rows stays within this many tokens (no over-commit, so no eviction).
        max_steps_per_call: decode steps run in the worker thread before the event loop is
            consulted, unless a row finishes or a request is waiting for a free slot first.
        prefix_cache: keep the KV of up to ``slots`` finished rows; a request whose prompt
            starts with one (the next turn of a trajectory: context + turn + tool feedback)
            prefills only the new tokens. Off: every turn re-prefills its whole context.
        lean_decode: decode with :class:`kit.models.decode.Qwen3DecodeStep` where it computes
            the model's forward exactly (same logits, fewer CPU seconds); False: always the
            transformers forward (benchmarks/rollout_bench.py ``--compare-decode`` times both).
    """

    def __init__(self, model: Any, tokenizer: Any, slots: int = 64, seed: int = 0, max_context: int | None = None,
                 kv_budget_tokens: int | None = None, max_steps_per_call: int = 8, prefix_cache: bool = True,
                 lean_decode: bool = True):
        super().__init__(model, tokenizer, seed, max_context, lean_decode)
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self.kv_budget = kv_budget_tokens
        self.max_steps_per_call = max_steps_per_call
        self._rows: _Rows | None = None
        self.occupancy: list[int] = []  # running rows at each decode step
        self.prefix_cache = prefix_cache
        self._prefixes: OrderedDict[tuple[int, ...], list] = OrderedDict()  # ids -> per-layer KV, LRU
        self.stats.update(prefix_hits=0, prefill_tokens=0, reused_tokens=0)

    def clear_prefix_cache(self) -> None:
        """Forget every kept prefix KV (call after the model's weights change: KV computed with
        the old weights must not seed a new turn). Rows in flight are not touched."""
        self._prefixes.clear()

    def _keep(self, ids: list[int], kv: list) -> None:
        self._prefixes[tuple(ids)] = kv
        self._prefixes.move_to_end(tuple(ids))
        while len(self._prefixes) > self.slots:
            self._prefixes.popitem(last=False)

    def _lookup(self, prompt_ids: list[int]) -> list | None:
        """Pop the longest kept KV whose ids start ``prompt_ids``."""
        best = None
        for key in self._prefixes:
            if len(key) <= len(prompt_ids) and (best is None or len(key) > len(best)) \
                    and tuple(prompt_ids[:len(key)]) == key:
                best = key
        return self._prefixes.pop(best) if best is not None else None

    def _admissible(self, rows: _Rows) -> list[_Req]:
        take: list[_Req] = []
        reserved = sum(len(r.prompt_ids) + r.max_new for r in rows.reqs if not r.done)
        while self._pending and len(rows) + len(take) < self.slots:
            r = self._pending[0]
            if r.future.cancelled():  # its caller was cancelled (a client that disconnected) before it got a row
                self._pending.pop(0)
                continue
            need = len(r.prompt_ids) + r.max_new
            if self.kv_budget is not None and reserved + need > self.kv_budget and (len(rows) or take):
                break
            take.append(self._pending.pop(0))
            reserved += need
        return take

    def _advance(self, rows: _Rows, admit: list[_Req]) -> list[_Req]:
        """Worker thread: prefill ``admit``, then decode until a row ends or a slot is wanted."""
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            keep = self._keep if self.prefix_cache else None
            if admit:
                pre = [self._lookup(r.prompt_ids) if self.prefix_cache else None for r in admit]
                rows.add(admit, pre)
                self.stats["prefills"] += 1
                reused = sum(p[0][0].shape[2] for p in pre if p is not None)
                self.stats["prefix_hits"] += sum(p is not None for p in pre)
                self.stats["reused_tokens"] += reused
                self.stats["prefill_tokens"] += sum(len(r.prompt_ids) for r in admit) - reused
            done = rows.collect_finished(keep)
            n = 0
            while not done and len(rows) and n < self.max_steps_per_call:
                rows.step()
                n += 1
                self.stats["steps"] += 1
                self.stats["row_steps"] += rows.physical
                self.stats["kv_cols"] += rows.mask.shape[1]
                self.occupancy.append(len(rows))
                done = rows.collect_finished(keep)
                if self._pending and len(rows) < self.slots:
                    break
            # finished rows keep their slot (and cost a row per step) until a new row takes it;
            # when few requests wait, drop them so the batch shrinks
            dead = rows.physical - len(rows)
            if dead and (not len(rows) or (dead * 4 >= rows.physical and len(self._pending) < dead)):
                rows.compact()
        self.stats["busy_s"] += time.perf_counter() - t0
        return done

    async def _serve(self) -> None:
        rows = self._rows = _Rows(self.model, self.pad_id, self.decode)
        while self._pending or len(rows):  # the worker ends when idle; generate() starts a new one
            admit = self._admissible(rows)
            try:
                done = await asyncio.to_thread(self._advance, rows, admit)
            except Exception as exc:  # every row in flight fails with the error
                self._fail(admit + rows.reqs, exc)
                rows = self._rows = _Rows(self.model, self.pad_id, self.decode)
                continue
            self._finish(done)


class BatchLoopBackend(_BackendBase):
    """The plain batch loop (``rollout.scheduler = "static"``): whole batches, slowest row last.

    Inside a cohort (:meth:`join` / :meth:`leave`, done by :func:`rollout_plain`) a batch starts
    only when every live trajectory of the cohort has submitted its next turn, so the batch waits
    for all tool calls of the previous one; all rows decode until the slowest is done (finished
    rows keep occupying the batch, as with ``model.generate``). Outside a cohort it batches what
    is pending after ``gather_s`` seconds of quiet.

    Args:
        model, tokenizer, seed, max_context: as :class:`ContinuousBatchingEngine`.
        batch_size: the most rows per batch.
        gather_s: quiet period before a batch outside a cohort (seconds).
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, seed: int = 0,
                 max_context: int | None = None, gather_s: float = 0.002):
        super().__init__(model, tokenizer, seed, max_context)
        self.batch_size = batch_size
        self.gather_s = gather_s
        self.active = 0  # live trajectories of the current cohort

    def join(self, n: int) -> None:
        """Declare ``n`` more live trajectories in the cohort."""
        self.active += n

    def leave(self) -> None:
        """A trajectory of the cohort ended (no more requests from it)."""
        self.active -= 1
        if self._pending:
            self._ensure_worker()

    def _decode(self, batch: list[_Req]) -> None:
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            rows = _Rows(self.model, self.pad_id, self.decode)
            rows.add(batch)
            self.stats["prefills"] += 1
            while not all(r.done for r in batch):
                rows.step()
                self.stats["steps"] += 1
                self.stats["row_steps"] += len(batch)
                self.stats["kv_cols"] += rows.mask.shape[1]
        self.stats["busy_s"] += time.perf_counter() - t0

    async def _serve(self) -> None:
        while True:  # ends when no batch is ready; generate() and leave() start a new worker
            if self.active > 0:
                if len(self._pending) < min(self.active, self.batch_size):
                    return
            else:
                n = -1
                while n != len(self._pending):
                    n = len(self._pending)
                    await asyncio.sleep(self.gather_s)
            if not self._pending:
                return
            batch, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size:]
            try:
                await asyncio.to_thread(self._decode, batch)
            except Exception as exc:
                self._fail(batch, exc)
                continue
            self._finish(batch)


async def rollout_plain(backend: BatchLoopBackend, tokenizer: Any, problems: Sequence[str], executor: Any, n: int,
                        cfg: Any = None, **kwargs: Any) -> list[list[Any]]:
    """The plain loop over ``P x n`` trajectories in cohorts of ``backend.batch_size``.

    Each cohort runs to its slowest trajectory before the next starts. Same arguments and
    result as :func:`kit.rollout.loop.rollout_batch` (``out[p][g]``, problem order).
    """
    flat_problems = [p for p in problems for _ in range(n)]
    flat: list[Any] = []

    async def one(p: str) -> Any:
        try:
            return await run_trajectory(backend, tokenizer, p, executor, cfg, **kwargs)
        finally:
            backend.leave()

    for start in range(0, len(flat_problems), backend.batch_size):
        chunk = flat_problems[start:start + backend.batch_size]
        backend.join(len(chunk))
        flat += await asyncio.gather(*(one(p) for p in chunk))
    return [flat[i * n:(i + 1) * n] for i in range(len(problems))]


def make_backend(model: Any, tokenizer: Any, rollout_cfg: Any, seed: int = 0) -> Any:
    """The tiny model's sampling backend for :func:`kit.rollout.rollout_batch`, by ``rollout.scheduler``.

    ``dynamic``: :class:`ContinuousBatchingEngine` (report §3.2's load-balanced rollout: a row
    that ends its turn frees its slot at once); ``static``: :class:`kit.rollout.HFBackend`
    (micro-batches of whatever is pending). Both draw row ``r``'s tokens from the same
    per-request seed, so they sample the same tokens. (:class:`BatchLoopBackend`, the plain
    cohort loop, is driven by :func:`rollout_plain` and is built directly.)

    Args:
        rollout_cfg: a :class:`kit.config.RolloutConfig` (``scheduler``, ``batch_size`` slots/rows).
        seed: the per-request seeds derive from it.
    Raises:
        ValueError: an unknown scheduler name.
    """
    if rollout_cfg.scheduler == "dynamic":
        return ContinuousBatchingEngine(model, tokenizer, slots=rollout_cfg.batch_size, seed=seed)
    if rollout_cfg.scheduler == "static":
        return HFBackend(model, tokenizer, batch_size=rollout_cfg.batch_size, seed=seed)
    raise ValueError(f"unknown rollout.scheduler {rollout_cfg.scheduler!r}")
