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
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from kit.pipeline import overlap
from kit.plan import Layout, read_state


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
    """The notebooks of ``upstream`` (those whose folders ``entry``'s notebook reads, directly or not:
    :func:`upstream_names`) that ran again, or began to, after that notebook ran or
    began: the ``run_id`` of their entry in ``state`` is not the one it recorded in ``entry["read"]``. A
    finished notebook then rests on files that are gone and reruns, also in a later invocation (``--only 08
    --force``, then a plain ``kit reproduce``: 20 rebuilds the report on 08's new files); a failed or
    interrupted one starts afresh instead of resuming from checkpoints made on the old files.

    Only the notebooks ``read`` names are compared: a background job's entry names those finished when the
    job began (stage 1 finishes beside 06's job; the notebook's own entry, when it is done, names all, a
    notebook not in the run folder as None). An entry that records nothing (a notebook not run, or run before
    the runner kept ``read``: run folders from before 2026-12-07) counts as unchanged: an older run folder is
    not rerun wholesale, and keeps the older rule (a reader reruns only when what it reads reruns in the same
    invocation).
    """
    read = entry.get("read") if isinstance(entry, dict) and entry.get("status") in ("done", "failed", "running") else None
    if not isinstance(read, dict):
        return []
    return [n for n in upstream if n in read and (state.get(n) or {}).get("run_id") != read[n]]


def resumable(entry: dict[str, Any] | None, nb: Any, root: Path) -> bool:
    """Whether ``nb`` failed or was interrupted last time with the same parameters: it then resumes
    into its output folders (trainers continue from their last checkpoint) instead of starting afresh."""
    entry = entry or {}
    return entry.get("status") in ("failed", "running") and same_parameters(entry.get("parameters"), nb.parameters, root)


def forced_names(force: bool | Collection[str], names: Sequence[str]) -> set[str]:
    """The notebooks ``force`` reruns whatever their state: all of ``names`` for True, none for False, else
    the names given.

    Raises:
        TypeError: ``force`` is a string (a str is a Collection: ``set("08_evaluation")`` would force nothing).
    """
    if isinstance(force, str):
        raise TypeError(f"force must be True, False or a collection of notebook names, not the string {force!r}")
    return set(names) if force is True else set(force or ())


def upstream_names(notebooks: Sequence[Any], graph: Sequence[Any] | None = None) -> dict[str, list[str]]:
    """Per notebook of ``notebooks``, the names of the notebooks whose folders it reads, directly or through
    another (:func:`kit.pipeline.overlap.upstream_indices`), found in ``graph`` (the whole series; default ``notebooks``): a
    selection that leaves out a producer (``--only 06`` without stage 1, whose folder 06 reuses when it is
    there) still names it. A notebook missing from ``graph`` gets its readings within ``notebooks``."""
    whole = list(graph) if graph else list(notebooks)
    in_whole = overlap.upstream_indices([nb.parameters for nb in whole])
    by = {nb.name: [whole[j].name for j in sorted(in_whole[i])] for i, nb in enumerate(whole)}
    own = overlap.upstream_indices([nb.parameters for nb in notebooks])
    return {nb.name: by.get(nb.name, [notebooks[j].name for j in sorted(own[i])]) for i, nb in enumerate(notebooks)}


def plan(notebooks: Sequence[Any], layout: Layout, *, force: bool | Collection[str] = False,
         graph: Sequence[Any] | None = None) -> list[str | None]:
    """What :func:`kit.pipeline.series.run_series` with the same arguments would do, before anything runs: per notebook of
    ``notebooks``, why it would run (``"forced"``, ``"not run yet"``, ``"08_evaluation ran again since it
    finished"``, ``"an earlier notebook reruns"``, ...), or None where it would be skipped (finished, same
    parameters and source, inputs unchanged). Reads ``pipeline_state.json``; writes nothing.

    Raises:
        TypeError: ``force`` is a string (:func:`forced_names`).
    """
    state = read_state(layout)
    forced = forced_names(force, [nb.name for nb in notebooks])
    ups = upstream_names(notebooks, graph)
    reads = overlap.upstream_indices([nb.parameters for nb in notebooks])
    base: list[str | None] = []
    for nb in notebooks:
        done, why = is_finished(state.get(nb.name), nb, layout.executed / f"{nb.name}.ipynb", layout.root)
        entry = state.get(nb.name)
        changed = inputs_changed(entry, ups[nb.name], state)
        base.append("forced" if nb.name in forced else changed_reason(changed, entry.get("status") == "done")
                    if changed else None if done else why)
    # reads are transitive: a notebook reruns when anything it reads (re)runs before it
    return [b or ("an earlier notebook reruns" if any(base[j] for j in reads[i]) else None) for i, b in enumerate(base)]


def changed_reason(changed: Sequence[str], finished: bool = True) -> str:
    """The runner's words for a notebook whose inputs ran again since it ``finished`` (else: since it began;
    :func:`inputs_changed`)."""
    return f"{', '.join(changed)} ran again since it {'finished' if finished else 'began'}"
