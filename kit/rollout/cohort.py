"""Trajectories as a cohort on a logical clock: scheduling that no wall clock decides (issue #41).

A local backend (:mod:`kit.rollout.engine`, :class:`kit.rollout.backends.HFBackend`) decodes
rows in batches, and a row's floats depend on its neighbours (padding offsets, matmul shapes).
If a batch were formed from whatever had arrived when the worker looked, the result would depend
on tool-call latency and machine load. Instead every trajectory of a rollout is registered with
the backend (:func:`gather_trajectories`) and the backend decides from a **logical clock** (its
decode-step counter) and the queue's contents alone:

* a trajectory is either *waiting* (the backend expects its next request, or its end, at a known
  clock value, its ``due`` step) or *submitted* (a request pending or a row running);
* a trajectory that joins is due at once; a row that ends at clock ``c`` makes its trajectory
  due at ``c + delay`` (``delay``: the tool latency the schedule assumes, in decode steps; the
  continuous engine keeps decoding the other rows meanwhile, report §3.2's overlap);
* the backend never runs past a due step while a trajectory due there has neither submitted nor
  left: it waits (wall time only), so a slow tool call costs time, never a different batch;
* requests are admitted in ``(due, trajectory id)`` order, and sampling seeds are given in that
  order (:func:`kit.rollout.batch_rows.request_seed`'s count).

A request from a caller outside any cohort (an HTTP client of :mod:`kit.rollout.serve`, a direct
``generate`` call) is *unmanaged*: admitted when it arrives, as before. Those batches follow
arrival times; the kit's own rollouts (training, evaluation, curation, Agent-R's search) all run
through :func:`gather_trajectories`.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["TRAJECTORY", "Cohort", "cohort_backend", "gather_trajectories"]

#: the cohort id of the trajectory the running task belongs to (None: an unmanaged caller)
TRAJECTORY: contextvars.ContextVar[int | None] = contextvars.ContextVar("kit_trajectory", default=None)


class Cohort:
    """Live trajectories of one backend and the logical clock they are scheduled on.

    Attributes:
        clock: the logical time in decode steps (the backend advances it).
        due: ``{trajectory id: due step}`` for waiting trajectories, ``None`` for submitted ones.
        ended: ``{trajectory id: due step}`` of trajectories that left before the step they were due at:
            the schedule sees their end at that step, not when it happened (a trajectory that ends
            after a tool call leaves once the call returns; the wall time of that must not move the
            engine's stops, compaction or "due soon" counts).
    """

    def __init__(self) -> None:
        self.clock = 0
        self.due: dict[int, int | None] = {}
        self.ended: dict[int, int] = {}
        self._next_id = 0
        self._event: asyncio.Event | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ registration
    def reserve(self, n: int) -> int:
        """Reserve ``n`` consecutive ids; returns the first (ids never repeat within a backend)."""
        base = self._next_id
        self._next_id += n
        return base

    def join(self, j: int, due: int | None = None) -> None:
        """Register trajectory ``j``, due at ``due`` (default: now)."""
        if j in self.due:
            raise ValueError(f"trajectory {j} already joined")
        self.due[j] = self.clock if due is None else due
        self.wake()

    def leave(self, j: int) -> int | None:
        """Trajectory ``j`` ended (no more requests); returns the step it was due at (None if it
        left with a request outstanding, e.g. cancelled)."""
        d = self.due.pop(j, None)
        if d is not None and d > self.clock:
            self.ended[j] = d
        self.wake()
        return d

    def submitted(self, j: int) -> int:
        """Trajectory ``j`` sent its next request; returns the step the request is due at.

        Raises:
            ValueError: ``j`` is not waiting (two requests at once from one trajectory, or not joined).
        """
        d = self.due.get(j)
        if d is None:
            raise ValueError(f"trajectory {j} sent a request while not waiting for one "
                             "(one request at a time per trajectory; was it joined?)")
        self.due[j] = None
        self.wake()
        return d

    def finished(self, j: int, delay: int) -> None:
        """Trajectory ``j``'s row ended now: it is due again ``delay`` steps from now."""
        if j in self.due:
            self.due[j] = self.clock + max(0, int(delay))

    # ------------------------------------------------------------------ queries
    def blocked(self) -> bool:
        """A trajectory due at or before the clock has neither submitted nor left."""
        return any(d is not None and d <= self.clock for d in self.due.values())

    def waiting(self) -> bool:
        """Some live trajectory is waiting (its next request or end is still to come)."""
        return any(d is not None for d in self.due.values())

    def next_due(self) -> int | None:
        """The earliest due step after the clock among waiting trajectories and those that left ahead
        of their due step (None if none)."""
        self.ended = {j: d for j, d in self.ended.items() if d > self.clock}
        later = [d for d in self.due.values() if d is not None and d > self.clock] + list(self.ended.values())
        return min(later) if later else None

    def due_within(self, horizon: int) -> int:
        """Trajectories due at or before ``horizon``: waiting ones, and those that left ahead of a due step
        in ``(clock, horizon]`` (counted as if still waiting, so when they left does not change the count)."""
        return (sum(d is not None and d <= horizon for d in self.due.values())
                + sum(self.clock < d <= horizon for d in self.ended.values()))

    def __len__(self) -> int:
        return len(self.due)

    # ------------------------------------------------------------------ waking the worker
    def wake(self) -> None:
        if self._event is not None:
            self._event.set()

    async def changed(self) -> None:
        """Wait until a trajectory joins, submits or leaves (call from the backend's worker)."""
        loop = asyncio.get_running_loop()
        if self._event is None or self._event_loop is not loop:
            self._event, self._event_loop = asyncio.Event(), loop
        self._event.clear()
        await self._event.wait()


def cohort_backend(backend: Any) -> Any | None:
    """The backend that schedules by cohort behind ``backend`` (a wrapper names it as
    ``cohort_backend``), or None when it has none (a remote endpoint)."""
    inner = getattr(backend, "cohort_backend", backend)
    return inner if isinstance(getattr(inner, "cohort", None), Cohort) else None


async def gather_trajectories(backend: Any, factories: Sequence[Callable[[], Awaitable[Any]]],
                              max_concurrency: int | None = None) -> list[Any]:
    """Run trajectory coroutines as one cohort of ``backend``; results in input order.

    Args:
        backend: the sampling backend (its ``cohort_backend`` if it wraps one).
        factories: one zero-argument coroutine function per trajectory (each sends its requests
            one at a time).
        max_concurrency: the most trajectories alive at once (None: all). Trajectory ``i`` runs in
            lane ``i mod max_concurrency`` after the lane's previous one and is due when that one
            left, so which trajectory starts when is fixed by the schedule, not by which ended first.
    Returns:
        ``[await factories[i]() for i]`` in order.
    Raises:
        Whatever a trajectory raises (the others are cancelled by ``asyncio.gather``'s caller
        as usual; every trajectory leaves the cohort on the way out).
    """
    n = len(factories)
    lanes = n if not max_concurrency else max(1, min(n, int(max_concurrency)))
    out: list[Any] = [None] * n
    b = cohort_backend(backend)
    if b is None:  # no cohort to schedule on (remote backend): plain concurrency
        async def plain(lane: int) -> None:
            for i in range(lane, n, lanes):
                out[i] = await factories[i]()
        await asyncio.gather(*(plain(k) for k in range(lanes)))
        return out
    co: Cohort = b.cohort
    base = co.reserve(n)
    for k in range(lanes):
        co.join(base + k)

    async def lane(k: int) -> None:
        i = k
        while True:
            j = base + i
            TRAJECTORY.set(j)
            ok = False
            try:
                out[i] = await factories[i]()
                ok = True
            finally:
                due = co.leave(j)
                if ok and i + lanes < n:  # the lane's next trajectory starts where this one left, at once
                    co.join(base + i + lanes, due)
                b.kick()  # a leave may unblock a batch that waits for it
            i += lanes
            if i >= n:
                return

    await asyncio.gather(*(lane(k) for k in range(lanes)))
    return out
