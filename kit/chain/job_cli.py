"""The command line shared by the notebooks' background training jobs (:mod:`kit.pipeline.overlap` starts
them: ``python -m kit.chain.<job> '<the notebook's parameters as JSON>'``): the parameters' checks
and the exit codes, 0 when the work finished, 1 on an error (the traceback is in the job's log), 2 on
bad parameters (nothing trained).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kit.config import ConfigError


def check_parameters(job: str, p: Mapping[str, Any], required: Sequence[str], kinds: Mapping[str, type]) -> None:
    """Refuse a missing or wrongly typed parameter of ``job``, naming it.

    Raises:
        KeyError: a key of ``required`` is missing (all missing ones named).
        TypeError: a key of ``kinds`` present in ``p`` has another type (each named with both types).
    """
    missing = [k for k in required if k not in p]
    if missing:
        raise KeyError(f"{job} job: missing parameter(s) {missing}")
    wrong = [f"{k} ({type(p[k]).__name__}, expected {t.__name__})" for k, t in kinds.items()
             if k in p and not isinstance(p[k], t)]
    if wrong:
        raise TypeError(f"{job} job: parameter(s) of the wrong type: {', '.join(wrong)}")


def job_main(job: str, notebook: str, run: Callable[[dict[str, Any]], dict[str, Any]],
             done: Callable[[dict[str, Any]], str], argv: Sequence[str] | None = None) -> int:
    """The job's command line: one argument, ``notebook``'s parameters as a JSON object, given to
    ``run``; prints ``done(summary)`` when it returns. Returns the exit code of the module docstring
    (an exception other than bad parameters propagates: the process exits 1 with its traceback)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        params = json.loads(args[0]) if len(args) == 1 else None
    except json.JSONDecodeError:
        params = None
    if not isinstance(params, dict):
        print(f"usage: python -m kit.chain.{job}_job '<notebook {notebook} parameters as a JSON object>'", file=sys.stderr)
        return 2
    try:
        summary = run(params)
    except (KeyError, TypeError, ConfigError) as exc:  # bad parameters: nothing trained
        print(f"{job} job: bad parameters: {exc}", file=sys.stderr)
        return 2
    print(f"{job} job: {done(summary)}", flush=True)
    return 0
