"""A warm fork-server worker: imports numpy/scipy/sympy once, forks one child per call.

Runs as ``python -I`` with :func:`main` and its JSON options (:func:`kit.sandbox.isolation.python_argv`), normally as pid 2 of its own
bubblewrap sandbox (see :mod:`kit.sandbox.isolation`). It speaks length-prefixed JSON frames on
its stdin/stdout: one request in, one response out, one call at a time. JSON both ways on
purpose: the host never unpickles anything that came out of a sandbox.

Per call the child gets: a new session and process group, rlimits (AS, CPU, FSIZE, NOFILE,
CORE=0, NPROC), a dedicated unprivileged uid when the worker runs as root (so NPROC holds and
the call can neither signal the worker nor write root-owned files), a private working
directory, stdin from a memfd, stdout/stderr/result on three pipes, and fresh random seeds.
The worker enforces the wall clock with a pidfd poll, kills the whole group on exit or
timeout, then sweeps every other process of the call (grandchildren that called setsid), and
never waits for a pipe's EOF (a grandchild holding the pipe cannot hang it).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

from kit.sandbox.wire import Capture, read_frame, write_frame

FSIZE_BYTES = 64 << 20  # largest file a call may write
NOFILE = 256
OUTPUT_KILL_FACTOR = 16  # kill a call once it printed this many times max_output_chars (>= 1 MiB)
PREIMPORTS = ("math", "cmath", "fractions", "decimal", "itertools", "functools", "collections",
              "heapq", "bisect", "random", "re", "json", "string", "statistics", "numpy", "scipy",
              "scipy.special", "scipy.linalg", "sympy")


# --------------------------------------------------------------------------- the child


def _child(req: dict, opts: dict, fds: tuple[int, int, int, int], workdir: str) -> None:
    """Runs in the forked child; never returns."""
    code = 70
    me = os.getpid()
    t_start = time.monotonic()
    try:
        os.setsid()
        stdin_fd, out_w, err_w, res_w = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, 3)
        os.closerange(4, 1 << 16)  # the protocol pipes and everything else of the worker
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past FSIZE raise instead of killing
        mem = int(opts["memory_mb"]) << 20
        cpu = max(1, int(round(float(opts["cpu_s"]))))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        uid = opts.get("uid")
        if uid is not None:  # root only: a per-worker uid makes NPROC bind and protects the worker
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if _LIBC is not None:  # after setuid, which clears it: die with the worker (isolation="none")
            _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        nproc = int(opts["max_procs"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        os.chdir(workdir)
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        _reseed()
        from kit.sandbox import runner

        t_exec = time.monotonic()
        if req["kind"] == "func":
            rec = runner.call_function(req["target"], req.get("args", []), req.get("kwargs", {}))
        else:
            rec = runner.execute(req["code"])
        cap = int(opts["max_output_chars"])
        if rec.get("value") is not None and len(rec["value"]) > cap:
            v = rec["value"]
            rec["value"] = f"{v[: cap // 2]}\n...[value truncated: {len(v) - cap} characters omitted]...\n{v[-(cap // 2):]}"
            rec["value_truncated"] = True
        if rec.get("error") and len(rec["error"]) > cap:
            rec["error"] = rec["error"][-cap:]
        code = rec["exit"]
        if os.getpid() != me:  # a process the user's code forked ran off the end of the cell
            os._exit(code)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - the user may have closed it
                pass
        rec["t"] = [t_start, t_exec, time.monotonic()]
        try:
            os.write(3, json.dumps(rec).encode()[: 4 << 20])
        except OSError:
            pass
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        os._exit(code)


def _reseed() -> None:
    """Forked children share the parent's RNG state; give each call fresh entropy."""
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(int.from_bytes(os.urandom(4), "little"))
        except Exception:  # noqa: BLE001
            pass


# --------------------------------------------------------------------------- the worker side


class Worker:
    def __init__(self, opts: dict):
        self.opts = opts
        self.uid = opts.get("uid")
        self.in_pid_ns = os.getpid() == 2 and opts.get("isolation") == "bwrap"
        base = os.environ.get("TMPDIR", "/tmp")
        self.workdir = os.path.join(base, f"kit-call-{os.getpid()}")
        os.makedirs(self.workdir, exist_ok=True)
        if self.uid is not None:
            os.chown(self.workdir, self.uid, self.uid)
        os.chmod(self.workdir, 0o700)
        self.my_pid = os.getpid()

    def run(self, req: dict, t_recv: float = 0.0) -> dict:
        """Run one request in a forked child; the reply dict (``t_recv``: when it was read)."""
        opts = dict(self.opts)
        timeout = float(req.get("timeout_s") or opts["timeout_s"])
        if req.get("timeout_s"):
            opts["cpu_s"] = min(float(opts["cpu_s"]), timeout)
        cap = int(opts["max_output_chars"])
        kill_at = max(OUTPUT_KILL_FACTOR * cap, 1 << 20)
        stdin_fd = os.memfd_create("stdin", 0)
        data = (req.get("input") or "").encode("utf-8", "replace")
        while data:
            data = data[os.write(stdin_fd, data):]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req, opts, (stdin_fd, out_w, err_w, res_w), self.workdir)
        for fd in (stdin_fd, out_w, err_w, res_w):
            os.close(fd)
        caps = {out_r: Capture(cap), err_r: Capture(cap), res_r: Capture(4 << 20)}
        for fd in caps:
            os.set_blocking(fd, False)
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        for fd in (*caps, pidfd):
            poller.register(fd, select.POLLIN)
        killed_by = None
        open_fds = set(caps)
        deadline = t0 + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                killed_by = "timeout"
                break
            events = poller.poll(max(1, int(left * 1000)))
            exited = False
            for fd, _ev in events:
                if fd == pidfd:
                    exited = True
                    continue
                if self._drain(fd, caps[fd]) and fd in open_fds:
                    poller.unregister(fd)
                    open_fds.discard(fd)
            if caps[out_r].total + caps[err_r].total > kill_at:
                killed_by = "output"
                break
            if exited:
                break
        _kill_group(pid)
        _, status, ru = os.wait4(pid, 0)
        t_reaped = time.monotonic()
        wall = t_reaped - t0
        self._sweep()
        self._remove_sysv_ipc()
        for fd in caps:
            self._drain(fd, caps[fd])
            os.close(fd)
        os.close(pidfd)
        self._clean_workdir()
        out = self._result(status, ru, wall, killed_by, caps[out_r], caps[err_r], caps[res_r], timeout, opts)
        out["timings"].update(w_recv=t_recv, w_reaped=t_reaped, w_cleaned=time.monotonic())
        return out

    @staticmethod
    def _drain(fd: int, cap: Capture) -> bool:
        """Read what is available now; True at EOF. Bounded so a fast writer cannot pin us."""
        for _ in range(64):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            cap.add(chunk)
        return False

    def _sweep(self) -> None:
        """Kill every process the call left behind (setsid grandchildren), reap them all.

        The worker is a child subreaper, so orphans of the call become its children; it loops
        until ``/proc`` shows none of them (bounded at 2 s for unkillable stragglers).
        """
        if not (self.in_pid_ns or self.uid is not None):
            self._reap()
            return
        deadline = time.monotonic() + 2.0
        while True:
            victims = self._leftovers()
            for p in victims:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            self._reap()
            if not victims or time.monotonic() > deadline:
                return
            time.sleep(0.001)

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

    @staticmethod
    def _reap() -> None:
        while True:
            try:
                p, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if p == 0:
                return

    def _remove_sysv_ipc(self) -> None:
        """Delete the System V shared memory, message queues and semaphores the call created.

        They outlive processes: without this a call could park gigabytes in ``shmget`` segments
        (RLIMIT_AS only bounds what is attached) that stay after the call and that the next
        call on this worker can read. In bwrap the worker has its own IPC namespace, so every
        object in it came from a call; otherwise only those of the call's uid are removed.
        """
        if _LIBC is None or not (self.in_pid_ns or self.uid is not None):
            return
        rm = {"shm": lambda i: _LIBC.shmctl(i, 0, None), "msg": lambda i: _LIBC.msgctl(i, 0, None),
              "sem": lambda i: _LIBC.semctl(i, 0, 0)}  # IPC_RMID = 0
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

    def _clean_workdir(self) -> None:
        """Empty the call's working directory and drop what the call left in /tmp, /dev/shm."""
        paths = []
        with contextlib.suppress(OSError):
            paths += [os.path.join(self.workdir, n) for n in os.listdir(self.workdir)]
        if self.uid is not None:
            for shared in ("/tmp", "/dev/shm", "/dev/mqueue"):  # POSIX queues outlive the call too
                with contextlib.suppress(OSError), os.scandir(shared) as it:
                    paths += [e.path for e in it
                              if e.path != self.workdir and e.stat(follow_symlinks=False).st_uid == self.uid]
        if paths:
            import shutil

            for path in paths:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def _result(self, status, ru, wall, killed_by, out, err, res, timeout, opts) -> dict:
        stdout, t_out = out.text()
        stderr, t_err = err.text()
        rec: dict = {}
        raw = bytes(res.head + res.tail)
        if raw:
            try:
                rec = json.loads(raw)
            except ValueError:
                rec = {}
        exit_code = os.waitstatus_to_exitcode(status)
        cpu = ru.ru_utime + ru.ru_stime
        value = rec.get("value") or ""
        if rec.get("error"):
            stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + rec["error"])
        note = ""
        if killed_by == "output":
            st = "output_limit"
            note = f"OutputLimitExceeded: the call printed more than {out.total + err.total} characters and was stopped"
        elif killed_by == "timeout":
            st = "timeout"
            note = f"TimeoutError: execution exceeded the {timeout:g} s time limit"
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGXCPU:
                st = "timeout"
                note = f"TimeoutError: execution exceeded the {opts['cpu_s']:g} s CPU time limit"
            else:
                st = "killed"
                note = f"Killed: the process died from signal {signal.Signals(sig).name}"
        elif rec.get("memory"):
            st = "memory_limit"
        elif exit_code == 0:
            st = "ok"
        else:
            st = "error"
        if note:
            stderr = stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + note
        if stdout:
            value = ""
        return {"timings": _child_stamps(rec.get("t")), "status": st, "stdout": stdout, "stderr": stderr, "value": value,
                "exit_code": exit_code, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6),
                "truncated": bool(t_out or t_err or rec.get("value_truncated")),
                "data": rec.get("data"), "rss_mb": _rss_mb()}


def _child_stamps(t: object) -> dict:
    """The child's three monotonic stamps (see :mod:`kit.sandbox.timings`); {} if the call's
    code scribbled something else on the result pipe."""
    if isinstance(t, list) and len(t) == 3 and all(type(x) is float for x in t):
        return dict(zip(("c_start", "c_exec", "c_done"), t, strict=True))
    return {}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


def _set_subreaper() -> None:
    if _LIBC is not None:
        _LIBC.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def main() -> None:
    opts = json.loads(sys.argv[1])
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = sys.stderr
    import importlib

    for mod in (*PREIMPORTS, *opts.get("preload", ())):
        try:
            importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001
            print(f"kit.sandbox.worker: cannot preload {mod}: {exc}", file=sys.stderr)
    import gc

    import kit.sandbox.runner  # noqa: F401 - warm for the children

    gc.collect()
    gc.freeze()  # keep the warm heap shared copy-on-write with the children
    _set_subreaper()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    worker = Worker(opts)
    write_frame(proto_out, {"ready": True, "pid": os.getpid(), "rss_mb": _rss_mb(),
                            "uid": opts.get("uid"), "pid_ns": worker.in_pid_ns})
    while True:
        req = read_frame(proto_in)
        if req is None or req.get("kind") == "exit":
            return
        if req.get("kind") == "ping":
            write_frame(proto_out, {"pong": True, "rss_mb": _rss_mb()})
            continue
        write_frame(proto_out, worker.run(req, time.monotonic()))


if __name__ == "__main__":
    main()
