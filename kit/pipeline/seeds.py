"""The series once per pipeline seed, then the claims pooled over the seeds (issue #42).

``python -m kit reproduce --seeds 101-105`` runs :func:`kit.pipeline.reproduce` for each seed, one
after another on this machine, into its own run folder (``reports/<profile>/s<seed>/``, or
``<run>-s<seed>/`` with ``--run``), each resumable as any run is; then it pools the claims of every
seed whose series finished (:func:`kit.claims.pool.pool_runs`) into ``reports/<profile>/pooled/``
(``<run>-pooled/``): ``pooled_claims.json``, ``pooled_claims.csv`` and ``over_seeds.pdf``. A seed
whose series fails does not stop the others; the exit code says it failed. With ``--ray local`` or
``--ray <address>`` the seeds run side by side as Ray tasks instead (:mod:`kit.pipeline.fanout`,
issue #48), into the same run folders, and are pooled the same way.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kit.claims import ClaimsError
from kit.claims.pool import pool_runs, write_pooled
from kit.config import load
from kit.pipeline import fanout
from kit.pipeline.lock import RunLocked
from kit.pipeline.timing import usable_cpus
from kit.plan import Layout

__all__ = ["DEFAULT_RUN", "fanout_name", "parse_seeds", "pooled_name", "reproduce_seeds", "seed_command", "seed_run_name"]

#: the ``--run`` default of ``kit reproduce``: with ``--seeds`` the folders are then ``s<seed>``
DEFAULT_RUN = "main"


def parse_seeds(spec: str) -> list[int]:
    """The seeds of ``--seeds``: ranges and lists, e.g. ``"1-5"``, ``"101-105,110"``, ``"3,7"``.

    Returns:
        (S,) seeds in the order given.
    Raises:
        ValueError: an empty or malformed part, a range that runs backwards, a negative seed or a seed
            given twice (each named): a pipeline seed is the unit of a pool and counts once.
    """
    seeds: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"--seeds {spec!r}: {part!r} is not a seed or a range like 1-5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--seeds {spec!r}: the range {part!r} runs backwards")
        for s in range(lo, hi + 1):
            if s in seeds:
                raise ValueError(f"--seeds {spec!r}: seed {s} is given twice")
            seeds.append(s)
    return seeds


def seed_run_name(run: str, seed: int) -> str:
    """The run folder's name of ``seed``: ``s<seed>``, or ``<run>-s<seed>`` for a ``run`` other than the default."""
    return f"s{seed}" if run == DEFAULT_RUN else f"{run}-s{seed}"


def pooled_name(run: str, only: Sequence[str] | None = None) -> str:
    """The folder of the pooled claims: ``pooled``, or ``<run>-pooled``; a partial series (``--only 11``):
    ``only-11-pooled``, or ``<run>-only-11-pooled`` (never the whole series' pool)."""
    stem = "" if run == DEFAULT_RUN else f"{run}-"
    return f"{stem}only-{'-'.join(only)}-pooled" if only else f"{stem}pooled"


def fanout_name(run: str) -> str:
    """The folder of a ``--ray`` fan-out's logs and records (:mod:`kit.pipeline.fanout`): ``fanout``, or
    ``<run>-fanout``."""
    return "fanout" if run == DEFAULT_RUN else f"{run}-fanout"


def seed_command(command: Sequence[str], run: str, seed: int) -> list[str]:
    """``python -m kit`` arguments of one seed's series: ``command`` without ``--seeds``, ``--seed``, ``--run``,
    ``--ray`` and ``--ray-cpus`` (either ``--x v`` or ``--x=v``), with ``--run <run> --seed <seed>`` (what the VERL CPU
    session re-runs, :func:`kit.pipeline.run_in_verl_cpu_session`)."""
    out: list[str] = []
    skip = False
    for arg in command:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--seeds", "--seed", "--run", "--ray", "--ray-cpus"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return [*out, "--run", run, "--seed", str(seed)]


def reproduce_seeds(reproduce: Callable[..., int], profile: str, run: str, seeds: Sequence[int], *,
                    command: Sequence[str] = (), reports_root: str | None = None, pool: bool = True,
                    ray: str | None = None, ray_cpus: int | None = None, **kwargs: Any) -> int:
    """Run the series for each seed, then pool the claims of those that finished.

    Args:
        reproduce: :func:`kit.pipeline.reproduce` (passed in: this module is imported by it).
        profile, run: as ``kit reproduce``; each seed's folder is :func:`seed_run_name`.
        seeds: (S,) pipeline seeds, in order (:func:`parse_seeds`).
        command: the ``python -m kit`` arguments of this call (each seed gets :func:`seed_command`).
        pool: pool the claims afterwards (off with ``--until`` or ``--dry-run``: no claims then).
        ray: None runs the seeds one after another here; ``"local"`` or a cluster's address runs them side by
            side as Ray tasks (:func:`kit.pipeline.fanout.fan_out`; not with ``--dry-run``, not for ``runtime=verl``).
        ray_cpus: CPUs a local Ray head announces (default: those this process may use).
        kwargs: the other options of :func:`kit.pipeline.reproduce`.
    Returns:
        2 when a seed's arguments are bad (one after another: nothing more is run; side by side: the others have
        run, nothing is pooled) or the fan-out cannot run, 1 when some seed's series or the
        pool failed (every seed is still run), else 0.
    """
    failed: list[int] = []
    local_cpus = ray_cpus or len(usable_cpus())  # a local Ray head's CPUs
    if ray and not kwargs.get("dry_run"):
        codes = _fan_out(reproduce, profile, run, seeds, command, reports_root, ray, local_cpus, kwargs)
        if codes is None:
            return 2
        refused = [s for s in seeds if codes[s] == 2]
        if refused:  # as one after another: a refused seed (its arguments, a locked run folder) is not resumed
            print(f"kit.pipeline: seed(s) {', '.join(map(str, refused))} refused to run (exit 2: see the message in "
                  "each seed's log); nothing was pooled", file=sys.stderr)
            return 2
        failed = [s for s in seeds if codes[s]]
    else:
        for i, seed in enumerate(seeds, 1):
            name = seed_run_name(run, seed)
            print(f"kit.pipeline: seed {seed} ({i} of {len(seeds)}) -> run {name}", flush=True)
            code = reproduce(profile, name, seed=seed, command=seed_command(command, name, seed),
                             reports_root=reports_root, **kwargs)
            if code == 2:
                return 2
            if code:
                failed.append(seed)
        if ray:  # a dry run: the same checks as the real fan-out, and its plan
            planned = _fan_out_plan(profile, run, seeds, ray, local_cpus, {**kwargs, "reports_root": reports_root})
            if planned is None:
                return 2
            print(f"kit.pipeline (dry run): {planned[0]}", flush=True)
    finished = [Layout.for_run(profile, seed_run_name(run, s), reports_root).root for s in seeds
                if s not in failed]  # a failed seed's claims.json (from an earlier try) is stale
    finished = [root for root in finished if (root / "claims.json").exists()]
    out = Layout.for_run(profile, pooled_name(run, kwargs.get("only")), reports_root).root
    if failed:
        print(f"kit.pipeline: the series failed for seed(s) {', '.join(map(str, failed))}; rerun the same command "
              "to resume them (finished notebooks are skipped)", file=sys.stderr)
    if pool and len(finished) >= 2:
        try:
            doc = pool_runs(finished)
            write_pooled(doc, out)
        except ClaimsError as exc:
            print(f"kit.pipeline: the claims could not be pooled: {exc}", file=sys.stderr)
            return 1
        counts = ", ".join(f"{n} {v}" for v, n in doc["counts"].items())
        print(f"kit.pipeline: claims pooled over {len(finished)} seeds: {counts} -> {out}")
    elif pool:
        print(f"kit.pipeline: {len(finished)} seed(s) with claims: nothing to pool (a pool needs 2)", file=sys.stderr)
    elif kwargs.get("dry_run") and not kwargs.get("until") and len(seeds) >= 2:
        print(f"kit.pipeline (dry run): then the claims of the seeds whose series finished are pooled into {out}")
    return 1 if failed else 0


def _fan_out_plan(profile: str, run: str, seeds: Sequence[int], ray: str, local_cpus: int,
                  kwargs: dict[str, Any]) -> tuple[str, int] | None:
    """``(the line that says how the seeds will be fanned out, CPUs per seed)``, or None (after printing why)
    when they cannot be:
    another runtime than the local one, a thread count of 0, a seed larger than the local head, a bad address."""
    cfg = load(profile, kwargs.get("overrides") or {}, write=False)  # (already checked by the seed's dry run)
    try:
        if cfg.runtime != "local":
            raise fanout.FanOutError(
                f"--ray runs the local runtime's seeds side by side; profile {profile} has runtime={cfg.runtime}, "
                "whose VERL trainer schedules its own workers on the cluster: run its seeds one after another "
                "(without --ray), or submit one `kit reproduce --seed N` per seed")
        per_seed, at_once = fanout.plan(cfg.model.torch_threads, ray, len(seeds), local_cpus)
    except fanout.FanOutError as exc:
        print(f"kit.pipeline: {exc}", file=sys.stderr)
        return None
    where = (f"a local Ray head ({local_cpus} CPUs, private network namespace, loopback only), "
             f"{at_once} at once" if at_once else f"the Ray cluster at {ray}")
    return (f"seeds {', '.join(map(str, seeds))} side by side on {where}, {per_seed} CPU(s) each (model.torch_threads); "
            f"runs {', '.join(seed_run_name(run, s) for s in seeds)}; logs in "
            f"{Layout.for_run(profile, fanout_name(run), kwargs.get('reports_root')).root}"), per_seed


def _fan_out(reproduce: Callable[..., int], profile: str, run: str, seeds: Sequence[int], command: Sequence[str],
             reports_root: str | None, ray: str, local_cpus: int, kwargs: dict[str, Any]) -> dict[int, int] | None:
    """The seeds as Ray tasks (:mod:`kit.pipeline.fanout`); None (after printing why) when they cannot run:
    the first seed's dry run (bad arguments) and :func:`_fan_out_plan` first, so that no Ray starts for a
    command every seed would refuse; a fan-out folder another fan-out holds; a cluster that cannot be joined."""
    name = seed_run_name(run, seeds[0])
    with contextlib.redirect_stdout(io.StringIO()):
        code = reproduce(profile, name, seed=seeds[0], command=seed_command(command, name, seeds[0]),
                         reports_root=reports_root, **{**kwargs, "dry_run": True})
    planned = None if code else _fan_out_plan(profile, run, seeds, ray, local_cpus,
                                              {**kwargs, "reports_root": reports_root})
    if planned is None:
        return None
    line, per_seed = planned
    print(f"kit.pipeline: {line}", flush=True)
    commands = {s: seed_command(command, seed_run_name(run, s), s) for s in seeds}
    try:
        return fanout.fan_out(commands, Layout.for_run(profile, fanout_name(run), reports_root).root, ray=ray,
                              cpus_per_seed=per_seed, local_cpus=local_cpus)
    except (fanout.FanOutError, RunLocked) as exc:
        print(f"kit.pipeline: {exc}", file=sys.stderr)
        return None
