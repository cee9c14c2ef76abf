"""Loaders for the RL problem pools of rStar2-Agent §4.2, read from ``<data_dir>/train``.

Each loader returns one :class:`Problem` per source row, in file order, with its pool name, a
stable id and the raw answer string. Loaders never filter: rows that curation will drop (a
non-integer answer, a Project Euler answer whose md5 does not match, a problem that needs a
data file) are still returned, flagged in ``meta``, so that the funnel in
:mod:`kit.data.curate` counts every drop. A row that cannot be parsed at all raises
:class:`PoolFormatError` naming the file and the row.

Files and quirks (see ``<data_dir>/SOURCES.md``):

- ``dapo_math_17k.parquet``: 17,917 rows; problem = ``prompt[0].content``, answer =
  ``reward_model.ground_truth``.
- ``gsm8k_train.jsonl`` (7,473) / ``gsm8k_test.jsonl`` (1,319): the answer is the text after
  ``#### `` in the solution, sometimes with thousands commas.
- ``project_euler_problems.txt`` (476 problems, md5 of each answer) joined on the problem number
  to ``project_euler_answers.md`` (997 answers); ``meta["md5_ok"]`` says whether the md5 of the
  joined answer matches; ``meta["needs_file"]`` flags statements that link a data file.
- ``aime_1983_2025.csv`` (982 rows): also holds AIME 2024/2025 and 20 AIMO rows (ids ``2024_*``,
  ``2025_*``), which decontamination must remove; ``meta["year"]`` is parsed from the id.
- ``openmathreasoning_sample.jsonl`` (5 rows): ``question``, ``expected_answer``.

What this module does not do: fetch the full pools (the AoPS/OpenMathReasoning 93K set, the
full Project Euler 937) from a hub; point ``data_dir`` at a folder holding files with the same
layout to use bigger copies.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kit.config.paths import data_file

#: Pool names accepted by :func:`load_pool` (the values of ``DataConfig.train_pools``).
POOLS = ("dapo", "gsm8k", "project_euler", "aime_history", "openmathreasoning")


class PoolFormatError(ValueError):
    """A row of a pool file cannot be parsed; the message names the file and the row."""


@dataclass(frozen=True)
class Problem:
    """One training problem.

    Attributes:
        source: pool name (one of :data:`POOLS`, or a user-defined name).
        id: identifier unique within the source (e.g. ``"dapo-17"``, ``"1983_AIME_1"``).
        problem: the problem statement as plain text / LaTeX.
        answer: the reference answer exactly as the file gives it (a string).
        meta: extra facts used by filters (``md5_ok``, ``needs_file``, ``year``, ``row``).
    """

    source: str
    id: str
    problem: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def uid(self) -> str:
        """``"<source>/<id>"``, unique across pools."""
        return f"{self.source}/{self.id}"


def _bad(path: Path, row: int | str, why: str) -> PoolFormatError:
    return PoolFormatError(f"{path}: row {row}: {why}")


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSONL file into ``(line number, object)`` pairs; blank lines are skipped."""
    out = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _bad(path, lineno, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _bad(path, lineno, f"invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise _bad(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
            out.append((lineno, obj))
    return out


def _field(path: Path, row: int | str, obj: Any, key: str, kind: type = str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _bad(path, row, f"missing key {key!r}")
    value = obj[key]
    if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, kind):
        raise _bad(path, row, f"key {key!r} should be {kind.__name__}, got {type(value).__name__}")
    return value


# ----------------------------------------------------------------------------- pools


def load_dapo(data_dir: str | Path | None = None) -> list[Problem]:
    """DAPO-Math-17k (deduplicated, 17,917 rows; every ground truth an integer string).

    Raises:
        PoolFormatError: a row without ``prompt[0].content`` or ``reward_model.ground_truth``,
            or a file that is not a readable parquet with those columns (names the file).
        kit.config.paths.DataFileMissing: the parquet file is absent.
    """
    path = data_file("train/dapo_math_17k.parquet", override=data_dir)
    try:
        table = pq.read_table(path, columns=["prompt", "reward_model", "extra_info"]).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a corrupt file or a missing column
        raise _bad(path, "-", f"not a readable DAPO parquet file ({exc})") from None
    out = []
    for i, row in enumerate(table):
        prompt = row.get("prompt")
        if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], dict):
            raise _bad(path, i, "prompt should be a non-empty list of {role, content}")
        text = _field(path, i, prompt[0], "content")
        answer = _field(path, i, row.get("reward_model"), "ground_truth")
        index = (row.get("extra_info") or {}).get("index", i)
        out.append(Problem("dapo", f"dapo-{index}", text, answer, {"row": i}))
    return out


_GSM_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


def load_gsm8k(data_dir: str | Path | None = None, split: str = "train") -> list[Problem]:
    """GSM8K ``train`` (7,473) or ``test`` (1,319); the answer is what follows ``#### ``.

    Raises:
        PoolFormatError: a line that is not JSON, lacks ``question``/``answer`` or has no
            ``####`` marker; the message names the file and the line.
        ValueError: ``split`` is neither ``train`` nor ``test``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"gsm8k split must be 'train' or 'test', got {split!r}")
    path = data_file(f"train/gsm8k_{split}.jsonl", override=data_dir)
    out = []
    for lineno, obj in _read_jsonl(path):
        question = _field(path, lineno, obj, "question")
        solution = _field(path, lineno, obj, "answer")
        m = _GSM_ANSWER.search(solution)
        if not m:
            raise _bad(path, lineno, "answer has no '#### <final answer>' line")
        out.append(Problem("gsm8k", f"gsm8k-{split}-{lineno - 1}", question, m.group(1), {"row": lineno}))
    return out


_PE_HEADER = re.compile(r"^Problem (\d+)\n=+\n", re.M)
_PE_MD5 = re.compile(r"^\s*Answer:\s*(\S+)\s*$", re.M)
_PE_ANSWER_LINE = re.compile(r"^(\d+)\.\s(.*?)\s*$")
#: Link targets that are data files a problem needs (names.txt, matrix.txt, CabriJava.class...).
_PE_DATA_LINK = re.compile(r"^\s*\d+\.\s+\S+\.(txt|csv|zip|gz|dat|class)\s*$", re.M | re.I)


def parse_project_euler_answers(path: Path) -> dict[int, str]:
    """Parse ``project_euler_answers.md``: lines ``N. answer`` -> ``{N: answer}``.

    Lines that do not start with ``N.`` (header, code fences) are not answers and are skipped.

    Raises:
        PoolFormatError: a problem number given twice.
    """
    answers: dict[int, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _PE_ANSWER_LINE.match(line)
        if not m:
            continue
        n = int(m.group(1))
        if n in answers:
            raise _bad(path, lineno, f"problem {n} answered twice")
        answers[n] = m.group(2)
    return answers


def load_project_euler(data_dir: str | Path | None = None) -> list[Problem]:
    """Project Euler statements joined on their number to the public answers (476 problems).

    ``meta["md5_ok"]`` is True when md5(answer) equals the hash printed under the statement
    (455 of 476 in the shared copy; ``meta["md5_known"]`` is False where the file prints
    ``Answer: ?``); ``meta["needs_file"]`` is True when the statement links a
    data file (names.txt, matrix.txt, ...) that the pool does not include. A problem with no
    answer line gets ``answer=""``.

    Raises:
        PoolFormatError: a problem block without its ``Answer: <md5>`` line, or a number seen
            twice; the message names the file and the problem number.
    """
    ppath = data_file("train/project_euler_problems.txt", override=data_dir)
    apath = data_file("train/project_euler_answers.md", override=data_dir)
    answers = parse_project_euler_answers(apath)
    text = ppath.read_text(encoding="utf-8")
    heads = list(_PE_HEADER.finditer(text))
    out, seen = [], set()
    for k, head in enumerate(heads):
        n = int(head.group(1))
        if n in seen:
            raise _bad(ppath, f"'Problem {n}'", "problem number given twice")
        seen.add(n)
        body = text[head.end(): heads[k + 1].start() if k + 1 < len(heads) else len(text)]
        m = _PE_MD5.search(body)
        if not m:
            raise _bad(ppath, f"'Problem {n}'", "no 'Answer: <md5 or ?>' line")
        statement = body[: m.start()]
        links = ""
        if "Visible links" in statement:
            statement, links = statement.split("Visible links", 1)
        statement = "\n".join(line.strip() for line in statement.strip("\n").splitlines()).strip()
        answer = answers.get(n, "")
        digest = m.group(1)  # "?" in the file when the hash is unknown
        md5_ok = bool(answer) and hashlib.md5(answer.encode()).hexdigest() == digest
        meta = {"row": n, "md5_ok": md5_ok, "md5_known": bool(re.fullmatch(r"[0-9a-f]{32}", digest)), "needs_file": bool(_PE_DATA_LINK.search(links))}
        out.append(Problem("project_euler", f"pe-{n}", statement, answer, meta))
    return out


_AIME_YEAR = re.compile(r"^(\d{4})_")


def load_aime_history(data_dir: str | Path | None = None) -> list[Problem]:
    """AIME 1983-2025 CSV (982 rows: id, problem, answer); ``meta["year"]`` from the id.

    The file also holds AIME 2024 II, AIME 2025 and 20 AIMO-2024 rows: benchmark-era problems
    that :func:`kit.data.curate.curate` removes in its decontamination step.

    Raises:
        PoolFormatError: a missing column, an empty field, more fields than the header or an id
            without a leading year; the
            message names the file and the CSV row (1 = first data row).
    """
    path = data_file("train/aime_1983_2025.csv", override=data_dir)
    out = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"id", "problem", "answer"} - set(reader.fieldnames or ())
        if missing:
            raise _bad(path, "header", f"missing columns {sorted(missing)}")
        for i, row in enumerate(reader, 1):
            if None in row:  # csv.DictReader puts fields beyond the header under the key None
                raise _bad(path, i, f"{len(row[None])} more field(s) than the header (an unquoted comma?) "
                                    f"in {row!r:.120}")
            if any(row.get(k) in (None, "") for k in ("id", "problem", "answer")):
                raise _bad(path, i, f"empty id/problem/answer in {row!r:.120}")
            m = _AIME_YEAR.match(row["id"])
            if not m:
                raise _bad(path, i, f"id {row['id']!r} does not start with a year")
            out.append(Problem("aime_history", row["id"], row["problem"], row["answer"].strip(),
                               {"row": i, "year": int(m.group(1))}))
    return out


def load_openmathreasoning(data_dir: str | Path | None = None) -> list[Problem]:
    """The 5-row OpenMathReasoning sample (``question``, ``expected_answer``; LaTeX answers).

    Raises:
        PoolFormatError: a line that is not JSON or lacks a key.
    """
    path = data_file("train/openmathreasoning_sample.jsonl", override=data_dir)
    return [
        Problem("openmathreasoning", f"omr-{lineno - 1}", _field(path, lineno, obj, "question"),
                _field(path, lineno, obj, "expected_answer"), {"row": lineno})
        for lineno, obj in _read_jsonl(path)
    ]


_LOADERS = {
    "dapo": load_dapo,
    "gsm8k": load_gsm8k,
    "project_euler": load_project_euler,
    "aime_history": load_aime_history,
    "openmathreasoning": load_openmathreasoning,
}


def load_pool(name: str, data_dir: str | Path | None = None) -> list[Problem]:
    """Load one pool by name (see :data:`POOLS`).

    Raises:
        KeyError: an unknown pool name (the message lists the known ones).
    """
    if name not in _LOADERS:
        raise KeyError(f"unknown training pool {name!r}; known pools: {', '.join(POOLS)}")
    return _LOADERS[name](data_dir)


def load_pools(names: Sequence[str] | Iterable[str] = POOLS, data_dir: str | Path | None = None
               ) -> dict[str, list[Problem]]:
    """Load several pools: ``{name: [Problem, ...]}`` in the order given."""
    return {name: load_pool(name, data_dir) for name in names}
