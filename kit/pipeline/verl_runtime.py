"""What the series needs from the VERL runtime before and around its notebooks.

* :func:`check_verl_device`: with ``runtime=verl``, the device the VERL stages would launch on
  (``KIT_VERL_DEVICE``, chosen by :func:`kit.bridge.verl_cpu.runner.default_launcher`) is checked
  before the first notebook runs, so a machine that cannot launch them stops at once with one
  message saying what to set, not at notebook 03 after minutes of SFT.
* :func:`ignored_device_warning`: ``KIT_VERL_DEVICE`` set with ``runtime=local`` is said once.
* :func:`run_in_verl_cpu_session`: with ``runtime=verl`` and ``KIT_VERL_DEVICE=cpu`` the whole
  command runs inside one kit session with one Ray head; ``reports/<profile>/<run>/verl_session/``
  then holds its log and ``session.json``.

``kit.bridge`` is imported inside these functions, only for ``runtime=verl``: it is the VERL side,
and a local run must not load it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kit.config import load
from kit.plan import SERIES, Layout, is_stage_entry
from kit.studies import STUDIES

T = TypeVar("T")

#: the environment variable that picks VERL's device (``kit.bridge.verl_cpu.runner.DEVICE_ENV``,
#: named here too so that a local run reads it without importing kit.bridge; a test keeps them equal)
DEVICE_ENV = "KIT_VERL_DEVICE"
#: the notebooks that launch VERL under ``runtime=verl`` (for the paper's stages; any RL stage's entry,
#: :func:`kit.plan.is_stage_entry`, does): :func:`kit.runtime.verl.run_stage` (03-05) and
#: :func:`kit.runtime.verl.run_ablation` (06) start stages through :mod:`kit.bridge.stages`,
#: whose launcher :func:`kit.bridge.verl_cpu.runner.default_launcher` picks from ``KIT_VERL_DEVICE``, and
#: each study that declares it (:data:`kit.studies.STUDIES`: ReTool's PPO arms, 10)
LAUNCHES_VERL = (*(n for n in SERIES if is_stage_entry(n)), "06_roc_ablation",
                 *(s.notebook for s in STUDIES if s.launches_verl))


class VerlDeviceError(RuntimeError):
    """``runtime=verl`` cannot launch its stages on this machine as ``KIT_VERL_DEVICE`` is set
    (the message says what to set)."""


def check_verl_device(runtime: str, notebooks: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    """Refuse, before anything runs, a series whose VERL stages could not launch on this machine.

    The check is the one the stages themselves make when they launch:
    :func:`kit.bridge.verl_cpu.runner.default_launcher` (``KIT_VERL_DEVICE=gpu`` or unset needs a
    CUDA GPU; ``cpu`` needs a machine without one; any other value is refused).

    Args:
        runtime: ``cfg.runtime`` of the run (``local`` is never checked: it launches no VERL).
        notebooks: names of the notebooks about to run; only a series holding one of
            :data:`LAUNCHES_VERL` is checked (``--until 02`` launches no stage).
        env: the environment (default ``os.environ``).
    Raises:
        VerlDeviceError: naming the notebooks, what is wrong and what to set.
    """
    launching = [n for n in notebooks if n in LAUNCHES_VERL or is_stage_entry(n)]
    if runtime != "verl" or not launching:
        return
    from kit.bridge.verl_cpu import runner  # kit.bridge (VERL side): only for runtime=verl, which launches it

    try:
        runner.default_launcher(os.environ if env is None else env)
    except runner.VerlCpuError as exc:
        msg = f"{', '.join(launching)} launch VERL, which cannot start on this machine: {exc}"
        raise VerlDeviceError(msg) from exc


def ignored_device_warning(runtime: str, env: Mapping[str, str] | None = None) -> str:
    """The one-line warning for ``KIT_VERL_DEVICE`` set with ``runtime=local``, or ``""``.

    A warning, not a refusal: ``KIT_VERL_DEVICE`` is an environment variable, often exported for a
    whole shell or CI job (the VERL tests, ``make test-verl``), while the runtime is chosen per run
    by the profile or ``--set runtime=...``; the local runtime launches no VERL, so the variable
    changes nothing there, and refusing would stop every tiny or smoke run in such a shell. But a
    user who sets it most likely meant VERL's trainer, so the runner says once, before the first
    notebook, that it is ignored and how to get VERL (``--set runtime=verl``).

    Args:
        runtime: ``cfg.runtime`` of the run.
        env: the environment (default ``os.environ``).
    """
    env = os.environ if env is None else env
    value = env.get(DEVICE_ENV, "").strip()
    if runtime != "local" or not value:
        return ""
    return (f"warning: {DEVICE_ENV}={value} is ignored with runtime=local: the notebooks train with the kit's own "
            f"engine in this process, not with VERL; add --set runtime=verl to train with VERL's trainer "
            f"({DEVICE_ENV}=cpu: on this CPU), or unset {DEVICE_ENV}")


#: the session folder of a chain run on VERL's CPU runtime, under the run folder (session.json, chain.log)
VERL_SESSION_DIR = "verl_session"


def run_in_verl_cpu_session(argv: Sequence[str], layout: Layout, overrides: dict[str, Any], *,
                            session_timeout_s: float) -> int | None:
    """Run this whole ``python -m kit`` command (``argv``: its arguments) inside ONE kit session when its notebooks train with
    VERL's trainer on this CPU (``runtime=verl`` and ``KIT_VERL_DEVICE=cpu``), and return its exit code.

    The session (:func:`kit.bridge.verl_cpu.runner.run_session`) is a private network and PID
    namespace with one Ray head the kit starts and stops; the notebook kernels inherit its
    environment, so every VERL stage of 03-06 runs on that head (``runner.shared_ray_address``)
    instead of starting a Ray of its own: one Ray start for the whole chain (Ray's and VERL's
    start-up are most of a smoke stage's cost). The command's output is streamed from
    ``<run>/verl_session/chain.log`` while it runs; nothing is left running after it (orphans are
    killed and named).

    Returns:
        ``None`` when no session is needed (another runtime or device, or already inside one);
        else the exit code of the command in the session (1 when the session itself failed:
        Ray did not start, timeout; the message names the log; 2 when the runtime cannot run
        here: a CUDA machine, a VERL version outside the pin, no plugin; the message says what to do).
    """
    cfg = load(layout.profile, overrides, write=False)
    if cfg.runtime != "verl" or os.environ.get(DEVICE_ENV, "").strip().lower() != "cpu":
        return None
    from kit.bridge.verl_cpu import runner  # kit.bridge (VERL, Ray): only for runtime=verl on this CPU

    if runner.shared_ray_address():  # this is the command inside the session
        return None
    try:
        runner.require_cpu_machine()
        runner.check_verl_version()
        runner.plugin_route()
    except runner.VerlCpuError as exc:
        print(f"kit.pipeline: {exc}", file=sys.stderr)
        return 2
    out = layout.root / VERL_SESSION_DIR
    out.mkdir(parents=True, exist_ok=True)
    log = out / "chain.log"
    log.write_text("")
    print(f"kit.pipeline: runtime=verl on this CPU: the whole series runs in one kit session (one Ray head, "
          f"private network namespace); output also in {log}", flush=True)
    launch = runner.Launch("chain", [sys.executable, "-m", "kit", *argv], str(log))
    res = followed(lambda: runner.run_session([launch], out, timeout_s=session_timeout_s), log)
    if res.orphans:
        print(f"kit.pipeline: {len(res.orphans)} processes were still running after the session and were killed: "
              f"{res.orphans}", file=sys.stderr)
    if res.error and "chain" not in res.codes:
        print(f"kit.pipeline: the VERL CPU session failed: {res.error}", file=sys.stderr)
        return 1
    print(f"kit.pipeline: session {res.timings.get('session_s', 0.0):.0f} s (Ray start "
          f"{res.timings.get('ray_start_s', float('nan')):.0f} s), peak PSS {res.peak_pss_bytes / 2**30:.1f} GiB, "
          f"sandbox workers steady {res.sandbox_workers_steady}; {out / 'session.json'}")
    return res.codes.get("chain", 1)


def followed(run: Callable[[], T], log: Path) -> T:
    """``run()`` while what is appended to ``log`` is copied to stdout (:func:`follow`): a session's output as it
    comes (the VERL CPU chain here, the seeds' Ray session in :mod:`kit.pipeline.fanout`)."""
    done = threading.Event()
    tail = threading.Thread(target=follow, args=(log, done), daemon=True)
    tail.start()
    try:
        return run()
    finally:
        done.set()
        tail.join()


def follow(path: Path, done: threading.Event, period_s: float = 1.0) -> None:
    """Copy what is appended to ``path`` to stdout until ``done`` is set (then the rest)."""
    with open(path, errors="replace") as fh:
        while True:
            stop = done.wait(period_s)
            chunk = fh.read()
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
            if stop:
                return

