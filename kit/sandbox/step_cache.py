"""A per-step cache of tool calls: a call whose code and input already ran in the same step is answered
with that run's result instead of a second sandbox run (issue #35).

Within one RL step the policy samples 2G trajectories of each prompt; many of them send the same code
(the same program for the same problem), and every call forks a sandbox child. :class:`StepCache` wraps
an executor for one step (:func:`kit.train.rollouts.collect` makes a new one per call, so nothing is
reused across steps or across evaluations) and answers a repeated call from the first one's result
(awaiting it when it is still running), marked ``cached=True`` with ``wall_s = cpu_s = 0`` and no
phase stamps (it ran nowhere; ``Batch.time_tool_s`` sums the sandbox work actually done).

A repeat is answered only where a second run could not differ (:func:`deterministic`, :func:`reusable`):
    * a code call (``ToolCall``), same ``code``, ``input`` and ``timeout_s``;
    * the first run ended ``ok`` or ``error`` within half the time limit, in CPU seconds (a
      timeout, a memory or output kill, an infra error, or a run near the limit is run again);
    * its output (stdout, stderr, value) shows no object address (:data:`ADDRESS`, `` at 0x...``: a
      default ``repr`` of an object, function, generator, ...; or a bare ``0x`` and 6 or more hex
      digits, an address cut out of a repr): addresses differ between workers and runs (issue #44
      item 6; ``tests/sandbox/test_sandbox_repeatable.py`` measures what repeats). The sandbox
      renumbers those of default reprs (:func:`kit.sandbox.outcome.canonical_addresses`), but a call
      that shows one may also act on it (set order, ``hash``), so it is still not reused. An address
      turned into decimal text by the code itself is not seen;
    * the code is deterministic by a conservative reading of its syntax tree: it imports only modules
      of :data:`PURE_MODULES` and uses none of :data:`IMPURE_NAMES` (OS randomness, clocks, files, the
      environment, object identity ``id``, process state). ``random`` is allowed (issue #41): each
      call's ``random`` is seeded from its code and input (:func:`kit.sandbox.seeds.call_seed`), so a
      rerun on any worker draws what the first run drew and the cached answer is what the rerun would
      print (``tests/sandbox/test_sandbox_random.py`` checks it on a real pool); not where the code could
      reseed it from the OS (:func:`reseeds_from_os`: ``random.seed()``, ``random.Random()``) or uses
      ``SystemRandom``. Sets (``set``, ``frozenset``, set
      displays and comprehensions) and ``hash`` are allowed since every worker runs with
      ``PYTHONHASHSEED=0`` (:data:`kit.sandbox.isolation.CLEAN_ENV`): a set of strings iterates in
      the same order on every worker of every run (same CPython build); but not in code that could
      hash an object it made by its address (:func:`identity_hashed`: it defines a class or a
      lambda, or uses its own function, an imported name or ``object``/``type`` as a value),
      whose set order follows addresses; nor in code that could make a NaN (:func:`makes_nan`:
      ``float('nan')``, ``math.nan``, ``inf - inf``, ``float(input())``), since a NaN hashes by
      its address from Python 3.10 on (``hash(float('nan'))`` gave 3 values in 6 runs).
      Code that does not parse is deterministic (the same ``SyntaxError`` every time).
Anything else runs as it would without the cache. So with the cache on, every trajectory sees the same
feedback text as without it; only the sandbox's CPU seconds and wall time change.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import math
import re
import warnings
from collections.abc import Iterable
from typing import Any

from kit.sandbox.types import ToolCall, ToolResult

#: modules whose functions are pure given their arguments (no randomness, clock, I/O or process state)
#: (``random``: each call's draws are seeded from its code and input, :func:`kit.sandbox.seeds.call_seed`)
PURE_MODULES = frozenset({"math", "cmath", "fractions", "decimal", "itertools", "functools", "operator",
                          "collections", "string", "re", "statistics", "heapq", "bisect", "numbers", "random"})
#: names (builtins, attributes) that can make a run's output differ from the next run's
IMPURE_NAMES = frozenset({"SystemRandom", "time", "datetime", "os", "sys", "uuid", "secrets", "id",
                          "open", "globals", "locals", "vars", "dir", "exec", "eval", "compile",
                          "__import__", "breakpoint", "memoryview", "urandom", "perf_counter",
                          "monotonic", "process_time", "now", "today", "getpid", "environ", "threading",
                          "subprocess", "gc", "resource", "signal", "socket", "tracemalloc"})
#: ``random`` names that draw a fresh seed from the OS when called without one (``random.seed()``,
#: ``random.Random()``): repeatable only when called with a literal seed (:func:`reseeds_from_os`)
RESEED_NAMES = frozenset({"seed", "Random"})
#: names whose result follows hash values: repeatable under the workers' fixed hash seed, unless an
#: element is hashed by its address (:func:`identity_hashed`)
HASH_ORDER_NAMES = frozenset({"set", "frozenset", "hash"})
#: names of objects that hash (and, by default, print) by address, or make new classes
IDENTITY_NAMES = frozenset({"object", "type", "super", "__class__", "__hash__", "partial"})
#: names of values that are, or make by arithmetic (``inf - inf``, ``0 * inf``), a NaN: since Python
#: 3.10 ``hash(nan)`` is its address (float, complex and ``Decimal``), so sets and ``hash`` of NaNs differ
#: between runs (issue #44 item 6, review: 3 distinct ``hash(float('nan'))`` in 6 calls on real workers)
NAN_NAMES = frozenset({"nan", "inf", "nanj", "infj"})
#: constructors that read a NaN or an infinity from text (``float('nan')``, ``Decimal('-Infinity')``)
FLOAT_PARSERS = frozenset({"float", "complex", "Decimal", "fromhex"})
#: a string that may spell a NaN or an infinity for :data:`FLOAT_PARSERS`
NAN_TEXT = re.compile(r"nan|inf", re.IGNORECASE)
#: an object address: in a default ``repr`` (``<A object at 0x7f...>``, ``<function f at 0x...>``) or
#: bare, cut out of one (``str(iter([])).split(' at ')[1]`` prints ``0x7ffff676beb0>``): 6 or more hex
#: digits after ``0x`` (a ``hex()`` of a large number is refused too; it only runs again)
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")
#: statuses a rerun reproduces (the program's own outcome, not a limit or the service)
REPEATABLE = ("ok", "error")


def deterministic(code: str) -> bool:
    """Whether two runs of ``code`` with the same input, on any two workers, give the same result by
    the rules of the module doc (a conservative reading: False where in doubt).

    Args:
        code: the call's Python source.
    Returns:
        True: only pure imports, no impure name, no reseeding of ``random`` from the OS, and sets or
        ``hash`` only where no element can be hashed by address (an object it made, a NaN); False otherwise. Never raises (code that does not parse is True).
    """
    try:
        with warnings.catch_warnings():  # model-written code: its SyntaxWarnings are the model's, not ours
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the same error every run
        return True
    hashes = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.level:
                return False
            if any(n.split(".")[0] not in PURE_MODULES for n in names):
                return False
        elif isinstance(node, ast.Set | ast.SetComp):
            hashes = True
        elif isinstance(node, ast.Name) and node.id in IMPURE_NAMES:
            return False
        elif isinstance(node, ast.Attribute) and node.attr in IMPURE_NAMES:
            return False
        elif isinstance(node, ast.alias) and (node.asname or node.name) in IMPURE_NAMES:
            return False
        if isinstance(node, ast.Name) and node.id in HASH_ORDER_NAMES or (
                isinstance(node, ast.Attribute) and node.attr in HASH_ORDER_NAMES):
            hashes = True
    if reseeds_from_os(tree):
        return False
    return not (hashes and (identity_hashed(tree) or makes_nan(tree)))


def reseeds_from_os(tree: ast.AST) -> bool:
    """Whether code could reseed a generator from the OS (conservatively): it names one of
    :data:`RESEED_NAMES` other than as a call whose first argument is a literal other than None
    (``random.seed(7)`` and ``random.Random(7)`` are fine; ``random.seed()``, ``random.Random()``,
    ``random.seed(n)`` and ``f = random.seed`` are not), or imports one under another name.

    Everything else ``random`` does is repeatable: the worker seeds ``random`` for each call from its
    code and input (:func:`kit.sandbox.seeds.call_seed`), so two trajectories that send the same code
    with the same input draw the same numbers on any worker, with the cache or without it.
    """
    literal_seeded = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
                      and isinstance(n.args[0], ast.Constant) and n.args[0].value is not None}
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.name in RESEED_NAMES and node.asname not in (None, node.name):
            return True
        if (isinstance(node, ast.Name) and node.id in RESEED_NAMES or isinstance(node, ast.Attribute)
                and node.attr in RESEED_NAMES) and id(node) not in literal_seeded:
            return True
    return False


def makes_nan(tree: ast.AST) -> bool:
    """Whether code could make a NaN (conservatively), which hashes by its address (Python >= 3.10).

    True when it names one of :data:`NAN_NAMES` (``math.nan``, ``math.inf``, ``from math import
    inf``: ``inf - inf`` is a NaN), holds an infinite float literal (``1e999``) or a string that
    may spell one (:data:`NAN_TEXT`, or text ``float`` reads as non-finite, ``'1e400'``), or
    uses one of :data:`FLOAT_PARSERS` other than called on literals (``float(input())`` or
    ``map(float, ...)`` reads ``nan`` from the input). Not seen: a NaN made by overflowing arithmetic on finite literals
    (``x = 1e308 * 10; x - x``), which needs the same unlikely chain as an address put in a set.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in NAN_NAMES or (
                isinstance(node, ast.Attribute) and node.attr in NAN_NAMES) or (
                isinstance(node, ast.alias) and (node.asname or node.name) in NAN_NAMES):
            return True
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, float | complex) and not _finite(v):
                return True
            if isinstance(v, str | bytes) and (NAN_TEXT.search(str(v)) or not _finite_text(v)):
                return True
    literal_parse = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
                     and all(isinstance(a, ast.Constant) for a in [*n.args, *(k.value for k in n.keywords)])}
    return any((isinstance(n, ast.Name) and n.id in FLOAT_PARSERS or isinstance(n, ast.Attribute)
                and n.attr in FLOAT_PARSERS) and id(n) not in literal_parse for n in ast.walk(tree))


def _finite(v: float | complex) -> bool:
    return all(math.isfinite(x) for x in (v.real, v.imag))


def _finite_text(v: str | bytes) -> bool:
    """False if ``float`` reads ``v`` as an infinity or a NaN (``'1e400'``); True if finite or not a number."""
    try:
        return math.isfinite(float(v))
    except (ValueError, TypeError, OverflowError):
        return True


def identity_hashed(tree: ast.AST) -> bool:
    """Whether code could put an object hashed by its address into a set (conservatively).

    True when it defines a class (instances hash by address unless ``__hash__`` says otherwise) or
    a lambda, names one of :data:`IDENTITY_NAMES`, or uses a function it defined or a name it
    imported as a value (``{f, g}``, ``s.add(math)``, ``map(gcd, xs)``) rather than calling it or
    reading an attribute of it. Builtins used as values (``key=len``, ``map(int, ...)``) are
    allowed: they exist before a call's child is forked, and with address randomisation off
    (:func:`kit.sandbox.isolation.python_argv`) ``id(len)``, ``id(int)`` and the order of a set of
    builtins were the same on every worker of two pool starts (objects a call creates were not).
    Not seen: bound methods, iterators and generators put in a set (rare; their ``repr`` carries
    an address, which :func:`reusable` refuses).
    """
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.Lambda):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Name) and node.id in IDENTITY_NAMES or (
                isinstance(node, ast.Attribute) and node.attr in IDENTITY_NAMES):
            return True
    if not defined:
        return False
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return any(isinstance(n, ast.Name) and n.id in defined and isinstance(n.ctx, ast.Load)
               and id(n) not in called and id(n) not in bases for n in ast.walk(tree))


def reusable(res: Any, timeout_s: float) -> bool:
    """Whether a first run's result may answer the repeats of its call: a :class:`ToolResult` that
    ended ``ok`` or ``error`` (:data:`REPEATABLE`) within half of ``timeout_s`` (CPU seconds, which
    the machine's load does not stretch as it does the wall clock: issue #41) and shows no object
    address (:data:`ADDRESS`: `` at 0x...`` or a bare ``0x`` with 6+ hex digits) in its stdout,
    stderr or value."""
    return (isinstance(res, ToolResult) and res.status in REPEATABLE and res.cpu_s <= 0.5 * timeout_s
            and not any(ADDRESS.search(t or "") for t in (res.stdout, res.stderr, res.value)))


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
            ok = reusable(res, self.timeout_s)
            fut.set_result(res if ok else None)
            if not ok:  # a later repeat runs again
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
