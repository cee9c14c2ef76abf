"""``python -m kit.sandbox selftest``: isolation, limits, semantics, throughput; PASS/FAIL each.

Exit status 0 when every check passes. Takes about 10 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import replace

from kit.config import SandboxConfig
from kit.sandbox import isolation
from kit.sandbox.pool import SandboxPool
from kit.sandbox.types import ToolCall, ToolResult

CANARY = "KIT_SELFTEST_CANARY"


def _checks() -> list[tuple[str, ToolCall, Callable[[ToolResult], bool]]]:
    st = lambda s: (lambda r: r.status == s)  # noqa: E731
    return [
        ("network blocked", ToolCall("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)"),
         lambda r: r.status == "error" and ("unreachable" in r.stderr.lower() or "OSError" in r.stderr)),
        ("root file system read-only", ToolCall("open('/etc/kit_selftest', 'w')"), st("error")),
        ("private /tmp writable", ToolCall("open('/tmp/x', 'w').write('hi')"), lambda r: r.status == "ok" and r.value == "2"),
        ("host home and secrets hidden", ToolCall("import os\nprint(os.path.exists('/home'), os.access('/etc/shadow', os.R_OK))"),
         lambda r: r.stdout.strip() == "False False"),
        ("environment scrubbed", ToolCall(f"import os\nprint('{CANARY}' in os.environ, len(os.environ))"),
         lambda r: r.stdout.startswith("False")),
        ("PID namespace", ToolCall("import os\nlen([p for p in os.listdir('/proc') if p.isdigit()])"),
         lambda r: r.status == "ok" and int(r.value or 99) <= 4),
        ("process-count limit holds (fork bomb)", ToolCall("import os\nwhile True:\n    os.fork()"),
         lambda r: r.status in ("error", "timeout")),
        ("no processes left behind", ToolCall("import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit())"),
         lambda r: r.status == "ok" and len(eval(r.value or "[0]*9")) <= 3),
        ("cannot signal the worker", ToolCall("import os\nos.kill(os.getppid(), 9)"), st("error")),
        ("wall-clock timeout (sleep)", ToolCall("import time\ntime.sleep(60)", timeout_s=1.0),
         lambda r: r.status == "timeout" and r.wall_s < 2.5),
        ("timeout (busy loop)", ToolCall("while True:\n    pass", timeout_s=1.0),
         lambda r: r.status == "timeout" and r.wall_s < 2.5),
        ("memory limit", ToolCall("x = bytearray(1 << 40)"), st("memory_limit")),
        ("output cap", ToolCall("while True:\n    print('spam' * 100)"),
         lambda r: r.status == "output_limit" and r.truncated and "truncated" in r.stdout),
        ("grandchild holding the pipe", ToolCall("import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('done')"),
         lambda r: r.status == "ok" and r.wall_s < 1.0),
        ("last-expression value", ToolCall("x = 2\nx + 1"), lambda r: r.status == "ok" and r.value == "3"),
        ("traceback with line", ToolCall("a = 1\na / 0"),
         lambda r: r.status == "error" and "line 2" in r.stderr and "ZeroDivisionError" in r.stderr),
        ("stdin", ToolCall("print(int(input()) * 2)", input="21\n"), lambda r: r.stdout == "42\n"),
    ]


async def _run(cfg: SandboxConfig) -> bool:
    ok_all = True

    def line(ok: bool, name: str, detail: str) -> None:
        nonlocal ok_all
        ok_all &= ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)

    line(isolation.bwrap_path() is not None or cfg.isolation == "none", "bubblewrap available",
         isolation.bwrap_path() or "missing (install bubblewrap)")
    t0 = time.perf_counter()
    async with SandboxPool(cfg) as pool:
        line(True, "pool start", f"{pool.stats()['workers']} workers in {time.perf_counter() - t0:.2f}s")
        for name, call, good in _checks():
            r = await pool.run(call)
            detail = f"status={r.status} wall={r.wall_s:.3f}s " + repr((r.stdout or r.value or r.stderr)[-80:])
            line(bool(good(r)), name, detail)
        n = 400
        lat: list[float] = []

        async def one(i: int) -> ToolResult:
            t = time.perf_counter()
            r = await pool.run(ToolCall(f"sum(i * i for i in range({i % 100}))"))
            lat.append(time.perf_counter() - t)
            return r

        t0 = time.perf_counter()
        sem = asyncio.Semaphore(max(1, pool.stats()["workers"]))

        async def limited(i: int) -> ToolResult:
            async with sem:
                return await one(i)

        rs = await asyncio.gather(*(limited(i) for i in range(n)))
        wall = time.perf_counter() - t0
        lat.sort()
        p50, p99 = lat[len(lat) // 2] * 1000, lat[int(0.99 * len(lat))] * 1000
        line(all(r.status == "ok" for r in rs) and n / wall > 50, "throughput",
             f"{n / wall:.0f} calls/s over {n} trivial calls")
        line(p99 <= 50, "latency", f"p50={p50:.1f}ms p99={p99:.1f}ms (target p99 <= 50 ms)")
        st = pool.stats()
        line(st.get("worker_deaths", 0) == 0 and st["alive"] >= 1, "pool healthy", str(st))
    return ok_all


def main(cfg: SandboxConfig | None = None) -> int:
    cfg = cfg or SandboxConfig()
    cfg = replace(cfg, num_workers=cfg.num_workers or (os.cpu_count() or 1), timeout_s=min(cfg.timeout_s, 5.0))
    os.environ[CANARY] = "secret"
    ok = asyncio.run(_run(cfg))
    print("selftest: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1
