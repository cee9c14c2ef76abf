"""A long-lived pool of killable verifier processes (the kit's answer to hanging math_verify).

math_verify bounds its own work with ``signal.alarm``: that fails off the main thread (VERL's
reward loop, asyncio executors, notebooks running threads) and cannot interrupt C code such
as a huge integer power (``7^{7^{7^{7^7}}}`` ran past 25 s). The released rStar2-Agent code
escaped this by running each grading in a fresh sandbox process (research note §5), paying
the sympy import every time. :class:`Verifier` keeps ``workers`` warm processes instead
(``python -m kit.reward.worker``), each capped with ``RLIMIT_AS``; one dispatcher thread feeds
them from a queue (:mod:`kit.reward.dispatch`: the base class whose methods run in that thread).
Callers get :class:`concurrent.futures.Future` objects, so the same pool serves plain calls,
worker threads (any number at once) and asyncio (:meth:`Verifier.averify`).

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
import math
import numbers
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future

# INFRA_ERROR and VerifierError live with the dispatcher thread; imported from here by kit.reward,
# kit.train.update and kit.bridge.sampler
from kit.reward.dispatch import INFRA_ERROR as INFRA_ERROR
from kit.reward.dispatch import VerifierError as VerifierError
from kit.reward.dispatch import _Dispatcher, _Job
from kit.reward.verdict import Verdict, check_pair, prepare


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


class Verifier(_Dispatcher):
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
            ``infra_error`` (the machine's fault, not the answer's). 30, as the sandbox's backstop
            (:data:`kit.sandbox.limits.WALL_FACTOR`): a smaller factor lets load decide outcomes.
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
                 wall_factor: float = 30.0):
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
