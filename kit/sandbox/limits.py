"""A call's time limits, decided by what the call itself used, never by how busy the machine is (issue #41).

A call has three limits (:func:`limits`):

``cpu_s``   RLIMIT_CPU of each of its processes (``SandboxConfig.cpu_s``, at most the call's
            ``timeout_s``); the kernel kills a process that reaches it (SIGXCPU). The model's timeout.
``time_s``  the limit the model is told (``ToolCall.timeout_s`` or ``SandboxConfig.timeout_s``) on
            the call's *used time* (:func:`used_time`): the larger of
            * the CPU seconds of all its processes together, and
            * its own elapsed time: wall clock since hand-over minus the time its first process
              spent runnable but waiting for a CPU (``run_delay`` of ``/proc/<pid>/schedstat``).
            Reaching it is the model's timeout.
``wall_s``  :data:`WALL_FACTOR` x ``time_s`` of plain wall clock (at least ``time_s`` +
            :data:`WALL_FLOOR_S`), a backstop: a call still running
            then, without having used ``time_s``, spent most of its life waiting for a CPU. It was
            starved by load, not slow: it is killed and retried once on a worker of the pool, then
            answered ``infra_error`` (never the model's fault; trainers leave such calls out of the
            tool-error counts), never ``timeout``.

So on an idle machine the limits are today's (a busy loop or a ``time.sleep(100)`` stops after
``timeout_s``), and on a loaded one a call's outcome is the same as on an idle one, or
``infra_error`` when load slowed it more than :data:`WALL_FACTOR`-fold.

Calls that sleep or block (``time.sleep``, waiting on a lock, a pipe, a child, a socket) use no
CPU, but their blocked time counts as used time: waiting is what the code chose, its timeout
is the model's, at ``timeout_s`` as before, on an idle and on a loaded machine alike. A call never
blocks on its input: stdin is a memfd holding ``ToolCall.input``, so ``input()`` past its end
raises ``EOFError`` at once.

A call whose first process has exited is judged on its CPU alone (:func:`verdict_at_exit`), even when the
worker looks late: a worker kept from its CPU (a series at nice 19 beside other work) once charged its own
wait to calls that had long ended, so a ``SyntaxError`` call ended ``timeout`` (2026-12-07, fixed in
:mod:`kit.sandbox.worker`; most likely also the one Agent-R probe of a seed's 3,328 that such a rerun ended
otherwise, a prime count using 3.2-4.0 CPU s of a 5 s limit; reports/LOG.md).

What the rule does not see: used CPU itself grows with contention (shared caches), so a call within about a
quarter of its limit can still end ``timeout`` on a loaded machine and not on a quiet one. Nor run-queue
waits of a call's other processes (its first process waiting on them counts them as its own time, so a
multiprocessing call starved by load can still time out), a running call blocked on a full output pipe that
a starved worker does not drain (over 64 KiB of output), waits for disk I/O (they count as the call's own
time), time stolen by a hypervisor (counted as the call's), and the CPU of orphans the worker reaps. Where ``/proc/<pid>/schedstat``
is missing (a kernel without ``CONFIG_SCHED_INFO``) the own time is the plain wall clock: the old
rule, load-dependent again.
"""

from __future__ import annotations

import os
from typing import NamedTuple

WALL_FACTOR = 30.0
"""Wall-clock backstop as a multiple of the call's time limit: a call is declared starved only after
the machine ran it at least this many times slower than an idle one would have. Used time (CPU, or
wall minus run-queue wait) keeps growing for any call the scheduler runs at all, so the backstop only
bounds how long a starved call may take; a smaller factor makes the outcome depend on load again.
Measured 2026-12-06: two tiny runs of one seed at load ~25 on 2 cores (12-fold oversubscribed) with a
4-fold backstop differed in one call of the RoC ablation (``timeout`` in one run, ``infra_error`` in
the other) and so in every step after it; 30-fold covers what the kit's own jobs put on a machine."""
WALL_FLOOR_S = 5.0
"""Least slack (s) of the backstop over ``time_s``: a short limit (a verifier's 0.3 s) is otherwise
within reach of one burst of run-queue waiting on a busy machine (the 5,000-call soak with 0.3 s
hostile calls got ``infra_error`` beside load 7 on 2 cores with a bare 4x backstop of 1.2 s)."""
CHECK_S = 1.0
"""Longest sleep (s) between two looks at a running call's used time: its processes' CPU can grow
faster than the wall clock, so a multiprocess call overshoots ``time_s`` by at most this times its
number of busy processes before it is stopped; one that exits first is judged on exit
(:func:`verdict_at_exit`), so the verdict does not depend on when the looks fell."""
MIN_CHECK_S = 0.01
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Limits(NamedTuple):
    """One call's limits, seconds (see the module doc)."""

    cpu_s: float
    time_s: float
    wall_s: float


def limits(opts: dict, req: dict) -> Limits:
    """The limits of one request.

    Args:
        opts: the worker's options: ``timeout_s`` and ``cpu_s`` (``SandboxConfig``), and optionally
            ``wall_factor`` and ``wall_floor_s`` (tests inject small ones; defaults
            :data:`WALL_FACTOR`, :data:`WALL_FLOOR_S`).
        req: the wire request; its ``timeout_s`` (None or > 0) replaces the config's.
    Returns:
        ``Limits(cpu_s, time_s, wall_s)``: ``time_s`` the request's timeout or the config's;
        ``cpu_s`` the config's, capped at the request's own timeout when it has one; ``wall_s =
        max(wall_factor * time_s, time_s + wall_floor_s)``.
    Raises:
        KeyError: ``opts`` lacks ``timeout_s`` or ``cpu_s``.
    """
    time_s = float(req.get("timeout_s") or opts["timeout_s"])
    cpu = min(float(opts["cpu_s"]), time_s) if req.get("timeout_s") else float(opts["cpu_s"])
    factor = float(opts.get("wall_factor") or WALL_FACTOR)
    floor = float(opts["wall_floor_s"]) if opts.get("wall_floor_s") is not None else WALL_FLOOR_S
    return Limits(cpu, time_s, max(factor * time_s, time_s + floor))


def rlimit_cpu(cpu_s: float) -> tuple[int, int]:
    """(soft, hard) RLIMIT_CPU, whole seconds, for a CPU limit of ``cpu_s`` seconds: the soft limit
    sends SIGXCPU, the hard one (a second later) SIGKILL."""
    soft = max(1, int(round(cpu_s)))
    return soft, soft + 1


def used_time(wall: float, run_delay: float | None, cpu_all: float) -> float:
    """A call's used time, seconds: ``max(wall - run_delay, cpu_all)``.

    Args:
        wall: seconds since the call was handed over.
        run_delay: seconds its first process spent waiting for a CPU since then; None when unknown
            (no schedstat): the plain wall clock counts then.
        cpu_all: user + system CPU seconds of all the call's processes (reaped children included).
    """
    own = wall - (run_delay or 0.0)
    return max(own, cpu_all)


def verdict(used: float, wall: float, lim: Limits) -> str | None:
    """What a running call's state means: "timeout" (the model's: its used time reached
    ``lim.time_s``), "starved" (the wall backstop passed first: the machine's fault), or None (go on).

    Used time wins a tie: a call that reached both was not starved."""
    if used >= lim.time_s:
        return "timeout"
    if wall >= lim.wall_s:
        return "starved"
    return None


def verdict_at_exit(cpu_all: float, lim: Limits) -> str | None:
    """The verdict on a call whose first process has exited: "timeout" if the CPU seconds of all its
    processes (``cpu_all``, read before the rest are killed) reached ``lim.time_s``, else None.

    Looks at a running call fall at most :data:`CHECK_S` apart, and the CPU of several processes grows
    faster than the wall clock between them, so without this a multi-process call that used more than
    its limit and exited before the next look would end ``ok``, by when the looks fell. Its own time
    (wall minus run-queue wait) needs no second look: it grows no faster than the wall clock, and
    :func:`next_check` looks before it could reach the limit."""
    return "timeout" if cpu_all >= lim.time_s else None


def next_check(used: float, wall: float, lim: Limits, check_s: float = CHECK_S) -> float:
    """Seconds to sleep before the next look: until the used time could reach ``time_s`` if it grew
    as fast as the wall clock, or the backstop, whichever comes first, at most ``check_s``
    (:data:`CHECK_S`; the worker's option ``check_s``, which tests make large)."""
    return max(MIN_CHECK_S, min(lim.time_s - used, lim.wall_s - wall, check_s))


def run_delay(pid: int) -> float | None:
    """Seconds process ``pid`` (its main thread) has spent runnable but waiting for a CPU, from
    ``/proc/<pid>/schedstat`` (second field, ns; Linux ``Documentation/scheduler/sched-stats.rst``).
    None when the file is unreadable (no such process, no ``CONFIG_SCHED_INFO``)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its children it has waited for, from
    ``/proc/<pid>/stat`` (utime, stime, cutime, cstime; proc(5)); 0.0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0
