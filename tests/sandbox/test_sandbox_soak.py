"""Soak: 5,000 calls, 5% hostile, through the async API: all answered, none lost or hung."""

import asyncio
import collections
import random
import time

import pytest

from kit.sandbox import STATUSES, SandboxPool, ToolCall

HOSTILE = [  # (code, expected status); quick ones, so the soak stays inside its time budget
    ("x = bytearray(10**12)", "memory_limit"),
    ("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(100)", ("error", "timeout")),
    ("import ctypes\nctypes.string_at(0)", "killed"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", "killed"),
    ("while True:\n    print('flood' * 50)", "output_limit"),
    ("import sys\nsys.exit(4)", "error"),
    ("import os\nos.close(1)\nprint(1)", "error"),
    ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\nprint('x')", "ok"),
    ("import subprocess\nsubprocess.Popen(['sleep', '100'])\nprint('x')", "ok"),
    ("import os\nos.kill(os.getppid(), 9)", "error"),
    ("import time\ntime.sleep(100)", "timeout"),
    ("while True:\n    pass", "timeout"),
]


@pytest.mark.slow
async def test_soak_5000_calls_5pct_hostile(make_cfg):
    rng = random.Random(0)
    n = 5000
    plan = []
    for i in range(n):
        if rng.random() < 0.05:
            code, want = rng.choice(HOSTILE)
            plan.append((ToolCall(code, timeout_s=0.3), want, None))
        elif i % 3 == 0:
            plan.append((ToolCall(f"print({i} * {i})"), "ok", f"{i * i}\n"))
        elif i % 3 == 1:
            plan.append((ToolCall(f"x = {i}\nx + 1"), "ok", str(i + 1)))
        else:
            plan.append((ToolCall("print(int(input()) * 2)", input=f"{i}\n"), "ok", f"{2 * i}\n"))
    cfg = make_cfg(num_workers=2, batch_size=64, send_workers=8, max_procs=16)
    t0 = time.monotonic()
    async with SandboxPool(cfg) as pool:
        async def agent(chunk):  # many concurrent coroutines, as in an agent loop
            return [await pool.run(c) for c, _, _ in chunk]

        chunks = [plan[k::50] for k in range(50)]
        outs = await asyncio.wait_for(asyncio.gather(*(agent(c) for c in chunks)), 600)
        results = [None] * n
        for k, out in enumerate(outs):
            results[k::50] = out
        stats = pool.stats()
    wall = time.monotonic() - t0
    assert all(r is not None for r in results)  # none lost
    wrong = [(c.code[:40], want, r.status) for (c, want, exp), r in zip(plan, results, strict=True)
             if r.status not in ((want,) if isinstance(want, str) else want) or (exp is not None and r.output != exp)]
    assert not wrong, wrong[:10]
    counts = collections.Counter(r.status for r in results)
    assert set(counts) <= set(STATUSES) and counts["infra_error"] == 0
    print(f"\nsoak: {n} calls in {wall:.1f}s, {stats.get('recycled', 0)} recycles, "
          f"{stats.get('worker_deaths', 0)} worker deaths")
    print("soak counts per status: " + ", ".join(f"{s}={counts.get(s, 0)}" for s in STATUSES))
