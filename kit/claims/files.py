"""Reading a run folder for the claims: the folders (:class:`RunDirs`) and tolerant JSON readers
that turn an absent or unreadable file into :class:`Missing` (the test is then inconclusive)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from kit.metrics import MetricsError, read_rows


class Missing(Exception):
    """A file or key a test needs is not in the run folder: the test is inconclusive."""


# --------------------------------------------------------------------------- inputs


@dataclasses.dataclass(frozen=True)
class RunDirs:
    """The run directories a claim reads; any may be absent (its tests are then inconclusive).

    Attributes:
        root: the pipeline run folder ``reports/<profile>/<run>/``.
        sft, stage1, stage2, stage3, ablation, eval, analysis: notebook run directories.
    """

    root: Path
    sft: Path
    stage1: Path
    stage2: Path
    stage3: Path
    ablation: Path
    eval: Path
    analysis: Path

    @classmethod
    def under(cls, root: str | os.PathLike, **overrides: str | os.PathLike) -> RunDirs:
        """The standard folders of a pipeline run (``root/sft``, ``root/stage1``, ...); keyword
        arguments replace single folders (empty values are ignored)."""
        root = Path(root)
        names = [f.name for f in dataclasses.fields(cls) if f.name != "root"]
        unknown = set(overrides) - set(names)
        if unknown:
            raise ValueError(f"unknown run folder(s) {sorted(unknown)}; expected some of {names}")
        return cls(root=root, **{n: Path(overrides[n]) if overrides.get(n) else root / n for n in names})

    def folder(self, name: str) -> Path:
        if name not in {f.name for f in dataclasses.fields(self)}:
            raise Missing(f"no run folder called {name!r}")
        return getattr(self, name)


def _json(path: Path) -> Any:
    if not path.exists():
        raise Missing(f"{path} not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise Missing(f"{path}: not valid JSON ({exc.msg})") from exc


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise Missing(f"{path} not found")
    try:
        rows = read_rows(path, partial_ok=True)  # a partial last line of a killed run is skipped
    except MetricsError as exc:  # not UTF-8 text
        raise Missing(str(exc)) from exc
    if not rows:
        raise Missing(f"{path} holds no rows")
    return rows


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v
