"""Pipeline seeds side by side on Ray (issue #48): ``python -m kit reproduce --seeds 101-105 --ray local``.

Each seed's series is one Ray task that runs ``python -m kit reproduce --run <run>-s<seed> --seed <seed> ...``
(:func:`kit.pipeline.seeds.seed_command`) as a subprocess: the same command, environment and run folder as
the seeds run one after another, so a seed's result files do not depend on how it was scheduled (its
fixed thread count, ``model.torch_threads``, is what makes them repeatable: :mod:`kit.fingerprint`). A
task asks Ray for that many CPUs (``cpus_per_seed``), so Ray runs as many seeds at once as the CPUs
allow and queues the rest. Resuming works as for one run: a seed's finished notebooks are skipped.

Two places to run:

* ``--ray local``: a Ray head the kit starts on this machine inside a private network and PID
  namespace with only loopback (:func:`kit.bridge.verl_cpu.runner.run_session`, ``verl=False``),
  announcing the CPUs this process may use; it is stopped, and every process left in the namespace
  killed, when the seeds end, fail or this command is killed.
* ``--ray <address>``: an existing cluster's head (``host:port``); the tasks run on its nodes, which
  must see this checkout and its ``reports/`` at the same path (a shared file system). Nothing is
  started or stopped there; tasks still running when this command is interrupted are cancelled and
  their seed's processes killed.

The per-seed output goes to ``reports/<profile>/<fanout folder>/seed-<seed>.log``
(:func:`fanout_name`); a line per seed is printed when it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.config.paths import REPO_ROOT
from kit.pipeline.timing import usable_cpus

__all__ = ["LOCAL", "cpus_per_seed", "drive", "fan_out", "fanout_name", "main", "seed_parallelism", "usable_cpus"]

#: ``--ray local``: a Ray head of the kit's own on this machine (private namespace, loopback only)
LOCAL = "local"
#: environment a Ray worker sets for its task that a seed run one after another does not have
_RAY_ENV_PREFIXES = ("RAY_", "KIT_VERL_SESSION_NS")


def fanout_name(run: str) -> str:
    """The folder of the fan-out's logs and session record: ``fanout``, or ``<run>-fanout``."""
    from kit.pipeline.seeds import DEFAULT_RUN

    return "fanout" if run == DEFAULT_RUN else f"{run}-fanout"


def seed_parallelism(cpus: int, cpus_per_seed: int, seeds: int) -> int:
    """How many of ``seeds`` seeds run at once on ``cpus`` Ray CPUs when each asks for ``cpus_per_seed``.

    Raises:
        ValueError: ``cpus_per_seed`` above ``cpus`` (no seed could ever be scheduled) or not positive.
    """
    if cpus_per_seed < 1:
        raise ValueError(f"a seed needs at least one CPU, got {cpus_per_seed}")
    if cpus_per_seed > cpus:
        raise ValueError(f"each seed asks for {cpus_per_seed} CPUs (model.torch_threads) but Ray has {cpus}: "
                         "no seed could be scheduled")
    return max(1, min(seeds, cpus // cpus_per_seed))


def fan_out(commands: dict[int, list[str]], out_dir: str | os.PathLike, *, ray: str, cpus_per_seed: int,
            local_cpus: int | None = None, timeout_s: float = 7 * 86400.0) -> dict[int, int]:
    """Run each seed's ``python -m kit`` command as one Ray task; returns each seed's exit code.

    Args:
        commands: seed -> the ``python -m kit`` arguments of its series (:func:`kit.pipeline.seeds.seed_command`).
        out_dir: the fan-out folder (:func:`fanout_name`): ``seed-<seed>.log`` per seed, the spec and, with
            ``ray="local"``, the session's record (``session.json``, ``session.log``).
        ray: ``"local"`` (a private Ray head on this machine) or a cluster's address.
        cpus_per_seed: CPUs each task asks Ray for (the profile's ``model.torch_threads``).
        local_cpus: CPUs the local head announces (default: those this process may use).
        timeout_s: the whole fan-out, seconds (the local session is killed after it).
    Returns:
        seed -> exit code of its series (1 for a seed that never reported: the session died or timed out).
    Raises:
        ValueError: a seed that cannot be scheduled (:func:`seed_parallelism`).
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cpus = local_cpus or len(usable_cpus())
    if ray == LOCAL:
        seed_parallelism(cpus, cpus_per_seed, len(commands))
    spec = {"commands": {str(s): list(c) for s, c in commands.items()}, "cpus_per_seed": cpus_per_seed,
            "cwd": str(REPO_ROOT), "python": sys.executable, "out": str(out), "results": str(out / "results.json"),
            # local: the seed runs with exactly the environment of a seed run one after another from here
            "env": dict(os.environ) if ray == LOCAL else {k: v for k, v in os.environ.items() if k.startswith("KIT_")},
            "exact_env": ray == LOCAL, "address": None if ray == LOCAL else ray}
    spec_path = out / "fanout_spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    results = out / "results.json"
    results.unlink(missing_ok=True)
    if ray == LOCAL:
        from kit.bridge.verl_cpu import runner  # Ray in a private namespace: only for --ray local
        from kit.pipeline.verl_runtime import follow

        log = out / "driver.log"
        log.write_text("")
        done = threading.Event()
        tail = threading.Thread(target=follow, args=(log, done), daemon=True)
        tail.start()
        try:
            res = runner.run_session([runner.Launch("seeds", [sys.executable, "-m", "kit.pipeline.fanout",
                                                              str(spec_path)], str(log), cwd=str(REPO_ROOT))],
                                     out, num_cpus=cpus, num_gpus=0, timeout_s=timeout_s, verl=False)
        finally:
            done.set()
            tail.join()
        if res.orphans:
            print(f"kit.pipeline: {len(res.orphans)} processes were still running after the seeds' Ray session and "
                  f"were killed: {res.orphans}", file=sys.stderr)
        if res.error:
            print(f"kit.pipeline: the seeds' Ray session failed: {res.error}", file=sys.stderr)
    else:
        drive(spec)
    codes = {int(k): int(v) for k, v in json.loads(results.read_text()).items()} if results.exists() else {}
    return {seed: codes.get(seed, 1) for seed in commands}


def drive(spec: dict[str, Any]) -> dict[int, int]:
    """The fan-out's driver (inside the local session, or against a cluster): one task per seed, each
    seed's end printed as it comes, the exit codes written to ``spec["results"]`` as they come (a seed
    that finished stays recorded if a later one kills the session). Returns seed -> exit code."""
    import ray  # Ray: the paper path's dependency, only for --ray

    address = spec["address"] or os.environ["RAY_ADDRESS"]
    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    codes: dict[int, int] = {}
    try:
        run_seed = ray.remote(_run_seed).options(num_cpus=spec["cpus_per_seed"], max_retries=0)
        pending = {run_seed.remote(spec, int(s)): int(s) for s in spec["commands"]}
        cpus = int(ray.cluster_resources().get("CPU", 0))
        print(f"kit: {len(pending)} seeds on Ray at {address}: {cpus} CPUs, {spec['cpus_per_seed']} per seed "
              f"({max(1, min(len(pending), cpus // spec['cpus_per_seed']))} at once)", flush=True)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                seed = pending.pop(ready[0])
                code, seconds = ray.get(ready[0])
                codes[seed] = code
                Path(spec["results"]).write_text(json.dumps({str(k): v for k, v in codes.items()}))
                print(f"kit: seed {seed} exited {code} after {seconds:.0f} s (log {_log(spec, seed)})", flush=True)
        except BaseException:
            for ref in pending:  # an interrupted driver leaves no seed running on a cluster
                ray.cancel(ref)
            raise
    finally:
        ray.shutdown()
    return codes


def _log(spec: dict[str, Any], seed: int) -> str:
    return str(Path(spec["out"]) / f"seed-{seed}.log")


def _run_seed(spec: dict[str, Any], seed: int) -> tuple[int, float]:
    """One Ray task: seed ``seed``'s series as a subprocess in its own process group, killed with the task
    (a cancelled task gets ``KeyboardInterrupt``). Returns ``(exit code, seconds)``."""
    env = dict(spec["env"]) if spec["exact_env"] else {
        **{k: v for k, v in os.environ.items() if not k.startswith(_RAY_ENV_PREFIXES) and k != "OMP_NUM_THREADS"},
        **spec["env"]}
    t0 = time.perf_counter()
    with open(_log(spec, seed), "w") as log:
        proc = subprocess.Popen([spec["python"], "-m", "kit", *spec["commands"][str(seed)]], cwd=spec["cwd"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return code, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kit.pipeline.fanout <spec.json>``: the driver inside the local session."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m kit.pipeline.fanout <fanout_spec.json>", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    codes = drive(spec)
    return 0 if codes and not any(codes.values()) else 1


def cpus_per_seed(threads: int) -> int:
    """CPUs a seed's task asks Ray for: its fixed thread count (``model.torch_threads``); 0 (the machine's
    default, not bitwise repeatable: :mod:`kit.fingerprint`) counts as one."""
    return max(1, int(threads))


if __name__ == "__main__":
    sys.exit(main())
