"""One shared object per asyncio event loop, created once even when many coroutines ask at once.

VERL's agent-loop worker starts every trajectory of a batch concurrently; a check-then-await
("if absent: await create()") lets each of them create its own sandbox pool (issue #15: 96
trajectories left 192 sandbox workers, ~17 GB). :func:`once_per_loop` stores the creation task
before the first ``await`` so all callers share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


def once_per_loop(tasks: dict[int, asyncio.Task], make: Callable[[], Awaitable[Any]]) -> asyncio.Future:
    """The one task of ``make()`` for the running event loop, started by the first caller.

    Callers await the returned (shielded) task, so N concurrent first callers share one
    creation; a creation that fails is forgotten and the next caller retries. Used for the
    worker's sandbox pool in :mod:`kit.bridge.agent_loop` and :mod:`kit.bridge.tool`.

    Args:
        tasks: the caller's registry, event-loop id -> creation task (a module or instance dict).
        make: coroutine function creating the object.
    Returns:
        An awaitable of the object; cancelling one waiter does not cancel the creation.
    """
    loop = asyncio.get_running_loop()
    task = tasks.get(id(loop))
    if task is None:
        task = tasks[id(loop)] = loop.create_task(make())

        def forget_failure(t: asyncio.Task, key: int = id(loop)) -> None:
            if (t.cancelled() or t.exception() is not None) and tasks.get(key) is t:
                del tasks[key]

        task.add_done_callback(forget_failure)
    return asyncio.shield(task)
