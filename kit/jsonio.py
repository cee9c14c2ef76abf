"""JSON files of the kit, written one way: NaN and infinities as ``null``.

Every file a run leaves (``metrics.jsonl``, ``summary.json``, ``ablation.json``, evaluation
results, samples) goes through :func:`dumps`, so it is valid JSON (``json.dumps``'s default
writes bare ``NaN``, which other JSON readers reject). A ratio that is undefined at a step
(e.g. the tool-error ratio among correct trajectories when none is correct) is therefore
``null`` in the file; readers turn it back into NaN (``kit.report.figures.read_metrics``, pandas).
Paths and other objects JSON does not know are written as ``str``; numpy scalars as numbers.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats replaced by None, tuples by lists, mapping keys by ``str``
    and numpy scalars by Python numbers (recursively); everything else unchanged."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():  # numpy scalar
        return jsonable(obj.item())
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """``json.dumps`` of :func:`jsonable` ``(obj)``; never writes NaN or Infinity.

    Example:
        >>> dumps({"ratio": float("nan"), "step": 3})
        '{"ratio": null, "step": 3}'
    """
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False, default=str)


def append_jsonl(path: str | os.PathLike, row: Any) -> None:
    """Append ``row`` as one JSON line (NaN as null, :func:`dumps`) to ``path`` (created if absent)."""
    with Path(path).open("a") as fh:
        fh.write(dumps(row) + "\n")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (NaN as null) to ``path``, creating parent folders.

    Atomic: the text goes to a temporary file beside ``path`` that then replaces it, so a reader
    (a notebook polling a status file, a resumed run) sees the old file or the new one, never half
    of one. Raises ``TypeError``/``ValueError`` from :func:`dumps` before touching ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(obj, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # as a plain write would leave it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
