"""The notebook pipeline: run the ordered notebook series through papermill (``make reproduce``).

One run of the series lives in ``reports/<profile>/<run>/``::

    notebooks/NN_*.ipynb   the executed notebooks (with outputs; the sources in notebooks/ stay clean)
    data/ sft/ stage1/ stage2/ stage3/ ablation/ analysis/ eval/
                           one run directory per notebook; notebooks share state only through them
    figures/ tables/       written by 20_figures_and_tables
    report.pdf             built by :mod:`kit.report` after the last notebook
    pipeline_state.json    which notebooks finished, with their parameters and wall time

The runner executes the notebooks in order, shows a progress bar per notebook (one tick per cell),
stops at the first failure naming the notebook and the cell, and is resumable: a notebook that
already finished with the same parameters and the same source is skipped, unless ``--force`` is
given or a notebook whose folder it reads ran again, in this invocation or since it finished
(:func:`kit.pipeline.state.inputs_changed`; ``--dry-run`` says which would run and why).

Command line: ``python -m kit reproduce --profile tiny --run main [--force] [--until NN] ...``
(:mod:`kit.cli` declares the options; :func:`reproduce` does the work).

With ``runtime=verl`` the device its VERL stages launch on (``KIT_VERL_DEVICE``) is checked before
the first notebook runs (exit 2 with what to set); with ``KIT_VERL_DEVICE=cpu`` (VERL's own trainer
on this CPU, the smoke profile) the whole command runs inside one kit session with one Ray head
(:func:`run_in_verl_cpu_session`); ``reports/<profile>/<run>/verl_session/`` then holds its log
and ``session.json``. ``KIT_VERL_DEVICE`` set with ``runtime=local`` is ignored, and said so once
(:func:`ignored_device_warning`).

On the local runtime the RoC ablation's training (06) runs as a background job beside 03-05, 07
and 08, which are latency-bound and leave a core idle; notebook 06 itself executes just before 20
and finds its arms trained (:mod:`kit.pipeline.overlap`; ``--no-overlap`` runs strictly in order). No other
notebooks run in parallel. It does not track data files outside the run directory; delete the
run folder or pass ``--force`` after changing the data directory (``KIT_DATA_DIR``).

Modules: :mod:`kit.pipeline.series` (the series and its runner, ``pipeline_state.json``),
:mod:`kit.pipeline.failures` (the error naming notebook and cell; the executed notebook marked),
:mod:`kit.pipeline.verl_runtime` (the device check and the one VERL CPU session); this module holds
:func:`reproduce` (the series, the report at the end) and exports every public name of the three,
so ``kit.pipeline.run_series`` & co. are what :func:`reproduce` calls.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Collection, Sequence
from typing import Any

from kit import claims
from kit.algo import adv_estimator
from kit.config import ConfigError, available_profiles, load
from kit.pipeline.failures import PipelineError, mark_not_run
from kit.pipeline.lock import RunLocked, run_lock
from kit.pipeline.series import (
    CELL_TIMEOUT_S,
    KERNEL_ENV,
    NOTEBOOK_DIR,
    OTHER_PROFILE_CELL_TIMEOUT_S,
    NotebookRun,
    default_cell_timeout,
    read_state,
    run_series,
    standard_series,
)
from kit.pipeline.state import plan
from kit.pipeline.timing import (
    children_cpu_s,
    cores_busy_line,
    host_speed_line,
    machine_busy_cpu_s,
    times_table,
)
from kit.pipeline.verl_runtime import (
    DEVICE_ENV,
    LAUNCHES_VERL,
    VERL_SESSION_DIR,
    VerlDeviceError,
    check_verl_device,
    ignored_device_warning,
    run_in_verl_cpu_session,
)
from kit.plan import SERIES, Layout, needed_for, series_parameters
from kit.report import builder
from kit.studies import STUDIES

__all__ = [
    "CELL_TIMEOUT_S", "KERNEL_ENV", "LAUNCHES_VERL", "NOTEBOOK_DIR", "OTHER_PROFILE_CELL_TIMEOUT_S", "SERIES",
    "VERL_SESSION_DIR", "ConfigError", "Layout", "NotebookRun", "PipelineError", "available_profiles",
    "children_cpu_s", "default_cell_timeout", "dry_run_text", "load", "machine_busy_cpu_s", "mark_not_run", "read_state",
    "reproduce",
    "cores_busy_line", "host_speed_line", "run_in_verl_cpu_session", "run_series", "series_parameters", "standard_series", "times_table",
    "VerlDeviceError", "check_verl_device", "DEVICE_ENV", "ignored_device_warning",
]


def dry_run_text(series: Sequence[NotebookRun], layout: Layout, overrides: dict[str, Any] | None = None,
                 force: bool | Collection[str] = False, graph: Sequence[NotebookRun] | None = None) -> str:
    """What ``run`` would do, as text: each notebook with what the runner would do with it
    (:func:`kit.pipeline.state.plan` over the run folder's state: ``(forced)``, ``(runs: not run yet)``,
    ``(runs: 08_evaluation ran again since it finished)``, ``(skipped: finished)``) and its parameters; on the
    paper profiles also the cluster chain (:func:`kit.bridge.stages.describe_chain`: VERL commands, merges,
    folders). Nothing runs and nothing is written.

    Raises:
        TypeError: ``force`` is a string.
    """
    cfg = load(layout.profile, overrides or {}, write=False)
    lines = [f"kit.pipeline (dry run): profile {layout.profile} -> {layout.root}", ""]
    what = plan(series, layout, force=force, graph=graph)
    for i, (nb, why) in enumerate(zip(series, what, strict=True), 1):
        params = {k: v for k, v in nb.parameters.items() if k not in ("profile", "seed", "overrides")}
        mark = "forced" if why == "forced" else f"runs: {why}" if why else "skipped: finished"
        lines.append(f"[{i}/{len(series)}] {nb.name} ({mark}): " + ", ".join(f"{k}={v}" for k, v in params.items()))
    for nb in series:
        if nb.background is not None and nb.background.after in {n.name for n in series}:
            lines.append(f"    {nb.name}: its training starts as a background job once {nb.background.after} is done, "
                         "beside the notebooks after it; the notebook runs before the first one that reads its "
                         "folder (--no-overlap: in order)")
    if cfg.runtime == "verl":
        from kit.bridge.stages import describe_chain  # kit.bridge (VERL): only for a paper profile's dry run

        dirs = {k: layout.dir(k) for k in ("data", "sft", *cfg.stages.names, "ablation", *(s.key for s in STUDIES))}
        lines += ["", describe_chain(cfg, dirs, notebooks=[nb.name for nb in series])]
    return "\n".join(lines)


def reproduce(profile: str = "tiny", run: str = "main", *, seed: int = 0, overrides: dict[str, Any] | None = None,
              force: bool = False, log_output: bool = False, cell_timeout: int | None = None, until: str | None = None,
              with_report: bool = True, overlap: bool = True, dry_run: bool = False, reports_root: str | None = None,
              command: Sequence[str] = (), only: Sequence[str] | None = None) -> int:
    """Run :data:`SERIES` into ``reports/<profile>/<run>/`` and then build ``report.pdf`` with
    :mod:`kit.report` (``python -m kit reproduce``; :mod:`kit.cli` documents each option).

    Args:
        overrides: ``--set`` config overrides for every notebook (dotted key -> value).
        cell_timeout: seconds per cell (None: :func:`default_cell_timeout` of the profile; 0: no limit).
        until: stop after the last notebook whose name starts with it (``"05"``: every stage run as
            ``05_rl_<stage>``; ``"05_rl_stage3"``: that one; no report then).
        only: name prefixes (``["11"]``): run those notebooks and the ones whose folders they read
            (:func:`kit.plan.needed_for`), then write ``claims.json`` over the folders the run holds
            (:func:`write_partial_claims`; a claim without its files is inconclusive); no report. Not with ``until``;
            empty names are refused. With ``force``, only the named notebooks rerun (and the selected ones that read
            their folders); the ones they read are skipped or resumed as usual (``--only 08 --force``: not the cold
            start). A finished notebook outside the selection that reads them (20) reruns the next time it is
            selected (:func:`kit.pipeline.state.inputs_changed`).
        overlap: False runs strictly in order (06's training not in the background).
        dry_run: print :func:`dry_run_text` and run nothing.
        reports_root: another folder than ``reports/`` (tests).
        command: the ``python -m kit`` arguments of this call; re-run as they are inside the one
            VERL CPU session (:func:`run_in_verl_cpu_session`).

    Returns:
        The exit code: 0 on success, 1 when a notebook failed (the message names it), 2 on bad
        arguments (unknown profile, bad ``--set`` key, ...) or, before anything runs, when
        ``runtime=verl`` cannot launch its stages here (:func:`check_verl_device`: no CUDA and no
        ``KIT_VERL_DEVICE=cpu``, ...; the message says what to set).
    """
    if profile not in available_profiles():
        print(f"kit.pipeline: unknown profile {profile!r}; available: {', '.join(available_profiles())}",
              file=sys.stderr)
        return 2
    overrides = dict(overrides or {})
    try:
        if cell_timeout is not None and cell_timeout < 0:  # nbclient reads < 0 as "no limit"
            raise ValueError(f"--cell-timeout must be 0 (no limit) or a number of seconds, got {cell_timeout}")
        layout = Layout.for_run(profile, run, reports_root)
        series = whole = standard_series(layout, seed=seed, overrides=overrides, overlap_jobs=overlap)
        if only and until:
            raise ValueError("give --only or --until, not both")
        if only is not None and not all(only) or only == []:
            raise ValueError(f"--only needs notebook names or prefixes, e.g. --only 11; got {list(only)}")
        if only:
            keep = set(needed_for(only, profile))
            series = [nb for nb in series if nb.name in keep]
            if force:  # the named notebooks (and, by the series, their readers), not the ones they read
                named = set(needed_for(only, profile, producers=False))
                force = [nb.name for nb in series if nb.name in named]
        if until:
            # the last match: ``--until 05`` runs every stage the template runs as ``05_rl_<stage>``
            # (stage3, stage4, ...), a full name (``05_rl_stage3``) stops at that one
            last = max((i for i, nb in enumerate(series) if nb.name.startswith(until)), default=None)
            if last is None:
                raise ValueError(f"--until {until!r} matches no notebook of {', '.join(nb.name for nb in series)}")
            series = series[:last + 1]
        cfg = load(profile, overrides, write=False)
        adv_estimator(cfg.algorithm.adv_estimator)  # an unknown estimator, named before anything runs
        runtime = cfg.runtime
    except (ValueError, FileNotFoundError, ConfigError) as exc:
        print(f"kit.pipeline: {exc}", file=sys.stderr)
        return 2
    warning = ignored_device_warning(runtime)
    if warning:  # once, before anything runs (the notebooks' kernels do not read the variable)
        print(f"kit.pipeline: {warning}", file=sys.stderr)
    if dry_run:
        print(dry_run_text(series, layout, overrides, force, graph=whole))
        return 0
    try:  # before the first notebook, not at 03 after minutes of SFT
        check_verl_device(runtime, [nb.name for nb in series])
    except VerlDeviceError as exc:
        print(f"kit.pipeline: {exc}. Nothing was run.", file=sys.stderr)
        return 2
    timeout = default_cell_timeout(profile) if cell_timeout is None else cell_timeout
    wrapped = run_in_verl_cpu_session(list(command), layout, overrides,
                                      session_timeout_s=(timeout or 7 * 86400) * len(series) + 600)
    if wrapped is not None:
        return wrapped
    print(f"kit.pipeline: profile {profile}, run {run} -> {layout.root}")
    t0, busy0 = time.perf_counter(), machine_busy_cpu_s()
    try:
        with run_lock(layout.root):  # one writer per run folder
            records = run_series(series, layout, force=force, log_output=log_output, cell_timeout_s=timeout,
                                 graph=whole)
            partial = bool(only) and not any(nb.name.startswith("20") for nb in series)
            if partial:
                path = write_partial_claims(layout, profile, cfg.stages.names, [nb.name for nb in series])
                print(f"kit.pipeline: claims over the folders this run holds -> {path} (no report: a partial run)")
            pdf = builder.build_report(layout) if with_report and not until and not partial else None
    except RunLocked as exc:
        print(f"kit.pipeline: {exc}. Nothing was run.", file=sys.stderr)
        return 2
    except PipelineError as exc:
        print(f"\nkit.pipeline: STOPPED. {exc}\n  Fix it and rerun; finished notebooks are skipped.",
              file=sys.stderr)
        return 1
    except builder.ReportError as exc:
        print(f"kit.pipeline: no report: {exc}", file=sys.stderr)
        return 1
    if pdf is not None:
        print(f"kit.pipeline: report {pdf}")
    wall, busy1 = time.perf_counter() - t0, machine_busy_cpu_s()
    print(times_table(records))
    print(cores_busy_line(records, wall, machine_busy_s=None if busy0 is None or busy1 is None else busy1 - busy0))
    sft_now = any(r["notebook"] == "02_cold_start_sft" and r["status"] == "done" for r in records)
    try:  # the run is done: a damaged metrics file only loses this line
        speed = host_speed_line(layout.root / "sft" / "metrics.jsonl", profile, earlier=not sft_now,
                                overrides=list(overrides))
    except (OSError, ValueError) as exc:
        speed = f"  host speed: not read ({exc})"
    if speed:
        print(speed)
    print(f"kit.pipeline: all {len(series)} notebooks finished in {wall:.0f} s")
    return 0


def write_partial_claims(layout: Layout, profile: str, stages: Sequence[str], notebooks: Sequence[str] = ()):
    """``claims.json`` of a run that ran part of the series (``--only``): every claim judged on the folders the run
    holds (:func:`kit.claims.evaluate_claims`), as notebook 20 judges them, a folder an earlier invocation left there
    included; a claim whose files are missing is inconclusive and says which. Its ``only`` names what it was judged
    on: ``notebooks`` (this invocation's) and every notebook ``pipeline_state.json`` records as done (an earlier
    ``--only`` run's included). Returns its path."""
    verdicts = claims.evaluate_claims(claims.RunDirs.under(layout.root, stages=list(stages)))
    state_file = layout.root / "pipeline_state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    done = {k for k, v in state.items() if isinstance(v, dict) and v.get("status") == "done"}
    return claims.write_claims(verdicts, layout.root / "claims.json", profile=profile, run=layout.root.name,
                               only=sorted(done | set(notebooks)))
