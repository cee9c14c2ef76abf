"""Rollout record files: one zstd parquet file per recorded step, readable while a run writes.

Layout under a run folder::

    <run_dir>/rollouts/meta.json                                 tokenizer folder, schema version
    <run_dir>/rollouts/<stage>/<arm>/step_<step:06d>.parquet     the step's records (kit.records.schema)

A step's file is written to ``.step_<n>.parquet.tmp`` and renamed into place, so a reader never
sees half of it; a file that still cannot be read (a copy cut short, a disk that filled) is
skipped with its name in :attr:`RecordIndex.unreadable` rather than failing the whole folder.
Anything that walks a pipeline run folder (the explorer, the export) finds every stage's and
arm's files with :func:`scan` (recursively: notebook run folders nest).

Size, measured by ``benchmarks/record_bench.py`` (tiny profile's shape, 200 tokens): see that
script's last line; ids and masks compress well, float32 log-probs hardly at all.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from kit import jsonio
from kit.records.build import records_from_trajectories, records_from_verl
from kit.records.schema import SCHEMA, SCHEMA_VERSION, check_record

FOLDER = "rollouts"
META = "meta.json"
_STEP_FILE = re.compile(r"^step_(\d+)\.parquet$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe(name: str) -> str:
    return _SAFE.sub("-", str(name)) or "-"


def step_path(run_dir: str | os.PathLike, stage: str, arm: str, step: int) -> Path:
    """``<run_dir>/rollouts/<stage>/<arm>/step_<step:06d>.parquet`` (names made file-safe)."""
    return Path(run_dir) / FOLDER / _safe(stage) / _safe(arm) / f"step_{int(step):06d}.parquet"


def write_records(path: str | os.PathLike, records: Sequence[dict[str, Any]]) -> int:
    """Write records as one parquet file (zstd), atomically (temporary name, then rename).

    Returns:
        Bytes on disk.
    Raises:
        KeyError / ValueError: a record does not match the schema (names the record's position).
    """
    path = Path(path)
    for i, rec in enumerate(records):
        check_record(rec, f"{path.name} record {i}")
    table = pa.Table.from_pylist(list(records), schema=SCHEMA)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=3)
    os.replace(tmp, path)
    return path.stat().st_size


class RolloutRecorder:
    """Writes a run's rollout records, every ``every``-th step, the first ``max_prompts`` groups.

    Args:
        run_dir: the stage's (or ablation arm's) run folder.
        every: record steps 1, 1 + every, 1 + 2 * every, ... (``every <= 0``: none).
        max_prompts: groups recorded per step (in the step's prompt order), None = all.
        tokenizer_dir: where the policy's tokenizer lives (written to ``rollouts/meta.json``
            so the explorer decodes ids while the run's own ``policy/`` does not exist yet).
    Raises:
        ValueError: ``max_prompts`` < 1.
    """

    def __init__(self, run_dir: str | os.PathLike, every: int = 1, max_prompts: int | None = None,
                 tokenizer_dir: str | os.PathLike | None = None):
        if max_prompts is not None and max_prompts < 1:
            raise ValueError(f"RolloutRecorder: max_prompts must be >= 1 or None, got {max_prompts}")
        self.run_dir, self.every, self.max_prompts = Path(run_dir), int(every), max_prompts
        self.bytes_written = 0
        self.rows_written = 0
        meta = self.run_dir / FOLDER / META
        if tokenizer_dir is not None or not meta.exists():
            meta.parent.mkdir(parents=True, exist_ok=True)
            jsonio.write_json(meta, {"schema_version": SCHEMA_VERSION,
                                     "tokenizer_dir": None if tokenizer_dir is None else str(tokenizer_dir)})

    def wants(self, step: int) -> bool:
        """Whether step ``step`` (1-based) is recorded."""
        return self.every > 0 and (int(step) - 1) % self.every == 0

    def _trim(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.max_prompts is None:
            return records
        return [r for r in records if r["prompt_index"] < self.max_prompts]

    def write(self, records: list[dict[str, Any]]) -> Path | None:
        """Write already built records (all of one stage, arm and step); None when empty."""
        records = self._trim(records)
        if not records:
            return None
        first = records[0]
        path = step_path(self.run_dir, first["stage"], first["arm"], first["step"])
        self.bytes_written += write_records(path, records)
        self.rows_written += len(records)
        return path

    def record_step(self, trajectories: Sequence[Any], rewards: Any, group_ids: Sequence[Any], *, stage: str,
                    step: int, algorithm: str, **kw: Any) -> Path | None:
        """Record one local step (when :meth:`wants` it); see
        :func:`kit.records.build.records_from_trajectories` for the arguments
        (``kept=sel`` or kept indices, ``advantages`` (N,) or (K,), ``problem_ids``, ``verdicts``,
        ``arm``, ``seed``, ``global_step``, ``roc``). Returns the file written, or None."""
        if not self.wants(step):
            return None
        return self.write(records_from_trajectories(trajectories, rewards, group_ids, stage=stage, step=step,
                                                    algorithm=algorithm, **kw))

    def record_verl(self, batch: Any, *, stage: str, step: int, algorithm: str, **kw: Any) -> Path | None:
        """Record one VERL step from its sampled rows (:func:`kit.records.build.records_from_verl`)."""
        if not self.wants(step):
            return None
        return self.write(records_from_verl(batch, stage=stage, step=step, algorithm=algorithm, **kw))


# ------------------------------------------------------------------ reading


class RunKey(NamedTuple):
    """One recorded run: its folder (relative to the scanned root, ``.`` for the root), stage and arm."""

    folder: str
    stage: str
    arm: str

    def label(self) -> str:
        return f"{self.stage} / {self.arm}" + ("" if self.folder == "." else f"  ({self.folder})")


@dataclass(frozen=True)
class StepFile:
    """One recorded step's file."""

    run: RunKey
    step: int
    path: Path

    @property
    def stage(self) -> str:
        return self.run.stage

    @property
    def arm(self) -> str:
        return self.run.arm


@dataclass
class RecordIndex:
    """What :func:`scan` found: files by run, sorted by step; files that could not be read."""

    root: Path
    files: list[StepFile] = field(default_factory=list)
    unreadable: list[Path] = field(default_factory=list)

    def runs(self) -> list[RunKey]:
        """The recorded runs, in order of first file."""
        return list(dict.fromkeys(f.run for f in self.files))

    def run(self, stage: str, arm: str, folder: str | None = None) -> RunKey:
        """The run of ``stage``/``arm`` (``folder`` needed only when several run folders hold one).

        Raises:
            KeyError: none, or several without ``folder`` (names them).
        """
        hits = [r for r in self.runs() if (r.stage, r.arm) == (stage, arm) and folder in (None, r.folder)]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} recorded runs of {stage}/{arm}" + (f" in {folder}" if folder else "")
                           + f" under {self.root}: {[r.folder for r in hits] or [r.label() for r in self.runs()]}")
        return hits[0]

    def steps(self, run: RunKey) -> list[int]:
        return [f.step for f in self.files if f.run == run]

    def file(self, run: RunKey, step: int) -> StepFile:
        for f in self.files:
            if f.run == run and f.step == step:
                return f
        raise KeyError(f"no records of {run.label()} step {step} under {self.root} (steps: {self.steps(run)})")

    def meta(self, f: StepFile) -> dict[str, Any]:
        """The ``meta.json`` of the run folder holding ``f`` ({} when absent or not a JSON object:
        that file is then listed in :attr:`unreadable`, and the explorer shows token ids)."""
        return self.read_meta(f.path.parents[2] / META)

    def read_meta(self, meta: Path) -> dict[str, Any]:
        """One ``rollouts/meta.json`` as a dict ({} when absent; {} and listed in :attr:`unreadable`
        when it is not a JSON object)."""
        if not meta.exists():
            return {}
        try:
            d = json.loads(meta.read_text())
        except (OSError, ValueError):
            d = None
        if not isinstance(d, dict):
            if meta not in self.unreadable:
                self.unreadable.append(meta)
            return {}
        return d


def scan(root: str | os.PathLike) -> RecordIndex:
    """Every ``rollouts/<stage>/<arm>/step_<n>.parquet`` below ``root`` (a run folder or a pipeline
    run folder: each ablation arm's folder is its own run); temporary files are ignored. Cheap:
    reads no file (call again to see new steps)."""
    root = Path(root)
    found = []
    for p in sorted(root.rglob(f"{FOLDER}/*/*/step_*.parquet")):
        m = _STEP_FILE.match(p.name)
        if m:
            folder = p.parents[3].relative_to(root).as_posix()
            found.append(StepFile(RunKey(folder, p.parent.parent.name, p.parent.name), int(m.group(1)), p))
    found.sort(key=lambda f: (f.run, f.step))
    return RecordIndex(root, found)


def read_step(f: StepFile | str | os.PathLike, columns: Sequence[str] | None = None,
              index: RecordIndex | None = None) -> list[dict[str, Any]]:
    """The records of one step file as dicts (``columns`` to read only some).

    With ``index``, a file that cannot be read (cut short) is added to ``index.unreadable`` and
    ``[]`` returned; without it the error is raised.

    Raises:
        OSError / pyarrow.ArrowInvalid: the file cannot be read (no ``index`` given), naming the file.
        ValueError: the file is a readable parquet but no records file of this schema (key columns
            missing, another ``schema_version``), naming the file.
    """
    path = f.path if isinstance(f, StepFile) else Path(f)
    try:
        table = pq.read_table(path, columns=list(columns) if columns else None)
        _check_columns(path, pq.read_schema(path))
        return table.to_pylist()
    except (OSError, pa.ArrowInvalid, ValueError) as exc:
        if index is None:
            raise type(exc)(f"rollout records {path}: {exc}") from exc
        if path not in index.unreadable:
            index.unreadable.append(path)
        return []


def _check_columns(path: Path, schema: pa.Schema) -> None:
    """A readable parquet that is no record file of this schema (a foreign table, another
    ``schema_version``) is refused naming what differs, not read into a ``KeyError`` later."""
    missing = [n for n in ("schema_version", "stage", "arm", "step", "prompt_index", "traj_index")
               if n in SCHEMA.names and n not in schema.names]
    if missing:
        raise ValueError(f"not a rollout-records file: columns {missing} missing")
    if "schema_version" in schema.names:
        versions = set(pq.read_table(path, columns=["schema_version"]).column(0).to_pylist())
        if versions - {SCHEMA_VERSION}:
            raise ValueError(f"schema_version {sorted(versions)}, this kit reads {SCHEMA_VERSION}")


def read_records(root: str | os.PathLike, *, stage: str | None = None, arm: str | None = None,
                 steps: Sequence[int] | None = None, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """All readable records below ``root``, filtered by stage, arm and steps (half-written files skipped)."""
    index = scan(root)
    out: list[dict[str, Any]] = []
    for f in index.files:
        if (stage is None or f.stage == stage) and (arm is None or f.arm == arm) and (steps is None or f.step in steps):
            out.extend(read_step(f, columns, index))
    return out
