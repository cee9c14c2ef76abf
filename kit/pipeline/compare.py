"""Two runs compared file by file: is the second the same run as the first? (issue #41)

A run is a function of (code, seed, machine type): two runs of one profile and seed on one machine
type must write byte-identical result files (metrics, samples, rollout records, evaluation outputs,
policy weights, ``claims.json``) whatever else the machine was doing. The fields that record *when*
and *where* a run happened (wall and CPU seconds, dates, process ids, the host's load) are not
results; they are stripped before comparing (:data:`TIME_KEYS`). What is compared:

* ``*.json`` and ``*.jsonl``: parsed, time fields (:data:`TIME_KEYS`, by name) removed at every depth
  except in data files such as a tokenizer or a config (:data:`NEVER_STRIP`), the run folder's own
  paths (where it is and where it was written) written as ``<run>``, then compared as canonical JSON (floats by their exact ``repr``, so any
  rounding difference shows);
* ``*.pt`` (trainer states, optimizer and RNG states): bytes; where the bytes differ, the values, loaded
  with ``torch.load(weights_only=True)`` (tensors by dtype, shape and every bit): the same state can pickle
  in other bytes (another memo layout: seed 101's cold-start trainer states from two commits, the same
  values, 12 bytes apart in ``data.pkl``), which is the same run;
* every other file but renderings: bytes (weights, tokenizers, parquet, CSV, text);
* not compared: the executed notebooks (``notebooks/``: cell timings and progress output), PDFs,
  images and HTML (renderings of the files above, with timestamps or timing plots), logs,
  ``tracking/`` (experiment-tracker files with timestamps) and ``pipeline_state.json`` (the runner's
  record: timings, load, the environment fingerprint).

Use :func:`compare_runs` from Python or ``python -m kit compare RUN_A RUN_B``, which first prints
:func:`run_notes`: environment fingerprints, repeatability stamps and code versions that differ.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kit.plan import run_parameters

__all__ = ["TIME_KEYS", "Difference", "compare_runs", "run_notes", "strip_time_fields"]

#: the keys, by name, that record when or where a run happened, not what it computed: wall and CPU
#: durations the trainers and chains write (``metrics.jsonl``, ``summary.json``, ``ablation.json``,
#: ``retool.json``, ``hard_subset.json``, Agent-R's ``search_cost.jsonl``), the evaluation manifest's
#: date and host, and ``claims.json``'s date, environment and its own absolute path. Step counters
#: (``perf_decode_steps``, ``perf_threads``, ...) are results of the schedule and are compared.
TIME_KEYS = frozenset({
    "time_s", "time_generate_s", "time_tool_s", "time_verify_s", "time_update_s", "time_step_s",
    "time_cpu_generate_s", "time_cpu_update_s", "seconds", "train_seconds", "heldout_seconds", "wall_s", "cpu_s",
    "created_utc", "host", "environment", "claims_file",
    # the code version an evaluation manifest records (``-dirty`` as files change): run_notes reports it
    "git_commit",
    # the run's folder name claims.json records (two runs of one seed live in two folders)
    "run"})
#: files whose keys are data, never time fields (a tokenizer's vocabulary has a token "date"; a config's
#: ``sandbox.cpu_s`` is a setting): compared whole
NEVER_STRIP = re.compile(r"^(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|vocab|"
                         r"added_tokens|preprocessor_config)\.json$")

#: folders and suffixes that are renderings, logs or timings, never compared
SKIP_DIRS = {"notebooks", "__pycache__", ".ipynb_checkpoints", "tracking"}
#: files that are the runner's own record (timings, parameters with absolute paths), not results
SKIP_FILES = {"pipeline_state.json"}
SKIP_SUFFIXES = {".pdf", ".png", ".svg", ".jpg", ".html", ".log", ".ipynb", ".tex", ".aux", ".lock"}


@dataclass(frozen=True)
class Difference:
    """One file that differs: its path relative to the run folder and what differs."""

    path: str
    what: str


def strip_time_fields(value: Any) -> Any:
    """``value`` (parsed JSON) without the keys of :data:`TIME_KEYS`, at every depth."""
    if isinstance(value, dict):
        return {k: strip_time_fields(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [strip_time_fields(v) for v in value]
    return value


def _recorded_roots(root: Path) -> list[str]:
    """The absolute folders a run's files may name as its own: where it is now and where it was
    written (``pipeline_state.json``'s run folders; a run copied or moved keeps the old paths)."""
    roots = {str(root.resolve())}
    try:
        state = json.loads((root / "pipeline_state.json").read_text())
    except (OSError, ValueError):
        state = {}
    for entry in state.values():
        run_dir = entry.get("parameters", {}).get("run_dir") if isinstance(entry, dict) else None
        if isinstance(run_dir, str) and os.path.isabs(run_dir):
            roots.add(os.path.dirname(run_dir.rstrip("/")))
    return sorted(roots, key=len, reverse=True)


def _canonical_json(path: Path, roots: list[str]) -> list[str]:
    """One canonical line per JSON document of ``path`` (a ``.jsonl`` has one per line), the run
    folder's absolute paths written as ``<run>`` (two runs live in two folders), time fields
    stripped unless the file is data (:data:`NEVER_STRIP`)."""
    text = path.read_text()
    for r in roots:
        text = text.replace(r, "<run>")
    docs = [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" \
        else [json.loads(text)]
    keep = NEVER_STRIP.match(path.name)
    return [json.dumps(d if keep else strip_time_fields(d), sort_keys=True) for d in docs]


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
            # a key on one side only (a newer kit's config section) is named as such, not as a changed value
            keys = [f"{k} ({'a' if k in dx else 'b'} only)" if (k in dx) != (k in dy) else k for k in keys]
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
        ValueError: ``a`` and ``b`` are the same folder, or neither holds a result file (nothing to compare
            is not "the same results").
    A ``.json``/``.jsonl`` file that does not parse on one side (a run killed mid-write) is one difference.
    """
    ra, rb = Path(a), Path(b)
    for r in (ra, rb):
        if not r.is_dir():
            raise FileNotFoundError(f"compare_runs: {r} is not a folder")
    if ra.resolve() == rb.resolve():
        raise ValueError(f"compare_runs: {ra} and {rb} are the same folder")
    fa, fb = _files(ra), _files(rb)
    if not fa and not fb:
        raise ValueError(f"compare_runs: neither {ra} nor {rb} holds a result file: nothing to compare")
    roots_a, roots_b = _recorded_roots(ra), _recorded_roots(rb)
    out = [Difference(p, "only in " + str(ra)) for p in sorted(fa - fb)]
    out += [Difference(p, "only in " + str(rb)) for p in sorted(fb - fa)]
    for p in sorted(fa & fb):
        pa, pb = ra / p, rb / p
        if pa.suffix in (".json", ".jsonl"):
            bad = []
            for side, path, roots in ((ra, pa, roots_a), (rb, pb, roots_b)):
                try:
                    got = _canonical_json(path, roots)
                except json.JSONDecodeError as exc:  # a run killed mid-write: that file differs, the rest is compared
                    bad.append(f"does not parse as JSON in {side} ({exc})")
                    continue
                if side is ra:
                    ja = got
                else:
                    jb = got
            if bad:
                out.append(Difference(p, "; ".join(bad)))
                continue
            if ja != jb:
                out.append(Difference(p, _first_json_difference(ja, jb)))
        elif pa.read_bytes() != pb.read_bytes():
            what = _torch_difference(pa, pb) if pa.suffix == ".pt" else "bytes differ"
            if what:
                out.append(Difference(p, what))
    return sorted(out, key=lambda d: d.path)


def _torch_difference(pa: Path, pb: Path) -> str:
    """What differs between two ``torch.save`` files whose bytes differ: "" when their values are the same
    (tensors bit for bit, with dtype and shape; every other value by ``==``), else the first path that differs,
    or "bytes differ" where one does not load with ``weights_only=True`` (nothing unsafe is unpickled)."""
    try:
        va, vb = (torch.load(p, map_location="cpu", weights_only=True) for p in (pa, pb))
    except Exception:  # noqa: BLE001 - not a plain state (a pickled object): compared as bytes
        return "bytes differ"

    def first(x: Any, y: Any, where: str) -> str:
        if torch.is_tensor(x) or torch.is_tensor(y):
            same = (torch.is_tensor(x) and torch.is_tensor(y) and x.dtype == y.dtype and x.shape == y.shape
                    and torch.equal(*(z.contiguous().reshape(-1).view(torch.uint8) for z in (x, y))))
            return "" if same else where or "the tensor"
        if isinstance(x, dict) and isinstance(y, dict):
            if list(x) != list(y):
                return f"{where or 'top'}: keys"
            return next((d for k in x if (d := first(x[k], y[k], f"{where}/{k}"))), "")
        if isinstance(x, list | tuple) and isinstance(y, list | tuple) and type(x) is type(y):
            if len(x) != len(y):
                return f"{where or 'top'}: length"
            return next((d for i, (u, v) in enumerate(zip(x, y, strict=True)) if (d := first(u, v, f"{where}[{i}]"))), "")
        return "" if type(x) is type(y) and x == y else where or "the value"

    where = first(va, vb, "")
    return f"values differ at {where}" if where else ""


def _state(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / "pipeline_state.json").read_text())
    except (OSError, ValueError):
        return {}


def _commits(root: Path) -> set[str]:
    """The code versions a run's evaluation manifests record (``eval/*.json``: ``manifest.git_commit``)."""
    out = set()
    for p in (root / "eval").glob("*.json") if (root / "eval").is_dir() else []:
        try:
            c = json.loads(p.read_text()).get("manifest", {}).get("git_commit")
        except (OSError, ValueError, AttributeError):
            continue
        if c:
            out.add(str(c))
    return out


def run_notes(a: str | os.PathLike, b: str | os.PathLike) -> list[str]:
    """What may explain a difference between two runs, before any file is compared: environment
    fingerprints that differ (another machine type computes other bits), a run stamped not bitwise
    repeatable (the speed mode), and code versions that differ. Empty when none applies."""
    ra, rb = Path(a), Path(b)
    sa, sb = _state(ra), _state(rb)
    notes = []
    ka, kb = (s.get("environment", {}).get("key") for s in (sa, sb))
    if ka != kb:
        notes.append(f"environment fingerprints differ ({ka} against {kb}): another machine type or build "
                     "computes other bits, so results may differ without any code change")
    for r, s in ((ra, sa), (rb, sb)):
        rep = s.get("repeatable")
        if isinstance(rep, dict) and not rep.get("bitwise", False):
            notes.append(f"{r} is not bitwise repeatable: {rep.get('why', '')}")
    ca, cb = _commits(ra), _commits(rb)
    if ca and cb and ca != cb:
        notes.append(f"code versions differ ({', '.join(sorted(ca))} against {', '.join(sorted(cb))})")
    pa, pb = run_parameters(sa), run_parameters(sb)
    for key in ("profile", "seed", "overrides"):
        if pa.get(key) != pb.get(key):
            notes.append(f"the runs differ in {key} ({pa.get(key)!r} against {pb.get(key)!r}): they are not the same "
                         "run, so their results are not expected to match")
    for r, s in ((ra, sa), (rb, sb)):
        done = [k for k, v in s.items() if isinstance(v, dict) and v.get("status") == "done"]
        if s and len(done) < len([k for k, v in s.items() if isinstance(v, dict) and "status" in v]):
            notes.append(f"{r} has not finished: {len(done)} notebooks done, the last {done[-1] if done else 'none'}")
    if not sa or not sb:
        notes.append("no pipeline_state.json in " + " and ".join(str(r) for r, s in ((ra, sa), (rb, sb)) if not s)
                     + ": profile, seed and whether the run finished are unknown")
    return notes
