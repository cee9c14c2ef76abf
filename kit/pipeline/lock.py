"""One writer per run folder: a second ``python -m kit reproduce`` into a folder that a run is writing
stops at once instead of interleaving its notebooks with the first (review of issue #41: two runs into
one folder both ran).

The lock is ``flock(2)`` on ``<run folder>/.run.lock``: the kernel releases it when the holding process
exits, however it exits, so a killed run never leaves a stale lock. The file holds the holder's pid,
for the message.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOCK_NAME", "RunLocked", "run_lock"]

LOCK_NAME = ".run.lock"


class RunLocked(RuntimeError):
    """Another process is writing the run folder."""


@contextmanager
def run_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold the run folder ``root`` for this process (created if missing) while the block runs.

    Raises:
        RunLocked: another live process holds it (the message names the folder and its pid).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RunLocked(f"{root} is being written by another run (pid {holder}); wait for it to finish, "
                        "or give this one another --run") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
