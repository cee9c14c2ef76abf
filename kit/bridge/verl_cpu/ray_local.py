"""A Ray head for one CPU run, on loopback only, inside a private network and PID namespace.

Ray 2.60 started by VERL's own ``ray.init`` on a loaded 2-core machine waits a fixed 30 s for its
dashboard agent and dies; a ``ray start`` cluster has token auth on; and Ray advertises and binds
the host's other interfaces even with ``--node-ip-address=127.0.0.1``. So the kit:

* runs the whole VERL session in a new network namespace that has only ``lo`` and a new PID
  namespace (:func:`namespace_argv`: ``unshare --net --pid --fork --mount-proc``): no traffic can
  leave the machine, and when the session's first process exits the kernel kills every process
  left in it (Ray daemons, VERL workers, sandbox workers), even after a crash;
* starts Ray itself (:func:`start_ray`): ``ray start --head`` on 127.0.0.1, fixed ports, no
  dashboard, fake ``--num-gpus`` (VERL's trainer asks for GPU resources) and ``--num-cpus``
  (TransferQueue's storage unit and controller each take one), ``RAY_AUTH_MODE=disabled``,
  retried; and stops it (:func:`stop_ray`) after the run, failed or not.

``stop_ray`` terminates every process it can see: it refuses to run outside a private PID
namespace (it would kill other users' Ray on a shared machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

HOST = "127.0.0.1"
#: Fixed ports: the namespace is private, so they cannot clash with another run.
PORTS = {"--port": 6379, "--node-manager-port": 6380, "--object-manager-port": 6381,
         "--dashboard-agent-grpc-port": 6382, "--dashboard-agent-listen-port": 6383,
         "--runtime-env-agent-port": 6384, "--metrics-export-port": 6385, "--ray-client-server-port": 6386,
         "--min-worker-port": 11000, "--max-worker-port": 11999}
SANDBOX_MARK = "kit.sandbox.worker"


class RayStartError(RuntimeError):
    """``ray start`` failed on every try (names the log folder)."""


def ray_cli() -> list[str]:
    """argv prefix of the ``ray`` command of this interpreter's environment."""
    exe = Path(sys.executable).parent / "ray"
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


def namespace_argv() -> list[str]:
    """``unshare`` prefix for a private network + PID namespace (user namespace when not root).

    Raises:
        RuntimeError: ``unshare`` is not installed (util-linux).
    """
    if shutil.which("unshare") is None:
        raise RuntimeError("the VERL CPU runtime runs Ray in a private network namespace and needs `unshare` "
                           "(util-linux): apt-get install util-linux")
    argv = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        argv.insert(1, "--map-root-user")
    return argv


SESSION_ENV = "KIT_VERL_SESSION_NS"  # set by the session to its own PID namespace


def in_private_namespace() -> bool:
    """True inside a session namespace (:data:`SESSION_ENV` names this process's PID namespace and
    the network has only loopback)."""
    try:
        return os.environ.get(SESSION_ENV) == pid_namespace() and set(psutil.net_if_addrs()) <= {"lo"}
    except OSError:
        return False


def loopback_up() -> None:
    """Bring up ``lo`` in this (new) network namespace.

    Raises:
        RuntimeError: ``ip`` failed, or another interface than ``lo`` exists.
    """
    r = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`ip link set lo up` failed in the private network namespace: {r.stderr.strip()}")
    others = sorted(set(psutil.net_if_addrs()) - {"lo"})
    if others:
        raise RuntimeError(f"the run's network namespace has interfaces besides loopback: {others}")


def start_ray(temp_dir: str | os.PathLike, *, num_cpus: int = 8, num_gpus: int = 1, env: dict[str, str] | None = None,
              tries: int = 4, timeout_s: float = 300.0) -> str:
    """``ray start --head`` on loopback (see the module docstring); returns the address ``host:port``.

    Args:
        temp_dir: Ray's session folder (short path: Ray's socket names must fit 107 bytes).
        num_cpus, num_gpus: logical resources Ray announces (fake GPUs for VERL's workers).
        env: environment of the Ray daemons and so of every worker (``PYTHONPATH``, ``VERL_*``).
        tries: attempts; a failed one is stopped before the next. On a loaded 2-core machine
            (load ~7-10 from other test runs) Ray 2.60's raylet dies at start-up: it waits a fixed
            ~16 s for the dashboard agent (a Python process whose imports take longer under load)
            to write its port file, then aborts (``node_manager.cc:3588``, "Timed out waiting for
            file .../dashboard_agent_listen_port_..."; neither ``RAY_agent_register_timeout_ms``
            nor ``RAY_raylet_start_wait_time_s`` moved it). Measured: two tries in a row failed
            at load ~10; a failed try costs ~1 minute, and a retry finds the imports warmer.
        timeout_s: per attempt, seconds (generous: a loaded machine imports Ray slowly).
    Raises:
        RayStartError: every attempt failed (names the log folder and the last output).
    """
    # the raylet dies when its agents take longer than 30 s to register (a loaded 2-core machine): allow 3 min
    env = {**os.environ, **(env or {}), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_agent_register_timeout_ms": "180000"}
    argv = [*ray_cli(), "start", "--head", f"--node-ip-address={HOST}", f"--num-cpus={num_cpus}",
            f"--num-gpus={num_gpus}", "--include-dashboard=false", "--disable-usage-stats",
            f"--temp-dir={temp_dir}", *(f"{k}={v}" for k, v in PORTS.items())]
    last = ""
    for attempt in range(1, tries + 1):
        try:
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
            last = (r.stdout + r.stderr)[-2000:]
            if r.returncode == 0:
                return f"{HOST}:{PORTS['--port']}"
        except subprocess.TimeoutExpired as exc:
            last = f"timed out after {timeout_s:.0f} s: {str(exc.stdout or '')[-1000:]}"
        print(f"kit: ray start attempt {attempt}/{tries} failed{'; retrying' if attempt < tries else ''}. "
              f"Output:\n{last[-600:]}", file=sys.stderr, flush=True)
        stop_ray()
        time.sleep(2.0 * attempt)
    raise RayStartError(f"Ray did not start after {tries} tries of {timeout_s:.0f} s (logs under "
                        f"{temp_dir}/session_latest/logs; the raylet did not register in time or died, which a "
                        "machine short of CPU or memory causes). Stop other heavy jobs (other Ray/VERL runs, "
                        "parallel test runs) or run the VERL tests alone (`make test-verl`), then retry. "
                        f"Last output:\n{last}")


def stop_ray(grace_s: float = 10.0) -> list[int]:
    """Stop Ray and everything else still running in the session namespace: SIGTERM to every
    process in it (what ``ray stop`` sends; the ``ray`` CLI itself takes 10-30 s to import on a
    loaded machine), SIGKILL to those alive ``grace_s`` later. Refused outside the private
    namespace (see the module docstring).

    Returns:
        PIDs that needed the SIGKILL.
    """
    if not in_private_namespace():
        raise RuntimeError("refusing to stop every process in sight outside the kit's private PID namespace: "
                           "it would stop other users' Ray on this machine")
    procs = [p for p in session_processes() if p.status() != psutil.STATUS_ZOMBIE]
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in alive]


def session_processes() -> list[psutil.Process]:
    """Every other process visible here (inside the namespace: the run's own)."""
    me = os.getpid()
    return [p for p in psutil.process_iter(["pid", "ppid", "cmdline"]) if p.pid not in (me, 1)]


def sandbox_workers(procs: list[psutil.Process] | None = None) -> int:
    """Number of running kit sandbox workers: ``kit.sandbox.worker`` interpreters, not their
    bwrap wrappers, and not the per-call children a worker forks (same command line; the worker
    is a fork server, ``kit/sandbox/worker.py``)."""
    marked = {}
    for p in procs if procs is not None else session_processes():
        cmd = p.info.get("cmdline") or []
        # `-m kit.sandbox.worker`, or the `-c "... from kit.sandbox.worker import main ..."` that
        # kit.sandbox.isolation.python_argv starts
        if cmd and "bwrap" not in Path(cmd[0]).name and any(
                a == SANDBOX_MARK or f"from {SANDBOX_MARK} import" in a for a in cmd):
            marked[p.pid] = p.info.get("ppid")
    return sum(1 for ppid in marked.values() if ppid not in marked)


def resident_bytes(procs: list[psutil.Process] | None = None) -> tuple[int, int]:
    """``(rss, pss)``: summed resident and proportional set sizes of the processes, bytes.

    RSS counts shared pages (torch's libraries) once per process; PSS splits them among the
    processes sharing them, so its sum is the memory the whole session actually holds.
    """
    rss = pss = 0
    for p in procs if procs is not None else session_processes():
        try:
            full = p.memory_full_info()
            rss += full.rss
            pss += getattr(full, "pss", full.rss)
        except psutil.Error:
            pass
    return rss, pss


def pid_namespace(pid: int | str = "self") -> str:
    """``pid:[inode]`` of a process's PID namespace."""
    return os.readlink(f"/proc/{pid}/ns/pid")


def processes_in_namespace(ns: str) -> list[int]:
    """PIDs (host view) of processes still in PID namespace ``ns`` (orphans after a session)."""
    out = []
    for p in psutil.pids():
        try:
            if os.readlink(f"/proc/{p}/ns/pid") == ns:
                out.append(p)
        except OSError:
            pass
    return out
