"""Pieces shared by the local SFT and RL trainers: seeds, schedule, metrics file, checkpoints.

Run-directory files (docs/contracts.md "Run directories"):
    ``metrics.jsonl``                one JSON object per optimizer step (SFT and RL rows; RL
                                     rows carry the keys kit.metrics declares);
    ``checkpoints/step_<n>/``        ``save_policy`` format plus ``trainer_state.pt``
                                     (optimizer, step, RNG states, stage state);
    ``policy/``                      the final policy of the run (``save_policy`` format);
    ``summary.json``                 what the run's entry point returned.

Exact resume: the data a step sees is a pure function of ``(seed, stage, step)``
(:func:`step_seed`), and every RNG the step uses is reseeded from it, so a run killed after
step k and resumed from its last checkpoint repeats steps exactly; on resume the metrics rows
after the checkpoint are dropped before they are written again (:meth:`MetricsWriter.truncate`).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kit import jsonio
from kit.data.tasks import hash_text
from kit.metrics import read_rows
from kit.models import save_policy


def step_seed(seed: int, *keys: Any) -> int:
    """A 63-bit seed derived from ``seed`` and ``keys`` (e.g. a stage name and a step number).

    Stable across processes and Python versions (no ``hash()`` randomisation).
    """
    return hash_text(json.dumps([seed, *keys])) & 0x7FFFFFFFFFFFFFFF


def seed_everything(seed: int) -> None:
    """Seed Python's ``random`` and torch's CPU generator with ``seed``."""
    random.seed(seed)
    torch.manual_seed(seed)


def set_threads(n: int) -> LoadAdaptiveThreads | None:
    """Use ``n`` torch threads: ``n > 0`` fixed, 0 leaves torch's default, ``n < 0`` sizes them
    to the cores other processes leave free (:class:`LoadAdaptiveThreads`, at most ``-n``, re-measured
    when the trainer calls ``.update()``). Returns the adaptive policy, or None.

    Only fixed counts give bitwise-repeatable runs (issue #41): the adaptive policy is an explicit
    speed mode, and a run that uses it is stamped not repeatable (``kit.pipeline.fingerprint``)."""
    if n > 0:
        torch.set_num_threads(n)
    elif n < 0:
        return LoadAdaptiveThreads(-n)
    return None


def _cpu_jiffies() -> tuple[int, int, int] | None:
    """``(busy, total, niced)`` jiffies of all CPUs from ``/proc/stat`` (None where there is none);
    ``niced``: the busy jiffies of processes with a positive nice value (the ``nice`` column)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields), fields[1]


class LoadAdaptiveThreads:
    """Torch intra-op threads sized to the cores that *other* processes leave free: the speed mode
    (``model.torch_threads < 0``), never a profile's default, since it makes the run depend on load.

    With as many threads as cores, one busy process beside the trainer makes every parallel
    region wait for the thread that shares its core (measured on 2 cores: an SFT step of 0.38 s
    became 1.21 s beside two busy processes). This policy measures, over the interval since its
    last measurement, the CPU time of all processes (``/proc/stat``) minus this process's own
    (``time.process_time``), i.e. the cores others keep busy, and uses
    ``clamp(round(cores - others), 1, max_threads)`` threads. The thread count changes speed and,
    sometimes, a step's float rounding: two seed-0 tiny cold starts of the same code (reports/LOG.md,
    2026-12-03), one beside other runs (1 thread at steps 63-64 and 170 more), one quiet (2 threads),
    first differed in step 65's loss (7e-8 apart: step 64's update rounded otherwise) and ended 3e-6
    apart in loss with the same held-out accuracy. A run's thread history is part of what it computes:
    a run under another load is not bitwise the same run.

    Niced neighbours do not count when this process is not niced itself: the scheduler gives
    their cores back to it (a nice-19 process gets ~1.5% of a core beside a nice-0 one), so a
    niced test run or background job beside the trainer must not halve its threads (seen in
    this session: a nice-19 profiler beside ``make reproduce`` sent its SFT from 2 threads and
    ~0.4 s per step to 1 thread and ~0.9 s). A niced trainer yields to everyone: all count.

    Args:
        max_threads: upper bound (also capped by the CPUs this process may run on).
        every_s: minimum seconds between measurements (:meth:`update` is cheap in between).
        first_s: length of the first measurement, taken at construction (a short sleep).
    Attributes:
        threads: the current thread count; ``history``: ``(seconds since start, others' cores,
        threads)`` per measurement.
    Does not: see other processes' future load (it reacts within ``every_s``), tell apart
    busy cores outside this process's CPU set from those inside it, or weigh nice values in
    between (every positive nice value counts as yielding).
    """

    def __init__(self, max_threads: int, every_s: float = 5.0, first_s: float = 0.3):
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
        self.cores = cores
        self.max_threads = max(1, min(max_threads, cores))
        self.every_s = every_s
        try:  # not niced: niced neighbours yield their cores to us (class docstring)
            self.ignore_niced = os.getpriority(os.PRIO_PROCESS, 0) <= 0
        except (AttributeError, OSError):  # pragma: no cover - not POSIX
            self.ignore_niced = False
        self.history: list[tuple[float, float, int]] = []
        self._t0 = time.monotonic()
        self._mark = self._sample()
        self.threads = self.max_threads
        torch.set_num_threads(self.threads)
        if self._mark is not None and first_s > 0:
            time.sleep(first_s)
            self.update(force=True)

    @staticmethod
    def _sample():
        j = _cpu_jiffies()
        return None if j is None else (time.monotonic(), time.process_time(), *j)

    def others_cores(self, now=None) -> float | None:
        """Cores used by other processes since the last measurement (None without /proc/stat)."""
        now = now or self._sample()
        if now is None or self._mark is None:
            return None
        wall = now[0] - self._mark[0]
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        busy_all = (now[2] - self._mark[2]) / ticks
        if self.ignore_niced:
            busy_all -= (now[4] - self._mark[4]) / ticks
        if wall <= 0:
            return None
        return max(0.0, (busy_all - (now[1] - self._mark[1])) / wall)

    def update(self, force: bool = False) -> int:
        """Re-measure when ``every_s`` has passed (or ``force``) and set the thread count; returns it."""
        now = self._sample()
        if now is None or (not force and now[0] - self._mark[0] < self.every_s):
            return self.threads
        others = self.others_cores(now)
        self._mark = now
        if others is None:
            return self.threads
        n = int(min(self.max_threads, max(1, round(self.cores - others))))
        if n != self.threads:
            torch.set_num_threads(n)
            self.threads = n
        self.history.append((now[0] - self._t0, others, n))
        return n


def lr_at(step: int, base_lr: float, warmup: int, total: int, schedule: str = "cosine", min_ratio: float = 0.1) -> float:
    """Learning rate for optimizer step ``step`` (0-based).

    Linear warmup over ``warmup`` steps to ``base_lr``, then either constant or a cosine decay to
    ``base_lr * min_ratio`` at step ``total``.

    Raises:
        ValueError: an unknown ``schedule``.
    """
    if step < warmup:
        return base_lr * (step + 1) / warmup
    if schedule == "constant":
        return base_lr
    if schedule != "cosine":
        raise ValueError(f"unknown lr schedule {schedule!r}; expected 'cosine' or 'constant'")
    span = max(1, total - warmup)
    frac = min(1.0, (step - warmup) / span)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.98)) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (betas (0.9, 0.98) as measured for the tiny model)."""
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                             betas=betas, weight_decay=weight_decay)


class MetricsWriter:
    """Append-only ``run_dir/metrics.jsonl`` (one JSON object per line, flushed per row)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as fh:
            fh.write(jsonio.dumps(row) + "\n")

    def rows(self) -> list[dict[str, Any]]:
        """All rows written so far (a partial last line from a killed run is skipped;
        :func:`kit.metrics.read_rows`)."""
        return read_rows(self.path, missing_ok=True, partial_ok=True)

    def truncate(self, keep: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite the file keeping only rows for which ``keep(row)`` is true."""
        rows = [r for r in self.rows() if keep(r)]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(jsonio.dumps(r) + "\n" for r in rows))
        tmp.replace(self.path)


def nanmean(values: Sequence[float]) -> float:
    """Mean of the defined values (NaN marks a step where the ratio is undefined); NaN if none."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else float("nan")


def metric_rows(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl`` as dicts (empty list if absent; an undefined value is
    None, written as null; a partial last line is skipped): :func:`kit.metrics.read_rows`, the one
    reader; :func:`kit.report.figures.read_metrics` reads the same file as a DataFrame (NaN for null)."""
    return MetricsWriter(run_dir).rows()


# --------------------------------------------------------------------------- checkpoints


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}"


def save_checkpoint(run_dir: str | os.PathLike, step: int, model, tokenizer, optimizer,
                    state: dict[str, Any], keep_last: int = 2) -> Path:
    """Write ``checkpoints/step_<step>/`` atomically: the policy plus ``trainer_state.pt``.

    Args:
        step: steps completed.
        state: JSON-able and tensor state of the trainer (stage, reference, ...); the
            optimizer state and torch/Python RNG states are added here.
        keep_last: older ``step_*`` folders beyond this many are removed.
    Returns:
        The checkpoint folder.
    """
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_policy(model, tokenizer, tmp)
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                "py_rng": random.getstate(), **state}, tmp / "trainer_state.pt")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    steps = sorted(s for s in _checkpoint_steps(run_dir))
    for old in steps[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(checkpoint_dir(run_dir, old), ignore_errors=True)
    return final


def _checkpoint_steps(run_dir: str | os.PathLike) -> list[int]:
    root = Path(run_dir) / "checkpoints"
    if not root.exists():
        return []
    out = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step_") and (p / "trainer_state.pt").exists():
            try:
                out.append(int(p.name[len("step_"):]))
            except ValueError:
                continue
    return out


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    steps = _checkpoint_steps(run_dir)
    return checkpoint_dir(run_dir, max(steps)) if steps else None


def load_trainer_state(ckpt: str | os.PathLike) -> dict[str, Any]:
    """``trainer_state.pt`` of a checkpoint folder (RNG states are restored by the caller)."""
    return torch.load(Path(ckpt) / "trainer_state.pt", weights_only=False)


def finished_summary(run_dir: str | os.PathLike, expect: dict[str, Any]) -> dict[str, Any] | None:
    """``run_dir/summary.json`` when the run finished (``policy/`` exists) with every key of
    ``expect`` equal; else None."""
    path = Path(run_dir) / "summary.json"
    if not path.exists() or not (Path(run_dir) / "policy" / "config.json").exists():
        return None
    summary = json.loads(path.read_text())
    return summary if all(summary.get(k) == v for k, v in expect.items()) else None
