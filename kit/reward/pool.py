"""A long-lived pool of killable verifier processes (the kit's answer to hanging math_verify).

math_verify bounds its own work with ``signal.alarm``: that fails off the main thread (VERL's
reward loop, asyncio executors, notebooks running threads) and cannot interrupt C code such
as a huge integer power (``7^{7^{7^{7^7}}}`` ran past 25 s). The released rStar2-Agent code
escaped this by running each grading in a fresh sandbox process (research note §5), paying
the sympy import every time. :class:`Verifier` keeps ``workers`` warm processes instead
(``python -m kit.reward.worker``), each capped with ``RLIMIT_AS``; one dispatcher thread feeds
them from a queue. Callers get :class:`concurrent.futures.Future` objects, so the same pool
serves plain calls, worker threads (any number at once) and asyncio (:meth:`Verifier.averify`).

Who is to blame, and what decides it (issues #41 and #44). Only CPU time decides a verdict, never
the wall clock, so a loaded machine cannot turn a slow-but-fine verification into a 0:

* ``timeout`` (the answer is too expensive to check; the model's 0): the worker spent
  ``timeout_s`` CPU seconds (user + system, read from ``/proc/<pid>/stat``) on the item; the pool
  SIGKILLs it (detail ``hard_kill``) and starts another. The worker's own soft alarm fires
  earlier, at ``soft_fraction * timeout_s`` CPU seconds (``ITIMER_PROF``), and keeps the worker
  (detail ``soft_alarm``). A peak at the worker's ``RLIMIT_AS`` is ``timeout`` too (``memory_limit``).
* ``infra_error`` (never the model's fault; both trainers leave the item out of the update,
  :func:`kit.train.update.select`; on VERL the kit's replay buffers, which read the reason from
  ``reward_extra_info``, :func:`kit.bridge.sampler.graded_rows`): the worker died mid-item by something else (the host's OOM
  killer, a crash, a stray signal), or the item reached ``wall_factor * timeout_s`` wall seconds
  with CPU time left (the worker was starved or stopped). Either way the item is retried once
  on a fresh worker; a second such failure answers ``infra_error``, as the sandbox does
  (:mod:`kit.sandbox.workers`).

CPU time is not bitwise repeatable either (caches and frequency move it by a few percent), so an
item within a few percent of ``timeout_s`` can still go either way; items that far from the limit
cannot.

What it does not do: it is no security sandbox (answers are model text, not code; nothing is
executed), and the per-item limits start at dispatch, so a batch larger than the pool waits
in the queue first (queue time is counted in neither limit).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import numbers
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from kit.reward.verdict import EXIT_MEMORY, Verdict, check_pair, prepare


@dataclass
class _Job:
    id: int
    gold: str
    answer: str
    timeout_s: float
    future: Future
    deadline: float = 0.0  # wall-clock expiry of this attempt (monotonic s): a retry, never a verdict
    dispatched: float = 0.0
    first_dispatched: float = 0.0
    cpu0: float = 0.0  # the worker's CPU seconds at dispatch
    next_check: float = 0.0  # when to read the worker's CPU time again (monotonic s)
    attempts: int = 0


@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen
    stderr: object
    buf: bytes = b""
    ready: bool = False
    job: _Job | None = None
    done: int = 0
    started: float = field(default_factory=time.monotonic)


INFRA_ERROR = "infra_error"
"""Verdict reason of an item the verifier could not grade (see the module docstring)."""


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``, clock-tick resolution,
    10 ms on Linux), or None when it cannot be read (the process is gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime: fields 14 and 15 of stat(5)
    except (OSError, IndexError, ValueError):
        return None


def _check_timeout(timeout_s: float | None) -> None:
    """A limit must be a finite positive number of seconds (or None: the pool's default).

    Unchecked, 0 silently meant the default, a negative limit killed a worker at once and
    ``inf`` crashed the dispatcher (``select`` cannot wait forever), breaking the pool.
    """
    if timeout_s is None:
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise TypeError(f"timeout_s must be a number of seconds, got {type(timeout_s).__name__}")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")


class VerifierError(RuntimeError):
    """The pool cannot run (workers fail to start, or it was closed)."""


class Verifier:
    """Warm, killable verifier processes behind a queue.

    Args:
        workers: number of worker processes; None means ``os.cpu_count()``.
        timeout_s: default per-item limit in CPU seconds of the worker, counted from dispatch
            (report §2.2.1 scores a slow verification 0; the release used 4 s of wall time for
            import plus grading). An item that uses it up is ``timeout`` (score 0).
        memory_mb: ``RLIMIT_AS`` of each worker in MiB (0 = no cap).
        soft_fraction: the worker's own alarm fires at this fraction of the CPU limit, so most
            slow items end without killing (and restarting) the worker.
        wall_factor: an attempt still running ``wall_factor * timeout_s`` wall seconds after
            dispatch with CPU time left is killed and retried once; the second time the item is
            ``infra_error`` (the machine's fault, not the answer's).
        recycle_after: a worker is replaced after this many items (bounds sympy's caches).
        max_start_failures: consecutive workers dying before "ready" that mark the pool broken.

    Raises:
        ValueError: ``workers``, ``recycle_after`` or ``max_start_failures`` below 1,
            ``memory_mb`` below 0, ``soft_fraction`` or ``timeout_s`` not a finite number > 0,
            ``wall_factor`` not a finite number >= 1 (the message names the argument).

    Example:
        >>> with Verifier(workers=2) as v:
        ...     v.verify("\\\\frac{1}{2}", "<answer>\\\\boxed{0.5}</answer>").correct
        True
    """

    def __init__(self, workers: int | None = None, *, timeout_s: float = 5.0, memory_mb: int = 1024,
                 soft_fraction: float = 0.8, recycle_after: int = 5000, max_start_failures: int = 3,
                 wall_factor: float = 6.0):
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        _check_timeout(timeout_s)
        for name, value, least in (("memory_mb", memory_mb, 0), ("recycle_after", recycle_after, 1),
                                   ("max_start_failures", max_start_failures, 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"Verifier: {name} must be an integer >= {least}, got {value!r}")
        if not (isinstance(soft_fraction, numbers.Real) and math.isfinite(soft_fraction) and soft_fraction > 0):
            raise ValueError(f"Verifier: soft_fraction must be a finite number > 0, got {soft_fraction!r}")
        if isinstance(wall_factor, bool) or not (isinstance(wall_factor, numbers.Real) and math.isfinite(wall_factor)
                                                 and wall_factor >= 1):
            raise ValueError(f"Verifier: wall_factor must be a finite number >= 1, got {wall_factor!r}")
        self.workers = workers or os.cpu_count() or 1
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.soft_fraction = float(soft_fraction)
        self.wall_factor = float(wall_factor)
        self.recycle_after = int(recycle_after)
        self.max_start_failures = int(max_start_failures)
        self.stats = {"submitted": 0, "completed": 0, "hard_kills": 0, "restarts": 0, "deaths": 0,
                      "wall_kills": 0, "retries": 0, "infra_errors": 0}
        self._lock = threading.Lock()
        self._incoming: collections.deque[_Job] = collections.deque()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._broken: str | None = None
        self._pid = os.getpid()
        self._wake_r, self._wake_w = -1, -1
        self._all_ready = threading.Event()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Verifier:
        """Start the dispatcher thread (workers start in the background). Idempotent."""
        with self._lock:
            if self._closing:
                raise VerifierError("verifier is closed")
            if self._thread is None:
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                self._thread = threading.Thread(target=self._run, name="kit-verifier", daemon=True)
                self._thread.start()
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Start the pool if needed and block until every worker is warm (math_verify imported).

        The first item on a cold pool otherwise waits for a worker start (about 0.5-2 s).

        Returns:
            True when all workers are ready; False on timeout or a broken pool.
        """
        self.start()
        return self._all_ready.wait(timeout_s) and self._broken is None

    def close(self) -> None:
        """Kill the workers and stop the dispatcher; pending items fail with VerifierError."""
        with self._lock:
            self._closing = True
            thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(timeout=10)
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> Verifier:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """True while the dispatcher runs in this process and the pool is not broken."""
        return (self._thread is not None and self._thread.is_alive() and self._broken is None
                and not self._closing and self._pid == os.getpid())

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for tests and monitoring)."""
        return [w.proc.pid for w in list(getattr(self, "_workers", []))]

    # ---------------------------------------------------------------- submission
    def submit(self, gold: str, answer: str, timeout_s: float | None = None) -> Future:
        """Queue one normalized ``(gold, answer)`` pair for math_verify.

        Args:
            timeout_s: CPU seconds the worker may spend on the item (None: the pool's).
        Returns:
            A Future resolving to ``(reason, detail, seconds)`` (``seconds``: wall time from the
            first dispatch, retries included); it raises VerifierError when the pool is broken
            or closed.
        """
        _check_timeout(timeout_s)
        if self._pid != os.getpid():
            raise VerifierError("this Verifier was created in another process (fork); make a new one")
        if self._thread is None:
            self.start()
        fut: Future = Future()
        with self._lock:
            if self._closing or self._broken:
                fut.set_exception(VerifierError(self._broken or "verifier is closed"))
                return fut
            limit = self.timeout_s if timeout_s is None else float(timeout_s)
            self._incoming.append(_Job(next(self._ids), gold, answer, limit, fut))
            self.stats["submitted"] += 1
        self._wake()
        return fut

    def _start_verdict(self, gold, response, timeout_s, fallback, where="") -> tuple[Verdict | None, Future | None, str | None, float]:
        _check_timeout(timeout_s)
        gold, response = check_pair(gold, response, where)
        verdict, g, a, extracted, dt = prepare(gold, response, fallback)
        if verdict is not None:
            return verdict, None, extracted, dt
        return None, self.submit(g, a, timeout_s), extracted, dt

    @staticmethod
    def _finish(result: tuple[str, str, float], extracted: str | None, dt: float) -> Verdict:
        reason, detail, seconds = result
        return Verdict(reason == "correct", reason, extracted, dt + seconds, detail)

    def verify(self, gold: str | int, response: str, *, timeout_s: float | None = None,
               fallback: bool = False) -> Verdict:
        """Grade one response against its gold answer; see :func:`kit.reward.verify`."""
        verdict, fut, extracted, dt = self._start_verdict(gold, response, timeout_s, fallback)
        return verdict if fut is None else self._finish(fut.result(), extracted, dt)

    def verify_batch(self, pairs: Sequence[tuple[str | int, str]], *, timeout_s: float | None = None,
                     fallback: bool = False) -> list[Verdict]:
        """Grade many ``(gold, response)`` pairs in parallel; results keep the input order."""
        started = [self._start_verdict(g, r, timeout_s, fallback, f"pairs[{i}]")
                   for i, (g, r) in enumerate(pairs)]
        return [v if f is None else self._finish(f.result(), e, dt) for v, f, e, dt in started]

    async def averify(self, gold: str | int, response: str, *, timeout_s: float | None = None,
                      fallback: bool = False) -> Verdict:
        """:meth:`verify` for asyncio code: awaits the worker without blocking the loop."""
        verdict, fut, extracted, dt = self._start_verdict(gold, response, timeout_s, fallback)
        if fut is None:
            return verdict
        return self._finish(await asyncio.wrap_future(fut), extracted, dt)

    async def averify_batch(self, pairs: Sequence[tuple[str | int, str]], *, timeout_s: float | None = None,
                            fallback: bool = False) -> list[Verdict]:
        """:meth:`verify_batch` for asyncio code."""
        return list(await asyncio.gather(*(self.averify(g, r, timeout_s=timeout_s, fallback=fallback)
                                           for g, r in pairs)))

    # ---------------------------------------------------------------- dispatcher thread
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _spawn(self) -> _Worker:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in (_REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p))
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kit.reward.worker", "--memory-mb", str(self.memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, close_fds=True,
            start_new_session=True,
        )
        w = _Worker(proc, err)
        os.set_blocking(proc.stdout.fileno(), False)
        self._sel.register(proc.stdout.fileno(), selectors.EVENT_READ, w)
        return w

    def _kill(self, w: _Worker) -> None:
        try:
            self._sel.unregister(w.proc.stdout.fileno())
        except (KeyError, ValueError):
            pass
        try:
            w.proc.kill()
        except OSError:
            pass
        try:
            w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (w.proc.stdin, w.proc.stdout, w.stderr):
            try:
                f.close()
            except OSError:
                pass
        self._workers.remove(w)

    def _stderr_tail(self, w: _Worker) -> str:
        try:
            w.stderr.seek(0)
            return w.stderr.read()[-2000:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def _resolve(self, w: _Worker, result: tuple[str, str, float]) -> None:
        job, w.job = w.job, None
        if job is not None and not job.future.done():
            job.future.set_result(result)
            self.stats["completed"] += 1

    def _on_death(self, w: _Worker) -> None:
        """A worker's stdout closed: answer its job, count a start failure if it never got ready."""
        self.stats["deaths"] += 1
        try:
            rc = w.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            rc = None
        if not w.ready:
            self._start_failures += 1
            if self._start_failures >= self.max_start_failures:
                self._broken = (f"verifier workers fail to start (exit code {rc}); last stderr:\n"
                                f"{self._stderr_tail(w)}")
        if w.job is not None:
            if rc == EXIT_MEMORY:  # the worker's own cap: the answer needs too much memory
                self._resolve(w, ("timeout", "memory_limit", time.monotonic() - w.job.first_dispatched))
            else:  # killed or crashed by something else (the OOM killer, a segfault): not the answer's fault
                self._retry_or_infra(w, f"worker_died:{rc}")
        self._kill(w)

    def _retry_or_infra(self, w: _Worker, why: str) -> None:
        """The job of ``w`` failed through no fault of its answer: queue it again at the front
        (first failure) or answer ``infra_error`` (second)."""
        job, w.job = w.job, None
        if job is None or job.future.done():
            return
        if job.attempts < 2:
            self.stats["retries"] += 1
            self._pending.appendleft(job)
            return
        self.stats["infra_errors"] += 1
        self.stats["completed"] += 1
        job.future.set_result((INFRA_ERROR, f"{why} (twice)", time.monotonic() - job.first_dispatched))

    def _read(self, w: _Worker) -> None:
        try:
            data = os.read(w.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._on_death(w)
            return
        w.buf += data
        while b"\n" in w.buf:
            line, w.buf = w.buf.split(b"\n", 1)
            msg = json.loads(line)
            if "ready" in msg:
                w.ready = True
                self._start_failures = 0
                if len(self._workers) >= self.workers and all(x.ready for x in self._workers):
                    self._all_ready.set()
            elif w.job is not None and msg.get("id") == w.job.id:
                elapsed = time.monotonic() - w.job.first_dispatched
                self._resolve(w, (msg["reason"], msg["detail"], elapsed))
                w.done += 1
                if msg.get("exiting") or w.done >= self.recycle_after:
                    self._kill(w)
                    self.stats["restarts"] += 1
                    return

    def _check_limits(self) -> None:
        """Busy workers due a check: over the CPU limit is the answer's ``timeout`` (hard kill);
        past the wall deadline with CPU time left is a retry, then ``infra_error``; else the next
        check is when the CPU time left could at the earliest run out."""
        now = time.monotonic()
        for w in [w for w in self._workers if w.job is not None and now >= min(w.job.next_check, w.job.deadline)]:
            job = w.job
            cpu = _cpu_seconds(w.proc.pid)
            used = (now - job.dispatched) if cpu is None else cpu - job.cpu0  # no /proc: wall time stands in
            if used >= job.timeout_s:
                self._resolve(w, ("timeout", "hard_kill", now - job.first_dispatched))
                self.stats["hard_kills"] += 1
            elif now >= job.deadline:
                self.stats["wall_kills"] += 1
                self._retry_or_infra(w, f"wall_limit:{now - job.dispatched:.1f}s_with_{used:.2f}_cpu_s")
            else:  # at most 1 s apart, in case the worker runs threads (CPU faster than wall)
                job.next_check = now + min(1.0, max(0.01, job.timeout_s - used))
                continue
            self._kill(w)
            self.stats["restarts"] += 1

    def _run(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._workers: list[_Worker] = []
        self._start_failures = 0
        pending: collections.deque[_Job] = collections.deque()
        self._pending = pending  # _retry_or_infra puts a failed attempt back at its front
        try:
            while True:
                with self._lock:
                    pending.extend(self._incoming)
                    self._incoming.clear()
                    if self._closing:
                        break
                if self._broken:
                    self._all_ready.set()  # wake wait_ready(); it reports the broken pool
                    for job in pending:
                        job.future.set_exception(VerifierError(self._broken))
                    pending.clear()
                    with self._lock:
                        for job in self._incoming:
                            job.future.set_exception(VerifierError(self._broken))
                        self._incoming.clear()
                else:
                    while len(self._workers) < self.workers:
                        self._workers.append(self._spawn())
                    for w in self._workers:
                        if w.ready and w.job is None and pending:
                            job = pending.popleft()
                            job.dispatched = time.monotonic()
                            job.first_dispatched = job.first_dispatched or job.dispatched
                            job.attempts += 1
                            job.deadline = job.dispatched + job.timeout_s * self.wall_factor
                            job.next_check = job.dispatched + job.timeout_s  # CPU time cannot outrun wall time
                            cpu = _cpu_seconds(w.proc.pid)
                            job.cpu0 = cpu if cpu is not None else 0.0
                            w.job = job
                            req = {"id": job.id, "gold": job.gold, "answer": job.answer,
                                   "soft_s": job.timeout_s * self.soft_fraction}
                            try:
                                w.proc.stdin.write((json.dumps(req) + "\n").encode())
                                w.proc.stdin.flush()
                            except OSError:
                                pass  # its death shows up as EOF on stdout
                checks = [min(w.job.next_check, w.job.deadline) for w in self._workers if w.job is not None]
                wait = max(0.0, min(checks) - time.monotonic()) if checks else None
                for key, _ in self._sel.select(wait):
                    if key.data is None:
                        try:
                            while os.read(self._wake_r, 4096):
                                pass
                        except BlockingIOError:
                            pass
                    elif key.data in self._workers:
                        self._read(key.data)
                self._check_limits()
        except BaseException as e:  # noqa: BLE001  (a dispatcher bug must not leave callers waiting)
            self._broken = f"verifier dispatcher crashed: {e!r}"
        finally:
            why = self._broken or "verifier closed"
            for w in list(self._workers):
                if w.job is not None and not w.job.future.done():
                    w.job.future.set_exception(VerifierError(why))
                self._kill(w)
            with self._lock:
                self._closing = True
                pending.extend(self._incoming)
                self._incoming.clear()
            for job in pending:
                if not job.future.done():
                    job.future.set_exception(VerifierError(why))
            self._all_ready.set()
            self._sel.close()


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
