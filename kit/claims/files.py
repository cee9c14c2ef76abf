"""Reading a run folder for the claims: the folders (:class:`RunDirs`) and tolerant JSON readers
that turn an absent or unreadable file into :class:`Missing` (the test is then inconclusive)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.config import StagesConfig
from kit.metrics import MetricsError, read_rows
from kit.studies import STUDIES


class Missing(Exception):
    """A file or key a test needs is not in the run folder: the test is inconclusive."""


# --------------------------------------------------------------------------- inputs


@dataclasses.dataclass(frozen=True)
class RunDirs:
    """The run directories a claim reads; any may be absent (its tests are then inconclusive).

    Attributes:
        root: the pipeline run folder ``reports/<profile>/<run>/``.
        sft, ablation, eval, analysis: notebook run directories (02, 06, 08, 07).
        stages: each RL stage's run directory by stage name, in training order.
        studies: each related-work study's run directory by its key (:data:`kit.studies.STUDIES`:
            ``retool`` notebook 10's ReTool comparison, ``agent_r`` notebook 11's Agent-R policies).
    """

    root: Path
    sft: Path
    ablation: Path
    eval: Path
    analysis: Path
    stages: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    studies: Mapping[str, Path] = dataclasses.field(default_factory=dict)

    @classmethod
    def under(cls, root: str | os.PathLike, *, stages: Mapping[str, str | os.PathLike] | Sequence[str] | None = None,
              studies: Mapping[str, str | os.PathLike] | None = None, **overrides: str | os.PathLike) -> RunDirs:
        """The standard folders of a pipeline run (``root/sft``, ``root/<stage>``, ``root/<study>``, ...);
        keyword arguments replace single folders (empty values are ignored).

        Args:
            root: the pipeline run folder.
            stages: the RL stages: ``{name: folder}`` (an empty folder: ``root/<name>``) or names
                (folders ``root/<name>``); default the paper's (``kit.config.StagesConfig().names``).
            studies: ``{study key: folder}`` (notebook 20's ``study_dirs``); every registered study
                not given (or given empty) is ``root/<key>``.
            overrides: ``sft``, ``ablation``, ``eval``, ``analysis`` folders, or a study's by its key
                (``retool=...``).
        Raises:
            ValueError: an unknown folder name or study key.
        """
        root = Path(root)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("root", "stages", "studies")]
        keys = [s.key for s in STUDIES]
        given_studies = {**(studies or {}), **{k: v for k, v in overrides.items() if k in keys}}
        unknown = (set(overrides) - set(names) - set(keys)) | (set(given_studies) - set(keys))
        if unknown:
            raise ValueError(f"unknown run folder(s) {sorted(unknown)}; expected some of {names} or a study's "
                             f"{keys} (RL stages: stages=)")
        given = dict(stages) if isinstance(stages, Mapping) else dict.fromkeys(stages or StagesConfig().names, "")
        return cls(root=root, **{n: Path(overrides[n]) if overrides.get(n) else root / n for n in names},
                   stages={n: Path(f) if f else root / n for n, f in given.items()},
                   studies={k: Path(given_studies[k]) if given_studies.get(k) else root / k for k in keys})

    def folder(self, name: str) -> Path:
        """The run directory ``name``: a notebook's (``sft``, ...), an RL stage's (``stage2``) or a
        study's (``retool``).

        Raises:
            Missing: no such folder.
        """
        if name in self.stages:
            return self.stages[name]
        if name in self.studies:
            return self.studies[name]
        if name in ("root", "stages", "studies") or name not in {f.name for f in dataclasses.fields(self)}:
            raise Missing(f"no run folder called {name!r}")
        return getattr(self, name)


def _json(path: Path) -> Any:
    if not path.exists():
        raise Missing(f"{path} not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise Missing(f"{path}: not valid JSON ({exc.msg})") from exc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's JSON-lines file (a partial last line of a killed run skipped).

    Raises:
        Missing: the file is absent, not UTF-8 text, or holds no rows (a test is then inconclusive).
    """
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
