"""The code that runs inside a call's process: IPython-style execution (rStar2-Agent §3.4).

``execute(code)`` parses the cell, runs every statement but the last, then evaluates the last
top-level expression (if there is one) and returns its ``repr`` unless it is None, the way a
notebook cell shows ``Out[n]``. Errors come back as a traceback restricted to the user's cell:
``File "<cell>", line N`` with the source line, then ``Type: message``.

This module has no dependencies outside the standard library, so it also runs as a plain
script (``python3 runner.py CODE_FILE``), which is how the benchmark emulates the released
fresh-interpreter-per-call design.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import linecache
import sys
import traceback
import types
from typing import Any

CELL = "<cell>"


def _cell_traceback(exc: BaseException) -> str:
    """Traceback text with the runner's own frames removed (starts at the user's cell)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb, limit=-30 if tb is not None else None)
    return "".join(te.format())


def _split_last_expr(code: str) -> tuple[Any, Any]:
    """Compile ``code`` into (body code object, last-expression code object or None)."""
    tree = ast.parse(code, CELL, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, CELL, "exec")
    return body, (compile(last, CELL, "eval") if last is not None else None)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main_namespace() -> dict[str, Any]:
    """A fresh ``__main__`` module, installed as ``sys.modules["__main__"]``, whose dict is the
    cell's namespace (as IPython does): a function the cell defines is then found by name in
    ``__main__``, so ``multiprocessing.Pool`` and ``concurrent.futures.ProcessPoolExecutor`` can
    pickle it to their (forked) processes. Call it only in the call's own process."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    return main.__dict__


def execute(code: str, namespace: dict | None = None) -> dict[str, Any]:
    """Run one cell. Stdout/stderr go wherever ``sys.stdout``/``sys.stderr`` point.

    Args:
        code: the cell's source.
        namespace: the globals to run it in; default :func:`main_namespace` (the call's process
            gets a ``__main__`` of its own).
    Returns:
        ``{"value": repr or None, "error": traceback or None, "etype": exception class name or
        None, "memory": bool, "exit": int}``.
    """
    ns = namespace if namespace is not None else main_namespace()
    linecache.cache[CELL] = (len(code), None, code.splitlines(True), CELL)
    rec: dict[str, Any] = {"value": None, "error": None, "etype": None, "memory": False, "exit": 0}
    try:
        body, last = _split_last_expr(code)
        exec(body, ns)
        if last is not None:
            value = eval(last, ns)
            if value is not None:
                rec["value"] = repr(value)
    except SystemExit as exc:
        rec["exit"] = _exit_code(exc)
    except MemoryError as exc:
        ns.clear()  # drop the user's big objects before formatting anything
        rec.update(error=_cell_traceback(exc), etype=type(exc).__name__, memory=True, exit=1)
    except BaseException as exc:  # noqa: BLE001 - the model's code may raise anything
        rec.update(error=_cell_traceback(exc), etype=type(exc).__name__, exit=1)
    return rec


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return repr(obj)


def call_function(target: str, args: list, kwargs: dict) -> dict[str, Any]:
    """Import ``module:qualname`` and call it; the return value comes back JSON-encoded."""
    rec: dict[str, Any] = {"value": None, "error": None, "etype": None, "memory": False, "exit": 0}
    try:
        module_name, _, qualname = target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        rec["data"] = json.dumps(obj(*args, **kwargs), default=_jsonable)
    except SystemExit as exc:
        rec["exit"] = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001
        rec.update(error="".join(traceback.format_exception(exc)), etype=type(exc).__name__,
                   memory=isinstance(exc, MemoryError), exit=1)
    return rec


if __name__ == "__main__":  # the released design: one fresh interpreter per call
    with open(sys.argv[1]) as fh:
        src = fh.read()
    out = execute(src)
    if out["value"] is not None:
        print(out["value"])
    if out["error"]:
        print(out["error"], file=sys.stderr, end="")
    sys.stdout.flush()
    raise SystemExit(out["exit"])
