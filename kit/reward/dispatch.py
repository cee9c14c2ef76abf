"""The verifier pool's dispatcher thread: warm worker processes and the limits of each attempt.

:class:`_Dispatcher` is the part of :class:`kit.reward.pool.Verifier` that runs in its ``kit-verifier``
thread: it starts workers (``python -m kit.reward.worker``), hands them queued items, reads their answers,
reads each busy worker's CPU time from ``/proc/<pid>/stat`` (:func:`_cpu_seconds`) and kills, retries or
answers an attempt past its limits, by the policy in :mod:`kit.reward.pool`'s docstring (``timeout`` by the
worker's CPU seconds; ``infra_error`` after a second death or wall-clock stall).

Workers run with ``PYTHONHASHSEED=0`` (issue #41), whatever the host's environment says: the hashes of
strings (sympy's symbol names among them) decide the order in which sets and hash-keyed dicts iterate,
and sympy walks such sets while it simplifies and solves, so with a hash secret of its own each worker
could take another path to a verdict (and reach a time limit on one worker but not on another); with
one seed for every worker of every run the order repeats. The sandbox's workers run with the same seed
(:data:`kit.sandbox.isolation.CLEAN_ENV`); unlike them, the verifier's inherit the rest of the host's
environment.

:func:`kit.sandbox.limits.cpu_seconds` reads the same file but counts waited-for children too and answers
0.0 for a gone process; this one answers None, so the wall clock stands in. ``kit.reward`` and
``kit.sandbox`` are siblings in the package layers (DEVELOPERS.md), so the few lines are not shared.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from kit.reward.verdict import EXIT_MEMORY


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
"""Verdict reason of an item the verifier could not grade (see :mod:`kit.reward.pool`'s docstring)."""


class VerifierError(RuntimeError):
    """The pool cannot run (workers fail to start, or it was closed)."""


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``, clock-tick resolution,
    10 ms on Linux), or None when it cannot be read (the process is gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime: fields 14 and 15 of stat(5)
    except (OSError, IndexError, ValueError):
        return None


class _Dispatcher:
    """The dispatcher thread's methods, a base of :class:`kit.reward.pool.Verifier`, which sets what they
    read: ``workers``, ``memory_mb``, ``soft_fraction``, ``wall_factor``, ``recycle_after``,
    ``max_start_failures``, ``stats``, ``_lock``, ``_incoming``, ``_closing``, ``_broken``, ``_wake_r``,
    ``_wake_w``, ``_all_ready``; :meth:`_run` (the thread's target) sets the rest."""

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _spawn(self) -> _Worker:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0",
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
