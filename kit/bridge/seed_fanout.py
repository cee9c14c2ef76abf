"""The Ray side of ``kit reproduce --seeds ... --ray`` (issue #48; the plan and the local session are
:mod:`kit.pipeline.fanout`'s): one Ray task per seed, each running that seed's ``python -m kit reproduce``
as a subprocess in its own process group, killed with the task; the exit codes and timings written as
they come.

``python -m kit.bridge.seed_fanout <fanout_spec.json>`` is the driver the local session runs (a cluster's
driver is :func:`drive`, called in the ``kit reproduce`` process itself).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

from kit.jsonio import write_json

__all__ = ["JoinError", "drive", "main"]

class JoinError(RuntimeError):
    """The Ray cluster could not be joined (the message names the address and Ray's error)."""


def drive(spec: dict[str, Any]) -> dict[int, int]:
    """The fan-out's driver (inside the local session, or against a cluster): one task per seed, each seed's
    end printed as it comes (a failed seed with its log's last lines), the exit codes written to
    ``spec["results"]`` as they come (a seed that finished stays recorded whatever happens later). Returns
    seed -> exit code.

    Raises:
        JoinError: the cluster could not be joined.
    """
    address = spec["address"] or os.environ["RAY_ADDRESS"]
    env = _seed_env(spec, dict(os.environ))  # before ray.init, which adds to os.environ (PYTHONBREAKPOINT)
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, ValueError, RuntimeError, ...
        raise JoinError(f"could not join the Ray cluster at {address}: {type(exc).__name__}: {exc}") from exc
    codes: dict[int, int] = {}
    seconds_of: dict[int, float] = {}
    cpus, t0 = None, time.perf_counter()
    t_end = t0
    pending: dict[Any, int] = {}
    try:
        run_seed = ray.remote(_run_seed).options(num_cpus=spec["cpus_per_seed"], max_retries=0)
        t0 = time.perf_counter()
        pending = {run_seed.remote(spec, int(s), env): int(s) for s in spec["commands"]}
        cpus = int(ray.cluster_resources().get("CPU", 0))
        print(f"kit: {len(pending)} seeds on Ray at {address}: {cpus} CPUs, {spec['cpus_per_seed']} per seed", flush=True)
        deadline = time.monotonic() + float(spec["timeout_s"])
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                print(f"kit: the fan-out ran past {spec['timeout_s']:.0f} s: seeds "
                      f"{', '.join(map(str, pending.values()))} are stopped", flush=True)
                for seed in pending.values():
                    _record(spec, codes, seed, 124)
                break
            seed = pending.pop(ready[0])
            try:
                code, seconds = ray.get(ready[0])
                how = f"exited {code} after {seconds:.0f} s"
                seconds_of[seed] = seconds
            except ray.exceptions.RayError as exc:  # its task died (out of memory, a lost node): this seed only
                code, how = 1, f"failed: its Ray task ended with {type(exc).__name__}: {str(exc)[:300]}"
            t_end = time.perf_counter()
            _record(spec, codes, seed, code)
            print(f"kit: seed {seed} {how} (log {_log(spec, seed)})" + _tail(spec, seed, code), flush=True)
    finally:
        _stop(pending)  # a timed-out or interrupted driver leaves no seed running on a cluster
        ray.shutdown()
        # the fan-out's wall (the benchmark's ratio to one seed alone: benchmarks/tiny_series.py --fanout)
        write_json(Path(spec["out"], "timings.json"),
                   {"wall_s": t_end - t0, "seeds_s": {str(k): v for k, v in seconds_of.items()},
                    "codes": {str(k): v for k, v in codes.items()}, "cpus_per_seed": spec["cpus_per_seed"],
                    "ray_cpus": cpus})
    return codes


def _stop(pending: dict[Any, int], wait_s: float = 30.0) -> None:
    """Cancel the tasks of ``pending`` and wait up to ``wait_s`` for them to end: each kills its seed's process
    group when the cancel reaches it (:func:`_run_seed` polls its subprocess so that it does within a second)."""
    if not pending:
        return
    for ref in pending:
        ray.cancel(ref)
    ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)


def _seed_env(spec: dict[str, Any], environ: dict[str, str]) -> dict[str, str] | None:
    """The environment of each seed: locally the caller's (``environ``, the driver's before ``ray.init``, with
    the variables the session set back to the caller's values: ``spec["restore"]``); None on a cluster
    (each node's own, :func:`_run_seed`)."""
    if spec["address"]:
        return None
    env = dict(environ)
    for key, value in spec["restore"].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _record(spec: dict[str, Any], codes: dict[int, int], seed: int, code: int) -> None:
    codes[seed] = code
    write_json(spec["results"], {str(k): v for k, v in codes.items()})


def _log(spec: dict[str, Any], seed: int) -> str:
    return str(Path(spec["out"]) / f"seed-{seed}.log")


def _tail(spec: dict[str, Any], seed: int, code: int, lines: int = 6) -> str:
    """A failed seed's last log lines (its STOPPED message names the notebook and cell), indented."""
    if code == 0:
        return ""
    try:
        text = Path(_log(spec, seed)).read_text(errors="replace").replace("\r", "\n")
    except OSError:
        return ""
    last = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("Executing")][-lines:]
    return "".join(f"\n    {ln}" for ln in last)


def _run_seed(spec: dict[str, Any], seed: int, env: dict[str, str] | None) -> tuple[int, float]:
    """One Ray task: seed ``seed``'s series as a subprocess in its own process group, killed with the task (a
    cancelled task gets ``KeyboardInterrupt`` in its main thread, which arrives between two polls of the
    subprocess). ``env`` None (a cluster): this node's environment without Ray's variables (``RAY_*``, and the
    ``OMP_NUM_THREADS`` Ray sets per task; the kit fixes its own threads), plus the caller's ``KIT_*``
    variables. Returns ``(exit code, seconds)``."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "OMP_NUM_THREADS"}
        env.update(spec.get("kit_env", {}))
    t0 = time.perf_counter()
    with open(_log(spec, seed), "w") as log:
        proc = subprocess.Popen([spec["python"], "-m", "kit", *spec["commands"][str(seed)]], cwd=spec["cwd"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:  # poll: a blocking wait would see the cancel only once the seed ended by itself
                try:
                    code = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return code, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kit.bridge.seed_fanout <spec.json>``: the driver inside the local session."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m kit.bridge.seed_fanout <fanout_spec.json>", file=sys.stderr)
        return 2
    try:
        codes = drive(json.loads(Path(args[0]).read_text()))
    except JoinError as exc:
        print(f"kit: {exc}", file=sys.stderr)
        return 1
    return 0 if codes and not any(codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
