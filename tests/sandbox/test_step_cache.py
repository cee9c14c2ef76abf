"""The per-step tool-call cache (kit.sandbox.step_cache): a repeat of a deterministic call is answered from
the first run, marked cached; anything a rerun could change runs again."""

from __future__ import annotations

import asyncio

from kit.sandbox import ToolCall, ToolResult
from kit.sandbox.step_cache import StepCache, deterministic


class Counting:
    """Executor double: runs ``status`` results, echoing the code, and records every call it ran."""

    def __init__(self, status="ok", wall_s=0.01):
        self.ran: list[tuple[str, str]] = []
        self.status, self.wall_s = status, wall_s

    async def run_batch(self, calls):
        await asyncio.sleep(0.01)  # repeats sent meanwhile must wait for this run, not start their own
        self.ran += [(c.code, c.input) for c in calls]
        return [ToolResult(self.status, stdout=f"{c.code}|{c.input}\n", wall_s=self.wall_s, cpu_s=0.005,
                           timings={"fork": 1.0}) for c in calls]


def test_a_repeat_in_the_same_step_is_answered_from_the_first_run_and_marked():
    ex = Counting()
    cache = StepCache(ex, timeout_s=5.0)

    async def go():  # two trajectories at once, then a later turn: the same code three times
        a, b = await asyncio.gather(cache.run_batch([ToolCall("print(6*7)")]),
                                    cache.run_batch([ToolCall("print(6*7)"), ToolCall("print(6*7)", "1")]))
        return a + b + await cache.run_batch([ToolCall("print(6*7)")])

    first, hit, other_input, later = asyncio.run(go())
    assert ex.ran == [("print(6*7)", ""), ("print(6*7)", "1")]  # one run per distinct (code, input)
    assert not first.cached and not other_input.cached
    for r in (hit, later):
        assert r.cached and (r.status, r.stdout) == (first.status, first.stdout)
        assert (r.wall_s, r.cpu_s, r.timings) == (0.0, 0.0, None)  # it ran nowhere
    assert cache.stats == {"hits": 2, "misses": 2, "uncached": 0}


def test_what_a_rerun_could_change_runs_again():
    cases = ["import random\nprint(random.random())", "import time\nprint(time.time())", "print(id(1))",
             "print({'a', 'b'})", "print(set('ab'))", "from os import getpid\nprint(getpid())",
             "import numpy as np\nprint(np.random.rand())"]
    assert not any(deterministic(c) for c in cases)
    assert deterministic("import math\nprint(math.factorial(12) % 97)") and deterministic("print(1/0)")
    assert deterministic("def f(:\n")  # a syntax error is the same every time
    for code in cases:
        ex = Counting()
        out = asyncio.run(StepCache(ex, 5.0).run_batch([ToolCall(code), ToolCall(code)]))
        assert len(ex.ran) == 2 and not any(r.cached for r in out), code
    for status, wall in (("timeout", 5.0), ("memory_limit", 0.1), ("ok", 3.0)):  # a limit, or near it
        ex = Counting(status, wall)
        cache = StepCache(ex, 5.0)
        out = asyncio.run(cache.run_batch([ToolCall("print(2)")])) + asyncio.run(cache.run_batch([ToolCall("print(2)")]))
        assert len(ex.ran) == 2 and not any(r.cached for r in out), status
