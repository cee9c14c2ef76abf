"""Evaluation benchmarks of rStar2-Agent Table 3/5: AIME24, AIME25, MATH-500, HMMT25, GPQA-Diamond.

Local copies are read from ``<data_dir>/benchmarks`` (see ``<data_dir>/SOURCES.md``):

| name | file | rows | answer |
|---|---|---|---|
| ``aime24`` | ``aime2024.json`` ([asy] figures stripped) | 30 | integer string |
| ``aime24_figures`` | ``aime2024_with_figures.json`` | 30 | integer string |
| ``aime25`` | ``aime2025.jsonl`` (I = ids 0-14, II = 15-29) | 30 | integer (as a string here) |
| ``math500`` | ``math500.json`` | 500 | LaTeX |
| ``hmmt25`` | ``hmmt2025.jsonl`` (HMMT February 2025) | 30 | LaTeX |
| ``gpqa`` | user-supplied (``EvalConfig.gpqa_path``; its licence forbids redistribution) | 198 | letter A-D |

HMMT's file appends "Please reason step by step, and put your final answer within \\boxed{}."
to every prompt; :func:`load_benchmark` strips it so all benchmarks go through the same prompt.
When a hub is reachable, :func:`load_benchmark_from_hub` reads the public copies the release's
preprocessing scripts use (HuggingFaceH4/aime_2024, opencompass/AIME2025, HuggingFaceH4/MATH-500);
it is not exercised offline.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq

from kit.config.paths import data_file

BENCHMARKS = ("aime24", "aime24_figures", "aime25", "math500", "hmmt25", "gpqa")
_FILES = {
    "aime24": "benchmarks/aime2024.json",
    "aime24_figures": "benchmarks/aime2024_with_figures.json",
    "aime25": "benchmarks/aime2025.jsonl",
    "math500": "benchmarks/math500.json",
    "hmmt25": "benchmarks/hmmt2025.jsonl",
}
HMMT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."


class BenchmarkFormatError(ValueError):
    """A benchmark row cannot be parsed; the message names the file and the row."""


@dataclass(frozen=True)
class BenchItem:
    """One evaluation problem: ``answer`` is the gold string given to the verifier."""

    benchmark: str
    id: str
    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def benchmark_path(name: str, data_dir: str | Path | None = None, gpqa_path: str = "") -> Path:
    """The file a benchmark is read from (for manifests and hashes).

    Raises:
        KeyError: unknown name. ValueError: ``gpqa`` without ``gpqa_path``.
        kit.config.paths.DataFileMissing: the file is absent.
    """
    if name == "gpqa":
        if not gpqa_path:
            raise ValueError("GPQA-Diamond is not shipped (its licence forbids redistribution): "
                             "set eval.gpqa_path to your copy of gpqa_diamond.csv")
        path = Path(gpqa_path).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"GPQA file not found: {path} (eval.gpqa_path)")
        return path
    if name not in _FILES:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return data_file(_FILES[name], override=data_dir)


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if path.suffix == ".jsonl":
        out = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    out.append((i, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise BenchmarkFormatError(f"{path}: line {i}: invalid JSON ({exc.msg})") from None
        return out
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BenchmarkFormatError(f"{path}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
    if not isinstance(data, list):
        raise BenchmarkFormatError(f"{path}: expected a JSON array of rows")
    return list(enumerate(data))


def _get(path: Path, row: int, obj: Any, key: str) -> str:
    if not isinstance(obj, dict) or key not in obj or obj[key] in (None, ""):
        raise BenchmarkFormatError(f"{path}: row {row}: missing or empty key {key!r}")
    return str(obj[key])


def strip_hmmt_suffix(prompt: str) -> str:
    """Remove the appended "Please reason step by step..." line of the HMMT25 file."""
    text = prompt.rstrip()
    if text.endswith(HMMT_SUFFIX):
        text = text[: -len(HMMT_SUFFIX)]
    return text.rstrip()


def load_benchmark(name: str, data_dir: str | Path | None = None, gpqa_path: str = "",
                   max_problems: int = 0) -> list[BenchItem]:
    """Load a benchmark by name (see the module table), in file order.

    Args:
        name: one of :data:`BENCHMARKS`.
        data_dir: data directory override (``DataConfig.data_dir``).
        gpqa_path: the user's GPQA-Diamond CSV (``EvalConfig.gpqa_path``), for ``gpqa`` only.
        max_problems: keep the first N items (0 = all; ``EvalConfig.max_problems``).
    Raises:
        KeyError: unknown name. BenchmarkFormatError: a row without question or answer (names
        file and row). kit.config.paths.DataFileMissing / FileNotFoundError: the file is absent.
    """
    path = benchmark_path(name, data_dir, gpqa_path)
    if name == "gpqa":
        items = load_gpqa(path)
    else:
        qkey = {"aime25": "problem", "hmmt25": "prompt"}.get(name, "question")
        items = []
        for row, obj in _rows(path):
            q = _get(path, row, obj, qkey)
            if name == "hmmt25":
                q = strip_hmmt_suffix(q)
            item_id = str(obj.get("id", obj.get("index", row))) if name != "hmmt25" else str(row - 1)
            items.append(BenchItem(name, item_id, q, _get(path, row, obj, "answer").strip()))
    return items[:max_problems] if max_problems else items


def _gpqa_rows(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Column names and rows of a GPQA file: CSV (the official layout; a UTF-8 byte-order mark,
    as Excel writes, is ignored), JSONL, a JSON array of objects, or parquet (the hub's
    conversion), all with the official column names."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a corrupt file
            raise BenchmarkFormatError(f"{path}: not a readable parquet file ({exc})") from None
        return list(table.column_names), table.to_pylist()
    if suffix in (".jsonl", ".json"):
        rows = [obj for _, obj in _rows(path)]
        bad = [i for i, obj in enumerate(rows, 1) if not isinstance(obj, dict)]
        if bad:
            raise BenchmarkFormatError(f"{path}: row {bad[0]}: expected a JSON object")
        return sorted({k for obj in rows for k in obj}), rows
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or ()), list(reader)


def load_gpqa(path: str | Path, seed: int = 0) -> list[BenchItem]:
    """GPQA-Diamond from the official CSV (``Question``, ``Correct Answer``, ``Incorrect Answer
    1..3``, optional ``Record ID``; also a JSONL, JSON or parquet copy with those columns): the
    four choices are shuffled with a per-item seed (sha256 of the record id and ``seed``) and
    lettered A-D; the gold answer is the letter.

    Raises:
        BenchmarkFormatError: a missing column or empty choice; the message names the row.
    """
    path = Path(path)
    cols = ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    items = []
    fieldnames, rows = _gpqa_rows(path)
    missing = set(cols) - set(fieldnames)
    if missing:
        raise BenchmarkFormatError(f"{path}: missing columns {sorted(missing)}")
    for i, row in enumerate(rows, 1):
        vals = [str(row.get(c) if row.get(c) is not None else "").strip() for c in cols]
        if not all(vals):
            raise BenchmarkFormatError(f"{path}: row {i}: empty question or choice")
        rid = str(row.get("Record ID") or i)
        choices = vals[1:]
        rng = random.Random(int(hashlib.sha256(f"{rid}:{seed}".encode()).hexdigest()[:16], 16))
        order = list(range(4))
        rng.shuffle(order)
        shuffled = [choices[k] for k in order]
        letter = "ABCD"[order.index(0)]
        body = vals[0] + "\n\n" + "\n".join(f"{'ABCD'[k]}) {c}" for k, c in enumerate(shuffled))
        body += "\n\nAnswer with the letter of the correct choice."
        items.append(BenchItem("gpqa", rid, body, letter, {"choices": shuffled}))
    return items


_HUB = {
    "aime24": ("HuggingFaceH4/aime_2024", None, "train", "problem", "answer"),
    "aime25": ("opencompass/AIME2025", ("AIME2025-I", "AIME2025-II"), "test", "question", "answer"),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem", "answer"),
}


def load_benchmark_from_hub(name: str) -> list[BenchItem]:  # pragma: no cover - needs network
    """The public hub copy of a benchmark (needs network and the ``datasets`` package).

    Raises:
        KeyError: a benchmark without a known hub copy (hmmt25 and gpqa have none here).
    """
    if name not in _HUB:
        raise KeyError(f"no hub copy known for {name!r}; hub benchmarks: {', '.join(_HUB)}")
    repo, configs, split, qkey, akey = _HUB[name]
    items = []
    for cfg in configs or (None,):
        ds = datasets.load_dataset(repo, cfg, split=split)
        for i, row in enumerate(ds):
            items.append(BenchItem(name, f"{cfg or ''}{i}", str(row[qkey]), str(row[akey]).strip()))
    return items
