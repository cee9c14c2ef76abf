"""The async client: central queue, batching send workers, back-pressure (rStar2-Agent §3.1).

``await pool.run(call)`` puts the call on one bounded asyncio queue (a full queue makes the
caller wait: back-pressure). ``send_workers`` sender tasks each take up to ``batch_size``
queued calls at once and hand the batch to the executor: the local warm workers
(:class:`~kit.sandbox.workers.LocalExecutor`) or Ray actors on other machines
(:mod:`kit.bridge.ray_sandbox`, ``backend="ray"``, registered by that module), behind the same API. Every call's future is
resolved: with a result, or with ``infra_error`` if the sandbox itself fails or closes.

Example:
    >>> async with SandboxPool(SandboxConfig(num_workers=2)) as pool:
    ...     r = await pool.run(ToolCall("x = 2\\nx + 1"))
    >>> r.value
    '3'
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kit.config import SandboxConfig, check_limits
from kit.sandbox.types import FunctionCall, ToolCall, ToolResult
from kit.sandbox.workers import LocalExecutor

Call = ToolCall | FunctionCall | str
#: executor factories by ``SandboxConfig.backend``, called as ``factory(cfg, preload=...)``. The
#: sandbox never imports Ray: :mod:`kit.bridge.ray_sandbox` adds ``"ray"`` when it is imported
#: (:func:`register_executor`).
EXECUTORS: dict[str, Callable[..., Any]] = {"local": LocalExecutor}


def register_executor(backend: str, factory: Callable[..., Any]) -> None:
    """Make ``SandboxConfig(backend=backend)`` pools use ``factory(cfg, preload=...)`` as executor."""
    EXECUTORS[backend] = factory


def _as_call(c: Call) -> ToolCall | FunctionCall:
    return ToolCall(c) if isinstance(c, str) else c


class SandboxPool:
    """Warm sandbox workers behind an async queue. Use ``async with SandboxPool(cfg) as pool``.

    A pool belongs to the event loop that started it; any number of coroutines of that loop
    may call it concurrently. From threads or other loops use :class:`SyncSandboxPool`.

    Args:
        cfg: the ``[sandbox]`` config section.
        preload: extra modules each worker imports once (e.g. ``("math_verify",)`` when
            :meth:`call_function` runs a verifier).
        executor: an object with ``start()``, ``run(req) -> dict``, optional
            ``run_batch(reqs) -> list[dict]``, ``close()``, ``stats()``; default from
            ``cfg.backend``.
    Raises:
        kit.config.ConfigError: at construction, a limit of ``cfg`` that is not > 0 (names the
            key, :func:`kit.config.check_limits`).
    Raises (from ``start`` / ``async with``):
        kit.config.ConfigError: a module of ``cfg.preimport`` does not import in a worker (names
            it); an extra of ``preload`` that fails is only logged by the worker.
        kit.sandbox.SandboxUnavailable: the workers could not start here (e.g. no namespaces).
    """

    def __init__(self, cfg: SandboxConfig | None = None, *, preload: Sequence[str] = (), executor: Any = None):
        self.cfg = cfg or SandboxConfig()
        check_limits(self.cfg)
        self.preload = tuple(preload)
        self._executor = executor
        self._queue: asyncio.Queue | None = None
        self._senders: list[asyncio.Task] = []
        self._pending: set[asyncio.Future] = set()
        self.counts: collections.Counter[str] = collections.Counter()
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> SandboxPool:
        if self._started:
            return self
        if self._executor is None:
            if self.cfg.backend not in EXECUTORS:
                raise ValueError(f"sandbox.backend={self.cfg.backend!r} has no executor registered (known: "
                                 f"{sorted(EXECUTORS)}); 'ray' registers itself when kit.bridge.ray_sandbox is imported")
            self._executor = EXECUTORS[self.cfg.backend](self.cfg, preload=self.preload)
        await self._executor.start()
        self._queue = asyncio.Queue(maxsize=max(1, 2 * self.cfg.batch_size * self.cfg.send_workers))
        self._senders = [asyncio.create_task(self._sender()) for _ in range(max(1, self.cfg.send_workers))]
        self._started = True
        return self

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for t in self._senders:
            t.cancel()
        await asyncio.gather(*self._senders, return_exceptions=True)
        while self._queue is not None and not self._queue.empty():
            _, fut = self._queue.get_nowait()
            _resolve(fut, ToolResult.infra("sandbox pool closed"))
        for fut in list(self._pending):
            _resolve(fut, ToolResult.infra("sandbox pool closed"))
        if self._executor is not None:
            await self._executor.close()

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ calls

    async def run(self, call: Call) -> ToolResult:
        """Execute one call; never raises for the call's own failures (see ``status``)."""
        if not self._started or self._closed:
            raise RuntimeError("SandboxPool is not running; use `async with SandboxPool(cfg) as pool`")
        assert self._queue is not None
        fut = asyncio.get_running_loop().create_future()
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        t_enqueued = time.monotonic()
        await self._queue.put((_as_call(call).to_wire(), fut))
        res = await fut
        if res.timings is not None:  # the call's phase stamps (kit.sandbox.timings)
            res.timings.update(enqueued=t_enqueued, done=time.monotonic())
        self.counts[res.status] += 1
        return res

    async def run_batch(self, calls: Iterable[Call]) -> list[ToolResult]:
        """Execute many calls concurrently; results in the order of ``calls``."""
        return list(await asyncio.gather(*(self.run(c) for c in calls)))

    async def call_function(self, target: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> ToolResult:
        """Run ``module:qualname(*args, **kwargs)`` in a sandboxed child (e.g. answer verification).

        The JSON-decoded return value is in ``result.data`` (None on error or timeout).
        """
        return await self.run(FunctionCall(target, tuple(args), kwargs, timeout_s))

    def stats(self) -> dict[str, Any]:
        ex = self._executor.stats() if self._executor is not None else {}
        return {"statuses": dict(self.counts), "queued": self._queue.qsize() if self._queue else 0, **ex}

    # ------------------------------------------------------------------ senders

    async def _sender(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.cfg.batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            batch = [(req, fut) for req, fut in batch if not fut.done()]
            if not batch:
                continue
            try:
                if hasattr(self._executor, "run_batch"):
                    outs = await self._executor.run_batch([req for req, _ in batch])
                    for (_, fut), out in zip(batch, outs, strict=True):
                        _resolve(fut, _to_result(out))
                else:
                    await asyncio.gather(*(self._one(req, fut) for req, fut in batch))
            except asyncio.CancelledError:
                for _, fut in batch:
                    _resolve(fut, ToolResult.infra("sandbox pool closed"))
                raise
            except Exception as exc:  # noqa: BLE001 - never lose a call
                for _, fut in batch:
                    _resolve(fut, ToolResult.infra(f"{type(exc).__name__}: {exc}"))

    async def _one(self, req: dict, fut: asyncio.Future) -> None:
        if fut.done():
            return
        try:
            if isinstance(self._executor, LocalExecutor):  # skip calls nobody waits for any more
                out = await self._executor.run(req, abandoned=fut.done)
            else:
                out = await self._executor.run(req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            out = {"status": "infra_error", "stderr": f"sandbox infrastructure error: {exc}"}
        _resolve(fut, _to_result(out))


def _to_result(out: dict) -> ToolResult:
    res = ToolResult.from_dict(out)
    if isinstance(res.data, str):
        with contextlib.suppress(ValueError):
            res.data = json.loads(res.data)
    return res


def _resolve(fut: asyncio.Future, res: ToolResult) -> None:
    if not fut.done():
        fut.set_result(res)


# ---------------------------------------------------------------------- blocking use


def _run_blocking(coro) -> Any:
    """Run a coroutine to completion from sync code, even inside a running loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def run_sync(calls: Iterable[Call] | Call, cfg: SandboxConfig | None = None, *,
             preload: Sequence[str] = ()) -> list[ToolResult]:
    """Start a pool, run ``calls``, shut it down; for notebooks and tests.

    Works from plain scripts and from cells of a notebook whose event loop is already running.
    A single call (or code string) is accepted too; the answer is always a list.
    """
    if isinstance(calls, str | ToolCall | FunctionCall):
        calls = [calls]
    calls = list(calls)

    async def go() -> list[ToolResult]:
        async with SandboxPool(cfg, preload=preload) as pool:
            return await pool.run_batch(calls)

    return _run_blocking(go())


class SyncSandboxPool:
    """A long-lived pool for synchronous code: its own event loop runs in a daemon thread.

    Example (a notebook cell; the pool stays warm between cells):
        >>> pool = SyncSandboxPool(cfg.sandbox)
        >>> pool.run("sum(range(10))").value
        '45'
        >>> pool.close()

    ``close()`` stops the workers, then the loop, and closes the loop (its selector and
    self-pipe: three file descriptors a pool would otherwise hold until garbage collection).
    """

    def __init__(self, cfg: SandboxConfig | None = None, *, preload: Sequence[str] = ()):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="kit-sandbox-loop", daemon=True)
        self._thread.start()
        self.pool = SandboxPool(cfg, preload=preload)
        try:
            self._call(self.pool.start())
        except BaseException:
            self._stop_loop()
            raise

    def _serve(self) -> None:
        """The loop thread: run until stopped, then close the loop here, where it ran."""
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _call(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def run(self, call: Call) -> ToolResult:
        return self._call(self.pool.run(call))

    def run_batch(self, calls: Iterable[Call]) -> list[ToolResult]:
        return self._call(self.pool.run_batch(list(calls)))

    def call_function(self, target: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> ToolResult:
        return self._call(self.pool.call_function(target, *args, timeout_s=timeout_s, **kwargs))

    def stats(self) -> dict[str, Any]:
        return self.pool.stats()

    def close(self) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(self.pool.close())
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> SyncSandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
