"""``python -m kit selftest``: isolation, limits, semantics, throughput; PASS/FAIL each.

Exit status 0 when every check passes. Takes about 15 s on 2 cores.

The latency check is relative (issue #18): the same trivial calls also go through a bare warm
fork (:class:`kit.sandbox.barefork.BareForkPool`, no isolation), in alternating blocks in the
same seconds, and the pool's p50 and p99 must stay within :data:`P50_OVER_BARE` and
:data:`P99_OVER_BARE` times the bare fork's. A fixed 50 ms p99 failed on a slow or busy
machine even when the sandbox added nothing, and passed a regression on a fast one. The
throughput check is relative the same way: the pool's calls/s over its blocks must reach
:data:`THROUGHPUT_VS_BARE` of the bare fork's over its own (a fixed 50 calls/s failed with six
CPU hogs beside it, at 42-46 calls/s, while the latency ratios were 0.8 and 1.1).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from kit.config import SandboxConfig
from kit.sandbox import isolation
from kit.sandbox.barefork import BareForkPool
from kit.sandbox.pool import SandboxPool
from kit.sandbox.types import ToolCall, ToolResult

CANARY = "KIT_SELFTEST_CANARY"
P50_OVER_BARE = 1.5  # the pool's p50 latency over a bare fork's, measured in the same seconds
P99_OVER_BARE = 3.0  # the same for p99 (tails are noisier on a shared machine)
THROUGHPUT_VS_BARE = 1 / P50_OVER_BARE  # the pool's calls/s over a bare fork's, same blocks
BLOCK = 50  # calls per alternating pool / bare-fork block


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
        # limits are used time, not wall time (kit.sandbox.limits; issue #41): on a loaded machine a 1 s call
        # takes longer, so these check the outcome and stay under the wall-clock backstop (4 x 1 s, at least +5 s)
        ("wall-clock timeout (sleep)", ToolCall("import time\ntime.sleep(60)", timeout_s=1.0),
         lambda r: r.status == "timeout" and r.wall_s < 6.5),
        ("timeout (busy loop)", ToolCall("while True:\n    pass", timeout_s=1.0),
         lambda r: r.status == "timeout" and r.cpu_s < 2.0 and r.wall_s < 6.5),
        ("memory limit", ToolCall("x = bytearray(1 << 40)"), st("memory_limit")),
        ("output cap", ToolCall("while True:\n    print('spam' * 100)"),
         lambda r: r.status == "output_limit" and r.truncated and "truncated" in r.stdout),
        ("grandchild holding the pipe", ToolCall("import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('done')"),
         lambda r: r.status == "ok" and r.wall_s < 10.0),  # did not wait for the 60 s grandchild
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
        t0 = time.perf_counter()
        m = await measure(pool, n, pool.stats()["workers"])
        ok, detail = throughput_verdict(n / m.kit_wall, n / m.bare_wall)
        line(all(r.status == "ok" for r in m.results) and ok, "throughput",
             f"{detail} over {n} trivial calls each ({time.perf_counter() - t0:.1f}s in all)")
        lat, bare_lat = m.lat, m.bare_lat
        ok, detail = latency_verdict(lat, bare_lat)
        line(ok, "latency", detail)
        st = pool.stats()
        line(st.get("worker_deaths", 0) == 0 and st["alive"] >= 1, "pool healthy", str(st))
    return ok_all


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Measured(NamedTuple):
    """What :func:`measure` saw: latencies (s) of the pool's and the bare fork's calls, the
    pool's results, and the seconds each side's blocks took in all."""

    lat: list[float]
    bare_lat: list[float]
    results: list[ToolResult]
    kit_wall: float
    bare_wall: float


async def measure_latency(pool: SandboxPool, n: int,
                          conc: int) -> tuple[list[float], list[float], list[ToolResult], float]:
    """(pool latencies, bare-fork latencies, the pool's results, seconds the pool's blocks
    took in all) of :func:`measure`."""
    m = await measure(pool, n, conc)
    return m.lat, m.bare_lat, m.results, m.kit_wall


async def measure(pool: SandboxPool, n: int, conc: int) -> Measured:
    """Latency (s) of ``n`` trivial calls through ``pool`` and through a bare warm fork, each with
    ``conc`` closed-loop clients, in alternating blocks of :data:`BLOCK` calls."""
    codes = [f"sum(i * i for i in range({i % 100}))" for i in range(n)]
    lat: list[float] = []
    bare_lat: list[float] = []
    rs: list[ToolResult] = []
    kit_wall = bare_wall = 0.0
    async with BareForkPool(conc, preload=(*pool.cfg.preimport, *pool.preload)) as bare:
        await asyncio.gather(*(bare.run("1") for _ in range(2 * conc)))

        async def kit_client(it) -> None:
            for c in it:
                t = time.perf_counter()
                rs.append(await pool.run(ToolCall(c)))
                lat.append(time.perf_counter() - t)

        async def bare_client(it) -> None:
            for c in it:
                t = time.perf_counter()
                await bare.run(c)
                bare_lat.append(time.perf_counter() - t)

        for k in range(0, n, BLOCK):
            for client in (kit_client, bare_client) if k // BLOCK % 2 == 0 else (bare_client, kit_client):
                it = iter(codes[k:k + BLOCK])
                t0 = time.perf_counter()
                await asyncio.gather(*(client(it) for _ in range(max(1, conc))))
                if client is kit_client:
                    kit_wall += time.perf_counter() - t0
                else:
                    bare_wall += time.perf_counter() - t0
    return Measured(lat, bare_lat, rs, kit_wall, bare_wall)


def throughput_verdict(rate: float, bare_rate: float) -> tuple[bool, str]:
    """Pass when the pool's calls/s reach :data:`THROUGHPUT_VS_BARE` of a bare fork's, both
    measured in alternating blocks in the same seconds (calls/s of closed-loop clients).

    Returns (passed, a one-line detail with both rates and their ratio).
    Raises:
        ValueError: a rate is not a positive number.
    """
    if not (rate > 0 and bare_rate > 0):
        raise ValueError(f"throughput_verdict needs positive rates, got {rate!r} and {bare_rate!r}")
    return rate >= THROUGHPUT_VS_BARE * bare_rate, (
        f"{rate:.0f} calls/s; bare fork {bare_rate:.0f} calls/s; ratio {rate / bare_rate:.2f} "
        f"(target >= {THROUGHPUT_VS_BARE:.2f})")


def latency_verdict(lat: list[float], bare_lat: list[float]) -> tuple[bool, str]:
    """Pass when the pool's p50 <= :data:`P50_OVER_BARE` x and p99 <= :data:`P99_OVER_BARE` x
    the bare fork's (latencies in seconds, measured side by side).

    Returns (passed, a one-line detail with both percentiles in ms and the ratios).
    Raises:
        ValueError: either list is empty.
    """
    if not lat or not bare_lat:
        raise ValueError("latency_verdict needs latencies of both the pool and the bare fork")
    p50, p99 = _pct(lat, 0.5), _pct(lat, 0.99)
    b50, b99 = _pct(bare_lat, 0.5), _pct(bare_lat, 0.99)
    ok = p50 <= P50_OVER_BARE * b50 and p99 <= P99_OVER_BARE * b99
    return ok, (f"p50={1000 * p50:.1f}ms p99={1000 * p99:.1f}ms; bare fork p50={1000 * b50:.1f}ms "
                f"p99={1000 * b99:.1f}ms; ratios {p50 / b50:.2f} (target <= {P50_OVER_BARE}) and "
                f"{p99 / b99:.2f} (target <= {P99_OVER_BARE})")


def main(cfg: SandboxConfig | None = None) -> int:
    """Run every check with ``cfg`` (``python -m kit selftest``; default :class:`SandboxConfig`;
    ``num_workers = 0``: one per core; call timeouts capped at 5 s), print PASS/FAIL per check and
    overall; returns 0 when all pass, else 1."""
    cfg = cfg or SandboxConfig()
    cfg = replace(cfg, num_workers=cfg.num_workers or (os.cpu_count() or 1), timeout_s=min(cfg.timeout_s, 5.0))
    os.environ[CANARY] = "secret"
    ok = asyncio.run(_run(cfg))
    print("selftest: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1
