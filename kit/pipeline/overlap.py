"""Notebooks of the series whose work runs beside the others (``make reproduce``).

The RL stages (notebooks 03-05) and the evaluations (07, 08) are latency-bound on a small
machine: a step waits on its longest trajectory and on tool round trips, so they keep about one
of two cores busy (tiny profile, seed 0: 03 used 176 CPU s in 190 s). The RoC ablation (06)
needs only the SFT policy and the curated data, and is most of the series' CPU work. So the
runner starts 06's training as a background job, at lower priority, as soon as 02 has finished,
runs 03-05, 07 and 08 beside it, and executes notebook 06 itself just before the first notebook
that reads its folder (10, then 20). ReTool's PPO arms (notebook 10, issue #33) are a second such job. By then the job has trained every arm, and the notebook finds them
finished (:func:`kit.train.ablation.run_ablation` returns a finished arm's summary without
training it) and draws its figures. If the job failed or was stopped, the notebook trains what
is missing itself, resuming from the arms' checkpoints; a job is never the only place work happens.

The job runs exactly the notebook's training cell with the notebook's own papermill parameters
(:mod:`kit.chain.ablation_job`), in the notebook's folder, and appends its output to
``notebooks/<name>.background.log`` in the run folder. It is stopped (its whole process group)
when the runner stops: on a failure or Ctrl-C by the runner itself, and when the runner is killed
(SIGTERM, SIGHUP, SIGKILL) by Linux (``PR_SET_PDEATHSIG``). The runner waits for it at most the
profile's cell time limit, counted from when it starts waiting, as it would for the notebook's cell.

Only the local runtime overlaps (VERL on a CPU runs the series inside one kit session and one Ray
head; see :mod:`kit.pipeline`). ``python -m kit reproduce --no-overlap`` runs the series strictly
in order, one notebook at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.studies import STUDIES
from kit.train.ablation import die_with_parent

#: ``nice`` increment of a background job: 19, so the latency-bound notebooks in the foreground keep
#: the cores they use (a nice-19 process gets ~1.5% of a core beside a nice-0 one; with nice 5 the
#: five arm processes outweighed stage 1's two threads, which then ran 1.4x slower, 273 s instead of
#: 190 s) and the job takes what they leave idle
BACKGROUND_NICE = 19
#: seconds a stopped job gets to exit after SIGTERM before its process group is killed
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Background:
    """The background job of one notebook.

    Attributes:
        argv: the command; the notebook's papermill parameters are appended as one JSON argument.
        after: the notebook of the series after which the job may start (its inputs are then ready).
    """

    argv: tuple[str, ...]
    after: str


#: the background job of each notebook of the standard series that has one: 06's arms, and each study's
#: that declares one (kit.studies: ReTool's PPO arms, issue #33, need only the SFT policy too; notebook 10
#: then draws them beside 06's arms)
STANDARD_JOBS: dict[str, Background] = {
    "06_roc_ablation": Background((sys.executable, "-m", "kit.chain.ablation_job"), after="02_cold_start_sft"),
    **{s.notebook: Background((sys.executable, "-m", s.job), after=s.job_after) for s in STUDIES if s.job},
}


def mentions(parameters: dict[str, Any], run_dir: str) -> bool:
    """Whether any parameter value (a list item, a dict value: 20's ``study_dirs``) is ``run_dir``: the
    notebook reads that folder."""
    for v in parameters.values():
        items = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list | tuple) else [v]
        if any(isinstance(x, str) and x == run_dir for x in items):
            return True
    return False


def upstream_indices(parameters: Sequence[dict[str, Any]]) -> list[set[int]]:
    """Per notebook of a series, the positions of the notebooks whose folders it reads, directly (its
    parameters name their ``run_dir``: :func:`mentions`) or through another notebook it reads.

    Args:
        parameters: (N,) the series' papermill parameters, in series order (each with ``run_dir``).
    Returns:
        (N,) sets of positions; a notebook that reads no other notebook's folder has an empty set.
    """
    direct = [{j for j, q in enumerate(parameters) if j != i and q.get("run_dir") and mentions(p, q["run_dir"])}
              for i, p in enumerate(parameters)]
    closed: list[set[int]] = []
    for i in range(len(parameters)):
        seen, todo = set(direct[i]), list(direct[i])
        while todo:
            for j in direct[todo.pop()] - seen:
                seen.add(j)
                todo.append(j)
        closed.append(seen - {i})
    return closed


def execution_order(names: Sequence[str], parameters: Sequence[dict[str, Any]],
                    deferred: Sequence[str]) -> list[int]:
    """Indices of the series in the order to execute it: each ``deferred`` notebook moves to just
    before the first later notebook whose parameters name its ``run_dir`` and that is already placed
    (a deferred reader is placed after it: 06 before 10, both before 20; the end if none is);
    every other notebook keeps its place.

    Args:
        names: the notebooks' names, in series order.
        parameters: their papermill parameters (each with ``run_dir``).
        deferred: names of the notebooks whose work runs as a background job.
    """
    order = [i for i, n in enumerate(names) if n not in deferred]
    for d in (i for i, n in enumerate(names) if n in deferred):
        own = parameters[d].get("run_dir")
        readers = [i for i in range(d + 1, len(names)) if own and mentions(parameters[i], own) and i in order]
        pos = order.index(readers[0]) if readers else len(order)
        order.insert(pos, d)
    return order


class BackgroundRun:
    """A started background job (:func:`start`). A waiter thread reaps it as soon as it exits, so
    ``seconds`` is its run time, not the time until the runner came to it."""

    def __init__(self, name: str, proc: subprocess.Popen, log: Path):
        self.name, self.proc, self.log = name, proc, log
        self.started = time.perf_counter()
        self.seconds: float | None = None
        #: the job's own CPU seconds (user + system, with its waited-for descendants: ``os.wait4``)
        self.cpu_seconds: float | None = None
        #: ``time.perf_counter()`` when it was reaped: from then on its CPU is in the runner's
        #: ``RUSAGE_CHILDREN``, inside whichever notebook's window was open (the series moves it to its own)
        self.reaped_at: float | None = None
        self.returncode: int | None = None
        self._waiter = threading.Thread(target=self._wait, name=f"job-{name}", daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        # os.wait4 instead of Popen.wait: the same reaping, plus this child's own resource usage
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.reaped_at = time.perf_counter()
        code = os.waitstatus_to_exitcode(status)
        self.proc.returncode = code  # so that Popen never waits for it again
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        self.seconds = self.reaped_at - self.started
        self.returncode = code

    def join(self, timeout_s: float | None = None) -> int | None:
        """Wait for the job (at most ``timeout_s`` seconds; None: no limit); once it has exited
        its CPU seconds count in ``RUSAGE_CHILDREN``.

        Returns:
            Its exit code (negative: killed by that signal), or None when it is still running.
        """
        self._waiter.join(timeout_s)
        return self.returncode

    def stop(self) -> None:
        """SIGTERM to the job's process group, SIGKILL after :data:`STOP_GRACE_S`; then reap it."""
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            if self.returncode is not None:
                return
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            self._waiter.join(wait_s)
        self._waiter.join()


def start(name: str, job: Background, parameters: dict[str, Any], log: Path, cwd: Path | None = None) -> BackgroundRun:
    """Start ``job`` for notebook ``name`` with its papermill ``parameters``, in a new session and
    process group, ``nice`` :data:`BACKGROUND_NICE`, in ``cwd`` (the notebook's folder, where its
    kernel runs: relative paths mean the same), killed by Linux if the runner dies; stdout and
    stderr appended to ``log`` (a resumed job keeps the earlier attempt's output).

    Raises:
        OSError: the command cannot be started.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    nice = shutil.which("nice")  # coreutils; without it the job runs at the runner's priority
    prefix = [nice, "-n", str(BACKGROUND_NICE)] if nice else []
    with open(log, "a") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {name}: background job started\n")
        out.flush()
        proc = subprocess.Popen([*prefix, *job.argv, json.dumps(parameters)], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                                preexec_fn=die_with_parent)  # noqa: PLW1509 - one prctl, no locks
    return BackgroundRun(name, proc, log)
