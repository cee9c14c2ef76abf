"""A per-step cache of tool calls: a call whose code and input already ran in the same step is answered
with that run's result instead of a second sandbox run (issue #35).

Within one RL step the policy samples 2G trajectories of each prompt; many of them send the same code
(the same program for the same problem), and every call forks a sandbox child. :class:`StepCache` wraps
an executor for one step (:func:`kit.train.rollouts.collect` makes a new one per call, so nothing is
reused across steps or across evaluations) and answers a repeated call from the first one's result
(awaiting it when it is still running), marked ``cached=True`` with ``wall_s = cpu_s = 0`` and no
phase stamps (it ran nowhere; ``Batch.time_tool_s`` sums the sandbox work actually done).

A repeat is answered only where a second run could not differ (:func:`deterministic`):
    * a code call (``ToolCall``), same ``code``, ``input`` and ``timeout_s``;
    * the first run ended ``ok`` or ``error`` within half the wall-clock limit (a timeout, a memory or
      output kill, an infra error, or a run near the limit is run again);
    * the code is deterministic by a conservative reading of its syntax tree: it imports only modules
      of :data:`PURE_MODULES` and uses none of :data:`IMPURE_NAMES` (randomness, clocks, files, the
      environment, object identity, string hashing: each worker has its own hash seed, so iterating a
      set of strings can differ between workers, hence no ``set``/``frozenset`` and no set displays).
      Code that does not parse is deterministic (the same ``SyntaxError`` every time).
Anything else runs as it would without the cache. So with the cache on, every trajectory sees the same
feedback text as without it; only the sandbox's CPU seconds and wall time change.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

from kit.sandbox.types import ToolCall, ToolResult

#: modules whose functions are pure given their arguments (no randomness, clock, I/O or process state)
PURE_MODULES = frozenset({"math", "cmath", "fractions", "decimal", "itertools", "functools", "operator",
                          "collections", "string", "re", "statistics", "heapq", "bisect", "numbers"})
#: names (builtins, attributes) that can make a run's output differ from the next run's
IMPURE_NAMES = frozenset({"random", "time", "datetime", "os", "sys", "uuid", "secrets", "hash", "id", "set",
                          "frozenset", "open", "globals", "locals", "vars", "dir", "exec", "eval", "compile",
                          "__import__", "breakpoint", "memoryview", "getrandbits", "urandom", "perf_counter",
                          "monotonic", "process_time", "now", "today", "getpid", "environ", "threading",
                          "subprocess", "gc", "resource", "signal", "socket", "tracemalloc"})
#: statuses a rerun reproduces (the program's own outcome, not a limit or the service)
REPEATABLE = ("ok", "error")


def deterministic(code: str) -> bool:
    """Whether two runs of ``code`` with the same input give the same result by the rules above."""
    try:
        with warnings.catch_warnings():  # model-written code: its SyntaxWarnings are the model's, not ours
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(code)
    except (SyntaxError, ValueError):  # the same SyntaxError (or null-byte error) every run
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.level:
                return False
            if any(n.split(".")[0] not in PURE_MODULES for n in names):
                return False
        elif isinstance(node, ast.Set | ast.SetComp):
            return False
        elif isinstance(node, ast.Name) and node.id in IMPURE_NAMES:
            return False
        elif isinstance(node, ast.Attribute) and node.attr in IMPURE_NAMES:
            return False
        elif isinstance(node, ast.alias) and (node.asname or node.name) in IMPURE_NAMES:
            return False
    return True


class StepCache:
    """An executor for one step: ``run_batch(calls)`` as ``executor``'s, repeats answered from the first run.

    Args:
        executor: what runs the calls (``kit.sandbox.SandboxPool`` or a test double with ``run_batch``).
        timeout_s: the sandbox's wall-clock limit (``sandbox.timeout_s``); a first run longer than half of
            it is not reused.
    Attributes:
        stats: ``{"hits", "misses", "uncached"}``: calls answered from the cache, calls run whose result may
            be reused, and calls run that may not (not a code call, non-deterministic code).
    """

    def __init__(self, executor: Any, timeout_s: float):
        self.executor = executor
        self.timeout_s = float(timeout_s)
        self._runs: dict[tuple[str, str, float | None], asyncio.Future] = {}
        self.stats = {"hits": 0, "misses": 0, "uncached": 0}

    async def run_batch(self, calls: Iterable[Any]) -> list[Any]:
        """Results of ``calls`` in order; a repeat of a reusable call waits for its first run."""
        calls = list(calls)
        out: list[Any] = [None] * len(calls)
        waits: list[tuple[int, asyncio.Future]] = []
        todo: list[int] = []
        owned: dict[int, asyncio.Future] = {}
        for i, c in enumerate(calls):
            if not isinstance(c, ToolCall) or not deterministic(c.code):
                self.stats["uncached"] += 1
                todo.append(i)
                continue
            key = (c.code, c.input, c.timeout_s)
            fut = self._runs.get(key)
            if fut is None:
                fut = asyncio.get_running_loop().create_future()
                self._runs[key] = owned[i] = fut
                self.stats["misses"] += 1
                todo.append(i)
            else:
                waits.append((i, fut))
        try:
            if todo:
                results = list(await self.executor.run_batch([calls[i] for i in todo]))
                for i, res in zip(todo, results, strict=True):
                    out[i] = res
        except BaseException:
            for i, fut in owned.items():  # the waiters run their calls themselves
                self._runs.pop((calls[i].code, calls[i].input, calls[i].timeout_s), None)
                if not fut.done():
                    fut.set_result(None)
            raise
        for i, fut in owned.items():
            res = out[i]
            reusable = (isinstance(res, ToolResult) and res.status in REPEATABLE
                        and res.wall_s <= 0.5 * self.timeout_s)
            fut.set_result(res if reusable else None)
            if not reusable:  # a later repeat runs again
                self._runs.pop((calls[i].code, calls[i].input, calls[i].timeout_s), None)
        rerun = []
        for i, fut in waits:
            first = await fut
            if first is None:
                rerun.append(i)
            else:
                self.stats["hits"] += 1
                out[i] = dataclasses.replace(first, wall_s=0.0, cpu_s=0.0, timings=None, cached=True)
        if rerun:  # the first run is not reusable: these run as they would without the cache
            self.stats["uncached"] += len(rerun)
            for i, res in zip(rerun, await self.executor.run_batch([calls[i] for i in rerun]), strict=True):
                out[i] = res
        return out
