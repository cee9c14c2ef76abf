"""Generation backends behind one small interface (rStar2-Agent §3.2: the rollout engine).

Every backend implements::

    async def generate(prompt_ids: list[int], max_new_tokens: int, temperature: float,
                       top_p: float, stop_ids: Sequence[int]) -> Generation

``Generation.token_ids`` are the sampled ids, the stop id included when generation stopped on
one; ``finish_reason`` is ``"stop"`` (ended with a stop id) or ``"length"`` (``max_new_tokens``
reached, or the model's context is full); ``logprobs[i]`` is ``log softmax(logits / T)`` of the
sampled token ``i`` (``T = 1`` when greedy), the quantity VERL's actor recomputes as the old
log-prob, or ``None`` when the backend cannot give it.

Backends here:
    * :class:`ScriptedBackend` replays fixed model texts (tests, demos).
    * :class:`HFBackend` the tiny model on CPU: a micro-batching engine that gathers the pending
      requests of many concurrent trajectories and decodes them together with a KV cache.
    * :class:`OpenAIBackend` an OpenAI-compatible ``/v1/completions`` server (SGLang, vLLM) with
      the released rStar2-Agent-14B, token ids in and (when the server returns them) out.
The continuous-batching training engine (``kit.rollout.engine``) and VERL's SGLang servers
(``kit.bridge.agent_loop``) implement the same interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from kit import prompts
from kit.rollout.cohort import TRAJECTORY, Cohort


@dataclass(frozen=True)
class Generation:
    """One model turn: sampled ids (stop id included), their log-probs, and why it ended.

    ``entropy[i]`` (nats) is the entropy of the distribution token ``i`` was drawn from, the
    tempered ``softmax(logits / T)`` before the nucleus cut (the one ``logprobs`` are read from;
    :func:`token_entropy`), or ``None`` when the backend cannot give it (scripted, OpenAI-compatible
    servers and VERL's servers return log-probs only).
    """

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: Literal["stop", "length"]
    entropy: list[float] | None = None

    def __post_init__(self):
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Generation: {len(self.logprobs)} logprobs for {len(self.token_ids)} tokens")
        if self.entropy is not None and len(self.entropy) != len(self.token_ids):
            raise ValueError(f"Generation: {len(self.entropy)} entropies for {len(self.token_ids)} tokens")


@runtime_checkable
class Backend(Protocol):
    """Anything that samples one continuation of a token prompt (see the module docstring)."""

    async def generate(self, prompt_ids: list[int], max_new_tokens: int, temperature: float, top_p: float,
                       stop_ids: Sequence[int]) -> Generation: ...


def check_request(prompt_ids: Sequence[int], max_new_tokens: int, temperature: float, top_p: float) -> None:
    """Reject a generation request every backend would fail on (shared by the backends here and
    :mod:`kit.rollout.engine`).

    Raises:
        ValueError: empty prompt, negative ``max_new_tokens``, or sampling settings out of range.
    """
    if not prompt_ids:
        raise ValueError("generate: empty prompt_ids")
    if max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"generate: need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")


def _cut_at_stop(ids: list[int], lps: list[float] | None, max_new: int, stop: set[int]):
    """Keep ids up to and including the first stop id, and at most ``max_new`` of them."""
    for i, t in enumerate(ids[:max_new]):
        if t in stop:
            return ids[: i + 1], (lps[: i + 1] if lps is not None else None), "stop"
    return ids[:max_new], (lps[:max_new] if lps is not None else None), "length"


class ScriptedBackend:
    """Replays scripted model turns as token ids (for tests and notebook demos).

    Args:
        tokenizer: the tokenizer that encodes the scripted texts.
        script: either a list of turn texts, consumed in order across all calls, or a function
            ``(context_text) -> turn text`` given the decoded prompt (for many concurrent
            trajectories). A text gets ``<|im_end|>`` appended unless it already holds a stop
            token; generation is cut at ``max_new_tokens`` like a real model.
        logprob: the log-prob reported for every scripted token (``None``: report none).
    Raises:
        RuntimeError: when a list script runs out.
    """

    def __init__(self, tokenizer: Any, script: Sequence[str] | Callable[[str], str], logprob: float | None = -0.5):
        self.tokenizer = tokenizer
        self.script = script if callable(script) else list(script)
        self.logprob = logprob
        self.calls: list[dict[str, Any]] = []  # every request, for assertions

    async def generate(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> Generation:
        check_request(prompt_ids, max_new_tokens, temperature, top_p)
        self.calls.append({"prompt_ids": list(prompt_ids), "max_new_tokens": max_new_tokens})
        if callable(self.script):
            text = self.script(self.tokenizer.decode(prompt_ids))
        else:
            if not self.script:
                raise RuntimeError("ScriptedBackend: the script ran out of turns")
            text = self.script.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        stop = set(stop_ids)
        if not stop & set(ids):
            ids = ids + [self.tokenizer.convert_tokens_to_ids(prompts.IM_END)]
        lps = [float(self.logprob)] * len(ids) if self.logprob is not None else None
        await asyncio.sleep(0)  # yield like a real engine, so trajectories interleave
        ids, lps, reason = _cut_at_stop(ids, lps, max_new_tokens, stop)
        return Generation(ids, lps, reason)


# --------------------------------------------------------------------------- HF micro-batching engine


@dataclass
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    stop_ids: frozenset[int]
    seed: int
    future: asyncio.Future
    traj: int | None = None  # its trajectory's cohort id (kit.rollout.cohort); None: an unmanaged caller


class HFBackend:
    """The tiny model on CPU: micro-batched sampling with a KV cache for concurrent trajectories.

    Requests of one cohort (:func:`kit.rollout.cohort.gather_trajectories`, as
    :func:`kit.rollout.rollout_batch` runs them) are batched when every live trajectory has
    submitted its next turn, in trajectory order (up to ``batch_size`` a batch), so batches do not
    depend on tool latency; requests from callers outside a cohort are gathered after ``gather_s``
    seconds of quiet. Batches are left-padded and decoded together in a worker thread, so the event loop keeps running tool
    calls meanwhile. Each row has its own token budget, temperature, top-p and stop ids; a row
    stops on a stop id (kept) or its budget, the batch when every row has stopped. Requests that
    arrive during a batch wait for the next one (use ``kit.rollout.engine`` for continuous batching).

    Sampling is reproducible: row ``r`` draws its tokens from its own stream of uniforms
    (:func:`sampling_uniforms`) seeded by ``(seed, prompt ids, how many times this prompt was
    requested before)``, by inverse CDF (:func:`sample_tokens`), so the result does not
    depend on which other requests share the batch (up to float summation order in the batched
    matmul; identical in practice on CPU float32).

    Args:
        model: a causal LM (``Qwen3ForCausalLM``), eval mode.
        tokenizer: its tokenizer (for ``pad_token_id``).
        batch_size: the most rows decoded together.
        seed: base seed.
        gather_s: how long to wait for more requests before starting a batch (seconds).
        max_context: prompt + new tokens limit; default ``model.config.max_position_embeddings``.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, seed: int = 0, gather_s: float = 0.002,
                 max_context: int | None = None):
        self.model = model
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.batch_size = batch_size
        self.seed = seed
        self.gather_s = gather_s
        self.max_context = max_context or int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self._pending: list[_Request] = []
        self._seen: dict[bytes, int] = {}
        self._worker: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._lock = threading.Lock()  # one forward at a time even across event loops
        self.stats = {"batches": 0, "rows": 0, "tokens": 0, "seconds": 0.0}
        #: the trajectories of the rollouts in flight (kit.rollout.cohort)
        self.cohort = Cohort()

    async def generate(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> Generation:
        check_request(prompt_ids, max_new_tokens, temperature, top_p)
        room = self.max_context - len(prompt_ids)
        if room <= 0:
            raise ValueError(f"HFBackend: prompt of {len(prompt_ids)} tokens fills the context of {self.max_context}")
        traj = TRAJECTORY.get()
        managed = traj is not None and traj in self.cohort.due
        loop = asyncio.get_running_loop()
        req = _Request(list(prompt_ids), min(max_new_tokens, room), float(temperature), float(top_p),
                       frozenset(stop_ids), -1, loop.create_future())
        if req.max_new_tokens == 0:
            if not managed:
                self._seed(req)
            return Generation([], [], "length")
        if managed:  # seeded when batched, in trajectory order (kit.rollout.cohort)
            req.traj = traj
            self.cohort.submitted(traj)
        else:
            self._seed(req)
        self._pending.append(req)
        self.kick()
        return await req.future

    def _seed(self, req: _Request) -> None:
        """``req.seed`` from ``(seed, prompt ids, how many times this prompt was seeded before)``."""
        key = hashlib.blake2b(json.dumps(req.prompt_ids).encode(), digest_size=8).digest()
        k = self._seen.get(key, 0)
        self._seen[key] = k + 1
        req.seed = int.from_bytes(hashlib.blake2b(key + f"{self.seed}:{k}".encode(), digest_size=8).digest(), "little") >> 1

    def kick(self) -> None:
        """Wake (or start) the batching task: a request arrived or a trajectory joined or left."""
        self.cohort.wake()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if not self._pending:
            return
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._serve())
        self._wake.set()

    async def aclose(self) -> None:
        """Stop the batching task of the running loop (idempotent; ``generate`` starts a new one).

        Call it when done with a backend inside a loop that keeps running: a dropped backend's
        pending task is garbage-collected and asyncio prints ``Task was destroyed but it is
        pending!`` into the notebook cell (issue #20; notebook 08 made one backend per benchmark).
        """
        worker, self._worker = self._worker, None
        if worker is not None and not worker.done() and worker.get_loop() is asyncio.get_running_loop():
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self.cohort):  # a cohort: one round when every live trajectory has submitted, in trajectory order
                if self.cohort.waiting():
                    continue
                rnd = sorted(self._pending, key=lambda r: (r.traj is None, r.traj if r.traj is not None else 0))
                self._pending = []
            else:  # unmanaged callers: what arrives within a quiet window (arrival-time batching)
                n = -1
                while n != len(self._pending):  # let concurrent trajectories submit before batching
                    n = len(self._pending)
                    await asyncio.sleep(self.gather_s)
                rnd, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size:]
                if self._pending:
                    self._wake.set()
            for start in range(0, len(rnd), self.batch_size):
                await self._run_batch(rnd[start:start + self.batch_size])

    async def _run_batch(self, batch: list[_Request]) -> None:
        """Decode one batch in a worker thread and answer its requests (an error goes to each)."""
        for r in batch:
            if r.seed < 0:
                self._seed(r)
        try:
            outs = await asyncio.to_thread(self._decode, batch)
        except Exception as exc:  # hand the error to every waiting trajectory
            outs = [exc] * len(batch)
        for r, g in zip(batch, outs, strict=True):
            if r.traj is not None:
                self.cohort.finished(r.traj, 0)
            if not r.future.done():
                if isinstance(g, Exception):
                    r.future.set_exception(g)
                else:
                    r.future.set_result(g)

    def _decode(self, batch: list[_Request]) -> list[Generation]:
        t0 = time.perf_counter()
        dev = next(self.model.parameters()).device
        with self._lock, torch.inference_mode():
            B = len(batch)
            L = max(len(r.prompt_ids) for r in batch)
            ids = torch.full((B, L), self.pad_id, dtype=torch.long)
            attn = torch.zeros((B, L), dtype=torch.long)
            for i, r in enumerate(batch):  # left padding
                ids[i, L - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
                attn[i, L - len(r.prompt_ids):] = 1
            ids, attn = ids.to(dev), attn.to(dev)
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            temps = torch.tensor([r.temperature for r in batch])
            top_ps = torch.tensor([r.top_p for r in batch])
            streams = [sampling_uniforms(r.seed, r.max_new_tokens) for r in batch]
            budget = [r.max_new_tokens for r in batch]
            out_ids: list[list[int]] = [[] for _ in batch]
            out_lp: list[list[float]] = [[] for _ in batch]
            out_h: list[list[float]] = [[] for _ in batch]
            done = [False] * B
            past = None
            step_ids, step_pos = ids, pos
            while not all(done):
                res = self.model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos,
                                 past_key_values=past, use_cache=True, logits_to_keep=1)
                past = res.past_key_values
                logits = res.logits[:, -1, :].float().cpu()  # (B, V); sampling on the CPU
                u = torch.tensor([0.0 if done[i] else streams[i][len(out_ids[i])] for i in range(B)],
                                 dtype=torch.float64)
                tok, logp = sample_tokens(logits, temps, top_ps, u)
                toks, lps = tok.tolist(), logp.gather(-1, tok[:, None]).squeeze(-1).tolist()
                ents = token_entropy(logp).tolist()
                for i, r in enumerate(batch):
                    if done[i]:
                        toks[i] = self.pad_id
                        continue
                    t = toks[i]
                    out_ids[i].append(t)
                    out_lp[i].append(lps[i])
                    out_h[i].append(ents[i])
                    if t in r.stop_ids or len(out_ids[i]) >= budget[i]:
                        done[i] = True
                step_ids = torch.tensor(toks, dtype=torch.long)[:, None].to(dev)
                attn = torch.cat([attn, torch.ones((B, 1), dtype=torch.long, device=dev)], dim=1)
                step_pos = step_pos[:, -1:] + 1
        self.stats["batches"] += 1
        self.stats["rows"] += B
        self.stats["tokens"] += sum(len(o) for o in out_ids)
        self.stats["seconds"] += time.perf_counter() - t0
        return [Generation(o, lp, "stop" if o and o[-1] in r.stop_ids else "length", h)
                for o, lp, h, r in zip(out_ids, out_lp, out_h, batch, strict=True)]


def sampling_uniforms(seed: int, n: int) -> list[float]:
    """The ``n`` uniform draws in [0, 1) of one request's sampling stream (one per new token).

    Every backend that samples locally (:class:`HFBackend`, ``kit.rollout.engine``) draws token
    ``t`` of a request from its ``t``-th uniform, so a request samples the same tokens whatever
    batch it shares, on any backend (up to float summation order in the logits).
    """
    return torch.rand(max(n, 0), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).tolist()


def sample_tokens(logits, temps, top_ps, u):
    """Sample one token per row by inverse CDF (temperature, then nucleus); greedy where T = 0.

    Args:
        logits: (B, V) float logits.
        temps: (B,) temperatures (0 = greedy).
        top_ps: (B,) nucleus mass.
        u: (B,) float64 uniforms in [0, 1), the rows' next draws of :func:`sampling_uniforms`.
    Returns:
        ``(tokens, logp)``: (B,) long tokens and (B, V) log-probabilities of the tempered
        distribution before the nucleus cut (what the trainer's importance ratio uses).
    """
    tok, logp, _ = _draw(logits, temps, top_ps, u)
    return tok, logp


def sample_step(logits, temps, top_ps, u):
    """:func:`sample_tokens` with what the engine keeps of each row, in one pass: the same tokens,
    each token's log-prob and :func:`token_entropy` (the probabilities exponentiated once for both).

    Args:
        logits, temps, top_ps, u: as :func:`sample_tokens`.
    Returns:
        ``(tokens, token_logp, entropy)``, each (B,): long tokens, ``logp[b, tokens[b]]``, nats.
    """
    tok, logp, probs = _draw(logits, temps, top_ps, u)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1), torch.special.entr(probs).sum(-1)


def _draw(logits, temps, top_ps, u):
    """:func:`sample_tokens`' draw; also returns ``logp.exp()``. The division by ``T`` is skipped when every
    ``T`` is 1 (``x / 1 == x`` exactly) and the argmax when no row is greedy: the same tokens either way."""
    greedy = temps == 0
    any_greedy = bool(greedy.any())
    if any_greedy or not bool((temps == 1).all()):
        logits_t = logits / torch.where(greedy, torch.ones_like(temps), temps)[:, None]
    else:
        logits_t = logits
    logp = torch.log_softmax(logits_t, dim=-1)
    probs = logp.exp()
    cdf = _top_p_filter(probs, top_ps).double().cumsum(-1)
    x = (u.double() * cdf[:, -1])[:, None]
    drawn = torch.searchsorted(cdf, x, right=True).squeeze(-1).clamp(max=logits.shape[-1] - 1)
    return (torch.where(greedy, logits.argmax(-1), drawn) if any_greedy else drawn), logp, probs


def token_entropy(logp: torch.Tensor) -> torch.Tensor:
    """(B,) entropy in nats of each row of ``logp`` (B, V) log-probabilities: ``-sum p log p``
    (0 where ``p = 0``). Of :func:`sample_tokens`'s ``logp``: the tempered distribution the token
    was drawn from, before the nucleus cut; on a greedy row (T = 0) the untempered one. One pass
    over the (B, V) logits the step has already computed (the rollout's per-token entropy, which
    ``kit.records`` stores)."""
    return torch.special.entr(logp.exp()).sum(-1)


def _top_p_filter(probs, top_p):
    """Zero the tail of each row's distribution beyond cumulative mass ``top_p`` (nucleus).

    probs: (B, V) rows summing to 1; top_p: (B,). Returns (B, V), not renormalised
    (``torch.multinomial`` accepts unnormalised weights). The most likely token is always kept.
    """
    if bool((top_p >= 1).all()):
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    keep_sorted = before < top_p[:, None]
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return probs * keep


# --------------------------------------------------------------------------- OpenAI-compatible server


class OpenAIBackend:
    """An OpenAI-compatible ``/v1/completions`` endpoint (SGLang or vLLM serving a checkpoint).

    The prompt is sent as token ids (``"prompt": [ids]``) with ``stop_token_ids``,
    ``skip_special_tokens=false``, ``logprobs=1`` and the vLLM flags ``return_token_ids`` /
    ``return_tokens_as_token_ids``. Output ids are read, in this order of preference, from
    ``choice.token_ids``, from ``logprobs.tokens`` written as ``"token_id:<n>"``, else by
    tokenizing ``choice.text`` (re-tokenized text may differ from the sampled ids: run
    :func:`kit.rollout.audit.audit_trajectory` to see it). A stop id that the server strips
    from the text is appended when ``finish_reason == "stop"`` (the id in ``stop_reason`` when the server
    names it, as vLLM does, else the first stop id).

    Args:
        base_url: e.g. ``http://127.0.0.1:30000/v1``.
        model: the served model name.
        tokenizer: for the text fallback and the stop token.
        timeout_s: HTTP timeout per request (seconds).
        api_key: sent as a bearer token when given.
        token_id_flags: send vLLM's ``return_token_ids`` / ``return_tokens_as_token_ids``; turn
            off for a server that rejects unknown request fields.
        extra_body: more request fields (e.g. ``{"top_k": 20}``).
    Raises:
        RuntimeError: (from ``generate``) an HTTP error or a reply without choices, with the
            server's message.
    """

    def __init__(self, base_url: str, model: str, tokenizer: Any, timeout_s: float = 600.0, api_key: str | None = None,
                 token_id_flags: bool = True, extra_body: dict[str, Any] | None = None):
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.token_id_flags = token_id_flags
        self.extra_body = dict(extra_body or {})

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(payload).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{self.url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
        except urllib.error.URLError as exc:
            raise RuntimeError(f"{self.url}: {exc.reason}") from exc

    async def generate(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> Generation:
        check_request(prompt_ids, max_new_tokens, temperature, top_p)
        if max_new_tokens == 0:
            return Generation([], [], "length")
        payload = {
            "model": self.model, "prompt": list(prompt_ids), "max_tokens": int(max_new_tokens),
            "temperature": float(temperature), "top_p": float(top_p), "stop_token_ids": list(stop_ids),
            "skip_special_tokens": False, "include_stop_str_in_output": True, "logprobs": 1,
            "n": 1, **self.extra_body,
        }
        if self.token_id_flags:
            payload.update(return_token_ids=True, return_tokens_as_token_ids=True)
        reply = await asyncio.to_thread(self._post, payload)
        choices = reply.get("choices") or []
        if not choices:
            raise RuntimeError(f"{self.url}: reply without choices: {json.dumps(reply)[:300]}")
        return self._parse(choices[0], max_new_tokens, stop_ids)

    def _parse(self, choice: dict[str, Any], max_new: int, stop_ids: Sequence[int]) -> Generation:
        lp_obj = choice.get("logprobs") or {}
        lps = lp_obj.get("token_logprobs")
        toks = lp_obj.get("tokens") or []
        if choice.get("token_ids") is not None:
            ids = [int(t) for t in choice["token_ids"]]
        elif toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
            ids = [int(t.split(":", 1)[1]) for t in toks]
        else:
            ids = self.tokenizer.encode(choice.get("text") or "", add_special_tokens=False)
            lps = None  # log-probs of the server's tokens do not line up with re-tokenized ids
        if lps is not None and len(lps) != len(ids):
            lps = None
        if lps is not None:
            lps = [float(x) if x is not None and math.isfinite(x) else 0.0 for x in lps]
        stop = set(stop_ids)
        if choice.get("finish_reason") == "stop" and not (ids and ids[-1] in stop) and stop_ids:
            hit = choice.get("stop_reason")  # vLLM: the stop token id that matched
            ids = ids + [int(hit) if isinstance(hit, int) and hit in stop else int(stop_ids[0])]
            lps = lps + [0.0] if lps is not None else None
        ids, lps, reason = _cut_at_stop(ids, lps, max_new, stop)
        return Generation(ids, lps, reason)
