"""A run's ``pipeline_state.json`` as the runner writes and reads it: whether a notebook finished
with the same parameters and source (then it is skipped), whether a failed one resumes, and the
folders emptied before a notebook runs afresh (:mod:`kit.pipeline.series` drives them).

A run folder is relocatable: moved or copied elsewhere (``--reports-root``, another run name), its
finished notebooks are still finished. Parameters are compared with the stored run folder's path
replaced by the current one (:func:`relocated`); everything else about them must be equal.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.plan import Layout


def notebook_sha(path: Path) -> str:
    """Hash of the notebook's cell sources (outputs and metadata do not count)."""
    nb = json.loads(path.read_text())
    text = json.dumps([(c.get("cell_type"), "".join(c.get("source", ""))) for c in nb.get("cells", [])])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_state(layout: Layout, state: dict[str, Any]) -> None:
    """Write ``pipeline_state.json`` atomically (a temporary file, then a rename)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(layout.state_path)


def clear_outputs(nb: Any, layout: Layout, echo: Callable[[str], None]) -> None:
    """Empty the output folders of ``nb`` (a :class:`kit.pipeline.series.NotebookRun`), only ones inside
    the run folder.

    Raises:
        ValueError: an output folder is the run folder itself or outside it.
    """
    root = layout.root.resolve()
    for d in map(Path, nb.outputs):
        d = d.resolve()
        if d == root or root not in d.parents:
            raise ValueError(f"{nb.name}: refusing to clear {d}, which is not inside the run folder {root}")
        if d.exists():
            shutil.rmtree(d)
            echo(f"    cleared {d} (a fresh run; stale checkpoints would be resumed otherwise)")


def relocated(value: Any, old: str, new: str) -> Any:
    """``value`` (a parameter: a string, or lists and dicts of them) with the folder ``old`` and any path
    under it moved to ``new``; other values unchanged."""
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old.rstrip("/") + "/") else value
    if isinstance(value, list):
        return [relocated(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: relocated(v, old, new) for k, v in value.items()}
    return value


def same_parameters(stored: dict[str, Any] | None, current: dict[str, Any], root: Path) -> bool:
    """Whether a notebook's ``stored`` parameters (its entry in ``pipeline_state.json``) are its ``current``
    ones in the run folder ``root``, up to where the run folder lies: the stored run folder is read off the
    stored ``run_dir`` (the run folder itself for 20, else its parent)."""
    if not isinstance(stored, dict) or not isinstance(stored.get("run_dir"), str):
        return stored == current
    now = json.loads(json.dumps(current))
    own = Path(stored["run_dir"])
    old = str(own if now.get("run_dir") == str(root) else own.parent)
    return relocated(stored, old, str(root)) == now


def is_finished(entry: dict[str, Any] | None, nb: Any, out: Path, root: Path) -> tuple[bool, str]:
    """``(finished, why not)`` of ``nb`` given its state ``entry``: done, its executed copy ``out`` present,
    the same parameters (:func:`same_parameters` in the run folder ``root``) and the same source."""
    if not entry:
        return False, "not run yet"
    if entry.get("status") != "done":
        return False, f"{entry.get('status', 'unfinished')} last time"
    if not out.exists():
        return False, "executed notebook missing"
    if not same_parameters(entry.get("parameters"), nb.parameters, root):
        return False, "parameters changed"
    if entry.get("source_sha") != notebook_sha(nb.source):
        return False, "notebook source changed"
    return True, ""


def inputs_changed(entry: dict[str, Any] | None, upstream: Sequence[str], state: dict[str, Any]) -> list[str]:
    """The notebooks of ``upstream`` (those whose folders ``entry``'s notebook reads, directly or not) that
    finished again, or began to, after that notebook ran: the ``run_id`` of their entry in ``state`` is not the
    one it recorded in ``entry["read"]`` when it finished. Its results then rest on files that are gone, and it
    reruns, also in a later invocation (``--only 08 --force``, then a plain ``kit reproduce``: 20 rebuilds the
    report on 08's new files).

    An entry that records nothing (a notebook not finished, or finished before the runner kept ``read``)
    counts as unchanged: an older run folder is not rerun wholesale.
    """
    read = entry.get("read") if isinstance(entry, dict) and entry.get("status") == "done" else None
    if not isinstance(read, dict):
        return []
    return [n for n in upstream if (state.get(n) or {}).get("run_id") != read.get(n)]


def resumable(entry: dict[str, Any] | None, nb: Any, root: Path) -> bool:
    """Whether ``nb`` failed or was interrupted last time with the same parameters: it then resumes
    into its output folders (trainers continue from their last checkpoint) instead of starting afresh."""
    entry = entry or {}
    return entry.get("status") in ("failed", "running") and same_parameters(entry.get("parameters"), nb.parameters, root)
