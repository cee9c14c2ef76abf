"""Why a notebook of the series stopped: the error naming the notebook and the cell, and the
executed notebook marked so that no reader takes it as finished.

Used by the runner (:mod:`kit.pipeline.series`) and read back by the report builder
(:mod:`kit.report` shows a notebook's ``kit_pipeline`` metadata).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbclient.exceptions import CellTimeoutError


class PipelineError(RuntimeError):
    """A notebook of the series failed; the message names the notebook and the cell."""

    def __init__(self, message: str, notebook: str, cell_index: int | None = None, error: str = ""):
        super().__init__(message)
        self.notebook = notebook
        self.cell_index = cell_index
        self.error = error  # "<ExceptionName>: <message>", as saved in the executed notebook


def failed_cell(output: Path) -> tuple[int | None, str]:
    """Index and first source line of the cell where execution stopped.

    That is the cell papermill marked ``failed`` or left ``running``; else (a timeout interrupts
    the kernel and papermill marks the cell ``completed``) the last cell with an error output;
    else the last cell that started.
    """
    try:
        nb = json.loads(output.read_text())
    except (OSError, json.JSONDecodeError):
        return None, ""
    cells = nb.get("cells", [])

    def first_line(cell) -> str:
        lines = [ln for ln in "".join(cell.get("source", "")).splitlines() if ln.strip()]
        return lines[0] if lines else ""

    meta = [c.get("metadata", {}).get("papermill", {}) for c in cells]
    stopped = [i for i, m in enumerate(meta) if m.get("status") in ("failed", "running")]
    errored = [i for i, c in enumerate(cells) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    started = [i for i, m in enumerate(meta) if m.get("start_time") is not None]
    i = stopped[0] if stopped else (errored or started or [None])[-1]
    return (i, first_line(cells[i])) if i is not None else (None, "")


def describe_failure(notebook: str, output: Path, exc: BaseException) -> PipelineError:
    """The :class:`PipelineError` of notebook ``notebook`` (its name), whose executed copy
    ``output`` stopped with ``exc`` (papermill's error, a cell timeout, or another failure)."""
    from papermill.exceptions import PapermillExecutionError  # papermill: the notebook runner

    if isinstance(exc, CellTimeoutError):
        index, first = failed_cell(output)
        limit = re.search(r"after (\d+) seconds", str(exc))
        error = f"CellTimeoutError: the cell ran longer than {limit.group(1) if limit else 'the limit of'} s " \
                "and was stopped (--cell-timeout)"
        count = ""
    elif isinstance(exc, PapermillExecutionError):
        index, error = exc.cell_index, f"{exc.ename}: {exc.evalue}"
        lines = [ln for ln in (exc.source or "").splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        count = f", In [{exc.exec_count}]" if exc.exec_count is not None else ""
    else:
        index, first = failed_cell(output)
        error = f"{type(exc).__name__}: {exc}"
        count = ""
    where = f"cell {index}{count}" if index is not None else "before any cell ran (kernel start)"
    snippet = f" `{first.strip()[:80]}`" if first else ""
    msg = (f"notebook {notebook} failed in {where}{snippet}: {error}\n"
           f"  executed notebook with the traceback: {output}")
    return PipelineError(msg, notebook, index, error)


def mark_not_run(output: Path, index: int | None, error: str) -> None:
    """Record in the executed notebook where execution stopped, so no reader takes it as finished.

    papermill leaves the cell a dead kernel was running, and every cell after it, marked
    ``completed``. Here the stopped cell gets papermill status ``failed`` and, when it has no error
    output, one saying it did not finish; every later code cell gets status ``pending``, no
    execution count and no outputs (not run). The notebook's metadata gets
    ``kit_pipeline = {"status": "failed", "failed_cell": index, "error": error}``, which
    :mod:`kit.report` shows. A missing or unreadable file is left alone.

    Args:
        output: the executed notebook.
        index: the cell where execution stopped (None: before any cell; every cell is not run).
        error: one line naming the error.
    """
    try:
        nb = json.loads(output.read_text())
    except (OSError, json.JSONDecodeError):
        return
    cells = nb.get("cells", [])
    start = index if index is not None else 0
    for i, cell in enumerate(cells[start:], start):
        meta = cell.setdefault("metadata", {}).setdefault("papermill", {})
        if i == index:
            meta["status"] = "failed"
            if cell.get("cell_type") == "code" and not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                ename, _, evalue = error.partition(": ")
                evalue = f"{evalue} (this cell did not finish)"
                # nbconvert prints the traceback, not ename / evalue: without one the report shows an empty box
                cell.setdefault("outputs", []).append({"output_type": "error", "ename": ename or "Error",
                                                       "evalue": evalue, "traceback": [f"{ename or 'Error'}: {evalue}"]})
        else:
            meta["status"] = "pending"
            if cell.get("cell_type") == "code":
                cell["execution_count"], cell["outputs"] = None, []
    nb.setdefault("metadata", {})["kit_pipeline"] = {"status": "failed", "failed_cell": index, "error": error}
    tmp = output.with_suffix(".tmp")
    tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(output)

