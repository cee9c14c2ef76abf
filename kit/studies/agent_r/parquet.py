"""Agent-R's training rows as a parquet for VERL's SFT trainer (issue #34, the paper-scale route).

VERL 0.9.1's ``MultiTurnSFTDataset`` puts loss on every assistant message, which would imitate
the bad branch of a revision trajectory. The kit therefore writes the exact token ids and the loss
mask per row (columns below) and VERL reads them with ``kit.bridge.revision_sft.TokenSFTDataset``
(``data.custom_cls``), so the mask reaches VERL's loss unchanged.

Columns: ``input_ids`` (list<int64>, prompt included), ``loss_mask`` (list<int8>, 1 = loss),
``kind`` (``revision`` / ``good`` / ``general``), ``task`` (task id), ``text`` (the decoded row,
for reading only).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ("input_ids", "loss_mask", "kind", "task", "text")


def general_share(general: Sequence[Any], n_rows: int, eta: float, seed: int = 0) -> list[Any]:
    """``round(eta * n_rows)`` of the ``general`` rows (at least one when ``eta > 0`` and there are
    rows), drawn without replacement with ``seed``: a trainer that reads rows uniformly (VERL's SFT)
    then sees general data at ``eta`` per Agent-R row, the weight the local loop gives it as a batch
    share ``eta / (1 + eta)`` (:mod:`kit.studies.agent_r.iterate`)."""
    if eta <= 0 or not general or n_rows <= 0:
        return []
    k = min(len(general), max(1, round(eta * n_rows)))
    idx = sorted(random.Random(seed).sample(range(len(general)), k))
    return [general[i] for i in idx]


def write_rows(rows: Sequence[Any], path: str | os.PathLike, tokenizer: Any = None,
               general: Sequence[tuple[Sequence[int], Sequence[int]]] = ()) -> Path:
    """Write ``rows`` (:class:`kit.studies.agent_r.revision.RevisionRow`) and ``general`` ``(ids, mask)``
    rows (already sized, :func:`general_share`) to ``path`` (zstd parquet); returns the path.

    Raises:
        ValueError: a row whose ids and mask differ in length (names the row).
    """
    recs = []
    for i, r in enumerate(rows):
        if len(r.ids) != len(r.mask):
            raise ValueError(f"row {i} ({r.kind}, task {r.task}): {len(r.ids)} ids but {len(r.mask)} mask values")
        recs.append({"input_ids": list(map(int, r.ids)), "loss_mask": list(map(int, r.mask)), "kind": r.kind,
                     "task": r.task, "text": tokenizer.decode(r.ids, skip_special_tokens=False) if tokenizer else ""})
    for ids, mask in general:
        recs.append({"input_ids": list(map(int, ids)), "loss_mask": list(map(int, mask)), "kind": "general",
                     "task": "", "text": tokenizer.decode(list(ids), skip_special_tokens=False) if tokenizer else ""})
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(recs, columns=list(COLUMNS)).to_parquet(p, compression="zstd", index=False)
    return p


def read_rows(path: str | os.PathLike) -> pd.DataFrame:
    """The parquet :func:`write_rows` wrote, checked: every column present, ids and mask of equal length.

    Raises:
        ValueError: a missing column or a row whose lengths differ (names the file and row).
    """
    df = pd.read_parquet(path)
    missing = [c for c in ("input_ids", "loss_mask") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected {COLUMNS}")
    for i, (ids, m) in enumerate(zip(df["input_ids"], df["loss_mask"], strict=True)):
        if len(ids) != len(m):
            raise ValueError(f"{path}: row {i} has {len(ids)} ids but {len(m)} loss-mask values")
    return df
