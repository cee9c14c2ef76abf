"""A warm fork-server worker: imports ``SandboxConfig.preimport`` once, forks one child per call.

Runs as ``python -s -P`` (``PYTHONHASHSEED=0``, address randomisation off) with :func:`main` and its JSON options
(:func:`kit.sandbox.isolation.python_argv`), normally as pid 2 of its own bubblewrap sandbox
(see :mod:`kit.sandbox.isolation`). It speaks length-prefixed JSON frames on its stdin/stdout:
one request in, one response out, one call at a time. JSON both ways on purpose: the host
never unpickles anything that came out of a sandbox.

Per call the child gets: a new session and process group, rlimits (AS, CPU, FSIZE, NOFILE,
CORE=0, NPROC), a dedicated unprivileged uid when the worker runs as root (so NPROC holds and
the call can neither signal the worker nor write root-owned files), a private working
directory, stdin from a memfd, stdout/stderr/result on three pipes, and random seeds derived from
the call itself (`kit.sandbox.seeds`: the same code with the same input draws the same numbers on any
worker of any run, issue #41).
The worker enforces the time limit with a pidfd poll on the call's used time (its CPU, or its
wall clock minus its waits for a CPU: :mod:`kit.sandbox.limits`; a call starved by load past a
generous wall-clock backstop is answered ``infra_error`` marked ``starved``, which the host
retries once), judges it once more when its first process exits (the CPU of all its processes
against the limit, so a multi-process call that ends between two looks is judged the same as one
that a look caught running), kills the whole group on exit or timeout, then sweeps every other process of the
call (grandchildren that called setsid), and never waits for a pipe's EOF (a grandchild holding
the pipe cannot hang it).

Fixed costs off the critical path (issue #18): while idle, the worker forks the next call's
child ahead of demand; that child makes its session and descriptors and signal dispositions,
then blocks reading its request from a pipe. The rest (uid, rlimits, stdin)
takes microseconds and is done only once the request is in, so a waiting child holds no user
data, runs as the worker's uid and carries no call's limits. The sweep of what a call left
(processes, IPC objects, files) runs after its reply is sent and before the next child is
forked; the worker reads no request until both are done, so isolation between calls is as
before. Outside bwrap (``isolation="none"``) no namespace dies with the worker, so the sweep
stays before the reply there: a host that kills the worker right after a reply leaves nothing
behind. See :mod:`kit.sandbox.timings` for where the time of a call goes.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
from typing import NamedTuple

from kit.sandbox.cleanup import LIBC, Cleaner
from kit.sandbox.hugepages import collapse_heap
from kit.sandbox.limits import (
    CHECK_S,
    cpu_seconds,
    limits,
    next_check,
    rlimit_cpu,
    run_delay,
    used_time,
    verdict,
    verdict_at_exit,
)
from kit.sandbox.outcome import make_result, rss_mb
from kit.sandbox.seeds import call_seed, seed_call
from kit.sandbox.wire import HEADER, Capture, read_raw, write_frame

FSIZE_BYTES = 64 << 20  # largest file a call may write
NOFILE = 256
OUTPUT_KILL_FACTOR = 16  # kill a call once it printed this many times max_output_chars (>= 1 MiB)
STDLIB_PREIMPORTS = ("math", "cmath", "fractions", "decimal", "itertools", "functools", "collections",
                     "heapq", "bisect", "random", "re", "json", "string", "statistics")
"""Imported once by every worker, shared copy-on-write by every call; they add ~0 to a fork."""
SCIENCE_PREIMPORTS = ("numpy", "scipy", "scipy.special", "scipy.linalg", "sympy")
"""The default of ``SandboxConfig.preimport``: what a worker imports beyond
:data:`STDLIB_PREIMPORTS`. Each costs every call fork and exit time in proportion to the memory it
adds (``sandbox_bench.py --preload-costs``, 2 cores: numpy +19 MB, scipy.special + scipy.linalg
+30 MB, sympy +32 MB, each ~0.5-1 ms of fork + exit on 4 KiB pages and ~0.2-0.5 ms once the heap
is on huge pages) but saves every call that uses it far more (importing scipy.special or
scipy.linalg in a warm child takes 300-400 ms, sympy more): for a model that writes scientific
Python (the paper's), all of them pay for themselves. A policy whose calls use none of them (the
tiny profile's arithmetic) sets ``preimport = []`` and saves their fork cost on every call."""
PREIMPORTS = (*STDLIB_PREIMPORTS, *SCIENCE_PREIMPORTS)
"""What a worker imports under the default config (the bare-fork baseline's parent too)."""
RECOLLAPSE_EVERY = 100  # calls between two huge-page collapses of the worker's heap
CHILD_RESET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM, signal.SIGPIPE)


# --------------------------------------------------------------------------- the child


def _standby(opts: dict, fds: tuple[int, int, int, int], workdir: str) -> None:
    """Runs in a child forked ahead of demand: prepares, waits for one request, runs it.

    Never returns. ``fds``: (request pipe, stdout, stderr, result pipe) ends of the child.
    """
    code = 70
    me = os.getpid()
    try:
        os.setsid()
        req_r, out_w, err_w, res_w = fds
        os.dup2(req_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, 3)
        os.closerange(4, 1 << 16)  # the protocol pipes and everything else of the worker
        for sig in CHILD_RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past FSIZE raise instead of killing
        if LIBC is not None:  # a waiting child dies with its worker (isolation="none")
            LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        os.chdir(workdir)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        from kit.sandbox import runner

        raw = read_raw(0)  # blocks until the worker hands over a call
        if raw is None:  # the worker stopped or retired this child
            os._exit(0)
        t_start = time.monotonic()
        req = json.loads(raw)
        del raw
        seed_call(call_seed(req))
        _enter_call(opts, req)
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


def _enter_call(opts: dict, req: dict) -> None:
    """The call's own part of the isolation, once its request is in: stdin, uid, rlimits."""
    stdin_fd = os.memfd_create("stdin", 0)
    data = (req.get("input") or "").encode("utf-8", "replace")
    while data:
        data = data[os.write(stdin_fd, data):]
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    os.dup2(stdin_fd, 0)  # also closes the request pipe
    os.close(stdin_fd)
    mem = int(opts["memory_mb"]) << 20
    soft, hard = rlimit_cpu(limits(opts, req).cpu_s)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    uid = opts.get("uid")
    if uid is not None:  # root only: a per-worker uid makes NPROC bind and protects the worker
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if LIBC is not None:  # again after setuid, which clears it: die with the worker
        LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    nproc = int(opts["max_procs"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


# --------------------------------------------------------------------------- the worker side


class Standby(NamedTuple):
    """A child forked ahead of demand and the worker's ends of its pipes."""

    pid: int
    pidfd: int
    req_w: int
    out_r: int
    err_r: int
    res_r: int


class Worker:
    """Runs requests one at a time, each in a child forked ahead of demand (see module doc)."""

    def __init__(self, opts: dict):
        self.opts = opts
        self.uid = opts.get("uid")
        self.in_pid_ns = os.getpid() == 2 and opts.get("isolation") == "bwrap"
        base = os.environ.get("TMPDIR", "/tmp")
        self.workdir = os.path.join(base, f"kit-call-{os.getpid()}")
        self.cleaner = Cleaner(self.uid, self.in_pid_ns, self.workdir)  # also makes the workdir
        self.standby: Standby | None = None
        self.off: dict[str, float] = {}  # seconds spent between calls, reported with the next reply
        self.calls = 0
        self.dirty = False  # a call ran and what it left is not removed yet

    def prefork(self) -> None:
        """Fork the next call's child now, while nothing waits for it."""
        t0 = time.monotonic()
        req_r, req_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _standby(self.opts, (req_r, out_w, err_w, res_w), self.workdir)
        for fd in (req_r, out_w, err_w, res_w):
            os.close(fd)
        for fd in (out_r, err_r, res_r):
            os.set_blocking(fd, False)
        self.standby = Standby(pid, os.pidfd_open(pid), req_w, out_r, err_r, res_r)
        self.off["off_prefork"] = time.monotonic() - t0

    def after_reply(self) -> None:
        """Between calls: remove what the last call left, then fork the next call's child."""
        if self.dirty:
            t0 = time.monotonic()
            self.cleaner.all()
            self.dirty = False
            self.off["off_cleanup"] = time.monotonic() - t0
        self.calls += 1
        if self.calls % RECOLLAPSE_EVERY == 0:  # forks split the huge pages again, slowly
            collapse_heap()
        self.prefork()

    def _take_standby(self) -> Standby:
        sb, self.standby = self.standby, None
        if sb is not None and not select.select([sb.pidfd], [], [], 0)[0]:
            return sb
        if sb is not None:  # it died waiting (never ran any code): drop it, fork another
            _kill_group(sb.pid)
            os.waitpid(sb.pid, 0)
            for fd in sb[1:]:
                os.close(fd)
        self.prefork()
        assert self.standby is not None
        sb, self.standby = self.standby, None
        return sb

    def run(self, req: dict, raw: bytes, t_recv: float = 0.0) -> dict:
        """Run one request (``raw``: its frame body) in a waiting child; the reply dict
        (``t_recv``: when the request was read)."""
        opts = dict(self.opts)
        lim = limits(opts, req)
        opts["cpu_s"] = lim.cpu_s
        cap = int(opts["max_output_chars"])
        kill_at = max(OUTPUT_KILL_FACTOR * cap, 1 << 20)
        sb = self._take_standby()
        pid, pidfd = sb.pid, sb.pidfd
        t0 = time.monotonic()
        try:
            _write_all(sb.req_w, HEADER.pack(len(raw)) + raw)
        except OSError:  # the child died right now: it is reaped below like any other exit
            pass
        os.close(sb.req_w)
        delay0 = run_delay(pid)  # what it waited for a CPU before the call: not the call's
        out_r, err_r, res_r = sb.out_r, sb.err_r, sb.res_r
        caps = {out_r: Capture(cap), err_r: Capture(cap), res_r: Capture(4 << 20)}
        poller = select.poll()
        for fd in (*caps, pidfd):
            poller.register(fd, select.POLLIN)
        killed_by = None
        open_fds = set(caps)
        used, delay = 0.0, None
        check_s = float(opts.get("check_s") or CHECK_S)
        look = t0 + next_check(0.0, 0.0, lim, check_s)  # the next look at the call's used time (kit.sandbox.limits)
        while True:  # the clock is read before the poll that looks for an exit: an exited call is judged at exit
            now = time.monotonic()  # (on its CPU only), and a look never charges time after the call was seen alive
            due = now >= look
            events = poller.poll(0 if due else int((look - now) * 1000) + 1)
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
            if exited:  # judged once more: its processes' CPU may have passed the limit since the last look
                cpu_all = self._call_cpu(pid)  # a zombie's /proc stat still holds its (and its reaped children's) CPU
                used = max(used, cpu_all)
                killed_by = verdict_at_exit(cpu_all, lim)
                break
            if due:  # alive at the poll after `now`: judged on its used time up to `now`
                d = run_delay(pid)
                delay = None if d is None or delay0 is None else d - delay0
                used = used_time(now - t0, delay, self._call_cpu(pid))
                killed_by = verdict(used, now - t0, lim)
                if killed_by is not None:
                    break
                look = now + next_check(used, now - t0, lim, check_s)
        _kill_group(pid)
        _, status, ru = os.wait4(pid, 0)
        t_reaped = time.monotonic()
        wall = t_reaped - t0
        for fd in caps:
            self._drain(fd, caps[fd])
            os.close(fd)
        os.close(pidfd)
        self.dirty = True
        if not self.in_pid_ns:  # no namespace dies with this worker: clean before the host may kill it
            self.cleaner.all()
            self.dirty = False
        starved = (f"the call was starved of CPU by load: after {wall:.2f} s of wall clock it had used {used:.2f} s "
                   f"of its {lim.time_s:g} s limit and waited {delay or 0.0:.2f} s for a CPU") if killed_by == "starved" else ""
        out = make_result(status, ru, wall, killed_by, caps[out_r], caps[err_r], caps[res_r], lim.time_s, opts,
                          starved)
        out["timings"].update(w_recv=t_recv, w_reaped=t_reaped, w_cleaned=time.monotonic(), **self.off)
        self.off = {}
        return out

    def _call_cpu(self, pid: int) -> float:
        """CPU seconds the running call used so far: its first process (with the children it
        reaped) and every other process of the call the worker can tell apart (all but itself in
        its PID namespace, else those of the call's uid)."""
        pids = {pid, *self.cleaner.call_pids()}
        return sum(cpu_seconds(p) for p in pids)

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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


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

    failed: dict[str, str] = {}  # module -> why it did not import; sent with "ready" (the host decides)
    for mod in (*STDLIB_PREIMPORTS, *opts.get("preload", ())):  # the config's preimport, then extras
        try:
            importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001
            failed[mod] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"kit.sandbox.worker: cannot preload {mod}: {exc}", file=sys.stderr)
    import gc

    import kit.sandbox.runner  # noqa: F401 - warm for the children

    gc.collect()
    gc.freeze()  # keep the warm heap shared copy-on-write with the children
    huge = collapse_heap()  # fewer page-table entries to copy per fork (kit.sandbox.hugepages)
    if LIBC is not None:
        LIBC.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the call's orphans come back to us
    # SIGPIPE stays ignored here (a dead child's request pipe must not kill the worker); a
    # host that went away ends the loop through BrokenPipeError; children get SIG_DFL back
    worker = Worker(opts)
    worker.prefork()
    try:
        write_frame(proto_out, {"ready": True, "pid": os.getpid(), "rss_mb": rss_mb(),
                                "uid": opts.get("uid"), "pid_ns": worker.in_pid_ns,
                                "huge_mb": huge >> 20, "preload_failed": failed})
        while True:
            raw = read_raw(proto_in)
            t_recv = time.monotonic()
            req = None if raw is None else json.loads(raw)
            if req is None or req.get("kind") == "exit":
                return
            if req.get("kind") == "ping":
                write_frame(proto_out, {"pong": True, "rss_mb": rss_mb()})
                continue
            write_frame(proto_out, worker.run(req, raw, t_recv))
            worker.after_reply()
    except BrokenPipeError:
        return


if __name__ == "__main__":
    main()
