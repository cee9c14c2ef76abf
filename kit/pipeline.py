"""The notebook pipeline: run the ordered notebook series through papermill (``make reproduce``).

One run of the series lives in ``reports/<profile>/<run>/``::

    notebooks/NN_*.ipynb   the executed notebooks (with outputs; the sources in notebooks/ stay clean)
    data/ sft/ stage1/ stage2/ stage3/ ablation/ analysis/ eval/
                           one run directory per notebook; notebooks share state only through them
    figures/ tables/       written by 09_figures_and_tables
    report.pdf             built by :mod:`kit.report` after the last notebook
    pipeline_state.json    which notebooks finished, with their parameters and wall time

The runner executes the notebooks in order, shows a progress bar per notebook (one tick per cell),
stops at the first failure naming the notebook and the cell, and is resumable: a notebook that
already finished with the same parameters and the same source is skipped, unless ``--force`` is
given or an earlier notebook was run again in this invocation (its inputs may have changed).

Command line (what ``python -m kit reproduce`` calls)::

    python -m kit.pipeline run --profile tiny --run main [--force] [--log-output]

With ``runtime=verl`` and ``KIT_VERL_DEVICE=cpu`` (VERL's own trainer on this CPU, the smoke
profile) the whole command runs inside one kit session with one Ray head
(:func:`run_in_verl_cpu_session`); ``reports/<profile>/<run>/verl_session/`` then holds its log
and ``session.json``.

On the local runtime the RoC ablation's training (06) runs as a background job beside 03-05, 07
and 08, which are latency-bound and leave a core idle; notebook 06 itself executes just before 09
and finds its arms trained (:mod:`kit.overlap`; ``--no-overlap`` runs strictly in order). No other
notebooks run in parallel. It does not track data files outside the run directory; delete the
run folder or pass ``--force`` after changing ``../shared/data``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbclient.exceptions import CellTimeoutError

from kit import OPENMP_SPINCOUNT, overlap, report
from kit.config import ConfigError, available_profiles, load
from kit.paths import REPO_ROOT
from kit.runs import SERIES, Layout, series_parameters
from kit.train.ablation import ablation_budget

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
#: Environment of the kernels the runner starts, unless the user set these variables already
#: (or ``OMP_WAIT_POLICY``): no download progress bars in executed notebooks (they print as
#: ``Loading weights: 0%`` in the PDF), and OpenMP threads that spin only briefly before they
#: sleep while waiting. Measured here, median tiny-profile SFT step (48 rows, 2 torch threads,
#: 2 cores): idle machine 0.35 s spinning (libgomp's default), 0.38 s with ``GOMP_SPINCOUNT=10000``,
#: 0.54 s with ``OMP_WAIT_POLICY=PASSIVE``; with two busy processes beside it 2.24 s, 1.21 s and
#: 0.76 s. The bounded spin is within 10% of the best on an idle machine and avoids the 3x
#: collapse of unbounded spinning on a shared one.
#: KIT_PROGRESS=text: the kit's progress bars as text the executed notebook and ``--log-output`` show advance (kit.progress)
KERNEL_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "GOMP_SPINCOUNT": OPENMP_SPINCOUNT, "KIT_PROGRESS": "text"}
#: Default per-cell limit of each profile, seconds (``--cell-timeout`` overrides it; 0 = no limit),
#: so that one endless cell cannot hang ``make reproduce`` forever. tiny: the slowest cell
#: measured is the SFT cell, 245-350 s on a shared 2-core machine (README), so 1800 s is about 5x
#: the slowest run seen; smoke runs seconds per notebook. Paper profiles: one cell drives a whole
#: VERL stage; the report's full 510-step recipe took about a week on 64 GPUs, so one stage on its
#: own gets 7 days. Other profiles: 1 day.
CELL_TIMEOUT_S = {"smoke": 900, "tiny": 1800, "paper-14b": 7 * 86400, "paper-32b": 7 * 86400}
OTHER_PROFILE_CELL_TIMEOUT_S = 86400


def default_cell_timeout(profile: str) -> int:
    """The per-cell time limit of ``profile`` in seconds (:data:`CELL_TIMEOUT_S`)."""
    return CELL_TIMEOUT_S.get(profile, OTHER_PROFILE_CELL_TIMEOUT_S)


class PipelineError(RuntimeError):
    """A notebook of the series failed; the message names the notebook and the cell."""

    def __init__(self, message: str, notebook: str, cell_index: int | None = None, error: str = ""):
        super().__init__(message)
        self.notebook = notebook
        self.cell_index = cell_index
        self.error = error  # "<ExceptionName>: <message>", as saved in the executed notebook


@dataclass(frozen=True)
class NotebookRun:
    """One notebook of a series.

    Attributes:
        source: the notebook file.
        parameters: papermill parameters it gets.
        outputs: folders it writes; emptied before it runs afresh (see :func:`run_series`).
        background: its work as a job that starts early and runs beside later notebooks
            (:class:`kit.overlap.Background`); None: the notebook does its work when it runs.
    """

    source: Path
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    background: overlap.Background | None = None

    @property
    def name(self) -> str:
        return self.source.stem


def standard_series(layout: Layout, seed: int = 0, notebook_dir: Path = NOTEBOOK_DIR,
                    overrides: dict[str, Any] | None = None, overlap_jobs: bool = True) -> list[NotebookRun]:
    """The kit's ordered series (``SERIES``) with each notebook's parameters for ``layout``.

    Args:
        layout: the run's folders.
        seed: passed to every notebook.
        notebook_dir: where the source notebooks are.
        overrides: dotted config keys passed to every notebook's ``overrides`` parameter
            (``{"rollout.max_response_tokens": 64}``); checked by ``kit.config.load``.
        overlap_jobs: give 06 its background job (:data:`kit.overlap.STANDARD_JOBS`) where that
            cannot change a result: the local runtime, and a main stage-1 run that cannot be one
            of the ablation's arms (another budget or step count; else 06 may copy that run, and
            whether it is finished when the job reaches the arm would depend on timing).
    Raises:
        FileNotFoundError: a notebook of the series is missing from ``notebook_dir``.
        kit.config.ConfigError: an override names an unknown key or has the wrong type.
    """
    cfg = load(layout.profile, overrides, write=False)  # fail here, not in the fifth notebook
    independent = ablation_budget(cfg) is not None or cfg.ablation.steps != cfg.stages.stage1.steps
    jobs = overlap.STANDARD_JOBS if overlap_jobs and cfg.runtime == "local" and independent else {}
    runs = []
    for name, params in series_parameters(layout, seed, overrides):
        path = notebook_dir / f"{name}.ipynb"
        if not path.exists():
            raise FileNotFoundError(f"notebook of the series not found: {path}")
        own = params["run_dir"]
        outputs = (own,) if own != str(layout.root) else (layout.dir("figures"), layout.dir("tables"))
        runs.append(NotebookRun(path, params, outputs, jobs.get(name)))
    return runs


# --------------------------------------------------------------------------- state


def _sha(path: Path) -> str:
    """Hash of the notebook's cell sources (outputs and metadata do not count)."""
    nb = json.loads(path.read_text())
    text = json.dumps([(c.get("cell_type"), "".join(c.get("source", ""))) for c in nb.get("cells", [])])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_state(layout: Layout) -> dict[str, Any]:
    """The run's ``pipeline_state.json`` (empty dict when absent).

    Raises:
        ValueError: the file exists but is not a JSON object (the message names the file).
    """
    if not layout.state_path.exists():
        return {}
    try:
        state = json.loads(layout.state_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{layout.state_path}: not valid JSON ({exc}); delete it to rerun everything") from exc
    if not isinstance(state, dict):
        raise ValueError(f"{layout.state_path}: expected a JSON object, got {type(state).__name__}")
    return state


def _write_state(layout: Layout, state: dict[str, Any]) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(layout.state_path)


def _clear_outputs(nb: NotebookRun, layout: Layout, echo: Callable[[str], None]) -> None:
    """Empty the notebook's output folders (only ones inside the run folder)."""
    root = layout.root.resolve()
    for d in map(Path, nb.outputs):
        d = d.resolve()
        if d == root or root not in d.parents:
            raise ValueError(f"{nb.name}: refusing to clear {d}, which is not inside the run folder {root}")
        if d.exists():
            shutil.rmtree(d)
            echo(f"    cleared {d} (a fresh run; stale checkpoints would be resumed otherwise)")


def _is_finished(entry: dict[str, Any] | None, nb: NotebookRun, out: Path) -> tuple[bool, str]:
    if not entry:
        return False, "not run yet"
    if entry.get("status") != "done":
        return False, f"{entry.get('status', 'unfinished')} last time"
    if not out.exists():
        return False, "executed notebook missing"
    if entry.get("parameters") != json.loads(json.dumps(nb.parameters)):
        return False, "parameters changed"
    if entry.get("source_sha") != _sha(nb.source):
        return False, "notebook source changed"
    return True, ""


# --------------------------------------------------------------------------- failures


def _failed_cell(output: Path) -> tuple[int | None, str]:
    """Index and first source line of the cell where execution stopped.

    That is the cell papermill marked ``failed`` or left ``running``; else (a timeout interrupts
    the kernel and papermill marks the cell ``completed``) the last cell with an error output;
    else the last cell that started.
    """
    try:
        nb = json.loads(output.read_text())
    except (OSError, json.JSONDecodeError):
        return None, ""
    cells = nb.get("cells", [])

    def first_line(cell) -> str:
        lines = [ln for ln in "".join(cell.get("source", "")).splitlines() if ln.strip()]
        return lines[0] if lines else ""

    meta = [c.get("metadata", {}).get("papermill", {}) for c in cells]
    stopped = [i for i, m in enumerate(meta) if m.get("status") in ("failed", "running")]
    errored = [i for i, c in enumerate(cells) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    started = [i for i, m in enumerate(meta) if m.get("start_time") is not None]
    i = stopped[0] if stopped else (errored or started or [None])[-1]
    return (i, first_line(cells[i])) if i is not None else (None, "")


def _describe_failure(nb: NotebookRun, output: Path, exc: BaseException) -> PipelineError:
    from papermill.exceptions import PapermillExecutionError  # papermill: the notebook runner

    if isinstance(exc, CellTimeoutError):
        index, first = _failed_cell(output)
        limit = re.search(r"after (\d+) seconds", str(exc))
        error = f"CellTimeoutError: the cell ran longer than {limit.group(1) if limit else 'the limit of'} s " \
                "and was stopped (--cell-timeout)"
        count = ""
    elif isinstance(exc, PapermillExecutionError):
        index, error = exc.cell_index, f"{exc.ename}: {exc.evalue}"
        lines = [ln for ln in (exc.source or "").splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        count = f", In [{exc.exec_count}]" if exc.exec_count is not None else ""
    else:
        index, first = _failed_cell(output)
        error = f"{type(exc).__name__}: {exc}"
        count = ""
    where = f"cell {index}{count}" if index is not None else "before any cell ran (kernel start)"
    snippet = f" `{first.strip()[:80]}`" if first else ""
    msg = (f"notebook {nb.name} failed in {where}{snippet}: {error}\n"
           f"  executed notebook with the traceback: {output}")
    return PipelineError(msg, nb.name, index, error)


def mark_not_run(output: Path, index: int | None, error: str) -> None:
    """Record in the executed notebook where execution stopped, so no reader takes it as finished.

    papermill leaves the cell a dead kernel was running, and every cell after it, marked
    ``completed``. Here the stopped cell gets papermill status ``failed`` and, when it has no error
    output, one saying it did not finish; every later code cell gets status ``pending``, no
    execution count and no outputs (not run). The notebook's metadata gets
    ``kit_pipeline = {"status": "failed", "failed_cell": index, "error": error}``, which
    :mod:`kit.report` shows. A missing or unreadable file is left alone.

    Args:
        output: the executed notebook.
        index: the cell where execution stopped (None: before any cell; every cell is not run).
        error: one line naming the error.
    """
    try:
        nb = json.loads(output.read_text())
    except (OSError, json.JSONDecodeError):
        return
    cells = nb.get("cells", [])
    start = index if index is not None else 0
    for i, cell in enumerate(cells[start:], start):
        meta = cell.setdefault("metadata", {}).setdefault("papermill", {})
        if i == index:
            meta["status"] = "failed"
            if cell.get("cell_type") == "code" and not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                ename, _, evalue = error.partition(": ")
                evalue = f"{evalue} (this cell did not finish)"
                # nbconvert prints the traceback, not ename / evalue: without one the report shows an empty box
                cell.setdefault("outputs", []).append({"output_type": "error", "ename": ename or "Error",
                                                       "evalue": evalue, "traceback": [f"{ename or 'Error'}: {evalue}"]})
        else:
            meta["status"] = "pending"
            if cell.get("cell_type") == "code":
                cell["execution_count"], cell["outputs"] = None, []
    nb.setdefault("metadata", {})["kit_pipeline"] = {"status": "failed", "failed_cell": index, "error": error}
    tmp = output.with_suffix(".tmp")
    tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(output)


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
    force: bool = False,
    log_output: bool = False,
    progress_bar: bool = True,
    cell_timeout_s: int | None = None,
    echo: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Execute ``notebooks`` in order with papermill into ``layout.executed``.

    A notebook that failed or was interrupted last time, with the same parameters and no rerun
    upstream, resumes into its output folders as they are (the trainers continue from their last
    checkpoint). Every other rerun (``force``, changed parameters or source, an upstream notebook
    rerun) first empties the notebook's ``outputs`` folders.

    Args:
        notebooks: the series; each gets its ``parameters`` injected after its ``parameters`` cell.
        layout: where the executed notebooks and ``pipeline_state.json`` go.
        force: run every notebook even when it already finished.
        log_output: stream cell outputs to the terminal as they are produced.
        progress_bar: show papermill's per-cell progress bar.
        cell_timeout_s: kill a cell that runs longer than this many seconds (None or 0: no
            limit; the command line defaults to the profile's :func:`default_cell_timeout`).
        echo: where the one-line status of each notebook is written.
    Returns:
        One record per notebook: ``{"notebook", "status" ("done" | "skipped"), "seconds"}``.
    Raises:
        PipelineError: the first notebook that fails; the message names the notebook, the
            cell index (as in the executed notebook, injected-parameters cell included), its first
            source line and the error. Later notebooks are not run.
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
        return _run_series(notebooks, layout, force, log_output, progress_bar, cell_timeout_s, echo)
    finally:
        pm_log.removeHandler(shown)
        pm_log.setLevel(old_level)
        pm_log.propagate = old_propagate
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children and their waited-for
    descendants: a notebook's kernel, its sandbox workers and ablation workers once reaped.
    Unlike wall time it hardly moves when other work shares the cores."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ch.ru_utime + ch.ru_stime


def times_table(records: Sequence[dict[str, Any]]) -> str:
    """Per-notebook times of :func:`run_series` as printed at the end of a run: wall seconds, CPU
    seconds of the kernel and its children, and the 1-minute load average when it finished
    (wall time is an upper bound on a shared machine; CPU seconds are the work)."""
    lines = [f"{'notebook':<30} {'status':<8} {'wall s':>8} {'cpu s':>8} {'load':>6}"]
    for r in records:
        if r["status"] == "skipped":  # finished in an earlier invocation: its times then
            lines.append(f"{r['notebook']:<30} {'earlier':<8} {r.get('earlier_seconds', 0.0):>8.0f} "
                         f"{r.get('earlier_cpu_seconds', float('nan')):>8.0f} {'':>6}")
            continue
        lines.append(f"{r['notebook']:<30} {r['status']:<8} {r['seconds']:>8.0f} {r.get('cpu_seconds', 0.0):>8.0f} "
                     f"{r.get('load_avg', float('nan')):>6.1f}")
    done = [r for r in records if r["status"] == "done"]
    lines.append(f"{'total (run now)':<30} {'':<8} {sum(r['seconds'] for r in done):>8.0f} "
                 f"{sum(r.get('cpu_seconds', 0.0) for r in done):>8.0f}")
    for r in done:
        if r.get("background_seconds") is not None:
            lines.append(f"  {r['notebook']}: its training ran {r['background_seconds']:.0f} s as a background job beside "
                         "the notebooks before it (its wall s: the wait for that job plus the notebook; its CPU s "
                         "include the job)")
    return "\n".join(lines)


def _run_series(notebooks, layout, force, log_output, progress_bar, cell_timeout_s, echo) -> list[dict[str, Any]]:
    import papermill as pm  # papermill: the notebook kernels' runner, only when notebooks run

    state = read_state(layout)
    rerun_downstream = False
    records = []
    total = len(notebooks)
    names = [nb.name for nb in notebooks]
    deferred = [nb.name for nb in notebooks if nb.background is not None and nb.background.after in names]
    jobs: dict[str, overlap.BackgroundRun] = {}

    def start_jobs_after(name: str) -> None:
        """Start the background job of each deferred notebook that waits for ``name`` and will run."""
        for nb in notebooks:
            if nb.name not in deferred or nb.background.after != name:
                continue
            done, _ = _is_finished(state.get(nb.name), nb, layout.executed / nb.source.name)
            if done and not force and not rerun_downstream:
                continue  # finished earlier: the loop skips it too
            entry = state.get(nb.name) or {}
            if not (entry.get("status") in ("failed", "running") and not force and not rerun_downstream
                    and entry.get("parameters") == json.loads(json.dumps(nb.parameters))):
                _clear_outputs(nb, layout, echo)
            state[nb.name] = {"status": "running", "parameters": nb.parameters}
            _write_state(layout, state)
            log = layout.executed / f"{nb.name}.background.log"
            jobs[nb.name] = overlap.start(nb.name, nb.background, nb.parameters, log)
            echo(f"[bg] {nb.name}: its training runs in the background from now on (nice {overlap.BACKGROUND_NICE}; "
                 f"log {log}); the notebook itself runs before the first notebook that reads its folder")

    try:
        order = overlap.execution_order(names, [nb.parameters for nb in notebooks], deferred)
        for i, idx in enumerate(order, 1):
            nb = notebooks[idx]
            out = layout.executed / nb.source.name
            done, why = _is_finished(state.get(nb.name), nb, out)
            if done and not force and not rerun_downstream:
                echo(f"[{i}/{total}] {nb.name}: finished earlier ({state[nb.name]['seconds']:.0f} s), "
                     "skipped (--force reruns it)")
                records.append({"notebook": nb.name, "status": "skipped", "seconds": 0.0,
                                "earlier_seconds": state[nb.name].get("seconds", 0.0),
                                "earlier_cpu_seconds": state[nb.name].get("cpu_seconds", float("nan"))})
                start_jobs_after(nb.name)
                continue
            job = jobs.get(nb.name)
            reason = ("its background job ran" if job else "forced" if force
                      else ("an earlier notebook was rerun" if rerun_downstream and done else why))
            echo(f"[{i}/{total}] {nb.name}: running ({reason})")
            t0, c0 = time.perf_counter(), children_cpu_s()  # a job's CPU counts once it is reaped below
            if job is not None:  # its outputs are the job's work: never cleared here
                code = job.join()
                echo(f"    background job: exit {code} after {job.seconds:.0f} s" + (
                    "" if code == 0 else f" (see {job.log}); the notebook trains what is missing itself"))
            else:
                # an interrupted notebook with unchanged inputs resumes (trainers continue from their last
                # checkpoint); any other rerun starts from empty output folders
                entry = state.get(nb.name) or {}
                resumable = (entry.get("status") in ("failed", "running") and not force and not rerun_downstream
                             and entry.get("parameters") == json.loads(json.dumps(nb.parameters)))
                if not resumable:
                    _clear_outputs(nb, layout, echo)
            state[nb.name] = {"status": "running", "parameters": nb.parameters}
            _write_state(layout, state)
            sha = _sha(nb.source)  # of the source that runs, not of a later edit
            kwargs: dict[str, Any] = {}
            if cell_timeout_s:  # None or 0: no limit
                kwargs["execution_timeout"] = int(cell_timeout_s)
            try:
                pm.execute_notebook(
                    str(nb.source), str(out), parameters=nb.parameters, kernel_name="python3",
                    progress_bar=progress_bar, log_output=log_output, cwd=str(nb.source.parent), **kwargs,
                )
            except Exception as exc:  # noqa: BLE001 - every failure is reported with the notebook named
                seconds = time.perf_counter() - t0
                err = _describe_failure(nb, out, exc)
                # the executed file's own index: papermill inserts markdown cells into a notebook that
                # raised (a banner first, an anchor before the failing cell), so err.cell_index, the
                # index papermill reports, is not that cell's index in the file
                mark_not_run(out, _failed_cell(out)[0], err.error)
                state[nb.name] = {"status": "failed", "parameters": nb.parameters, "seconds": seconds,
                                  "error": str(err)}
                _write_state(layout, state)
                raise err from exc
            seconds, cpu = time.perf_counter() - t0, children_cpu_s() - c0
            load_avg = os.getloadavg()[0]
            extra = {"background_seconds": job.seconds, "background_exit": job.returncode} if job else {}
            state[nb.name] = {"status": "done", "parameters": json.loads(json.dumps(nb.parameters)),
                              "source_sha": sha, "seconds": seconds, "cpu_seconds": cpu, "load_avg": load_avg,
                              "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
            _write_state(layout, state)
            echo(f"[{i}/{total}] {nb.name}: done in {seconds:.0f} s ({cpu:.0f} CPU s; load average {load_avg:.1f})")
            records.append({"notebook": nb.name, "status": "done", "seconds": seconds, "cpu_seconds": cpu,
                            "load_avg": load_avg, **extra})
            rerun_downstream = True
            start_jobs_after(nb.name)
    finally:  # a failure, an interrupt: no job outlives the runner
        for job in jobs.values():
            job.stop()
    return records


def _parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x,y"]`` -> ``{"a.b": 1, "c": "x,y"}``; values are JSON when they parse as JSON.

    Raises:
        ValueError: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def dry_run_text(series: Sequence[NotebookRun], layout: Layout, overrides: dict[str, Any] | None = None) -> str:
    """What ``run`` would do, as text: each notebook with its parameters; on the paper profiles
    also the cluster chain (:func:`kit.bridge.stages.describe_chain`: VERL commands, merges,
    folders). Nothing runs and nothing is written."""
    cfg = load(layout.profile, overrides or {}, write=False)
    lines = [f"kit.pipeline (dry run): profile {layout.profile} -> {layout.root}", ""]
    for i, nb in enumerate(series, 1):
        params = {k: v for k, v in nb.parameters.items() if k not in ("profile", "seed", "overrides")}
        lines.append(f"[{i}/{len(series)}] {nb.name}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    if cfg.runtime == "verl":
        from kit.bridge.stages import describe_chain  # kit.bridge (VERL): only for a paper profile's dry run

        dirs = {k: layout.dir(k) for k in ("data", "sft", "stage1", "stage2", "stage3", "ablation")}
        lines += ["", describe_chain(cfg, dirs, notebooks=[nb.name for nb in series])]
    return "\n".join(lines)


#: the session folder of a chain run on VERL's CPU runtime, under the run folder (session.json, chain.log)
VERL_SESSION_DIR = "verl_session"


def run_in_verl_cpu_session(argv: Sequence[str], layout: Layout, overrides: dict[str, Any], *,
                            session_timeout_s: float) -> int | None:
    """Run this whole ``kit.pipeline`` command inside ONE kit session when its notebooks train with
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
    if cfg.runtime != "verl" or os.environ.get("KIT_VERL_DEVICE", "").strip().lower() != "cpu":
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
    launch = runner.Launch("chain", [sys.executable, "-m", "kit.pipeline", *argv], str(log))
    done = threading.Event()
    tail = threading.Thread(target=_follow, args=(log, done), daemon=True)
    tail.start()
    try:
        res = runner.run_session([launch], out, timeout_s=session_timeout_s)
    finally:
        done.set()
        tail.join()
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


def _follow(path: Path, done: threading.Event, period_s: float = 1.0) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    """``run --profile P --run R [--force] [--until NN] [--set KEY=VALUE ...] [--cell-timeout S] [--log-output] [--no-report] [--no-overlap] [--dry-run]``.

    Runs :data:`SERIES` into ``reports/<P>/<R>/`` and then builds ``report.pdf`` with
    :mod:`kit.report`. Returns the exit code: 0 on success, 1 when a notebook failed (the message
    names it), 2 on bad arguments (unknown profile, bad ``--set`` key, ...).
    """
    parser = argparse.ArgumentParser(prog="kit.pipeline", description="Run the notebook series with papermill.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute the series into reports/<profile>/<run>/")
    r.add_argument("--profile", default="tiny")
    r.add_argument("--run", default="main")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every notebook, e.g. --set rollout.max_response_tokens=64 (repeatable)")
    r.add_argument("--force", action="store_true", help="rerun notebooks that already finished")
    r.add_argument("--log-output", action="store_true", help="stream cell outputs to the terminal")
    r.add_argument("--cell-timeout", type=int, default=None, metavar="SECONDS",
                   help="stop a cell that runs longer than this and fail its notebook naming the cell "
                        f"(default per profile: {', '.join(f'{k} {v} s' for k, v in CELL_TIMEOUT_S.items())}; "
                        "0 = no limit)")
    r.add_argument("--until", default=None, metavar="NN",
                   help="stop after the notebook whose name starts with NN (e.g. 03); no report then")
    r.add_argument("--no-report", action="store_true", help="do not build report.pdf at the end")
    r.add_argument("--no-overlap", action="store_true",
                   help="run strictly in order: 06's training does not run in the background beside 03-08")
    r.add_argument("--dry-run", action="store_true",
                   help="print each notebook's parameters (and, on paper profiles, the VERL and merge commands "
                        "with the folders each stage reads and writes) without running anything")
    r.add_argument("--reports-root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.profile not in available_profiles():
        print(f"kit.pipeline: unknown profile {args.profile!r}; available: {', '.join(available_profiles())}",
              file=sys.stderr)
        return 2
    try:
        if args.cell_timeout is not None and args.cell_timeout < 0:  # nbclient reads < 0 as "no limit"
            raise ValueError(f"--cell-timeout must be 0 (no limit) or a number of seconds, got {args.cell_timeout}")
        layout = Layout.for_run(args.profile, args.run, args.reports_root)
        overrides = _parse_sets(args.set)
        series = standard_series(layout, seed=args.seed, overrides=overrides, overlap_jobs=not args.no_overlap)
        if args.until:
            last = next((i for i, nb in enumerate(series) if nb.name.startswith(args.until)), None)
            if last is None:
                raise ValueError(f"--until {args.until!r} matches no notebook of {', '.join(SERIES)}")
            series = series[:last + 1]
    except (ValueError, FileNotFoundError, ConfigError) as exc:
        print(f"kit.pipeline: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(dry_run_text(series, layout, overrides))
        return 0
    timeout = default_cell_timeout(args.profile) if args.cell_timeout is None else args.cell_timeout
    wrapped = run_in_verl_cpu_session(list(argv if argv is not None else sys.argv[1:]), layout, overrides,
                                      session_timeout_s=(timeout or 7 * 86400) * len(series) + 600)
    if wrapped is not None:
        return wrapped
    print(f"kit.pipeline: profile {args.profile}, run {args.run} -> {layout.root}")
    t0 = time.perf_counter()
    try:
        records = run_series(series, layout, force=args.force, log_output=args.log_output, cell_timeout_s=timeout)
    except PipelineError as exc:
        print(f"\nkit.pipeline: STOPPED. {exc}\n  Fix it and rerun; finished notebooks are skipped.",
              file=sys.stderr)
        return 1
    if not args.no_report and not args.until:
        try:
            pdf = report.build_report(layout)
        except report.ReportError as exc:
            print(f"kit.pipeline: no report: {exc}", file=sys.stderr)
            return 1
        print(f"kit.pipeline: report {pdf}")
    print(times_table(records))
    print(f"kit.pipeline: all {len(series)} notebooks finished in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
