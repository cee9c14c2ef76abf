"""Pipeline seeds side by side on Ray (issue #48): ``python -m kit reproduce --seeds 101-105 --ray local``.

Each seed's series is one Ray task that runs ``python -m kit reproduce --run <run>-s<seed> --seed <seed> ...``
(:func:`kit.pipeline.seeds.seed_command`) as a subprocess, from the caller's working folder, into the same
run folder as the seeds run one after another; a seed's result files do not depend on how it was scheduled
(its fixed thread count, ``model.torch_threads``, is what makes them repeatable: :mod:`kit.fingerprint`).
The Ray side (the tasks, the driver) is :mod:`kit.bridge.seed_fanout`.
A task asks Ray for that many CPUs (:func:`seed_cpus`), so Ray runs as many seeds at once as the CPUs allow
and queues the rest. That count is the seed's torch threads only: its background training (06, 10 beside
the notebooks) and its sandbox workers come on top, and Ray pins nothing to cores, so a machine full of
seeds is oversubscribed (the results stay the same; the time does not scale perfectly). Resuming works as
for one run: a seed's finished notebooks are skipped.

Two places to run:

* ``--ray local``: a Ray head the kit starts on this machine inside a private network and PID
  namespace with only loopback (:func:`kit.bridge.verl_cpu.runner.run_session`, ``verl=False``),
  announcing the CPUs this process may use (``--ray-cpus``); it is stopped, and every process left in the
  namespace killed, when the seeds end, fail or this command is killed. Seeds get this command's
  environment (no network but loopback: a seed that needs one, an online tracker, cannot run here).
* ``--ray <host:port>``: an existing cluster's head; the tasks run on its nodes, which must see this
  checkout, the working folder and ``reports/`` at the same paths (a shared file system), and get the
  node's environment plus this command's ``KIT_*`` variables. Nothing is started or stopped there;
  seeds still running when this command is interrupted or times out are cancelled and their
  processes killed.

One seed's failure (its series, or its Ray task: out of memory, a lost node) does not stop the others.
The fan-out folder (:func:`kit.pipeline.seeds.fanout_name`) holds ``seed-<seed>.log`` per seed,
``results.json`` (each finished seed's exit code, written as it ends), ``timings.json`` (the fan-out's wall
seconds from the first task submitted to the last seed's end, each seed's own, Ray's CPUs) and, with
``local``, the session's record; it is locked while a fan-out writes it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from kit.jsonio import write_json
from kit.pipeline.lock import run_lock
from kit.pipeline.verl_runtime import followed

__all__ = ["LOCAL", "FanOutError", "fan_out", "plan", "seed_cpus"]

#: ``--ray local``: a Ray head of the kit's own on this machine (private namespace, loopback only)
LOCAL = "local"
#: what the local session sets in every process's environment (its Ray head, the namespace's mark, and this
#: checkout first on PYTHONPATH): each seed gets the caller's values back
SESSION_VARS = ("PYTHONPATH", "RAY_ADDRESS", "RAY_AUTH_MODE", "KIT_VERL_SESSION_NS")
#: seconds the local session may take beyond the fan-out's own limit: Ray's start (up to 4 tries on a loaded
#: machine, :func:`kit.bridge.verl_cpu.ray_local.start_ray`) and stop
RAY_START_ALLOWANCE_S = 1800.0
#: ``--ray`` addresses: ``host:port`` or ``ray://host:port``
_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d+")


class FanOutError(RuntimeError):
    """The seeds cannot be fanned out as asked (the message says why and what to do)."""


def seed_cpus(threads: int) -> int:
    """CPUs a seed's task asks Ray for: its torch thread count ``model.torch_threads`` (a negative count,
    adaptive up to that many, asks for that many).

    Raises:
        FanOutError: ``threads`` is 0 (the machine's default: neither a budget nor bitwise repeatable).
    """
    if int(threads) == 0:
        raise FanOutError("--ray needs each seed's thread count fixed (model.torch_threads = 0 means the machine's "
                          "default, which neither bounds a seed nor repeats bitwise): --set model.torch_threads=N")
    return abs(int(threads))


def plan(threads: int, ray: str, seeds: int, local_cpus: int) -> tuple[int, int | None]:
    """``(CPUs per seed, seeds at once)`` of a fan-out; seeds at once is None for a cluster (its CPUs are
    known once joined).

    Args:
        threads: the profile's ``model.torch_threads``.
        ray: ``"local"`` or a cluster's ``host:port`` (``ray://host:port``).
        seeds: how many seeds.
        local_cpus: the CPUs a local head announces.
    Raises:
        FanOutError: a thread count of 0 (:func:`seed_cpus`), a seed that needs more CPUs than a local head
            has, or an address that is not ``host:port``.
    """
    per_seed = seed_cpus(threads)
    if ray != LOCAL:
        if not _ADDRESS.fullmatch(ray):
            raise FanOutError(f"--ray {ray!r}: give 'local' or a Ray head's address host:port (ray://host:port)")
        return per_seed, None
    if per_seed > local_cpus:
        raise FanOutError(f"each seed asks for {per_seed} CPUs (model.torch_threads) but the local Ray head has "
                          f"{local_cpus} (--ray-cpus): no seed could be scheduled")
    return per_seed, max(1, min(seeds, local_cpus // per_seed))


def fan_out(commands: dict[int, list[str]], out_dir: str | os.PathLike, *, ray: str, cpus_per_seed: int,
            local_cpus: int, timeout_s: float = 7 * 86400.0) -> dict[int, int]:
    """Run each seed's ``python -m kit`` command as one Ray task; returns each seed's exit code.

    Args:
        commands: seed -> the ``python -m kit`` arguments of its series (:func:`kit.pipeline.seeds.seed_command`).
        out_dir: the fan-out folder (locked while this runs).
        ray: ``"local"`` (a private Ray head on this machine) or a cluster's address.
        cpus_per_seed: CPUs each task asks Ray for (:func:`plan`).
        local_cpus: CPUs a local head announces.
        timeout_s: the whole fan-out, seconds: seeds still running then are stopped (exit code 124).
    Returns:
        seed -> exit code of its series (1 for a seed whose Ray task failed or that never reported).
    Raises:
        FanOutError: the cluster could not be joined, or the local session did not start.
        kit.pipeline.lock.RunLocked: another fan-out writes ``out_dir``.
        SystemExit: 130 when interrupted (Ctrl-C): the seeds are stopped, their finished notebooks kept.
    """
    out = Path(out_dir).resolve()
    with run_lock(out):
        spec = {"commands": {str(s): list(c) for s, c in commands.items()}, "cpus_per_seed": cpus_per_seed,
                "cwd": os.getcwd(), "python": sys.executable, "out": str(out), "results": str(out / "results.json"),
                "address": None if ray == LOCAL else ray, "timeout_s": timeout_s,
                "kit_env": {} if ray == LOCAL else {k: v for k, v in os.environ.items() if k.startswith("KIT_")},
                # what the local session sets that a seed gets back as it is here (None: unset)
                "restore": {k: os.environ.get(k) for k in SESSION_VARS}}
        spec_path = write_json(out / "fanout_spec.json", spec)
        results = out / "results.json"
        results.unlink(missing_ok=True)
        (out / "timings.json").unlink(missing_ok=True)  # a failed start leaves none, not the last fan-out's
        try:
            if ray == LOCAL:
                _local(spec, spec_path, out, local_cpus, timeout_s)
            else:
                from kit.bridge.seed_fanout import JoinError, drive  # Ray: only for --ray

                try:
                    drive(spec)
                except JoinError as exc:
                    raise FanOutError(str(exc)) from exc
        except KeyboardInterrupt:
            print("\nkit.pipeline: interrupted; the seeds were stopped and their finished notebooks kept: rerun the "
                  "same command to resume them", file=sys.stderr)
            raise SystemExit(130) from None
        codes = {int(k): int(v) for k, v in json.loads(results.read_text()).items()} if results.exists() else {}
    return {seed: codes.get(seed, 1) for seed in commands}


def _local(spec: dict[str, Any], spec_path: Path, out: Path, cpus: int, timeout_s: float) -> None:
    """The driver in a private session with a Ray head of its own (its output streamed here)."""
    from kit.bridge.verl_cpu import runner  # Ray in a private namespace: only for --ray local

    log = out / "driver.log"
    log.write_text("")
    launch = runner.Launch("seeds", [sys.executable, "-m", "kit.bridge.seed_fanout", str(spec_path)], str(log),
                           cwd=spec["cwd"])
    res = followed(lambda: runner.run_session([launch], out, num_cpus=cpus, num_gpus=0,
                                              timeout_s=timeout_s + RAY_START_ALLOWANCE_S, verl=False), log)
    if res.orphans:
        print(f"kit.pipeline: {len(res.orphans)} processes were still running after the seeds' Ray session and were "
              f"killed: {res.orphans}", file=sys.stderr)
    if res.error and not (out / "results.json").exists():  # no seed ran: the session did not start
        raise FanOutError(f"the seeds' Ray session did not start: {res.error}")
    if res.error:
        print(f"kit.pipeline: the seeds' Ray session failed: {res.error}", file=sys.stderr)
