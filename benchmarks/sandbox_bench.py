"""Released design vs the kit's pool on the same 1,000 mixed snippets (issue #3, report §3.1).

(a) released: code-judge's executor, one fresh ``python3`` subprocess per call (new session,
    temp dir, RLIMIT_AS/CPU/CORE, OPENBLAS_NUM_THREADS=1), as many concurrent as cores.
(b) kit: ``SandboxPool`` with isolation on (bubblewrap), one warm worker per core.

Both run closed-loop with one client per core, so latency is a call's end-to-end time
without queueing behind other clients. Snippets, 1:1:1:1:1: sympy ``factorint``, a small numpy
matmul, plain integer arithmetic with print, a bare last expression, stdin reading.
"Trivial" = the last three. Prints calls/s, p50, p99 for both; last line ``speedup=<x>``
(b over a, calls/s). Target on 2 cores: speedup >= 20 and kit p99 of trivial <= 50 ms.

Usage: ``python benchmarks/sandbox_bench.py [--n 1000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kit.config import SandboxConfig
from kit.sandbox import SandboxPool, ToolCall
from kit.sandbox import runner as runner_mod

KINDS = ("sympy", "numpy", "arith", "expr", "stdin")
TRIVIAL = {"arith", "expr", "stdin"}


def snippets(n: int, seed: int) -> list[tuple[str, ToolCall]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        k = rng.randint(10**6, 10**12)
        if kind == "sympy":
            code = f"import sympy\nprint(sympy.factorint({k}))"
        elif kind == "numpy":
            code = f"import numpy as np\na = np.random.rand({rng.randint(10, 60)}, 30)\nprint(float((a @ a.T).trace()))"
        elif kind == "arith":
            code = f"a, b = {k}, {rng.randint(2, 10**6)}\nprint(a * b % 1000003, a // b)"
        elif kind == "expr":
            code = f"sum(i * i for i in range({rng.randint(10, 2000)}))"
        else:
            code = "n = int(input())\nprint(n * (n + 1) // 2)"
        out.append((kind, ToolCall(code, input=f"{rng.randint(1, 10**6)}\n")))
    rng.shuffle(out)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def released(work: list[tuple[str, ToolCall]], cfg: SandboxConfig, conc: int) -> tuple[float, list, list]:
    """code-judge style: fresh interpreter per call, rlimits in preexec, killpg afterwards."""
    script = Path(runner_mod.__file__)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENBLAS_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    mem = cfg.memory_mb << 20

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (int(cfg.cpu_s), int(cfg.cpu_s) + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def one(item: tuple[str, ToolCall]) -> tuple[str, float, bool]:
        kind, call = item
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "source.py"
            src.write_text(call.code)
            p = subprocess.Popen([sys.executable, str(script), str(src)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=d, env=env,
                                 start_new_session=True, preexec_fn=limits)
            try:
                p.communicate(call.input.encode(), timeout=cfg.timeout_s + 1)
            except subprocess.TimeoutExpired:
                pass
            finally:
                try:
                    os.killpg(p.pid, 9)
                except OSError:
                    pass
                p.wait()
        return kind, time.perf_counter() - t0, p.returncode == 0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(one, work))
    return time.perf_counter() - t0, res, []


async def kit_pool(work: list[tuple[str, ToolCall]], cfg: SandboxConfig, conc: int) -> tuple[float, list, dict]:
    async with SandboxPool(cfg) as pool:
        await pool.run_batch([ToolCall("1")] * (2 * conc))  # workers are warm before timing
        it = iter(work)
        res: list[tuple[str, float, bool]] = []

        async def client() -> None:
            for kind, call in it:
                t0 = time.perf_counter()
                r = await pool.run(call)
                res.append((kind, time.perf_counter() - t0, r.status == "ok"))

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(conc)))
        return time.perf_counter() - t0, res, pool.stats()


def report(name: str, wall: float, res: list) -> float:
    lat = [t for _, t, _ in res]
    triv = [t for k, t, _ in res if k in TRIVIAL]
    ok = sum(o for _, _, o in res)
    rate = len(res) / wall
    print(f"{name:9s} calls={len(res)} ok={ok} wall={wall:.1f}s calls/s={rate:.1f} "
          f"p50={1000 * pct(lat, .5):.1f}ms p99={1000 * pct(lat, .99):.1f}ms "
          f"trivial_p50={1000 * pct(triv, .5):.1f}ms trivial_p99={1000 * pct(triv, .99):.1f}ms")
    for kind in KINDS:
        ks = [t for k, t, _ in res if k == kind]
        print(f"{'':9s} {kind:6s} p50={1000 * pct(ks, .5):.1f}ms p99={1000 * pct(ks, .99):.1f}ms")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    conc = os.cpu_count() or 1
    cfg = SandboxConfig(isolation="bwrap", num_workers=conc)
    work = snippets(args.n, args.seed)
    print(f"machine: {conc} cores; {args.n} snippets; isolation={cfg.isolation}; concurrency={conc}")
    wall_a, res_a, _ = released(work, cfg, conc)
    rate_a = report("released", wall_a, res_a)
    wall_b, res_b, stats = asyncio.run(kit_pool(work, cfg, conc))
    rate_b = report("kit", wall_b, res_b)
    print(f"kit pool stats: {stats}")
    print(f"speedup={rate_b / rate_a:.1f}")


if __name__ == "__main__":
    main()
