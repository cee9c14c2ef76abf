"""Two runs compared file by file: is the second the same run as the first? (issue #41)

A run is a function of (code, seed, machine type): two runs of one profile and seed on one machine
type must write byte-identical result files (metrics, samples, rollout records, evaluation outputs,
policy weights, ``claims.json``) whatever else the machine was doing. The fields that record *when*
and *where* a run happened (wall and CPU seconds, dates, process ids, the host's load) are not
results; they are stripped before comparing (:data:`TIME_KEY`). What is compared:

* ``*.json`` and ``*.jsonl``: parsed, time fields removed at every depth, the run folder's own path
  written as ``<run>``, then compared as canonical JSON (floats by their exact ``repr``, so any
  rounding difference shows);
* every other file but renderings: bytes (weights, tokenizers, parquet, CSV, text);
* not compared: the executed notebooks (``notebooks/``: cell timings and progress output), PDFs,
  images and HTML (renderings of the files above, with timestamps or timing plots), logs,
  ``tracking/`` (experiment-tracker files with timestamps) and ``pipeline_state.json`` (the runner's
  record: timings, load, the environment fingerprint).

Use :func:`compare_runs` from Python or ``python -m kit compare RUN_A RUN_B``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TIME_KEY", "Difference", "compare_runs", "strip_time_fields"]

#: keys that record when or where a run happened, not what it computed: ``time_*``, ``perf_*``,
#: ``*_s``/``*_seconds``/``*seconds*`` (durations), wall/CPU/clock readings, dates, process and
#: host identity, the machine's load, the environment fingerprint's free-text fields
TIME_KEY = re.compile(
    r"^(time_.*|perf_.*|timing_s/.*|timing/.*|.*_s|.*seconds.*|wall.*|cpu_.*|.*_cpu|busy.*|"
    r"date|created|created_at|created_utc|started_at|finished_at|updated_at|timestamp|pid|pids|pid_namespace|host|"
    r"hostname|loadavg|load_avg|environment|"
    r".*_mfu|host_factor|tokens_per_s.*|.*_per_s|elapsed.*|duration.*)$")

#: folders and suffixes that are renderings, logs or timings, never compared
SKIP_DIRS = {"notebooks", "__pycache__", ".ipynb_checkpoints", "tracking"}
#: files that are the runner's own record (timings, parameters with absolute paths), not results
SKIP_FILES = {"pipeline_state.json"}
SKIP_SUFFIXES = {".pdf", ".png", ".svg", ".jpg", ".html", ".log", ".ipynb", ".tex", ".aux"}


@dataclass(frozen=True)
class Difference:
    """One file that differs: its path relative to the run folder and what differs."""

    path: str
    what: str


def strip_time_fields(value: Any) -> Any:
    """``value`` (parsed JSON) without the keys :data:`TIME_KEY` matches, at every depth."""
    if isinstance(value, dict):
        return {k: strip_time_fields(v) for k, v in value.items() if not TIME_KEY.match(str(k))}
    if isinstance(value, list):
        return [strip_time_fields(v) for v in value]
    return value


def _canonical_json(path: Path, root: Path) -> list[str]:
    """One canonical line per JSON document of ``path`` (a ``.jsonl`` has one per line), the run
    folder's absolute path written as ``<run>`` (two runs live in two folders)."""
    text = path.read_text().replace(str(root.resolve()), "<run>")
    docs = [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" \
        else [json.loads(text)]
    return [json.dumps(strip_time_fields(d), sort_keys=True) for d in docs]


def _files(root: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".tmp")]
        for f in filenames:
            p = Path(dirpath) / f
            if p.suffix not in SKIP_SUFFIXES and f not in SKIP_FILES:
                out.add(str(p.relative_to(root)))
    return out


def _first_json_difference(a: list[str], b: list[str]) -> str:
    if len(a) != len(b):
        return f"{len(a)} against {len(b)} records"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            dx, dy = json.loads(x), json.loads(y)
            keys = sorted(k for k in set(dx) | set(dy) if dx.get(k) != dy.get(k)) if isinstance(dx, dict) and isinstance(dy, dict) else []
            return f"record {i}: " + (", ".join(keys[:6]) + (" ..." if len(keys) > 6 else "") if keys else "values")
    return "same"


def compare_runs(a: str | os.PathLike, b: str | os.PathLike) -> list[Difference]:
    """The result files in which run folder ``b`` differs from run folder ``a``.

    Args:
        a, b: two run folders (``reports/<profile>/<run>``), or any two folders laid out alike.
    Returns:
        One :class:`Difference` per file that is missing from one side or differs after the time
        fields are stripped; empty when ``b`` is bitwise the same run as ``a``. Sorted by path.
    Raises:
        FileNotFoundError: ``a`` or ``b`` is not a folder.
        ValueError: a ``.json``/``.jsonl`` file that does not parse (named).
    """
    ra, rb = Path(a), Path(b)
    for r in (ra, rb):
        if not r.is_dir():
            raise FileNotFoundError(f"compare_runs: {r} is not a folder")
    fa, fb = _files(ra), _files(rb)
    out = [Difference(p, "only in " + str(ra)) for p in sorted(fa - fb)]
    out += [Difference(p, "only in " + str(rb)) for p in sorted(fb - fa)]
    for p in sorted(fa & fb):
        pa, pb = ra / p, rb / p
        if pa.suffix in (".json", ".jsonl"):
            try:
                ja, jb = _canonical_json(pa, ra), _canonical_json(pb, rb)
            except json.JSONDecodeError as exc:
                raise ValueError(f"compare_runs: {p} does not parse as JSON: {exc}") from exc
            if ja != jb:
                out.append(Difference(p, _first_json_difference(ja, jb)))
        elif pa.read_bytes() != pb.read_bytes():
            out.append(Difference(p, "bytes differ"))
    return sorted(out, key=lambda d: d.path)
