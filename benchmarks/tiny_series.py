"""The notebook series, timed (issue #35): per-notebook wall and CPU seconds, the machine's busy CPU seconds,
the host's speed and the distance to the machine's limit, in one run.

Usage::

    .venv/bin/python benchmarks/tiny_series.py [--profile tiny] [--run bench] [--seed 0] [--until 08]
        [--set key=value ...] [--force] [--no-overlap] [--no-report] [--no-limits]
    .venv/bin/python benchmarks/tiny_series.py --read reports/tiny/main [--no-limits]   # a finished run's state
    .venv/bin/python benchmarks/tiny_series.py --read reports/tiny/s10{1..5}             # per notebook and per seed
    .venv/bin/python benchmarks/tiny_series.py --fanout reports/tiny/fanout --solo reports/tiny/s101  # Ray fan-out

It runs the series as ``python -m kit reproduce`` does (:func:`kit.pipeline.run_series` into
``reports/<profile>/<run>/``, resumable; then the report unless ``--until`` or ``--no-report``) and prints,
per notebook: wall seconds, the runner's CPU seconds (the kernel and its reaped children, the background
job's once reaped) and the machine's busy CPU seconds while it ran (``/proc/stat``, every process on the
run's CPUs: also the sandbox's per-call children the runner's count misses, and anything else running).
While 06's training runs in the background beside 03-05, 07 and 08 (the local runtime's overlap), their
machine column includes that job's work; 06's row is then its wait and the notebook. ``--read`` prints the
same table from a run's ``pipeline_state.json`` (runs before issue #35 have no machine column).

The host-speed factor is the run's median cold-start step at 2 threads over the reference in
``kit/reference/host_speed.yaml`` (:func:`kit.pipeline.timing.host_speed_factor`): 1.0 is the reference
host's speed, 1.3 means this host took 1.3 times as long for the same steps. A profile without a reference
whose SFT step is the same work as one with (smoke: the tiny step, 40 steps instead of 600) is compared
with that one; ``nan`` where no cold start ran at 2 threads or ``--set`` changes a step's work.

Then (unless ``--no-limits``) ``benchmarks/machine_limit.py``'s figures, measured now in this process:
sustained fp32/bf16 matmul FLOP/s at 2 threads and the SFT step's, an RL update's and the decode's model
FLOPs utilisation against the fp32 bound; and the run's own rollout decode tokens/s (stage metrics'
``perf_decoded_tokens`` over ``time_generate_s``) against the probe's.

``--read`` with several run folders (the seeds of ``kit reproduce --seeds``, issue #48) prints per notebook each
seed's wall and machine CPU seconds and their mean, then per seed its totals, its host factor, and the series'
per-seed target (:data:`TARGET_WALL_S` wall, :data:`TARGET_MACHINE_S` machine CPU seconds on 2 quiet cores of
the reference host's speed) against the measured mean scaled by the host factor. A notebook a seed did not run
(an ``--only`` run) is ``-`` and its totals say how many notebooks they cover; the wall column sums notebook
seconds, which overcounts a series whose background training overlapped the notebooks beside it.
Last line then: ``seeds=<n> mean_wall_s=<x> mean_machine_cpu_s=<y> host_factor=<f>``.

``--fanout DIR`` reads a ``kit reproduce --seeds ... --ray`` fan-out's ``timings.json`` (:mod:`kit.pipeline.fanout`)
and prints its wall seconds (first task submitted to last seed ended; Ray's start apart), each seed's own, and,
with ``--solo DIR`` (one seed of the same series alone: best the fan-out folder of ``--seeds N --ray local``, the
same clock; a run folder's summed notebook seconds overcount overlapped training), the ratio of the fan-out's
wall to that seed's; no ratio where a seed did not exit 0. Issue #48's target is at most
:data:`TARGET_FANOUT_RATIO` for 5 seeds on 16 or more cores. Last line then:
``fanout_seeds=<n> fanout_wall_s=<x> solo_wall_s=<y> ratio=<r>``.

Last line (one run): ``series_wall_s=<x> series_cpu_s=<y> machine_cpu_s=<z> host_factor=<f>`` (the invocation's wall
seconds including the report, the runner's CPU seconds summed over the notebooks run now, the machine's busy
CPU seconds over the whole invocation; with ``--read``: the state's sums, machine over the notebooks that
have it). Ratios between two runs are only meaningful at the same ``host_factor`` and load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kit.config import load  # noqa: E402
from kit.metrics import read_rows  # noqa: E402
from kit.pipeline.timing import (  # noqa: E402
    SFT_STEP_REFERENCE_S,
    WORK_KEYS,
    host_speed_factor,
    machine_busy_cpu_s,
    usable_cpus,
)


def reference_profile(profile: str, overrides: dict[str, Any] | None = None) -> str | None:
    """The host-speed reference that applies to ``profile``'s cold-start step: its own, else that of a
    referenced profile whose SFT step is the same work (the model section but ``torch_threads``, and the
    :data:`WORK_KEYS` of ``sft``); None when ``overrides`` change that work or none matches."""
    over = dict(overrides or {})
    if any(k in WORK_KEYS or (k.startswith("model.") and k != "model.torch_threads") for k in over):
        return None
    if profile in SFT_STEP_REFERENCE_S:
        return profile

    def work(cfg) -> tuple:
        model = dataclasses.replace(cfg.model, torch_threads=0)
        return model, tuple(getattr(cfg.sft, k.split(".", 1)[1]) for k in WORK_KEYS)

    mine = work(load(profile, over, write=False))
    return next((ref for ref in SFT_STEP_REFERENCE_S if work(load(ref, write=False)) == mine), None)


def table(records: list[dict[str, Any]]) -> str:
    """Per-notebook rows: status, wall s, runner CPU s, machine CPU s (``-`` where not measured)."""
    lines = [f"{'notebook':<30} {'status':<8} {'wall s':>8} {'cpu s':>8} {'machine s':>10}"]
    for r in records:
        mach = r.get("machine_cpu_seconds")
        lines.append(f"{r['notebook']:<30} {r['status']:<8} {r.get('seconds', 0.0):>8.0f} {r.get('cpu_seconds', 0.0):>8.0f} "
                     f"{'-' if mach is None else f'{mach:.0f}':>10}")
    done = [r for r in records if r["status"] == "done"]
    mach = [r["machine_cpu_seconds"] for r in done if r.get("machine_cpu_seconds") is not None]
    lines.append(f"{'total':<30} {'':<8} {sum(r['seconds'] for r in done):>8.0f} "
                 f"{sum(r.get('cpu_seconds', 0.0) for r in done):>8.0f} {sum(mach) if mach else float('nan'):>10.0f}")
    return "\n".join(lines)


def state_records(root: Path) -> list[dict[str, Any]]:
    """The finished notebooks of ``root/pipeline_state.json`` as :func:`kit.pipeline.run_series` records.

    Raises:
        FileNotFoundError: no state file in ``root``.
    """
    path = root / "pipeline_state.json"
    if not path.is_file():
        raise FileNotFoundError(f"no pipeline_state.json in {root} (not a series run folder)")
    state = json.loads(path.read_text())
    return [{"notebook": name, **entry} for name, entry in state.items() if entry.get("status") == "done"]


#: issue #48's target for one seed of the tiny series, B-STaR in it, on 2 quiet cores of the reference host
TARGET_WALL_S, TARGET_MACHINE_S = 1200.0, 2000.0
#: issue #48's fan-out target: 5 seeds side by side on 16 or more cores within this many times one seed's wall
TARGET_FANOUT_RATIO = 1.3


def fanout_lines(folder: Path, solo: Path | None) -> tuple[list[str], dict[str, float]]:
    """The fan-out's figures (see the module docstring); returns ``(lines, {"seeds", "wall_s", "solo_wall_s",
    "ratio"})`` (nan where there is no solo run, or where a seed did not finish with exit 0: no ratio then).

    Raises:
        FileNotFoundError: no ``timings.json`` in ``folder`` (not a finished fan-out), or no state in ``solo``.
    """
    t = _timings(folder)
    seeds, codes = t.get("seeds_s", {}), t.get("codes", {})
    bad = {k: v for k, v in codes.items() if v != 0}
    lines = [f"fan-out {folder}: {len(codes)} seeds, {t.get('cpus_per_seed')} CPU(s) each on {t.get('ray_cpus')} Ray "
             f"CPUs, wall {t['wall_s']:.0f} s; each seed's own: "
             + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(seeds.items()))]
    solo_wall = ratio = math.nan
    if bad:
        lines.append(f"no ratio: seeds {', '.join(f'{k} (exit {v})' for k, v in sorted(bad.items()))} did not finish")
    if solo is not None:
        if (solo / "timings.json").is_file():  # one seed fanned out alone: the same clock as the fan-out's
            solo_wall, how = _timings(solo)["wall_s"], "its fan-out's wall"
        else:  # a run folder: its notebooks' seconds, which overcount overlapped background training
            solo_wall, how = sum(r.get("seconds", 0.0) for r in state_records(solo)), "its notebooks' summed seconds"
        ratio = t["wall_s"] / solo_wall if solo_wall > 0 and not bad else math.nan
        lines.append(f"one seed alone ({solo}, {how}): {solo_wall:.0f} s; fan-out / alone = {ratio:.2f} (target <= "
                     f"{TARGET_FANOUT_RATIO} for 5 seeds on 16 or more cores; {len(usable_cpus())} cores here)")
    return lines, {"seeds": len(codes), "wall_s": t["wall_s"], "solo_wall_s": solo_wall, "ratio": ratio}


def _timings(folder: Path) -> dict[str, Any]:
    path = folder / "timings.json"
    if not path.is_file():
        raise FileNotFoundError(f"no timings.json in {folder} (not the folder of a finished kit reproduce --ray)")
    return json.loads(path.read_text())


def seeds_table(roots: list[Path]) -> tuple[str, dict[str, float]]:
    """Per notebook x seed wall and machine CPU seconds of several run folders, per-seed totals and host factors,
    and the target line (see the module docstring). Returns ``(text, {"mean_wall_s", "mean_machine_cpu_s",
    "host_factor"})``; the host factor is the median of the seeds' (nan where none has one).

    Raises:
        FileNotFoundError: a folder without ``pipeline_state.json`` (named).
    """
    runs = {r.name: {x["notebook"]: x for x in state_records(r)} for r in roots}
    names = sorted({n for recs in runs.values() for n in recs})
    width = max(12, *(len(n) for n in runs))
    lines = [f"{'notebook':<28}" + "".join(f" {n[-width:]:>{width}}" for n in runs) + f" {'mean':>12}",
             f"{'':<28}" + "".join(f" {'wall/machine':>{width}}" for _ in runs) + f" {'wall/machine':>12}"]

    def cell(rec: dict[str, Any] | None) -> str:
        if rec is None:
            return "-"
        mach = rec.get("machine_cpu_seconds")
        return f"{rec.get('seconds', 0.0):.0f}/{'-' if mach is None else f'{mach:.0f}'}"

    for name in names:
        got = [recs.get(name) for recs in runs.values()]
        have = [g for g in got if g is not None]
        mw = sum(g.get("seconds", 0.0) for g in have) / len(have)
        mm = [g["machine_cpu_seconds"] for g in have if g.get("machine_cpu_seconds") is not None]
        mean = f"{mw:.0f}/{sum(mm) / len(mm):.0f}" if mm else f"{mw:.0f}/-"
        lines.append(f"{name:<28}" + "".join(f" {cell(g):>{width}}" for g in got) + f" {mean:>12}")
    walls, machines, factors = [], [], []
    lines.append("")
    for root, (run, recs) in zip(roots, runs.items(), strict=True):
        wall = sum(r.get("seconds", 0.0) for r in recs.values())
        mach = sum(r.get("machine_cpu_seconds") or 0.0 for r in recs.values())
        ref = reference_profile(_profile_of(root))
        factor = host_speed_factor(root / "sft" / "metrics.jsonl", ref) if ref else None
        walls.append(wall)
        machines.append(mach)
        if factor is not None and math.isfinite(factor):
            factors.append(factor)
        lines.append(f"{run}: {len(recs)} of {len(names)} notebooks, wall {wall:.0f} s, machine {mach:.0f} CPU s, "
                     f"host factor {'nan' if factor is None else f'{factor:.2f}'}")
    factor = sorted(factors)[len(factors) // 2] if factors else math.nan
    mean_wall, mean_mach = sum(walls) / len(walls), sum(machines) / len(machines)
    full = [i for i, recs in enumerate(runs.values()) if len(recs) == len(names)]
    if not full:
        lines.append("per-seed target: no seed ran every notebook of the table (partial runs), so no per-seed figure")
    elif not math.isfinite(factor):
        lines.append("per-seed target: no host factor (no cold start at its reference threads)")
    else:
        w = sum(walls[i] for i in full) / len(full) / factor
        m = sum(machines[i] for i in full) / len(full) / factor
        lines.append(f"per seed at the reference host's speed ({len(full)} complete seed(s), mean / host factor "
                     f"{factor:.2f}): wall {w:.0f} s (target {TARGET_WALL_S:.0f}: {'met' if w <= TARGET_WALL_S else 'not met'}), "
                     f"machine {m:.0f} CPU s (target {TARGET_MACHINE_S:.0f}: {'met' if m <= TARGET_MACHINE_S else 'not met'}); "
                     "a loaded machine's figures are not a quiet run's")
    return "\n".join(lines), {"mean_wall_s": mean_wall, "mean_machine_cpu_s": mean_mach, "host_factor": factor}


def _profile_of(root: Path) -> str:
    cfg = root / "sft" / "config.json"
    return json.loads(cfg.read_text()).get("profile", "tiny") if cfg.is_file() else "tiny"


def run_decode_rate(root: Path, stages: tuple[str, ...]) -> float | None:
    """The run's rollout decode tokens per wall second over its RL stages' steps (``perf_decoded_tokens``
    over ``time_generate_s``; tool calls overlap generation, so this is a lower bound of the engine's rate),
    or None where no stage wrote them."""
    tokens = seconds = 0.0
    for stage in stages:
        for row in read_rows(root / stage / "metrics.jsonl", missing_ok=True, partial_ok=True):
            tok, sec = row.get("perf_decoded_tokens"), row.get("time_generate_s")
            if isinstance(tok, int | float) and isinstance(sec, int | float) and sec > 0:
                tokens, seconds = tokens + tok, seconds + sec
    return tokens / seconds if seconds else None


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], Path, float, float | None, str, dict]:
    """Run (or read) the series; returns ``(records, run folder, wall s, machine CPU s, profile, overrides)``."""
    from kit.cli import parse_sets

    overrides = parse_sets(args.set)
    if args.read:
        root = Path(args.read[0])
        cfg = json.loads((root / "sft" / "config.json").read_text()) if (root / "sft" / "config.json").is_file() else {}
        recs = state_records(root)
        mach = [r["machine_cpu_seconds"] for r in recs if r.get("machine_cpu_seconds") is not None]
        return recs, root, sum(r.get("seconds", 0.0) for r in recs), sum(mach) if mach else None, \
            cfg.get("profile", args.profile), overrides
    from kit.pipeline import default_cell_timeout, run_series, standard_series
    from kit.plan import Layout
    from kit.report import builder

    layout = Layout.for_run(args.profile, args.run, args.reports_root)
    series = standard_series(layout, seed=args.seed, overrides=overrides, overlap_jobs=not args.no_overlap)
    if args.until:
        last = next((i for i, nb in enumerate(series) if nb.name.startswith(args.until)), None)
        if last is None:
            raise SystemExit(f"--until {args.until!r} matches no notebook of {', '.join(nb.name for nb in series)}")
        series = series[:last + 1]
    t0, busy0 = time.perf_counter(), machine_busy_cpu_s()
    recs = run_series(series, layout, force=args.force, cell_timeout_s=default_cell_timeout(args.profile))
    if not (args.until or args.no_report):
        t1, b1 = time.perf_counter(), machine_busy_cpu_s()
        print(f"report: {builder.build_report(layout)}")
        recs.append({"notebook": "report (kit.report)", "status": "done", "seconds": time.perf_counter() - t1,
                     "cpu_seconds": 0.0, **({} if b1 is None else {"machine_cpu_seconds": machine_busy_cpu_s() - b1})})
    busy1 = machine_busy_cpu_s()
    return recs, layout.root, time.perf_counter() - t0, None if busy0 is None else busy1 - busy0, args.profile, overrides


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--run", default="bench", help="run name: reports/<profile>/<run>/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--until", default="", help="stop after the notebook whose name starts with this (no report)")
    ap.add_argument("--set", action="append", default=[], help="config override key=value, as python -m kit reproduce")
    ap.add_argument("--force", action="store_true", help="rerun finished notebooks")
    ap.add_argument("--no-overlap", action="store_true", help="06's training in order, not in the background")
    ap.add_argument("--no-report", action="store_true", help="do not build report.pdf at the end")
    ap.add_argument("--no-limits", action="store_true", help="skip the matmul bound and MFU probes")
    ap.add_argument("--read", nargs="+", default=[], metavar="RUN",
                    help="print a finished run folder's times instead of running; several: per notebook and per seed")
    ap.add_argument("--fanout", default="", metavar="DIR", help="print a --ray fan-out's figures (its folder)")
    ap.add_argument("--solo", default="", metavar="RUN", help="with --fanout: one seed's run folder, run alone")
    ap.add_argument("--reports-root", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.solo and not args.fanout:
        ap.error("--solo goes with --fanout")
    if args.fanout:
        lines, f = fanout_lines(Path(args.fanout), Path(args.solo) if args.solo else None)
        print("\n".join(lines))
        print(f"fanout_seeds={f['seeds']} fanout_wall_s={f['wall_s']:.0f} solo_wall_s={f['solo_wall_s']:.0f} "
              f"ratio={f['ratio']:.2f}")
        return 0
    if len(args.read) > 1:
        text, means = seeds_table([Path(r) for r in args.read])
        print(text)
        print(f"seeds={len(args.read)} mean_wall_s={means['mean_wall_s']:.0f} "
              f"mean_machine_cpu_s={means['mean_machine_cpu_s']:.0f} host_factor={means['host_factor']:.2f}")
        return 0
    recs, root, wall, machine, profile, overrides = run(args)
    print(table(recs))
    cpu = sum(r.get("cpu_seconds", 0.0) for r in recs if r["status"] == "done")
    ref = reference_profile(profile, overrides)
    factor = host_speed_factor(root / "sft" / "metrics.jsonl", ref) if ref else None
    cores = len(usable_cpus())
    print(f"{cores} cores; machine busy {'-' if machine is None else f'{machine:.0f}'} CPU s over {wall:.0f} s wall"
          + ("" if machine is None or wall <= 0 else f" ({machine / (cores * wall):.0%} of the cores)"))
    ref_s = SFT_STEP_REFERENCE_S.get(ref or "", (math.nan, 0, ""))
    print(f"host speed: median cold-start step at {ref_s[1]} threads over {ref_s[0]:.3f} s ({ref_s[2] or 'no reference'}"
          f"{'' if ref == profile else f', the {ref} reference: the same step'}) = "
          f"{'nan' if factor is None else f'{factor:.2f}'}")
    if not args.no_limits:
        import machine_limit

        lim = machine_limit.measure()
        cfg = load(profile, overrides, write=False)
        rate = run_decode_rate(root, tuple(cfg.stages.names))
        if rate is not None:
            print(f"the run's rollout decode: {rate:.0f} tokens per generate-wall second over its stages "
                  f"({rate / lim['decode_tok_s']:.2f} of the probe's {lim['decode_tok_s']:.0f}: tool calls and "
                  "short, uneven batches)")
        print(machine_limit.result_line(lim))
    print(f"series_wall_s={wall:.0f} series_cpu_s={cpu:.0f} machine_cpu_s={'nan' if machine is None else f'{machine:.0f}'} "
          f"host_factor={'nan' if factor is None else f'{factor:.2f}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
