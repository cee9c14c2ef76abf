"""What a worker removes after each call: leftover processes, System V IPC objects, files.

Runs in the worker (:mod:`kit.sandbox.worker`) after a call's child was reaped and, since
issue #18, after its reply was sent: the worker reads its next request only once this is done
and the next child is forked, so no call ever sees what the previous one left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import stat
import time

try:
    LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not glibc
    LIBC = None


SHARED_DIRS = ("/tmp", "/dev/shm", "/dev/mqueue")  # writable by calls, outlive them (POSIX queues too)


class Cleaner:
    """Removes what one call left behind.

    Args:
        uid: the calls' dedicated uid (None when the worker is not root).
        in_pid_ns: the worker is pid 2 of its own PID and IPC namespaces (bwrap), so every
            other process and IPC object in them came from a call, and :data:`SHARED_DIRS`
            are its own (private tmpfs, mqueue mount).
        workdir: the calls' working directory: created here, emptied after each call, and
            made again (a directory of ``uid``, mode 0700) when a call removed, renamed,
            replaced or re-permissioned it (the call owns it, so it can).
        shared: the shared directories to sweep (tests pass their own).
    """

    def __init__(self, uid: int | None, in_pid_ns: bool, workdir: str, shared: tuple[str, ...] = SHARED_DIRS):
        self.uid, self.in_pid_ns, self.workdir, self.shared = uid, in_pid_ns, workdir, shared
        self.my_pid = os.getpid()
        self.reset_workdir()
        # without a uid of their own, calls' files are told apart from the worker's by name:
        # what is in the private shared directories when the worker starts is the worker's
        self.baseline = {d: set(_names(d)) for d in shared}

    def reset_workdir(self) -> None:
        """Make ``workdir`` an empty-or-kept directory owned by the calls' uid, mode 0700, never
        a symlink (the next call's child enters it and the cleaner empties it as root)."""
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(self.workdir).st_mode):
                os.unlink(self.workdir)  # a symlink or file a call put in its place
        os.makedirs(self.workdir, exist_ok=True)
        if self.uid is not None:
            os.lchown(self.workdir, self.uid, self.uid)
        os.chmod(self.workdir, 0o700)

    def all(self) -> None:
        self.sweep()
        self.remove_sysv_ipc()
        self.clean_workdir()

    def sweep(self) -> None:
        """Kill every process the call left behind (setsid grandchildren), reap them all.

        The worker is a child subreaper, so orphans of the call become its children; it loops
        until ``/proc`` shows none of them (bounded at 2 s for unkillable stragglers).
        """
        if not (self.in_pid_ns or self.uid is not None):
            reap()
            return
        deadline = time.monotonic() + 2.0
        while True:
            victims = self._leftovers()
            for p in victims:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            reap()
            if not victims or time.monotonic() > deadline:
                return
            time.sleep(0.001)

    def call_pids(self) -> list[int]:
        """Pids of the processes of the running call this worker can tell apart: every process
        but pid 1 and the worker in its own PID namespace, else those of the calls' uid; [] when
        neither holds (``isolation="none"`` without root)."""
        if not (self.in_pid_ns or self.uid is not None):
            return []
        return self._leftovers()

    def _leftovers(self) -> list[int]:
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, self.my_pid):
                continue
            if not self.in_pid_ns:
                try:
                    if os.stat(f"/proc/{name}").st_uid != self.uid:
                        continue
                except OSError:
                    continue
            out.append(int(name))
        return out

    def remove_sysv_ipc(self) -> None:
        """Delete the System V shared memory, message queues and semaphores the call created.

        They outlive processes: without this a call could park gigabytes in ``shmget`` segments
        (RLIMIT_AS only bounds what is attached) that stay after the call and that the next
        call on this worker can read. In bwrap the worker has its own IPC namespace, so every
        object in it came from a call; otherwise only those of the call's uid are removed.
        """
        if LIBC is None or not (self.in_pid_ns or self.uid is not None):
            return
        rm = {"shm": lambda i: LIBC.shmctl(i, 0, None), "msg": lambda i: LIBC.msgctl(i, 0, None),
              "sem": lambda i: LIBC.semctl(i, 0, 0)}  # IPC_RMID = 0
        for kind, remove in rm.items():
            try:
                with open(f"/proc/sysvipc/{kind}") as fh:
                    head, *rows = [line.split() for line in fh if line.strip()]
            except (OSError, ValueError):
                continue
            owners = [head.index(c) for c in ("uid", "cuid") if c in head]
            for row in rows:
                if self.in_pid_ns or any(int(row[k]) == self.uid for k in owners):
                    remove(int(row[1]))

    def clean_workdir(self) -> None:
        """Empty the call's working directory (made again if the call tampered with it) and
        drop what the call left in /tmp, /dev/shm, /dev/mqueue."""
        paths = []
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(self.workdir).st_mode):  # never list through a symlink
                paths += [os.path.join(self.workdir, n) for n in os.listdir(self.workdir)]
        for shared in self.shared:
            if self.uid is not None:
                with contextlib.suppress(OSError), os.scandir(shared) as it:
                    paths += [e.path for e in it
                              if e.path != self.workdir and e.stat(follow_symlinks=False).st_uid == self.uid]
            elif self.in_pid_ns:  # the worker's own private directories: all new names are a call's
                paths += [os.path.join(shared, n) for n in _names(shared)
                          if n not in self.baseline[shared] and os.path.join(shared, n) != self.workdir]
        if paths:
            for path in paths:
                if os.path.isdir(path) and not os.path.islink(path):
                    _rmtree(path)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
        self.reset_workdir()


def _rmtree(path: str) -> None:
    """``shutil.rmtree`` that first gives back the owner's access to every directory below
    ``path`` (a call may have made one read-only; only root with CAP_DAC_OVERRIDE could
    remove it as it was)."""
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, d), 0o700, follow_symlinks=False)
    shutil.rmtree(path, ignore_errors=True)


def _names(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def reap() -> None:
    """Collect every exited child without blocking."""
    while True:
        try:
            p, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if p == 0:
            return
