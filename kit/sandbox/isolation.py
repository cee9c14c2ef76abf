"""How a worker process is launched: the bubblewrap command line, the scrubbed environment.

The sandbox view of the file system is an allowlist, not the host's root: system directories
(``/usr``, ``/bin``, ``/lib*``, ``/etc``) plus the Python installation and the directories on
``sys.path`` (the venv, the kit), all read-only; a private tmpfs on ``/tmp``; a minimal ``/dev``
with a private, size-capped, writable tmpfs on ``/dev/shm`` (issue #30: read-only before, so
``multiprocessing`` could not make a semaphore)
and a ``/proc`` of the worker's own PID namespace. Home directories, ``/root`` (except the
Python installation when it lives there), ``/run`` (docker.sock), data directories and the
host's ``/tmp`` are simply absent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

from kit.config import SandboxConfig

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
TMPFS_BYTES = 256 << 20
#: the private ``/dev/shm`` (POSIX semaphores and shared memory: ``multiprocessing.Lock``, ``Pool``,
#: ``ProcessPoolExecutor``, ``shared_memory``); emptied after each call like ``/tmp`` (kit.sandbox.cleanup)
SHM_BYTES = 64 << 20
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "MPLCONFIGDIR": "/tmp",
    "PYTHONHASHSEED": "0",
}
"""The only environment a worker (and the bare-fork baseline) ever sees: bwrap clears the host's
and sets these; with ``isolation="none"`` the host starts the worker with exactly these.

``PYTHONHASHSEED=0`` (issue #41): every worker of every pool and run hashes ``str``/``bytes`` the
same way, so a set's iteration order, ``repr`` of a set of strings and ``hash("...")`` repeat
across workers and runs (same CPython build). The children are forked, not exec'd, so the seed is
one per interpreter, not one per call; hash flooding by model code is bounded by the CPU limit."""
#: personality(2) flag that turns address-space randomisation off for a process and what it execs
ADDR_NO_RANDOMIZE = 0x0040000


class SandboxUnavailable(RuntimeError):
    """Isolation was requested but bubblewrap is missing or does not work here."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_isolation(cfg: SandboxConfig) -> None:
    """Raise when bwrap is asked for but absent; warn loudly when isolation is off."""
    if cfg.isolation == "bwrap":
        if bwrap_path() is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, so the code sandbox cannot isolate model code. "
                "Install it (`make setup`, or `apt-get install bubblewrap`), or set "
                "sandbox.isolation='none' explicitly to run model code WITHOUT isolation."
            )
    elif cfg.isolation == "none":
        msg = ("kit.sandbox: isolation='none': model-written code runs WITHOUT namespaces "
               "(network, host files and processes are reachable); only rlimits, process groups "
               "and a dedicated uid (when root) apply. Use only on a throwaway machine.")
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        print(f"WARNING: {msg}", file=sys.stderr)
    else:
        raise ValueError(f"sandbox.isolation must be 'bwrap' or 'none', got {cfg.isolation!r}")


def _python_roots() -> list[str]:
    """Directories the worker's interpreter needs: prefixes and every sys.path entry."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for p in sys.path:  # site-packages and friends; not the host script's dir or cwd
        if p and os.path.isdir(p) and ("-packages" in p or any(p.startswith(x) for x in (sys.prefix, sys.base_prefix))):
            roots.add(os.path.realpath(p))
    roots.add(kit_root())  # the kit checkout (editable installs, worktrees)
    for p in list(roots):
        roots.add(os.path.realpath(p))
    # keep only the outermost of nested roots, skip what the system dirs already cover
    out: list[str] = []
    for p in sorted(roots, key=len):
        if p in ("/", "") or any(p == d or p.startswith(d + "/") for d in (*SYSTEM_DIRS, *out)):
            continue
        out.append(p)
    return out


def kit_root() -> str:
    """The directory holding the ``kit`` package this host process imported."""
    return str(Path(__file__).resolve().parents[2])


def python_argv(module: str, arg: str) -> list[str]:
    """``python -s -P`` running ``module.main()`` from this host's own kit checkout, with address
    space randomisation off (issue #41).

    Start it with ``env=`` :func:`worker_env` (bwrap's ``--clearenv`` does the same inside): the
    environment is then exactly :data:`CLEAN_ENV`. It used to be ``python -I``, whose ``-E`` also
    ignores ``PYTHONHASHSEED``, so every worker drew its own hash secret. ``-s`` (no user site)
    and ``-P`` (no script directory on ``sys.path``) keep the rest of ``-I``; ``-m module`` is
    avoided because it found whatever copy of the kit the interpreter's site-packages points at
    (an editable install of another checkout) rather than this host's.

    The boot code re-executes the interpreter once with ``personality(ADDR_NO_RANDOMIZE)`` unless
    it is set already (read from ``/proc/self/personality``, so the final process never loads
    ``ctypes`` for it): the heap, ``mmap`` and stack bases are then the same in every worker and
    run, which makes what the worker imports land at the same addresses. It does not make a
    call's ``id()`` repeatable (see :mod:`kit.sandbox.step_cache`); where ``personality`` is
    refused (seccomp) the worker runs randomised, as before.
    """
    boot = f"{FIXED_LAYOUT}\nimport sys; sys.path.insert(0, {kit_root()!r}); from {module} import main; main()"
    return [sys.executable, "-s", "-P", "-c", boot, arg]


#: the first lines of a worker's boot code: re-exec once (same ``sys.orig_argv``) with address
#: randomisation off unless it is off already or ``personality`` is refused; nothing of the kit
#: is imported before the exec, and the final process never loads ``ctypes`` for it
FIXED_LAYOUT = f"""import os, sys
try:
    _p = int(open('/proc/self/personality').read(), 16)
    if not _p & {ADDR_NO_RANDOMIZE:#x}:
        import ctypes
        if ctypes.CDLL(None).personality(_p | {ADDR_NO_RANDOMIZE:#x}) != -1:
            os.execv(sys.executable, sys.orig_argv)
except Exception:
    pass"""


def worker_argv(cfg: SandboxConfig, opts: dict) -> list[str]:
    """The command that starts one worker (wrapped in bwrap unless isolation is 'none')."""
    inner = python_argv("kit.sandbox.worker", json.dumps(opts))
    if cfg.isolation == "none":
        return inner
    bw = bwrap_path()
    if bw is None:
        raise SandboxUnavailable("bwrap disappeared")
    argv = [bw, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() != 0:
        argv.append("--unshare-user")
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    # the private /tmp first: a checkout or venv that lives under /tmp (CI clones do) is then
    # bind-mounted on top of it instead of being hidden by it
    argv += ["--dev", "/dev", "--mqueue", "/dev/mqueue", "--proc", "/proc",
             "--size", str(SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm",
             "--size", str(TMPFS_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    made: set[str] = set()
    for root in _python_roots():
        # parents such as /root are created with the host's mode (0700): make them traversable
        for parent in reversed(Path(root).parents):
            sp = str(parent)
            if sp not in ("/", "/tmp") and sp not in made and not any(sp == d or sp.startswith(d + "/") for d in SYSTEM_DIRS):
                argv += ["--perms", "0755", "--dir", sp]
                made.add(sp)
        argv += ["--ro-bind", root, root]
    argv += ["--clearenv"]
    for k, v in CLEAN_ENV.items():
        argv += ["--setenv", k, v]
    argv += ["--chdir", "/tmp", "--"]
    return argv + inner


def worker_env() -> dict[str, str]:
    """Environment for the launcher process itself (bwrap clears it again inside)."""
    return dict(CLEAN_ENV)


def world_readable_python() -> bool:
    """True when every directory above the interpreter and sys.path is traversable by others."""
    for root in _python_roots():
        for d in (Path(root), *Path(root).parents):
            try:
                if not d.stat().st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True


def worker_uid(index: int, isolation: str = "bwrap") -> int | None:
    """A uid of its own for worker ``index`` when we are root and that uid exists in our user namespace (None
    otherwise: not root, or root of a namespace that maps only itself, where the call runs as the worker's uid
    and so, as for a non-root user, RLIMIT_NPROC and the protection of the worker from the call do not hold).

    Unique per live host process and worker slot, so RLIMIT_NPROC counts only that worker's
    call and the post-call sweep kills only that call's leftovers.
    """
    if os.geteuid() != 0:
        return None
    if isolation == "none" and not world_readable_python():
        return None  # the unprivileged uid could not import anything; stay root (documented)
    uid = 100_000_000 + (os.getpid() % (1 << 22)) * 256 + index % 256
    # root of a user namespace that maps only itself (``unshare --map-root-user``, as a non-root user's Ray or VERL
    # session runs): no other uid exists there, and chown to one fails (EINVAL); the call stays this uid
    return uid if uid_mapped(uid) else None


def uid_mapped(uid: int, uid_map: str = "/proc/self/uid_map") -> bool:
    """Whether ``uid`` exists in this process's user namespace (a line ``inside outside count`` of
    ``uid_map`` covers it); True where the file cannot be read (no user namespaces: every uid exists)."""
    try:
        lines = Path(uid_map).read_text().split("\n")
    except OSError:
        return True
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and int(parts[0]) <= uid < int(parts[0]) + int(parts[2]):
            return True
    return False
