"""The notebook series runner: each notebook of :data:`kit.plan.SERIES` executed in order with
papermill, resumable through ``pipeline_state.json`` (see :mod:`kit.pipeline` for the run layout);
on the local runtime 06's and each study's training run as background jobs (:mod:`kit.pipeline.overlap`).

:func:`standard_series` gives the ordered notebooks with their parameters; :func:`run_series`
runs them, skipping a notebook that already finished with the same parameters and source and
stopping at the first failure (:class:`kit.pipeline.failures.PipelineError`, naming the notebook
and the cell); :func:`kit.pipeline.timing.times_table` prints their wall and CPU seconds.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from kit import OPENMP_SPINCOUNT, fingerprint
from kit.config import load
from kit.config.paths import REPO_ROOT
from kit.pipeline import overlap
from kit.pipeline.failures import PipelineError, describe_failure, failed_cell, mark_not_run
from kit.pipeline.kernels import KERNEL_NAME, QuietKernelManager, record_kernelspec
from kit.pipeline.state import (
    changed_reason,
    clear_outputs,
    forced_names,
    inputs_changed,
    is_finished,
    notebook_sha,
    resumable,
    upstream_names,
    write_state,
)
from kit.pipeline.timing import children_cpu_s, machine_busy_cpu_s, own_cpu_seconds
from kit.plan import Layout, ablation_arms, read_run_keys, read_state, series, series_parameters

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
#: Environment of the kernels the runner starts, unless the user set these variables already
#: (or ``OMP_WAIT_POLICY``): no download progress bars in executed notebooks (they print as
#: ``Loading weights: 0%`` in the PDF), and OpenMP threads that spin only briefly before they
#: sleep while waiting. Measured here, median tiny-profile SFT step (48 rows, 2 torch threads,
#: 2 cores): idle machine 0.35 s spinning (libgomp's default), 0.38 s with ``GOMP_SPINCOUNT=10000``,
#: 0.54 s with ``OMP_WAIT_POLICY=PASSIVE``; with two busy processes beside it 2.24 s, 1.21 s and
#: 0.76 s. The bounded spin is within 10% of the best idle and avoids the 3x collapse of unbounded spinning.
#: KIT_PROGRESS=text: the kit's progress bars as text the executed notebook and ``--log-output`` show advance (kit.progress)
KERNEL_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "GOMP_SPINCOUNT": OPENMP_SPINCOUNT, "KIT_PROGRESS": "text"}
#: Default per-cell limit of each profile, seconds (``--cell-timeout`` overrides it; 0 = no limit),
#: so that one endless cell cannot hang ``make reproduce`` forever. tiny: the slowest cell
#: measured is the SFT cell, 245-350 s on a shared 2-core machine (reports/LOG.md), so 1800 s is about 5x
#: the slowest run seen; smoke runs seconds per notebook. Paper profiles: one cell drives a whole
#: VERL stage; the report's full 510-step recipe took about a week on 64 GPUs, so one stage on its
#: own gets 7 days. Other profiles: 1 day.
CELL_TIMEOUT_S = {"smoke": 900, "tiny": 1800, "paper-14b": 7 * 86400, "paper-32b": 7 * 86400}
OTHER_PROFILE_CELL_TIMEOUT_S = 86400


def default_cell_timeout(profile: str) -> int:
    """The per-cell time limit of ``profile`` in seconds (:data:`CELL_TIMEOUT_S`)."""
    return CELL_TIMEOUT_S.get(profile, OTHER_PROFILE_CELL_TIMEOUT_S)


@dataclass(frozen=True)
class NotebookRun:
    """One notebook of a series.

    Attributes:
        source: the notebook file.
        parameters: papermill parameters it gets.
        outputs: folders it writes; emptied before it runs afresh (see :func:`run_series`).
        background: its work as a job that starts early and runs beside later notebooks
            (:class:`kit.pipeline.overlap.Background`); None: the notebook does its work when it runs.
    """

    source: Path
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    background: overlap.Background | None = None
    label: str = ""  # its name in the series when not the source's (a stage run by kit.plan.STAGE_TEMPLATE)

    @property
    def name(self) -> str:
        return self.label or self.source.stem


def standard_series(layout: Layout, seed: int = 0, notebook_dir: Path = NOTEBOOK_DIR,
                    overrides: dict[str, Any] | None = None, overlap_jobs: bool = True) -> list[NotebookRun]:
    """The kit's ordered series (``SERIES``) with each notebook's parameters for ``layout``.

    Args:
        layout: the run's folders.
        seed: passed to every notebook.
        notebook_dir: where the source notebooks are.
        overrides: dotted config keys passed to every notebook's ``overrides`` parameter
            (``{"rollout.max_response_tokens": 64}``); checked by ``kit.config.load``.
        overlap_jobs: give 06 its background job (:data:`kit.pipeline.overlap.STANDARD_JOBS`) where that
            cannot change a result: the local runtime, and a main stage-1 run that cannot be one
            of the ablation's arms (another budget or step count; else 06 may copy that run, and
            whether it is finished when the job reaches the arm would depend on timing).
    Raises:
        FileNotFoundError: a notebook of the series is missing from ``notebook_dir``.
        kit.config.ConfigError: an override names an unknown key or has the wrong type.
    """
    cfg = load(layout.profile, overrides, write=False)  # fail here, not in the fifth notebook
    # the main first-stage run may be one of the arms only if an arm trains exactly its stages
    independent = all(arm.stages != cfg.stages for arm in ablation_arms(cfg))
    jobs = overlap.STANDARD_JOBS if overlap_jobs and cfg.runtime == "local" and independent else {}
    runs = []
    entries = series(cfg.stages.names)
    for entry, (name, params) in zip(entries, series_parameters(layout, seed, overrides, cfg.stages.names), strict=True):
        path = entry.source if entry.notebook_dir else notebook_dir / f"{entry.notebook}.ipynb"
        if not path.exists():
            raise FileNotFoundError(f"notebook of the series not found: {path}")
        own = params["run_dir"]
        outputs = (own,) if own != str(layout.root) else (layout.dir("figures"), layout.dir("tables"))
        runs.append(NotebookRun(path, params, outputs, jobs.get(name), "" if name == path.stem else name))
    return runs


# --------------------------------------------------------------------------- running


class _CellOutput(logging.Handler):
    """Writes papermill's ``log_output`` records (a cell's stdout and stderr text, cell headers) to
    ``stream`` as they come, without adding a newline to text that ends one (or a bar's ``\\r``)."""

    def __init__(self, stream: Any):
        super().__init__(logging.INFO)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        self.stream.write(msg if msg.endswith(("\n", "\r")) else msg + "\n")
        self.stream.flush()


def run_series(
    notebooks: Sequence[NotebookRun],
    layout: Layout,
    *,
    force: bool | Collection[str] = False,
    log_output: bool = False,
    progress_bar: bool = True,
    cell_timeout_s: int | None = None,
    echo: Callable[[str], None] = print,
    graph: Sequence[NotebookRun] | None = None,
) -> list[dict[str, Any]]:
    """Execute ``notebooks`` in order with papermill into ``layout.executed``.

    A notebook that failed or was interrupted last time, with the same parameters and no rerun
    upstream, resumes into its output folders as they are (the trainers continue from their last
    checkpoint). Every other rerun (``force``, changed parameters or source, an upstream notebook
    rerun now or after it finished: :func:`kit.pipeline.state.inputs_changed`) first empties the notebook's
    ``outputs`` folders.

    Args:
        notebooks: the series; each gets its ``parameters`` injected after its ``parameters`` cell.
        layout: where the executed notebooks and ``pipeline_state.json`` go.
        force: True reruns every notebook even when it already finished; a collection of names reruns those and
            the notebooks of ``notebooks`` that read their folders (``--only 08 --force``: not the cold start 08 reads).
        log_output: stream cell outputs to the terminal as they are produced.
        progress_bar: show papermill's per-cell progress bar.
        cell_timeout_s: kill a cell that runs longer than this many seconds (None or 0: no
            limit; the command line defaults to the profile's :func:`default_cell_timeout`).
        echo: where the one-line status of each notebook is written.
        graph: the whole series ``notebooks`` was selected from (``--only``, ``--until``; default ``notebooks``):
            which notebooks' folders each one reads is taken from it (:func:`upstream_names`), so that what a
            notebook records as read does not depend on the selection it ran in.
    Returns:
        One record per notebook: ``{"notebook", "status" ("done" | "skipped"), "seconds"}``; a notebook run now
        also has ``cpu_seconds`` (its kernel and reaped children), ``load_avg`` and, where ``/proc/stat`` exists,
        ``machine_cpu_seconds`` (busy CPU seconds of the run's CPUs while it ran, every process's:
        :func:`kit.pipeline.timing.machine_busy_cpu_s`); ``pipeline_state.json`` keeps the same (:func:`kit.fingerprint.stamp_state`).
    Raises:
        PipelineError: before anything runs, a notebook without a ``parameters`` cell
            (:func:`check_parameters_cell`); else the first notebook that fails; the message names the notebook, the
            cell index (as in the executed notebook, injected-parameters cell included), its first
            source line and the error. Later notebooks are not run.
        TypeError: ``force`` is a string (a name must come in a collection).
    """
    layout.executed.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in KERNEL_ENV}
    user_omp = "OMP_WAIT_POLICY" in os.environ  # the user chose how OpenMP threads wait
    os.environ.update({k: v for k, v in KERNEL_ENV.items()
                       if k not in os.environ and not (k == "GOMP_SPINCOUNT" and user_omp)})
    pm_log = logging.getLogger("papermill")  # papermill's --log-output lines: stdout at INFO, stderr at WARNING
    shown, old_level, old_propagate = _CellOutput(sys.stdout), pm_log.level, pm_log.propagate
    if log_output:  # without a handler of its own, Python drops INFO records: cell prints would never show
        pm_log.addHandler(shown)
        pm_log.setLevel(logging.INFO)
        pm_log.propagate = False  # a root handler the caller configured would print every line twice
    try:
        return _run_series(notebooks, layout, force, log_output, progress_bar, cell_timeout_s, echo, graph)
    finally:
        pm_log.removeHandler(shown)
        pm_log.setLevel(old_level)
        pm_log.propagate = old_propagate
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_parameters_cell(nb: NotebookRun) -> None:
    """Refuse a notebook without a code cell tagged ``parameters`` (issue #30), before it runs.

    Papermill injects the series' parameters right after that cell; without it papermill only
    warns and injects them at the top, where the notebook's own defaults then overwrite them: the
    notebook runs its defaults (another profile, another run folder) and would be recorded as done.

    Raises:
        PipelineError: naming the notebook, its file and what to add (the tag, on the cell that
            sets the parameters the series passes).
    """
    book = nbformat.read(str(nb.source), as_version=4)
    # the first tagged cell, as papermill.utils.find_first_tagged_cell_index finds it
    idx = next((i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", [])), -1)
    if idx >= 0 and book.cells[idx].cell_type == "code":
        return
    keys = ", ".join(sorted(nb.parameters)) or "its parameters"
    found = "" if idx < 0 else f" (cell {idx} has the tag but is a {book.cells[idx].cell_type} cell)"
    raise PipelineError(
        f"notebook {nb.name} ({nb.source}) has no code cell tagged 'parameters'{found}: papermill would run its "
        f"own defaults instead of this run's parameters ({keys}). Add the tag 'parameters' to the code cell that "
        'sets them (JupyterLab: Property Inspector > Cell Tags; in the .ipynb: "metadata": {"tags": ["parameters"]}) '
        "and run again.", nb.name)


def _run_series(notebooks, layout, force, log_output, progress_bar, cell_timeout_s, echo, graph) -> list[dict[str, Any]]:
    import papermill as pm  # papermill: the notebook kernels' runner, only when notebooks run

    for nb in notebooks:  # every notebook of the series, before the first one runs
        check_parameters_cell(nb)
    state = read_state(layout)
    ran: list[int] = []  # series positions of the notebooks run in this invocation
    records = []
    total = len(notebooks)
    names = [nb.name for nb in notebooks]
    forced = forced_names(force, names)
    reads = overlap.upstream_indices([nb.parameters for nb in notebooks])
    ups = upstream_names(notebooks, graph)  # what each records as read, whatever the selection
    # forced now, with the notebooks of the series that read a forced one's folder (they rerun on its new files)
    # and those whose inputs ran again since they finished or began (an earlier invocation: state.inputs_changed)
    stale = {n: inputs_changed(state.get(n), ups[n], state) for n in names}
    starts = forced | {n for n, changed in stale.items() if changed}
    rerun = [n for i, n in enumerate(names) if n in starts or any(names[j] in starts for j in reads[i])]
    # issue #41: the run's fingerprint and repeatability stamp first (kit.fingerprint); a resume elsewhere warns
    state = fingerprint.stamp_state(state, read_run_keys(layout), layout.profile, [nb.parameters for nb in notebooks],
                                    rerun, echo)
    write_state(layout, state)  # also when every notebook is skipped: the warning is kept with the run
    deferred = [nb.name for nb in notebooks if nb.background is not None and nb.background.after in names]
    jobs: dict[str, overlap.BackgroundRun] = {}
    kept_why = ("skipped (--force reruns only the notebooks named and their readers)" if forced and force is not True
                else "skipped (--force reruns it)")

    def upstream_rerun(idx: int) -> bool:
        """Whether a notebook whose folder the notebook at series position ``idx`` reads (directly or through
        another one: :func:`overlap.upstream_indices`) ran in this invocation: its inputs may have changed.
        A notebook that reads none of them is not rerun (a rerun 01 does not rerun 02, which builds its own
        demos, nor 11, which reads only 02). So is one whose inputs ran again since it finished or began, in an
        earlier invocation (``stale``)."""
        return any(j in reads[idx] for j in ran) or bool(stale[names[idx]])

    def changed_why(idx: int) -> str:
        """Why a notebook with an entry reruns on its inputs (as :func:`plan` says it)."""
        name = names[idx]
        if stale[name]:
            return changed_reason(stale[name], finished=(state.get(name) or {}).get("status") == "done")
        return "an earlier notebook was rerun"

    def read_now(name: str, finished_only: bool = False) -> dict[str, str | None]:
        """The run_ids of the notebooks ``name`` reads (state.inputs_changed): all as it starts (None: not in
        this run folder); only the finished ones as its background job starts (stage 1 finishes beside 06's)."""
        entries = {u: state.get(u) or {} for u in ups[name]}
        return {u: e.get("run_id") for u, e in entries.items() if not finished_only or e.get("status") == "done"}

    def start_jobs_after(name: str) -> None:
        """Start the background job of each deferred notebook that waits for ``name`` and will run."""
        for idx, nb in enumerate(notebooks):
            if nb.name not in deferred or nb.background.after != name:
                continue
            rerun_downstream = upstream_rerun(idx)
            done, _ = is_finished(state.get(nb.name), nb, layout.executed / f"{nb.name}.ipynb", layout.root)
            again = nb.name in forced
            if done and not again and not rerun_downstream:
                continue  # finished earlier: the loop skips it too
            if not (not again and not rerun_downstream and resumable(state.get(nb.name), nb, layout.root)):
                clear_outputs(nb, layout, echo)
            state[nb.name] = {"status": "running", "parameters": nb.parameters,
                              "read": read_now(nb.name, finished_only=True)}
            write_state(layout, state)
            log = layout.executed / f"{nb.name}.background.log"
            jobs[nb.name] = overlap.start(nb.name, nb.background, nb.parameters, log, cwd=nb.source.parent)
            ran.append(idx)  # it reruns from now on: the notebooks that read its folder rerun too
            echo(f"[bg] {nb.name}: its training runs in the background from now on (nice {overlap.BACKGROUND_NICE}; "
                 f"log {log}); the notebook itself runs before the first notebook that reads its folder")

    try:
        order = overlap.execution_order(names, [nb.parameters for nb in notebooks], deferred)
        for i, idx in enumerate(order, 1):
            nb = notebooks[idx]
            out = layout.executed / f"{nb.name}.ipynb"
            done, why = is_finished(state.get(nb.name), nb, out, layout.root)
            rerun_downstream = upstream_rerun(idx)
            again = nb.name in forced
            if done and not again and not rerun_downstream:
                echo(f"[{i}/{total}] {nb.name}: finished earlier ({state[nb.name]['seconds']:.0f} s), {kept_why}")
                records.append({"notebook": nb.name, "status": "skipped", "seconds": 0.0,
                                "earlier_seconds": state[nb.name].get("seconds", 0.0),
                                "earlier_cpu_seconds": state[nb.name].get("cpu_seconds", float("nan"))})
                start_jobs_after(nb.name)
                continue
            job = jobs.get(nb.name)
            reason = ("its background job ran" if job else "forced" if again
                      else (changed_why(idx) if rerun_downstream and (done or stale[nb.name]) else why))
            echo(f"[{i}/{total}] {nb.name}: running ({reason})")
            t0, c0 = time.perf_counter(), children_cpu_s()  # a job's CPU counts once it is reaped below
            m0 = machine_busy_cpu_s()  # every process's on the run's CPUs (a background job's beside it too)
            if job is not None:  # its outputs are the job's work: never cleared here
                if job.returncode is None:
                    echo(f"    waiting for its background job (log {job.log})")
                code = job.join(cell_timeout_s or None)  # the cell's limit, as the notebook's cell would have
                if code is None:
                    job.stop()
                    state[nb.name] = {"status": "failed", "parameters": nb.parameters,
                                      "read": state[nb.name].get("read"),  # what the job began on
                                      "seconds": time.perf_counter() - t0, "error": "background job timed out"}
                    write_state(layout, state)
                    raise PipelineError(f"notebook {nb.name}: its background job was still running {cell_timeout_s} s "
                                        f"after the runner began waiting for it (the cell limit) and was stopped; "
                                        f"see {job.log}. Rerun to resume its arms from their checkpoints.", nb.name)
                echo(f"    background job: exit {code} after {job.seconds:.0f} s" + (
                    "" if code == 0 else f" (see {job.log}); the notebook trains what is missing itself"))
            else:
                # an interrupted notebook with unchanged inputs resumes (trainers continue from their last
                # checkpoint); any other rerun starts from empty output folders
                if not (not again and not rerun_downstream and resumable(state.get(nb.name), nb, layout.root)):
                    clear_outputs(nb, layout, echo)
            read = read_now(nb.name)  # what its cells read, recorded when it is done
            if not (job and state.get(nb.name, {}).get("status") == "running"):  # a job's entry: what the job began on
                state[nb.name] = {"status": "running", "parameters": nb.parameters, "read": read}
            write_state(layout, state)
            began = state[nb.name]["read"]  # a failed notebook resumes only on these
            sha = notebook_sha(nb.source)  # of the source that runs, not of a later edit
            kwargs: dict[str, Any] = {}
            if cell_timeout_s:  # None or 0: no limit
                kwargs["execution_timeout"] = int(cell_timeout_s)
            try:
                try:
                    pm.execute_notebook(
                        str(nb.source), str(out), parameters=nb.parameters, kernel_name=KERNEL_NAME,
                        progress_bar=progress_bar, log_output=log_output, cwd=str(nb.source.parent),
                        kernel_manager_class=QuietKernelManager, **kwargs,
                    )
                finally:  # the executed notebook names the kernel that ran it, not the source's (issue #44)
                    record_kernelspec(out)
            except Exception as exc:  # noqa: BLE001 - every failure is reported with the notebook named
                seconds = time.perf_counter() - t0
                err = describe_failure(nb.name, out, exc)
                # the executed file's own index: papermill inserts markdown cells into a notebook that
                # raised (a banner first, an anchor before the failing cell), so err.cell_index, the
                # index papermill reports, is not that cell's index in the file
                mark_not_run(out, failed_cell(out)[0], err.error)
                state[nb.name] = {"status": "failed", "parameters": nb.parameters, "read": began, "seconds": seconds,
                                  "error": str(err)}
                write_state(layout, state)
                raise err from exc
            t1 = time.perf_counter()
            seconds, cpu, m1 = t1 - t0, children_cpu_s() - c0, machine_busy_cpu_s()
            cpu = own_cpu_seconds(cpu, job, jobs.values(), t0, t1)
            load_avg = os.getloadavg()[0]
            extra = {"background_seconds": job.seconds, "background_exit": job.returncode} if job else {}
            if m0 is not None and m1 is not None:
                extra["machine_cpu_seconds"] = m1 - m0
            # run_id: which finishing of it the notebooks after it read (state.inputs_changed); read: theirs
            state[nb.name] = {"status": "done", "parameters": json.loads(json.dumps(nb.parameters)),
                              "source_sha": sha, "run_id": uuid.uuid4().hex, "read": read, "seconds": seconds,
                              "cpu_seconds": cpu, "load_avg": load_avg,
                              "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra,
                              "environment_key": state[fingerprint.ENVIRONMENT_KEY]["key"]}
            write_state(layout, state)
            echo(f"[{i}/{total}] {nb.name}: done in {seconds:.0f} s ({cpu:.0f} CPU s; load average {load_avg:.1f})")
            records.append({"notebook": nb.name, "status": "done", "seconds": seconds, "cpu_seconds": cpu,
                            "load_avg": load_avg, **extra})
            ran.append(idx)
            start_jobs_after(nb.name)
    finally:  # a failure, an interrupt: no job outlives the runner
        for job in jobs.values():
            job.stop()
    return records
