"""The continuous-batching engine's running rows: requests, prefill, slots, decode steps, sampling.

rStar2-Agent report §3.2 (the rollout engine), the tiny model on CPU. :class:`RunningRows` is the
batch state both backends of :mod:`kit.rollout.engine` drive: requests (:class:`EngineRequest`)
are prefilled together and written in place into the slots of finished rows (left-padding the
whole batch only when a new row is longer than it); rows that no new request is waiting for are
dropped with ``index_select`` and all-padding columns are trimmed. Padding is masked and every row
has its own position ids, so a row's logits do not depend on its neighbours (up to float
summation order). Row ``r`` samples with its own stream of uniforms seeded exactly as
:class:`kit.rollout.backends.HFBackend` seeds it (:func:`request_seed`: base seed, prompt ids, how
many times that prompt was requested), so the engines and the HF backend give the same tokens for
the same requests. A row prefilled from a cached prefix (:meth:`RunningRows.add` with
``prefixes``) computes only its new tokens; fresh rows with one prompt (a group's first turns)
go through the layers once (:meth:`RunningRows._prefill`, bitwise the same results). The KV cache itself (buffer layers with free columns)
is :mod:`kit.rollout.kv_cache`; the decode forward :class:`kit.models.decode.Qwen3DecodeStep`.

Shapes: B rows, L cache columns (tokens), V vocabulary; per layer keys and values
(B, kv_heads, L, head_dim), mask (B, L).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from kit.models.decode import Qwen3DecodeStep
from kit.rollout.backends import Generation, sample_step, sampling_uniforms
from kit.rollout.kv_cache import BufferLayer, as_cache


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
class EngineRequest:
    """One generation request in the engine: its prompt, budget, sampling settings and seed, the
    caller's future, and the tokens and log-probs sampled so far (one row of :class:`RunningRows`)."""

    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop: frozenset[int]
    seed: int
    future: asyncio.Future | None = None
    out: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    ents: list[float] = field(default_factory=list)  # per token: entropy of its sampling distribution (nats)
    done: bool = False
    reported: bool = False
    u: list[float] | None = None  # the request's sampling stream (one uniform per new token)
    traj: int | None = None  # its trajectory's cohort id (kit.rollout.cohort); None: an unmanaged caller
    due: int = 0  # the logical step it may be admitted at (managed requests)

    def result(self) -> Generation:
        """The sampled turn as the ``Backend`` contract returns it (``"stop"`` when it ends on a stop id)."""
        reason = "stop" if self.out and self.out[-1] in self.stop else "length"
        return Generation(list(self.out), list(self.lps), reason, list(self.ents))


class RunningRows:
    """Running rows with one left-padded KV cache: (B, heads, L, dim) per layer; mask (B, L)."""

    def __init__(self, model: Any, pad_id: int, decode: Qwen3DecodeStep | None = None):
        self.model, self.pad_id, self.decode = model, pad_id, decode
        self.reqs: list[EngineRequest] = []
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.mask = torch.zeros((0, 0), dtype=torch.long)
        self.pos = torch.zeros((0, 1), dtype=torch.long)  # (B, 1) next position id
        self.last = torch.zeros((0, 1), dtype=torch.long)  # (B, 1) last sampled token
        # buffer layers of the last decode step; reused while ``self.kv`` is still their views
        self._layers: list[BufferLayer] | None = None
        self._layers_kv: list | None = None

    def __len__(self) -> int:
        """Live rows (finished rows may still sit in the batch until their slot is reused)."""
        return sum(not r.done for r in self.reqs)

    @property
    def physical(self) -> int:
        """Rows in the batch tensors, finished ones included (they cost compute per step)."""
        return len(self.reqs)

    def _sample(self, logits: torch.Tensor, reqs: list[EngineRequest]) -> torch.Tensor:
        """Append one token to every unfinished row of ``reqs``; return the (B, 1) tokens.

        Row ``r``'s ``t``-th token comes from the ``t``-th uniform of its stream
        (:func:`kit.rollout.backends.sample_step`: :func:`~kit.rollout.backends.sample_tokens`' tokens
        with their log-probs and entropies), vectorised over the batch.
        """
        temps = torch.tensor([r.temperature for r in reqs])
        top_ps = torch.tensor([r.top_p for r in reqs])
        u = torch.tensor([0.0 if r.done else r.u[len(r.out)] for r in reqs], dtype=torch.float64)
        tok, lp, ent = sample_step(logits.float(), temps, top_ps, u)
        toks, lps, ents = tok.tolist(), lp.tolist(), ent.tolist()
        for i, r in enumerate(reqs):
            if r.done:
                toks[i] = self.pad_id
                continue
            t = toks[i]
            r.out.append(t)
            r.lps.append(lps[i])
            r.ents.append(ents[i])
            r.done = t in r.stop or len(r.out) >= r.max_new or r.future.cancelled()  # caller gone: free the row
        return torch.tensor(toks, dtype=torch.long)[:, None]

    def add(self, reqs: list[EngineRequest], prefixes: list | None = None) -> None:
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

    def _prefill(self, reqs: list[EngineRequest]):
        """Prefill fresh rows, left-padded. With the lean forward, rows with the same prompt (a group's
        G or 2G first turns) go through the layers once: a row's keys and values depend only on its own
        ids and padding, which copies share; the LM head then runs on every request's row, as before
        (its matmul's rounding depends on how many rows it multiplies), so each logit is the same."""
        uniq: dict[tuple[int, ...], int] = {}
        inv = [uniq.setdefault(tuple(r.prompt_ids), len(uniq)) for r in reqs] if self.decode is not None \
            else list(range(len(reqs)))  # row -> its distinct prompt
        distinct = [reqs[inv.index(j)] for j in range(max(inv) + 1)]
        L = max(len(r.prompt_ids) for r in distinct)
        ids = torch.full((len(distinct), L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(distinct), L), dtype=torch.long)
        for i, r in enumerate(distinct):
            ids[i, L - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[i, L - len(r.prompt_ids):] = 1
        for r in reqs:
            r.u = sampling_uniforms(r.seed, r.max_new)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        idx = torch.tensor(inv) if len(distinct) < len(reqs) else None
        logits, kv = self._forward(ids, mask, pos, None, idx)
        if idx is not None:
            mask, kv = mask[idx], [(k[idx], v[idx]) for k, v in kv]
        return kv, mask, torch.tensor([[len(r.prompt_ids)] for r in reqs]), self._sample(logits, reqs)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, kv: list | None,
                 rows: torch.Tensor | None = None):
        """Prefill ``ids`` (B, T) after the cached ``kv`` (or none): last position's logits (B, V), or of
        ``rows`` (R,) only (lean forward), and the per-layer ``(keys, values)`` of cache and new tokens."""
        if self.decode is not None:  # the same logits without transformers' per-call overhead
            layers = as_cache(kv).layers if kv is not None else [DynamicLayer() for _ in self.model.model.layers]
            logits = self.decode(ids, pos, mask, layers, rows)
            return logits, [(layer.keys, layer.values) for layer in layers]
        res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                         past_key_values=as_cache(kv) if kv is not None else None)
        return res.logits[:, -1, :], [(layer.keys, layer.values) for layer in res.past_key_values.layers]

    def _prefill_cached(self, cached: list[tuple[EngineRequest, list]]):
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

    def _place(self, reqs: list[EngineRequest], kv, mask: torch.Tensor, new_pos: torch.Tensor, last: torch.Tensor) -> None:
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

    def _set_layers(self, layers: list[BufferLayer]) -> None:
        """The batch's cache is now ``layers`` (decode buffers; the next step writes into them)."""
        self._layers = layers
        self.kv = self._layers_kv = [(layer.keys, layer.values) for layer in layers]

    def _left_pad(self, n: int) -> None:
        self._set_layers([BufferLayer.stacked([(k, v)], k.shape[2] + n) for k, v in self.kv])
        self.mask = torch.cat([torch.zeros((self.mask.shape[0], n), dtype=torch.long), self.mask], dim=1)

    def _merge(self, reqs: list[EngineRequest], kv, mask: torch.Tensor, new_pos: torch.Tensor, last: torch.Tensor) -> None:
        if not self.reqs:
            self.reqs, self.kv, self.mask, self.pos, self.last = list(reqs), kv, mask, new_pos, last
            return
        La, Lb = self.mask.shape[1], mask.shape[1]
        Lm = max(La, Lb)

        def lpad(t: torch.Tensor, n: int) -> torch.Tensor:  # left-pad a (B, L) mask
            return torch.cat([torch.zeros((t.shape[0], n), dtype=t.dtype), t], dim=1) if n else t

        self._set_layers([BufferLayer.stacked([a, b], Lm) for a, b in zip(self.kv, kv, strict=True)])
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
        return ids, [(k[i:i + 1, :, cols], v[i:i + 1, :, cols]) for k, v in self.kv]  # indexing copies

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
            self._layers = [BufferLayer.around(k, v) for k, v in self.kv]
        mask = torch.cat([self.mask, torch.ones((len(self.reqs), 1), dtype=torch.long)], dim=1)
        if self.decode is not None:  # the same logits without transformers' per-call overhead
            logits = self.decode(self.last, self.pos, mask, self._layers)
        else:
            logits = self.model(input_ids=self.last, attention_mask=mask, position_ids=self.pos,
                                past_key_values=as_cache(self.kv, self._layers), use_cache=True).logits[:, -1, :]
        self.kv = self._layers_kv = [(layer.keys, layer.values) for layer in self._layers]
        self.mask = mask
        self.pos = self.pos + 1
        self.last = self._sample(logits, self.reqs)

    def collect_finished(self, keep_cache=None) -> list[EngineRequest]:
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
