"""JSON files of the kit, written one way: NaN and infinities as ``null``.

Every file a run leaves (``metrics.jsonl``, ``summary.json``, ``ablation.json``, evaluation
results, samples) goes through :func:`dumps`, so it is valid JSON (``json.dumps``'s default
writes bare ``NaN``, which other JSON readers reject). A ratio that is undefined at a step
(e.g. the tool-error ratio among correct trajectories when none is correct) is therefore
``null`` in the file; readers turn it back into NaN (``kit.figures.read_metrics``, pandas).
Paths and other objects JSON does not know are written as ``str``; numpy scalars as numbers.
"""

from __future__ import annotations

import json
import math
import os
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


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (NaN as null) to ``path``, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(obj, indent=2) + "\n")
    return path


def append_jsonl(path: str | os.PathLike, rows: Any) -> None:
    """Append each of ``rows`` (dicts) to the JSON-lines file ``path`` as one line (NaN as null)."""
    with Path(path).open("a") as fh:
        for row in rows:
            fh.write(dumps(row) + "\n")
