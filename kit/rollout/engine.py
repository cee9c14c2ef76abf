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

This module is the scheduling: admission, when to prefill, decode, compact, and which requests
form a batch. The batch state both backends drive (prefill, slot placement, decode steps,
per-row sampling) is :class:`kit.rollout.batch_rows.RunningRows`; the KV cache in buffers with
free columns and the grouped-KV attention are :mod:`kit.rollout.kv_cache` (decode step 8.9 ->
5.0 ms, collect 2.92 -> 2.17 s on a stage-1 rollout of the tiny policy, 6 prompts x 16, 2
cores). The decode forward itself is :class:`kit.models.decode.Qwen3DecodeStep` (the same
logits bitwise without transformers' per-call overhead; 5.2 -> 3.1 CPU ms per decode step at 32
rows), prefills too: a stage-1 RoC step of the SFT policy (6 x 16 rollouts, 1 thread,
benchmarks/rl_step_profile.py) went 1.67 -> 1.33 CPU s of rollout, 2.15 -> 1.80 CPU s and 2.53 ->
2.12 s wall per step, same trajectories. Row ``r`` samples with its own stream of uniforms seeded
exactly as :class:`kit.rollout.backends.HFBackend` seeds it (:func:`kit.rollout.batch_rows.request_seed`), so both
engines and the HF backend give the same tokens for the same requests. Prefix reuse (continuous
engine): a finished row's KV is kept (LRU, ``slots`` entries), and a request whose prompt starts
with kept ids (a trajectory's next turn: context, turn, tool feedback) prefills only its new
tokens. The plain loop re-prefills every turn, as a ``model.generate`` loop does;
``prefix_cache=False`` gives the scheduling effect alone.

Not done: no chunked prefill, no preemption (admission never over-commits), one model forward at
a time per process, CPU float32 only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from kit.models.decode import Qwen3DecodeStep, supports
from kit.rollout.backends import Generation, HFBackend, check_request
from kit.rollout.batch_rows import EngineRequest, RunningRows, request_seed
from kit.rollout.cohort import TRAJECTORY, Cohort, gather_trajectories
from kit.rollout.kv_cache import use_gqa_attention
from kit.rollout.loop import run_trajectory

__all__ = ["BatchLoopBackend", "ContinuousBatchingEngine", "make_backend", "rollout_plain"]


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
        self._pending: list[EngineRequest] = []
        #: the trajectories of the rollouts in flight and the logical clock (kit.rollout.cohort)
        self.cohort = Cohort()
        self._lock = threading.Lock()
        self._worker: asyncio.Task | None = None
        #: tokens: sampled tokens; steps: decode forwards; row_steps: rows x steps (padding rows
        #: included); kv_cols: cache columns (padding included) summed over steps; prefills;
        #: busy_s: seconds inside model forwards and sampling; stall_s: seconds the schedule waited
        #: for a tool call that was due by the logical clock (wall time only, kit.rollout.cohort).
        self.stats = {"tokens": 0, "steps": 0, "row_steps": 0, "kv_cols": 0, "prefills": 0, "busy_s": 0.0,
                      "stall_s": 0.0}

    def _make(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> EngineRequest | Generation:
        check_request(prompt_ids, max_new_tokens, temperature, top_p)
        room = self.max_context - len(prompt_ids)
        if room <= 0:
            raise ValueError(f"{type(self).__name__}: prompt of {len(prompt_ids)} tokens fills the context of {self.max_context}")
        traj = TRAJECTORY.get()
        managed = traj is not None and traj in self.cohort.due
        if min(max_new_tokens, room) == 0:
            if not managed:
                self._seen_count(prompt_ids)
            return Generation([], [], "length")
        req = EngineRequest(list(prompt_ids), min(max_new_tokens, room), float(temperature), float(top_p),
                            frozenset(stop_ids), -1, asyncio.get_running_loop().create_future())
        if managed:  # seeded at admission, in (due, trajectory) order (kit.rollout.cohort)
            req.traj, req.due = traj, self.cohort.submitted(traj)
        else:
            req.seed = request_seed(self.seed, prompt_ids, self._seen_count(prompt_ids))
        return req

    def _seen_count(self, prompt_ids) -> int:
        """How many times this exact prompt was seeded before (then counts this one)."""
        key = json.dumps(list(prompt_ids))
        k = self._seen.get(key, 0)
        self._seen[key] = k + 1
        return k

    def _seed_in_order(self, reqs: list[EngineRequest]) -> None:
        """Give managed requests their sampling seeds, in the order they are listed (admission order)."""
        for r in reqs:
            if r.seed < 0:
                r.seed = request_seed(self.seed, r.prompt_ids, self._seen_count(r.prompt_ids))

    def _ready(self) -> list[EngineRequest]:
        """Pending requests that may be scheduled now: managed ones due by the clock, in (due,
        trajectory) order, then unmanaged ones in arrival order (a cancelled one is dropped)."""
        self._pending = [r for r in self._pending if not r.future.cancelled()]
        clock = self.cohort.clock
        managed = sorted((r for r in self._pending if r.traj is not None and r.due <= clock), key=lambda r: (r.due, r.traj))
        return managed + [r for r in self._pending if r.traj is None]

    def _next_event(self) -> int | None:
        """The earliest clock value after now at which a trajectory or a pending request is due."""
        later = [r.due for r in self._pending if r.traj is not None and r.due > self.cohort.clock]
        nxt = self.cohort.next_due()
        if nxt is not None:
            later.append(nxt)
        return min(later) if later else None

    def kick(self) -> None:
        """Wake (or restart) the worker: a trajectory joined, submitted or left."""
        self.cohort.wake()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._pending or self.cohort.waiting():
            self._ensure_worker()

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

    def _finish(self, reqs: list[EngineRequest]) -> None:
        for r in reqs:
            self.stats["tokens"] += len(r.out)
            if not r.future.done():
                r.future.set_result(r.result())

    def _fail(self, reqs: list[EngineRequest], exc: BaseException) -> None:
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
            consulted, unless a row finishes or a trajectory is due first.
        tool_delay_steps: the tool latency the schedule assumes, in decode steps: a trajectory
            whose turn ends at step ``c`` has its next turn admitted at step ``c + tool_delay_steps``
            (the other rows decode meanwhile; the engine waits there if its tool call is slower).
            The schedule, and so every float, is a function of the requests, never of the wall
            clock (:mod:`kit.rollout.cohort`).
        prefix_cache: keep the KV of up to ``slots`` finished rows; a request whose prompt
            starts with one (the next turn of a trajectory: context + turn + tool feedback)
            prefills only the new tokens. Off: every turn re-prefills its whole context.
        lean_decode: decode with :class:`kit.models.decode.Qwen3DecodeStep` where it computes
            the model's forward exactly (same logits, fewer CPU seconds); False: always the
            transformers forward (benchmarks/rollout_bench.py ``--compare-decode`` times both).
    """

    def __init__(self, model: Any, tokenizer: Any, slots: int = 64, seed: int = 0, max_context: int | None = None,
                 kv_budget_tokens: int | None = None, max_steps_per_call: int = 8, prefix_cache: bool = True,
                 lean_decode: bool = True, tool_delay_steps: int = 8):
        super().__init__(model, tokenizer, seed, max_context, lean_decode)
        if tool_delay_steps < 0:
            raise ValueError(f"tool_delay_steps must be >= 0, got {tool_delay_steps}")
        self.tool_delay_steps = tool_delay_steps
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self.kv_budget = kv_budget_tokens
        self.max_steps_per_call = max_steps_per_call
        self._rows: RunningRows | None = None
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

    def _admissible(self, rows: RunningRows, ready: list[EngineRequest]) -> list[EngineRequest]:
        """The prefix of ``ready`` that fits the free slots (and the KV budget), taken off the queue."""
        take: list[EngineRequest] = []
        reserved = sum(len(r.prompt_ids) + r.max_new for r in rows.reqs if not r.done)
        for r in ready:
            if len(rows) + len(take) >= self.slots:
                break
            need = len(r.prompt_ids) + r.max_new
            if self.kv_budget is not None and reserved + need > self.kv_budget and (len(rows) or take):
                break
            take.append(r)
            reserved += need
        taken = {id(r) for r in take}
        self._pending = [r for r in self._pending if id(r) not in taken]
        self._seed_in_order(take)
        return take

    def _advance(self, rows: RunningRows, admit: list[EngineRequest], max_steps: int,
                 soon: int = 0) -> tuple[list[EngineRequest], int]:
        """Worker thread: prefill ``admit``, then decode until a row ends or ``max_steps`` steps.

        Every decision here follows from the rows and the arguments (kit.rollout.cohort): the
        step count is fixed by the caller from the logical clock, so when the loop stops does not
        depend on when a tool call returns. Only unmanaged requests (no cohort) may stop it early
        to take a free slot. ``soon``: requests due within these steps (they will want the slots
        of finished rows). Returns the finished requests and the decode steps run.
        """
        t0 = time.perf_counter()
        n = 0
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
            while not done and len(rows) and n < max_steps:
                rows.step()
                n += 1
                self.stats["steps"] += 1
                self.stats["row_steps"] += rows.physical
                self.stats["kv_cols"] += rows.mask.shape[1]
                self.occupancy.append(len(rows))
                done = rows.collect_finished(keep)
                if len(rows) < self.slots and any(r.traj is None for r in self._pending):
                    break  # an unmanaged request waits for a free slot (arrival-time scheduling)
            # finished rows keep their slot (and cost a row per step) until a new row takes it;
            # when few requests are due soon, drop them so the batch shrinks
            dead = rows.physical - len(rows)
            if dead and (not len(rows) or (dead * 4 >= rows.physical and soon < dead)):
                rows.compact()
        self.stats["busy_s"] += time.perf_counter() - t0
        return done, n

    async def _serve(self) -> None:
        rows = self._rows = RunningRows(self.model, self.pad_id, self.decode)
        co = self.cohort
        while True:  # the worker ends when idle; generate() and kick() start a new one
            if co.blocked():  # a trajectory due now is still in its tool call: wait for it (wall time only)
                t0 = time.perf_counter()
                await co.changed()
                self.stats["stall_s"] += time.perf_counter() - t0
                continue
            ready = self._ready()
            if not len(rows) and not ready:
                nxt = self._next_event()
                if nxt is None:
                    if co.waiting():  # cannot happen: a waiting trajectory is due at some step
                        await co.changed()
                        continue
                    return
                co.clock = nxt  # nothing to decode until then: logical time jumps
                continue
            admit = self._admissible(rows, ready)
            nxt = self._next_event()
            steps = self.max_steps_per_call if nxt is None else max(1, min(self.max_steps_per_call, nxt - co.clock))
            horizon = co.clock + steps
            soon = co.due_within(horizon) + sum(r.traj is None or r.due <= horizon for r in self._pending)
            try:
                done, n = await asyncio.to_thread(self._advance, rows, admit, steps, soon)
            except Exception as exc:  # every row in flight fails with the error
                failed = [r for r in admit + rows.reqs if not r.future.done()]  # a finished row's caller has moved on
                self._fail(failed, exc)
                for r in failed:
                    if r.traj is not None:
                        co.finished(r.traj, 0)
                rows = self._rows = RunningRows(self.model, self.pad_id, self.decode)
                continue
            co.clock += n
            for r in done:
                if r.traj is not None:
                    co.finished(r.traj, self.tool_delay_steps)
            self._finish(done)


class BatchLoopBackend(_BackendBase):
    """The plain batch loop (``rollout.scheduler = "static"``): whole batches, slowest row last.

    Inside a cohort (:func:`kit.rollout.cohort.gather_trajectories`, as :func:`rollout_plain` runs
    it) a batch starts only when every live trajectory of the cohort has submitted its next turn,
    so the batch waits for all tool calls of the previous one; the requests are batched in
    trajectory order; all rows decode until the slowest is done (finished rows keep occupying the
    batch, as with ``model.generate``). Outside a cohort it batches what is pending after
    ``gather_s`` seconds of quiet (arrival-time batching: not repeatable under load).

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

    def _decode(self, batch: list[EngineRequest]) -> None:
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            rows = RunningRows(self.model, self.pad_id, self.decode)
            rows.add(batch)
            self.stats["prefills"] += 1
            while not all(r.done for r in batch):
                rows.step()
                self.stats["steps"] += 1
                self.stats["row_steps"] += len(batch)
                self.stats["kv_cols"] += rows.mask.shape[1]
        self.stats["busy_s"] += time.perf_counter() - t0

    async def _serve(self) -> None:
        co = self.cohort
        while True:  # ends when no batch is ready; generate() and kick() start a new one
            self._pending = [r for r in self._pending if not r.future.cancelled()]
            if len(co):  # a cohort: wait until every live trajectory has submitted
                if co.waiting():
                    return
                batch = sorted(self._pending, key=lambda r: (r.traj is None, r.traj if r.traj is not None else 0))
            else:
                n = -1
                while n != len(self._pending):
                    n = len(self._pending)
                    await asyncio.sleep(self.gather_s)
                batch = list(self._pending)
            if not batch:
                return
            batch = batch[: self.batch_size]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            self._seed_in_order(batch)
            try:
                await asyncio.to_thread(self._decode, batch)
            except Exception as exc:
                self._fail(batch, exc)
            else:
                self._finish(batch)
            for r in batch:  # answered (or failed): each trajectory's next request, or its end, is due
                if r.traj is not None:
                    co.finished(r.traj, 0)


async def rollout_plain(backend: BatchLoopBackend, tokenizer: Any, problems: Sequence[str], executor: Any, n: int,
                        cfg: Any = None, **kwargs: Any) -> list[list[Any]]:
    """The plain loop over ``P x n`` trajectories in cohorts of ``backend.batch_size``.

    Each cohort runs to its slowest trajectory before the next starts. Same arguments and
    result as :func:`kit.rollout.loop.rollout_batch` (``out[p][g]``, problem order).
    """
    flat_problems = [p for p in problems for _ in range(n)]
    flat: list[Any] = []
    for start in range(0, len(flat_problems), backend.batch_size):
        chunk = flat_problems[start:start + backend.batch_size]
        flat += await gather_trajectories(backend, [
            (lambda p=p: run_trajectory(backend, tokenizer, p, executor, cfg, **kwargs)) for p in chunk])
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
        return ContinuousBatchingEngine(model, tokenizer, slots=rollout_cfg.batch_size, seed=seed,
                                        tool_delay_steps=getattr(rollout_cfg, "tool_delay_steps", 8))
    if rollout_cfg.scheduler == "static":
        return HFBackend(model, tokenizer, batch_size=rollout_cfg.batch_size, seed=seed)
    raise ValueError(f"unknown rollout.scheduler {rollout_cfg.scheduler!r}")
