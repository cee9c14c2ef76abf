"""The RL stages' training pool, one door for both runtimes (rStar2-Agent §4.2-4.3).

``data.source`` says what the stages train on:

* ``"curated"``: the curated real pool notebook 01 writes, ``<data_dir>/data/curated.parquet``
  (:func:`kit.data.curate.write_curated`; ``data_dir`` is the ``01_data_curation`` run folder).
  Every stage trains on the whole pool, as the report's stages 1-2 do; a ``problems = "hard"``
  stage filters it first (the trainer's job). The VERL runtime reads the same file
  (:func:`curated_file`) as VERL's ``data.train_files``;
* ``"tasks"``: the generated task family of :mod:`kit.data.tasks` at the stage's ``difficulty``
  (the tiny/smoke profiles' pool; the local runtime only);
* ``"auto"`` (the default): ``"tasks"`` on the local runtime, ``"curated"`` on VERL, so tiny
  and smoke keep their task family and a ``--set runtime=verl`` still trains on what 01 wrote.

Not to be confused with :mod:`kit.data.pools`, the loaders of the raw source pools that curation reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kit.config import KitConfig, StageConfig
from kit.data.tasks import TaskProblem, task_split

#: The values of ``data.source`` besides ``"auto"``.
SOURCES = ("tasks", "curated")
#: Columns of ``curated.parquet`` a training problem is read from.
CURATED_COLUMNS = ("source", "id", "problem", "answer")


@dataclass(frozen=True)
class CuratedProblem:
    """One row of ``curated.parquet`` as a training problem (what the trainer reads of a
    :class:`kit.data.tasks.TaskProblem`: ``id``, ``question``, ``answer``).

    Attributes:
        id: ``"<source>/<id>"``, unique across pools (as ``kit.bridge.hard_subset.source_id``).
        source: the pool it came from (``dapo``, ``gsm8k``, ...).
        question: the problem statement.
        answer: the reference answer (an integer as a decimal string, after curation).
    """

    id: str
    source: str
    question: str
    answer: str


Problem = TaskProblem | CuratedProblem


def source(cfg: KitConfig) -> str:
    """``cfg.data.source`` resolved: ``"tasks"`` or ``"curated"`` (``"auto"``: by ``cfg.runtime``)."""
    if cfg.data.source == "auto":
        return "curated" if cfg.runtime == "verl" else "tasks"
    return cfg.data.source


def curated_file(data_dir: str | os.PathLike | None) -> Path:
    """``<data_dir>/data/curated.parquet``, the file both runtimes train on under ``data.source = "curated"``
    (VERL's ``data.train_files`` for every stage but a hard one; it may not exist yet, e.g. in a dry run).

    Raises:
        ValueError: ``data_dir`` is None (names what it must be).
    """
    if data_dir is None:
        raise ValueError("data.source='curated' trains on <data_dir>/data/curated.parquet: pass data_dir, the "
                         "01_data_curation run folder")
    return Path(data_dir) / "data" / "curated.parquet"


def read_curated(path: str | os.PathLike) -> list[CuratedProblem]:
    """The rows of a ``write_curated`` parquet as training problems, in file order.

    Raises:
        FileNotFoundError: no file at ``path`` (names it and what writes it).
        ValueError: a missing column, a row with an empty problem or answer, or no rows (names the
            file, and the row).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} not found: notebook 01_data_curation writes it (kit.data.curate.write_curated)")
    df = pd.read_parquet(path)
    missing = [c for c in CURATED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (kit.data.curate.write_curated writes "
                         f"{', '.join(CURATED_COLUMNS)})")
    out = []
    for i, row in enumerate(df[list(CURATED_COLUMNS)].itertuples(index=False)):
        if not _text(row.problem) or not _text(row.answer):
            raise ValueError(f"{path}: row {i} ({row.source}/{row.id}) has an empty problem or answer")
        out.append(CuratedProblem(f"{row.source}/{row.id}", str(row.source), str(row.problem), str(row.answer)))
    if not out:
        raise ValueError(f"{path}: no problems")
    return out


def _text(value: Any) -> bool:
    return bool(pd.notna(value)) and str(value).strip() != ""


def pool(cfg: KitConfig, stage: StageConfig, data_dir: str | os.PathLike | None) -> list[Problem]:
    """The problems one RL stage draws its steps from, before a ``hard`` stage's filter.

    Args:
        cfg: resolved config (``data.source``, ``runtime``, the ``data.task_*`` sizes, ``seed``).
        stage: the stage's config (``difficulty`` picks the task level; unused for ``curated``).
        data_dir: the ``01_data_curation`` run folder (read for ``curated`` only).
    Returns:
        ``tasks``: the train split's problems of level ``stage.difficulty``; ``curated``: every row of
        ``<data_dir>/data/curated.parquet``.
    Raises:
        ValueError, FileNotFoundError: see :func:`curated_file` and :func:`read_curated`.
    """
    if source(cfg) == "curated":
        return read_curated(curated_file(data_dir))
    return list(task_split(cfg).level(stage.difficulty))
