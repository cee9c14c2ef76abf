"""Where a sandbox call's time goes: monotonic stamps carried back in the reply (issue #18).

Every stamp is ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for the whole machine: bwrap
makes no time namespace), taken by the process that did the step:

=========== ======= ============================================================
stamp       taken   moment
=========== ======= ============================================================
enqueued    host    ``SandboxPool.run`` put the call on the central queue
picked      host    a worker was free and the request is about to be written
w_recv      worker  the request frame was read and decoded
c_start     child   the call's child holds the request (fork, or hand-over to a
                    child forked ahead of demand)
c_exec      child   limits, uid, descriptors set up; the user's code starts
c_done      child   the user's code ended and its output was flushed
w_reaped    worker  the child exited and was reaped (group killed, status read)
w_cleaned   worker  what the call left is gone (or, when that runs after the
                    reply, the output pipes are drained) and the reply is built
done        host    ``SandboxPool.run`` has the result in hand
=========== ======= ============================================================

:func:`phases` turns them into the durations of :data:`PHASES`, which add up to the call's
latency seen by its caller. Work a worker does between calls (cleanup after the reply, the next
child forked while idle) is off the critical path; the worker reports how long it took as
``off_cleanup`` and ``off_prefork`` (seconds) in the next reply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

STAMPS = ("enqueued", "picked", "w_recv", "c_start", "c_exec", "c_done", "w_reaped", "w_cleaned", "done")
PHASES = ("queue", "dispatch", "fork", "isolation", "execution", "capture", "cleanup", "reply")
"""queue: waiting for a free worker (central queue, send batch, idle worker queue).
dispatch: host writes the request frame, the worker reads and decodes it.
fork: the worker gets a child going with the request (fork, or hand-over to a pre-forked child).
isolation: session, rlimits, uid, descriptors, stdin (what of it is left on the call's path).
execution: the user's code.
capture: child exit, killing its group, reaping it.
cleanup: draining the pipes; sweeping leftovers, IPC objects and files when done before the reply.
reply: building and sending the result frame, the host reading it and waking the caller."""
OFF_PATH = ("off_cleanup", "off_prefork")


def phases(stamps: dict | None) -> dict[str, float] | None:
    """Durations (seconds) of :data:`PHASES` from one call's stamps.

    Args:
        stamps: ``ToolResult.timings``: the :data:`STAMPS` as monotonic seconds.
    Returns:
        ``{phase: seconds}`` summing to ``done - enqueued``, or None when a stamp is missing,
        not a finite number, or out of order (a call can scribble on its own result pipe, and
        a result from another backend carries none).
    """
    if not stamps:
        return None
    try:
        ts = [float(stamps[k]) for k in STAMPS]
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(t) for t in ts) or any(b < a for a, b in zip(ts, ts[1:], strict=False)):
        return None
    return {p: b - a for p, a, b in zip(PHASES, ts[:-1], ts[1:], strict=True)}


def summarize(all_stamps: Iterable[dict | None]) -> dict[str, tuple[float, float]]:
    """``{phase: (p50 ms, mean ms)}`` over calls with usable stamps; also ``total`` and the
    off-path phases. Empty when no call had usable stamps."""
    rows = []
    off: dict[str, list[float]] = {k: [] for k in OFF_PATH}
    for st in all_stamps:
        ph = phases(st)
        if ph is None:
            continue
        ph["total"] = sum(ph.values())
        rows.append(ph)
        for k in OFF_PATH:
            v = (st or {}).get(k)
            if isinstance(v, int | float) and math.isfinite(v) and v >= 0:
                off[k].append(float(v))
    out: dict[str, tuple[float, float]] = {}
    for key in (*PHASES, "total"):
        xs = sorted(r[key] for r in rows)
        if xs:
            out[key] = (1000 * xs[len(xs) // 2], 1000 * sum(xs) / len(xs))
    for key, xs in off.items():
        if xs:
            xs.sort()
            out[key] = (1000 * xs[len(xs) // 2], 1000 * sum(xs) / len(xs))
    return out
