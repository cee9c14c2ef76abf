"""How long a run took and how much work it was (issue #16): per-notebook wall and CPU seconds, and
the machine's busy CPU seconds over the run, printed by ``python -m kit reproduce`` at its end.

Wall time on a shared machine is an upper bound; the runner's CPU count (:func:`children_cpu_s`)
is the notebooks' work but misses processes it never reaps (the sandbox's per-call children);
:func:`machine_busy_cpu_s` counts everything on the CPUs the run may use.
"""

from __future__ import annotations

import math
import os
import resource
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from kit.report.figures import read_metrics


def own_cpu_seconds(cpu: float, job: Any, jobs: Iterable[Any], t0: float, t1: float) -> float:
    """A notebook's CPU seconds from its window ``[t0, t1]``'s ``RUSAGE_CHILDREN`` delta ``cpu``: a
    job's CPU joins that count when the job is reaped, in whichever window is open then, so another
    notebook's job reaped in this window is taken out, and this notebook's own ``job`` counts here
    wherever it was reaped. ``job``, ``jobs``: :class:`kit.pipeline.overlap.BackgroundRun` (``cpu_seconds``,
    ``reaped_at``); ``t0``, ``t1``: ``time.perf_counter()`` seconds."""
    def inside(j: Any) -> bool:
        return j.reaped_at is not None and t0 <= j.reaped_at <= t1

    cpu -= sum(j.cpu_seconds or 0.0 for j in jobs if j is not job and inside(j))
    if job is not None and job.cpu_seconds is not None and not inside(job):
        cpu += job.cpu_seconds
    return cpu


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children and their waited-for
    descendants: a notebook's kernel, its sandbox workers and ablation workers once reaped.
    Unlike wall time it hardly moves when other work shares the cores."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ch.ru_utime + ch.ru_stime


def usable_cpus() -> list[int]:
    """The CPU numbers this process may run on (``os.sched_getaffinity``; every CPU of
    ``os.cpu_count`` where the call does not exist)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def machine_busy_cpu_s(cpus: Sequence[int] | None = None) -> float | None:
    """Busy CPU seconds since boot of the CPUs ``cpus`` (default :func:`usable_cpus`), from their
    ``cpuN`` lines in ``/proc/stat``: user, nice, system, irq and softirq ticks over
    ``SC_CLK_TCK`` (guest time is already inside user and nice; idle, iowait and steal, the time
    the hypervisor gave other guests, are not work here). Every process on those CPUs counts, not
    only this run's; two readings bracket a run. None where ``/proc/stat`` is missing or lists
    none of the CPUs. Under a container CPU quota on a bigger host the figure covers the host's
    other tenants too, so read it only on a machine of your own.
    """
    want = {f"cpu{n}" for n in (usable_cpus() if cpus is None else cpus)}
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    ticks = 0
    found = False
    for line in lines:
        fields = line.split()
        if len(fields) >= 8 and fields[0] in want:
            user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
            ticks += user + nice + system + irq + softirq
            found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def cores_busy_line(records: Sequence[dict[str, Any]], wall_s: float, cores: int | None = None,
                    machine_busy_s: float | None = None) -> str:
    """How much work the run was and how busy it kept the cores (printed at the end of a run).

    The runner's count (the notebooks' kernels, their children, the background job) misses CPU
    that is not reaped into it: the sandbox's per-call children and the kernel's own work for
    them. ``machine_busy_s`` (two :func:`machine_busy_cpu_s` readings) is every process's on the
    run's CPUs, so on a quiet machine it is the run's whole cost, and ``machine_busy_s / cores``
    the least wall time that much work allows in any order (issue #16: on 2 cores the 20-minute
    target is a CPU budget).

    Args:
        records: :func:`kit.pipeline.run_series` records.
        wall_s: the whole invocation's wall seconds.
        cores: default ``len(usable_cpus())``, the CPUs :func:`machine_busy_cpu_s` reads.
        machine_busy_s: busy CPU seconds of those CPUs over the run, or None (not measured).
    """
    cores = cores or len(usable_cpus())
    cpu = sum(r.get("cpu_seconds", 0.0) for r in records if r["status"] == "done")
    line = f"  {cpu:.0f} CPU s counted for the notebooks (kernels, their children, the background job)"
    if machine_busy_s is None or wall_s <= 0:
        return line
    return (f"{line}; the {cores} cores were busy {machine_busy_s:.0f} CPU s (/proc/stat, every process: also the "
            f"sandbox calls the count misses, and any other work) = {machine_busy_s / (cores * wall_s):.0%} of "
            f"{wall_s:.0f} s; if all of it was this run's, no order finishes it under {machine_busy_s / cores:.0f} s "
            f"on {cores} cores")


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


#: the shipped reference of :func:`host_speed_line` (a YAML file, per profile: ``step_s``, ``threads``, ``where``)
HOST_SPEED_FILE = Path(__file__).resolve().parents[1] / "reference" / "host_speed.yaml"


def load_step_reference(path: str | os.PathLike = HOST_SPEED_FILE) -> dict[str, tuple[float, int, str]]:
    """Per profile ``(seconds, threads, where)`` from ``path``: the median SFT step (wall seconds) at
    ``threads`` torch threads of a run on a reference host, and where that run is described. The cold start
    is the same work in every tiny run of a seed (600 steps of 48 rows), so a run's median step at those
    threads against it probes the host's speed.

    Raises:
        ValueError: ``path`` is not a mapping of profiles to ``step_s`` > 0, ``threads`` >= 1 and ``where``
            (the message names the file and the profile).
    """
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of profile names to step_s, threads, where")
    out = {}
    for profile, ref in data.items():
        try:
            s, th, where = float(ref["step_s"]), int(ref["threads"]), str(ref["where"])
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"{path}: profile {profile!r} needs step_s, threads and where ({exc})") from exc
        if not (math.isfinite(s) and s > 0 and th >= 1):
            raise ValueError(f"{path}: profile {profile!r}: step_s must be > 0 and threads >= 1")
        out[str(profile)] = (s, th, where)
    return out


SFT_STEP_REFERENCE_S = load_step_reference()
"""Per profile: ``(seconds, threads, where)`` of :data:`HOST_SPEED_FILE` (see :func:`load_step_reference`)."""

#: ``--set`` keys that change an SFT step's work (its rows, their length and mix), so that no reference applies;
#: so does any ``model.`` key but ``model.torch_threads`` (threads: the comparison already separates them)
WORK_KEYS = ("sft.batch_size", "sft.max_seq_tokens", "sft.function_calling_sets", "sft.task_demo_fraction")


def step_times(sft_metrics: str | os.PathLike) -> dict[int | None, list[float]]:
    """The timed SFT steps of ``sft_metrics`` (``sft/metrics.jsonl``) by torch thread count: ``{threads:
    [time_s, ...]}`` (None: a row without ``threads``); rows without a finite ``time_s >= 0`` are left out,
    and a missing file gives ``{}``.

    Raises:
        ValueError: a line is not a JSON object (:class:`kit.metrics.MetricsError`, naming the file and line).
    """
    path = Path(sft_metrics)
    if not path.is_file():
        return {}
    rows = read_metrics(path)  # MetricsError (a ValueError) names the file, and the line of a bad row
    times: dict[int | None, list[float]] = {}
    for t, th in zip(rows.get("time_s", ()), rows.get("threads", [None] * len(rows)), strict=False):
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            continue
        th = int(th) if isinstance(th, int | float) and not isinstance(th, bool) and math.isfinite(th) else None
        times.setdefault(th, []).append(float(t))
    return times


def host_speed_factor(sft_metrics: str | os.PathLike, reference: str) -> float | None:
    """The run's median SFT step at the reference's thread count over :data:`SFT_STEP_REFERENCE_S`'s
    ``reference`` step (1.0: as fast as the reference host; 2.0: the same steps took twice as long), or
    None: no such reference, or no timed step at its thread count. :func:`host_speed_line` says the same
    in words; the caller decides whether the run's steps are the reference's work (:data:`WORK_KEYS`).

    Raises:
        ValueError: as :func:`step_times`.
    """
    ref = SFT_STEP_REFERENCE_S.get(reference)
    if ref is None:
        return None
    at = step_times(sft_metrics).get(ref[1], [])
    return statistics.median(at) / ref[0] if at else None


def host_speed_line(sft_metrics: str | os.PathLike, profile: str, *, earlier: bool = False,
                    overrides: Sequence[str] = ()) -> str | None:
    """The host's speed as the run's cold start measured it, printed at the end of a run (issue #16: a
    wall-time target needs the host's speed beside it; on one 2-core VM the same SFT took 298 s to 391 s).

    Reads each step's ``time_s`` (wall seconds) and ``threads`` (torch threads) from ``sft_metrics``
    (the local trainer's ``sft/metrics.jsonl``, one JSON object per line, rows without a finite
    ``time_s >= 0`` skipped). The median over the steps at the reference's thread count is compared with
    :data:`SFT_STEP_REFERENCE_S` for ``profile``; steps at other thread counts are counted apart, since
    the adaptive thread policy runs steps at fewer threads when other processes hold cores (load, not
    the host's speed).

    Args:
        sft_metrics: path of ``sft/metrics.jsonl``.
        profile: the run's profile; one without a reference gets the median alone.
        earlier: the cold start ran in an earlier invocation (02 skipped now); the line says so.
        overrides: the run's ``--set`` keys; one of :data:`WORK_KEYS` or a ``model.`` key changes a step's
            work, so there is no comparison then.
    Returns:
        One line: the median step (seconds) over all timed steps and, where a reference applies, the median
        at its thread count and their ratio (the same steps took that many times as long here); or None
        where the file is missing or has no timed step (a linked or VERL cold start).
    Raises:
        ValueError: the file cannot be decoded as UTF-8, or a line is not a JSON object
            (:class:`kit.metrics.MetricsError`, naming the file and line).
    """
    times = step_times(sft_metrics)
    if not times:
        return None
    every = [t for ts in times.values() for t in ts]
    where = "an earlier invocation's cold start" if earlier else "cold start"
    line = f"  host speed ({where}): median step {statistics.median(every):.3f} s over {len(every)} steps"
    ref = SFT_STEP_REFERENCE_S.get(profile)
    if ref is None:
        return line
    ref_s, ref_threads, ref_where = ref
    work = [k for k in overrides if k in WORK_KEYS or (k.startswith("model.") and k != "model.torch_threads")]
    if work:
        return f"{line}; not compared with {ref_where}: --set {', '.join(work)} changes a step's work"
    at = times.get(ref_threads, [])
    if not at:
        return f"{line}, none at {ref_threads} threads, so not compared with {ref_where} ({ref_s:.3f} s at {ref_threads})"
    med = statistics.median(at)
    fewer = len(every) - len(at)
    load = (f"; {fewer} steps at other thread counts left out (the thread policy takes fewer while other "
            "processes hold cores: load, not the host's speed)" if fewer else "")
    return (f"{line}, {len(at)} at {ref_threads} threads: median {med:.3f} s against {ref_s:.3f} s in {ref_where}: "
            f"{med / ref_s:.2f} times as long for the same steps{load}. Read this run's wall times with that "
            "factor beside them")
