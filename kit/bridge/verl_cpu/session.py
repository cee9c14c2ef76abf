"""Inside the private namespace: start Ray, run the launches, watch, stop Ray (``python -m``).

Run by :func:`kit.bridge.verl_cpu.runner.run_session` as PID 1 of a new PID and network
namespace; reads the spec JSON it wrote and writes ``session.json`` beside it::

    {"pid_namespace": "pid:[...]", "codes": {name: exit status}, "timings": {"ray_start_s": ...,
     "<name>_s": ..., "ray_stop_s": ...}, "sandbox_workers_max": n, "sandbox_workers_steady": n, "peak_rss_bytes": b, "peak_pss_bytes": b, "error": null}

The session lives no longer than the process that started it (issue #44): ``run_session`` passes the
read end of a pipe (``lifeline_fd`` in the spec) whose write end only it holds, and
:func:`watch_lifeline` ends the session when that pipe reads EOF: every process in the namespace
gets SIGTERM, then SIGKILL 2 s later, and this process (PID 1) exits, upon which the kernel kills
whatever is left in the namespace. A pipe, not ``PR_SET_PDEATHSIG``: the death signal follows the
*thread* that forked, and the starter may be any thread of a notebook kernel.

A watcher thread samples every second the number of kit sandbox worker interpreters (reported:
the maximum, the steady count = the most frequent non-zero sample, and the histogram) and the
resident memory of all processes in the namespace (Ray, VERL, sandbox; summed RSS and PSS): the
maxima are reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from kit.bridge.verl_cpu import ray_local


class Watcher(threading.Thread):
    """Samples sandbox workers and resident memory of the namespace's processes every ``period_s``."""

    def __init__(self, period_s: float = 1.0):
        super().__init__(daemon=True)
        self.period_s, self.stop_event = period_s, threading.Event()
        self.sandbox_max, self.rss_max, self.pss_max = 0, 0, 0
        self.sandbox_counts: dict[int, int] = {}  # workers seen -> number of samples

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            procs = ray_local.session_processes()
            n = ray_local.sandbox_workers(procs)
            self.sandbox_max = max(self.sandbox_max, n)
            self.sandbox_counts[n] = self.sandbox_counts.get(n, 0) + 1
            rss, pss = ray_local.resident_bytes(procs)
            self.rss_max, self.pss_max = max(self.rss_max, rss), max(self.pss_max, pss)


def write_record(out: Path, info: dict) -> None:
    """Write ``out/session.json`` whole or not at all (a temp file renamed): two threads write it, and
    the lifeline's ``os._exit`` may cut the process off at any point."""
    tmp = out / f"session.json.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, out / "session.json")


LIFELINE_GRACE_S = 2.0  # seconds between SIGTERM and SIGKILL when the starter is gone


def watch_lifeline(fd: int, out: Path, ray_temp: str, info: dict, grace_s: float = LIFELINE_GRACE_S) -> threading.Thread:
    """Start a daemon thread that ends the session when ``fd`` (the lifeline pipe's read end) reads
    EOF, i.e. when every holder of its write end (the starter) has exited or been killed.

    Ending it: SIGTERM to every other process of the namespace, SIGKILL to those alive ``grace_s``
    seconds later (:func:`ray_local.stop_ray`), Ray's temp folder removed, ``starter_gone`` noted as
    ``info["error"]`` (the session's record, which :func:`main` also writes) and in
    ``out/session.json``, then ``os._exit(1)``: PID 1 leaving takes the rest of the namespace with it.
    Bytes written to the pipe are ignored. Must run inside the session's namespace.

    Returns:
        The started thread.
    """
    os.set_inheritable(fd, False)  # Ray, VERL and the launches must not hold the session's lifeline

    def run() -> None:
        while True:
            try:
                if not os.read(fd, 4096):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        try:
            print("kit: the process that started this session is gone; stopping the session", flush=True)
            info["error"] = "starter_gone: the process that started the session exited or was killed"
            write_record(out, info)
            ray_local.stop_ray(grace_s)
            subprocess.run(["rm", "-rf", ray_temp], check=False)
        finally:
            os._exit(1)

    t = threading.Thread(target=run, name="kit-session-lifeline", daemon=True)
    t.start()
    return t


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    env = {**os.environ, **spec["env"]}
    info: dict = {"pid_namespace": ray_local.pid_namespace(), "codes": {}, "timings": {}, "error": None}
    os.environ[ray_local.SESSION_ENV] = env[ray_local.SESSION_ENV] = info["pid_namespace"]
    write_record(out, info)
    if spec.get("lifeline_fd") is not None:  # issue #44: nothing of the session outlives its starter
        watch_lifeline(int(spec["lifeline_fd"]), out, spec["ray_temp"], info)
    watcher = Watcher()
    started = False
    try:
        ray_local.loopback_up()
        started = True  # from here on, whatever runs in the namespace is stopped at the end
        address = ""
        if spec.get("start_ray", True):
            t = time.perf_counter()
            address = ray_local.start_ray(spec["ray_temp"], num_cpus=spec["num_cpus"], num_gpus=spec["num_gpus"],
                                          env=env)
            info["timings"]["ray_start_s"] = time.perf_counter() - t
            print(f"kit: Ray head at {address} (private namespace {info['pid_namespace']}), "
                  f"{info['timings']['ray_start_s']:.1f} s", flush=True)
        watcher.start()
        for launch in spec["launches"]:
            t = time.perf_counter()
            print(f"kit: {launch['name']}: {' '.join(launch['argv'])}", flush=True)
            with open(launch["log"], "w") as log:
                code = subprocess.run(launch["argv"], env={**env, **({"RAY_ADDRESS": address} if address else {}),
                                                           **launch["env"]},
                                      cwd=launch.get("cwd"), stdout=log, stderr=subprocess.STDOUT).returncode
            info["codes"][launch["name"]] = code
            info["timings"][f"{launch['name']}_s"] = time.perf_counter() - t
            print(f"kit: {launch['name']} exited {code} after {info['timings'][launch['name'] + '_s']:.1f} s "
                  f"(log {launch['log']})", flush=True)
    except Exception as exc:  # noqa: BLE001 - reported in session.json, the caller raises
        info["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        watcher.stop_event.set()
        if started:
            t = time.perf_counter()
            try:
                info["killed_after_grace"] = ray_local.stop_ray()
            except Exception as exc:  # noqa: BLE001
                info["error"] = info["error"] or f"ray stop failed: {exc}"
            info["timings"]["ray_stop_s"] = time.perf_counter() - t
        info["sandbox_workers_max"] = watcher.sandbox_max
        # the steady count: the most frequent non-zero sample (a worker replaced after a timeout
        # briefly overlaps its successor, so the maximum can exceed the pool by one)
        busy = {n: c for n, c in watcher.sandbox_counts.items() if n > 0}
        info["sandbox_workers_steady"] = max(busy, key=busy.get) if busy else 0
        info["sandbox_worker_samples"] = {str(n): c for n, c in sorted(watcher.sandbox_counts.items())}
        info["peak_rss_bytes"] = watcher.rss_max
        info["peak_pss_bytes"] = watcher.pss_max
        write_record(out, info)
        subprocess.run(["rm", "-rf", spec["ray_temp"]], check=False)
    return 0 if info["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
