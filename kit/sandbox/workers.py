"""Host side of the warm workers: start, talk to, recycle and replace them (rStar2-Agent §3.1).

:class:`LocalExecutor` owns ``num_workers`` worker processes on this machine and hands each
request to an idle one. A worker that dies or hangs mid-call is killed and replaced (the
watchdog also replaces idle ones that died); its call is retried once on another worker, then
answered ``infra_error``, so no call is lost or left hanging. A call a worker answered
``starved`` (load kept it from its CPU until the wall-clock backstop, :mod:`kit.sandbox.limits`)
is retried once the same way, then answered that ``infra_error``. Workers are recycled after
``recycle_after`` calls or when their memory grows. The Ray actors of
:mod:`kit.bridge.ray_sandbox` wrap this same class.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import time
from typing import Any

from kit.config import ConfigError, SandboxConfig
from kit.sandbox import isolation
from kit.sandbox import limits as time_limits
from kit.sandbox.wire import HEADER, MAX_FRAME

START_TIMEOUT_S = 120.0  # imports on a loaded 2-core box can take a while
HANG_GRACE_S = 10.0  # a worker silent this long past a call's wall-clock backstop is declared hung
RSS_GROWTH_MB = 256.0


class WorkerDied(RuntimeError):
    """The worker process exited, hung, or sent something that is not a frame."""


class WorkerProc:
    """One worker process (inside its own bwrap sandbox) and its pipes."""

    def __init__(self, cfg: SandboxConfig, index: int, preload: tuple[str, ...] = (), generation: int = 0):
        self.cfg, self.index, self.preload, self.generation = cfg, index, preload, generation
        self.retiring = False  # a replacement is starting; keep serving until it is ready
        self.retired = False  # the replacement is serving; stop at the next pick-up
        self.proc: asyncio.subprocess.Process | None = None
        self.calls = 0
        self.base_rss = self.rss = 0.0
        self.log: collections.deque[str] = collections.deque(maxlen=40)
        self._log_task: asyncio.Task | None = None
        self.info: dict[str, Any] = {}

    def opts(self) -> dict[str, Any]:
        c = self.cfg
        return {"timeout_s": c.timeout_s, "cpu_s": c.cpu_s, "memory_mb": c.memory_mb,
                "max_output_chars": c.max_output_chars, "max_procs": c.max_procs,
                "wall_factor": time_limits.WALL_FACTOR, "wall_floor_s": time_limits.WALL_FLOOR_S,
                "check_s": time_limits.CHECK_S,
                "uid": isolation.worker_uid(self.index % 128 + 128 * (self.generation % 2), c.isolation), "isolation": c.isolation,
                "preload": list(dict.fromkeys((*c.preimport, *self.preload)))}

    async def start(self) -> None:
        argv = isolation.worker_argv(self.cfg, self.opts())
        self.proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=isolation.worker_env(), limit=MAX_FRAME + 8,
            start_new_session=True)
        self._log_task = asyncio.create_task(self._read_log())
        try:
            self.info = await asyncio.wait_for(self._read(), START_TIMEOUT_S)
        except (TimeoutError, WorkerDied) as exc:
            await self.kill()
            raise WorkerDied(f"worker {self.index} did not start: {exc}; log: {self.tail_log()}") from None
        bad = {m: why for m, why in self.info.get("preload_failed", {}).items() if m in self.cfg.preimport}
        if bad:  # a typo would otherwise cost every call that uses the module its import, silently
            await self.kill()
            m = next(iter(bad))
            raise ConfigError(f"sandbox.preimport: {m!r} does not import in a sandbox worker ({bad[m]}); "
                              f"fix or remove it (the list: {list(self.cfg.preimport)})")
        self.base_rss = self.rss = float(self.info.get("rss_mb", 0.0))

    async def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.log.append(line.decode(errors="replace").rstrip()[:500])

    def tail_log(self) -> str:
        return " | ".join(self.log) or "(empty)"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def _read(self) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            head = await self.proc.stdout.readexactly(HEADER.size)
            (n,) = HEADER.unpack(head)
            if n > MAX_FRAME:
                raise WorkerDied(f"frame of {n} bytes")
            return json.loads(await self.proc.stdout.readexactly(n))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            raise WorkerDied(f"worker {self.index} gone ({type(exc).__name__})") from None

    async def request(self, req: dict, timeout_s: float, body: bytes | None = None) -> dict:
        """Send one request (``body``: its encoded frame, if already made) and wait for its
        answer; WorkerDied if the worker fails."""
        if not self.alive:
            raise WorkerDied(f"worker {self.index} is not running")
        assert self.proc is not None and self.proc.stdin is not None
        if body is None:
            body = json.dumps(req).encode()
        try:
            self.proc.stdin.write(HEADER.pack(len(body)) + body)
            await self.proc.stdin.drain()
            out = await asyncio.wait_for(self._read(), timeout_s + HANG_GRACE_S)
        except (TimeoutError, ConnectionError) as exc:
            await self.kill()
            raise WorkerDied(f"worker {self.index} failed ({type(exc).__name__})") from None
        except WorkerDied:
            await self.kill()
            raise
        self.calls += 1
        self.rss = float(out.pop("rss_mb", self.rss))
        return out

    def worn_out(self) -> bool:
        return self.calls >= self.cfg.recycle_after or self.rss > self.base_rss + RSS_GROWTH_MB

    async def stop(self) -> None:
        """Workers hold no state worth saving: stopping is killing the sandbox."""
        await self.kill()

    async def kill(self) -> None:
        """Kill the worker's process group (bwrap and, with it, the worker's PID namespace) and wait
        for asyncio's child watcher to report the exit.

        Only the watcher may reap the process. ``Process.kill()`` after ``killpg`` used to poll
        it (``Popen.send_signal`` calls ``waitpid(WNOHANG)`` first) and, on a loaded machine,
        reaped the group leader the signal had just killed before the watcher's thread ran; the
        watcher then logged ``Unknown child process pid N, will report returncode 255`` into
        whatever notebook cell was running. The leader is in the group (``start_new_session``),
        so ``killpg`` alone kills it; a group that is gone means the watcher already reaped it.
        """
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5.0)
        if self._log_task is not None:
            self._log_task.cancel()


class LocalExecutor:
    """``num_workers`` warm workers on this machine; ``await run(req)`` executes one request."""

    def __init__(self, cfg: SandboxConfig, preload: tuple[str, ...] = ()):
        self.cfg = cfg
        self.preload = tuple(preload)
        self.n = cfg.num_workers or os.cpu_count() or 1
        self.workers: dict[int, WorkerProc] = {}
        self._live: list[WorkerProc] = []  # every started worker, old ones being recycled included
        self.idle: asyncio.Queue[WorkerProc | None] = asyncio.Queue()
        self.counters: collections.Counter[str] = collections.Counter()
        self.broken: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._watchdog: asyncio.Task | None = None
        self._closed = False

    async def start(self) -> None:
        isolation.require_isolation(self.cfg)
        ws = [WorkerProc(self.cfg, i, self.preload) for i in range(self.n)]
        results = await asyncio.gather(*(w.start() for w in ws), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(w.kill() for w in ws))
            if bad_config := [e for e in errors if isinstance(e, ConfigError)]:
                raise bad_config[0]  # the config, not the machine: no isolation hint
            hint = (" (bubblewrap could not build the sandbox here: containers often forbid namespaces; "
                    "run on a host or VM, or set sandbox.isolation='none' explicitly)") if self.cfg.isolation == "bwrap" else ""
            raise isolation.SandboxUnavailable(f"sandbox workers failed to start: {errors[0]}{hint}")
        self._live += ws
        for w in ws:
            self.workers[w.index] = w
            self.idle.put_nowait(w)
        self._watchdog = asyncio.create_task(self._watch())

    async def run(self, req: dict, abandoned=None) -> dict:
        """Execute one wire request; always returns a result dict (infra_error at worst).

        ``abandoned``: optional ``() -> bool``, checked when a worker is free for the call; True
        (the caller cancelled or timed out while it was queued) skips the call.
        """
        body, bad = _encode(req)
        if bad:  # the caller's request, not the sandbox: answer it without touching a worker
            return {**_infra(""), "status": "error", "stderr": bad}
        # the wall-clock backstop the worker applies (its options carry these module defaults)
        timeout = time_limits.limits({"timeout_s": self.cfg.timeout_s, "cpu_s": self.cfg.cpu_s}, req).wall_s
        last = "no attempt"
        for attempt in range(2):  # the original try and one retry
            while True:
                w = await self.idle.get()
                if w is None or self._closed:
                    self.idle.put_nowait(None)  # wake the next waiter too
                    return _infra(self.broken or "sandbox pool closed")
                if not w.retired:
                    break
                self._spawn(w.stop())
            if abandoned is not None and abandoned():
                self.idle.put_nowait(w)
                return _infra("the caller gave up before the call started")
            t0 = time.monotonic()
            try:
                out = await w.request(req, timeout, body)
                if isinstance(out.get("timings"), dict):
                    out["timings"]["picked"] = t0
            except WorkerDied as exc:
                last = str(exc)
                self.counters["worker_deaths"] += 1
                if attempt == 0:
                    self.counters["retries"] += 1
                self._replace(w)
                continue
            except BaseException:  # cancelled mid-call: the worker state is unknown, replace it
                self._replace(w)
                raise
            out["queue_s"] = round(time.monotonic() - t0 - out.get("wall_s", 0.0), 6)
            starved = bool(out.pop("starved", False))
            if starved:
                self.counters["starved"] += 1
            if w.worn_out() and not w.retiring:
                # recycle without losing capacity: the old worker serves until the new one is up
                w.retiring = True
                self.counters["recycled"] += 1
                self._spawn(self._restart(w, overlap=True))
            self.idle.put_nowait(w)
            if starved and attempt == 0:  # the machine's fault: once more, then its infra_error
                self.counters["retries"] += 1
                continue
            return out
        return _infra(f"call failed on two workers: {last}")

    def _replace(self, old: WorkerProc) -> None:
        if self._closed or old.retiring:  # closing, or a replacement is already on its way
            old.retired = True
            self._spawn(old.stop())
            return
        self._spawn(self._restart(old))

    def _spawn(self, coro) -> None:
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _restart(self, old: WorkerProc, overlap: bool = False) -> None:
        if not overlap:
            self._spawn(old.stop())
        last = ""
        for attempt in range(3):
            new = WorkerProc(self.cfg, old.index, self.preload, old.generation + 1)
            try:
                await new.start()
            except Exception as exc:  # noqa: BLE001
                self.counters["start_failures"] += 1
                await asyncio.sleep(0.5 * 2**attempt)
                last = str(exc)
                continue
            if self._closed:
                await new.stop()
                return
            self.counters["restarts"] += 1
            self._live = [w for w in self._live if w.alive] + [new]
            self.workers[old.index] = new
            old.retired = True  # an idle old worker is stopped when next picked up
            self.idle.put_nowait(new)
            return
        if overlap:  # could not start a replacement: keep the old worker a while longer
            old.retiring = False
            old.calls = 0
            return
        self.workers.pop(old.index, None)
        if not self.workers:
            self.broken = f"every sandbox worker failed to restart: {last}"
            self.idle.put_nowait(None)

    async def _watch(self) -> None:
        """Replace idle workers that died between calls."""
        while not self._closed:
            await asyncio.sleep(1.0)
            keep = []
            while not self.idle.empty():
                w = self.idle.get_nowait()
                if w is None or w.retired:
                    keep.append(w)
                elif w.alive:
                    keep.append(w)
                else:
                    self.counters["watchdog_restarts"] += 1
                    self._replace(w)
            for w in keep:
                self.idle.put_nowait(w)

    async def close(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.idle.put_nowait(None)
        queued = []
        while not self.idle.empty():
            w = self.idle.get_nowait()
            if w is not None:
                queued.append(w)  # includes old workers still serving while being recycled
        self.idle.put_nowait(None)
        everyone = {id(w): w for w in [*self.workers.values(), *queued, *self._live]}
        await asyncio.gather(*(w.stop() for w in everyone.values()), return_exceptions=True)
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(t, 10.0)

    def stats(self) -> dict[str, Any]:
        return {"workers": len(self.workers), "alive": sum(w.alive for w in self.workers.values()),
                **self.counters}


def _encode(req: dict) -> tuple[bytes, str]:
    """The request's frame body, or an error message when no worker could take it: not JSON
    (NaN, objects), wrong field types (a worker would crash on them), or a frame over the wire's
    limit (the worker would drop the connection). Such calls used to kill two workers and come
    back ``infra_error``, which blames the sandbox for the caller's input."""
    try:
        if req.get("kind", "code") == "code" and not (
                isinstance(req.get("code"), str) and isinstance(req.get("input") or "", str)):
            raise TypeError("'code' and 'input' must be strings")
        t = req.get("timeout_s")
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t > 0):
            raise ValueError(f"timeout_s must be a finite number > 0, got {t!r}")
        body = json.dumps(req, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        return b"", f"InvalidRequest: {type(exc).__name__}: {exc}"
    if len(body) > MAX_FRAME:
        return b"", (f"InvalidRequest: the call is {len(body)} bytes encoded, over the sandbox's "
                     f"{MAX_FRAME} byte limit on code plus input")
    return body, ""


def _infra(reason: str) -> dict:
    return {"status": "infra_error", "stderr": f"sandbox infrastructure error: {reason}",
            "stdout": "", "value": "", "exit_code": None, "wall_s": 0.0, "cpu_s": 0.0,
            "truncated": False}
