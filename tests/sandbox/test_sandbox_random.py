"""Tool code that draws random numbers is repeatable (issue #41, kit.sandbox.seeds): each call's
``random``, ``np.random`` and sympy generator are seeded from its code and input, so the same call
draws the same numbers on any worker of any pool start, a different call other numbers, and the step
cache may answer a repeat of it (kit.sandbox.step_cache)."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from kit.config import SandboxConfig
from kit.sandbox import SandboxPool, SyncSandboxPool, ToolCall, isolation
from kit.sandbox.seeds import call_seed
from kit.sandbox.step_cache import StepCache, deterministic

DRAWS = ("import random\nimport numpy as np\nfrom sympy import randprime\n"
         "print(random.random(), random.randint(1, 10**9), random.sample(range(100), 5))\n"
         "print(np.random.rand(3), np.random.randint(0, 10**6))\nprint(randprime(10**6, 10**7))")
PLAIN = "import random\nprint([random.randint(1, 6) for _ in range(20)])"


def test_the_seed_is_a_stable_digest_of_code_and_input_only():
    req = {"kind": "code", "code": PLAIN, "input": "3", "timeout_s": 5.0}
    text = json.dumps(["code", PLAIN, "3"], sort_keys=True, ensure_ascii=False)
    assert call_seed(req) == hashlib.blake2b(text.encode(), digest_size=32).digest()  # never Python's hash()
    assert call_seed({**req, "timeout_s": 1.0}) == call_seed(req)  # the limit is no part of it
    assert call_seed({**req, "input": "4"}) != call_seed(req) != call_seed({**req, "code": PLAIN + "\n"})
    func = {"kind": "func", "target": "m:f", "args": [1], "kwargs": {"b": 2, "a": 1}}
    assert call_seed(func) == call_seed({**func, "kwargs": {"a": 1, "b": 2}})


@pytest.fixture(scope="module")
def runs():
    """Each call 3 times on each of two pool starts of 2 workers, with the science modules loaded."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    cfg = SandboxConfig(isolation="bwrap", timeout_s=20.0, cpu_s=20.0, memory_mb=1024, num_workers=2)
    calls = [ToolCall(DRAWS), ToolCall(DRAWS + "  # another cell"), ToolCall(PLAIN), ToolCall(PLAIN, "x")]
    out = []
    for _ in range(2):
        with SyncSandboxPool(cfg) as pool:
            rs = pool.run_batch(calls * 3)
        assert all(r.status == "ok" for r in rs), rs
        out.append([r.stdout for r in rs])
    return out


def test_the_same_call_draws_the_same_numbers_on_every_worker_and_pool_start(runs):
    for k in range(4):  # each of the 4 calls: 3 runs x 2 pool starts, one output
        assert len({run[i] for run in runs for i in range(k, 12, 4)}) == 1, [run[k] for run in runs]


def test_different_code_or_input_draws_other_numbers(runs):
    first = runs[0]
    assert first[0] != first[1]  # a comment changes the code, so the seed: every generator draws anew
    assert all(a != b for a, b in zip(first[0].splitlines(), first[1].splitlines(), strict=True))
    assert first[2] != first[3]  # the same code with another input


def test_random_code_is_cached_and_the_cached_answer_is_what_a_rerun_prints():
    """Two trajectories send the same ``random`` code: with the cache the second gets the first's
    answer, without it each runs on its own worker; all print the same numbers. Code that reseeds
    ``random`` from the OS is never cached."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    assert deterministic(PLAIN) and deterministic("import random\nrandom.seed(7)\nprint(random.random())")
    for code in ("import random\nrandom.seed()\nprint(random.random())", "import random\nprint(random.Random().random())",
                 "import random\nprint(random.SystemRandom().random())", "from random import seed as s\ns(None)",
                 "import random\nn = None\nrandom.seed(n)", "import numpy as np\nprint(np.random.rand())"):
        assert not deterministic(code), code
    cfg = SandboxConfig(isolation="bwrap", timeout_s=5.0, cpu_s=5.0, memory_mb=768, num_workers=2, preimport=())

    async def go():
        async with SandboxPool(cfg) as pool:
            cache = StepCache(pool, cfg.timeout_s)
            cached = await cache.run_batch([ToolCall(PLAIN)] * 4)
            plain = await pool.run_batch([ToolCall(PLAIN)] * 4)
            return cached, plain, cache.stats

    cached, plain, stats = asyncio.run(go())
    assert [r.cached for r in cached] == [False, True, True, True] and stats["hits"] == 3
    assert len({r.stdout for r in cached + plain}) == 1, [r.stdout for r in cached + plain]
