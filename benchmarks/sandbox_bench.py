"""Released design, the kit's pool and a bare warm fork on the same 1,000 mixed snippets
(issues #3 and #18, report §3.1).

(a) released: code-judge's executor, one fresh ``python3`` subprocess per call (new session,
    temp dir, RLIMIT_AS/CPU/CORE, OPENBLAS_NUM_THREADS=1), as many concurrent as cores.
(b) kit: ``SandboxPool`` with isolation on (bubblewrap), one warm worker per core.
(c) bare: the machine's limit, :class:`kit.sandbox.barefork.BareForkPool`: one warm parent per
    core with the worker's preloaded modules, a fork per call, output back through a pipe; no
    isolation, no limits, no cleanup.

All run closed-loop with one client per core, so latency is a call's end-to-end time
without queueing behind other clients. (b) and (c) run in alternating blocks of ``--block``
calls in the same minute, so a busy machine slows both alike. Snippets, 1:1:1:1:1: sympy
``factorint``, a small numpy matmul, plain integer arithmetic with print, a bare last
expression, stdin reading. "Trivial" = the last three. Prints calls/s, p50, p99 for each, the
kit call's per-phase breakdown (:mod:`kit.sandbox.timings`), and last
``speedup=<b/a calls/s> over_bare_fork=<b p50 / c p50> throughput_vs_bare=<b/c calls/s>
kit_calls_s=<b> bare_calls_s=<c> released_calls_s=<a>`` (``name=<x>`` tokens only). Targets on 2 cores: speedup >= 20, kit p99 of trivial <= 50 ms,
over_bare_fork <= 1.3, throughput_vs_bare >= 0.8.

``--preload-costs`` prints instead what each preloaded module costs a warm parent in resident
memory and in fork + exit + reap time (the price every call pays for a preload).

``--preimport-ab`` runs instead the trivial snippets through two pools in alternating blocks, one
with the default ``SandboxConfig.preimport`` (numpy, scipy, sympy) and one with ``preimport=()``
(the tiny profile's), and prints each one's CPU per call (host + workers + their children), last
``preimport_none_over_default=<x>`` (issue #16: the tiny run makes ~38,000 tool calls).

Usage: ``python benchmarks/sandbox_bench.py [--n 1000] [--seed 0] [--block 100] [--skip-released]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
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
from kit.sandbox.barefork import BareForkPool
from kit.sandbox.timings import OFF_PATH, PHASES, summarize
from kit.sandbox.worker import PREIMPORTS

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


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds used so far by the processes ``roots`` and all their live descendants,
    reaped children included (utime + stime + cutime + cstime from /proc, 10 ms ticks)."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, list(roots)
    seen = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += cpu.get(pid, 0.0)
        todo += [c for c, pp in parent.items() if pp == pid]
    return total


async def kit_and_bare(work: list[tuple[str, ToolCall]], cfg: SandboxConfig, conc: int, block: int,
                       bare_huge: bool = False) -> tuple[dict, dict, dict, dict, dict, list]:
    """Run ``work`` through the kit's pool and through bare forks (also bare forks on huge pages
    with ``bare_huge``), in rotating blocks of ``block`` calls.

    Returns ({side: wall s}, {side: [(kind, seconds, ok)]}, {side: CPU s of host + workers +
    children}, pool stats, kit stamps); wall and CPU are sums over each side's blocks.
    """
    async with contextlib.AsyncExitStack() as stack:
        pool = await stack.enter_async_context(SandboxPool(cfg))
        bares = {"bare": await stack.enter_async_context(BareForkPool(conc))}
        if bare_huge:
            bares["bare_huge"] = await stack.enter_async_context(BareForkPool(conc, huge=True))
        await pool.run_batch([ToolCall("1")] * (4 * conc))  # warm before timing
        for b in bares.values():
            await asyncio.gather(*(b.run("1") for _ in range(4 * conc)))
        sides = ["kit", *bares]
        res: dict[str, list] = {k: [] for k in sides}
        walls = dict.fromkeys(sides, 0.0)
        cpus = dict.fromkeys(sides, 0.0)
        roots = {"kit": [w.proc.pid for w in pool._executor.workers.values()],
                 **{k: [p.pid for p in b._procs] for k, b in bares.items()}}
        stamps: list = []

        async def client(side: str, it) -> None:
            for kind, call in it:
                t0 = time.perf_counter()
                if side == "kit":
                    r = await pool.run(call)
                    ok = r.status == "ok"
                    stamps.append(r.timings)
                else:
                    out, _ = await bares[side].run(call.code, call.input)
                    ok = "Traceback" not in out
                res[side].append((kind, time.perf_counter() - t0, ok))

        for b, start in enumerate(range(0, len(work), block)):
            for side in sides[b % len(sides):] + sides[:b % len(sides)]:
                it = iter(work[start:start + block])
                c0 = tree_cpu(roots[side]) + time.process_time()
                t0 = time.perf_counter()
                await asyncio.gather(*(client(side, it) for _ in range(conc)))
                walls[side] += time.perf_counter() - t0
                cpus[side] += tree_cpu(roots[side]) + time.process_time() - c0
        return walls, res, cpus, pool.stats(), stamps


async def preimport_ab(work: list[tuple[str, ToolCall]], conc: int, block: int) -> dict[str, tuple[float, int, int]]:
    """CPU per call with the default ``SandboxConfig.preimport`` and with none, same calls, blocks of
    ``block`` alternating (a busy machine slows both alike).

    Returns:
        ``{"default" | "none": (CPU s of host + workers + children, calls, calls ok)}``.
    """
    base = SandboxConfig(isolation="bwrap", num_workers=conc, recycle_after=10**6)  # no recycling: roots stay
    cfgs = {"default": base, "none": dataclasses.replace(base, preimport=())}
    out = {k: [0.0, 0, 0] for k in cfgs}
    async with contextlib.AsyncExitStack() as stack:
        pools = {k: await stack.enter_async_context(SandboxPool(c)) for k, c in cfgs.items()}
        for pool in pools.values():
            await pool.run_batch([ToolCall("1")] * (4 * conc))  # warm before timing
        sides = list(pools)
        for b, start in enumerate(range(0, len(work), block)):
            for side in sides[b % 2:] + sides[:b % 2]:
                roots = [w.proc.pid for w in pools[side]._executor.workers.values()]
                c0 = tree_cpu(roots) + time.process_time()
                rs = await pools[side].run_batch([call for _, call in work[start:start + block]])
                out[side][0] += tree_cpu(roots) + time.process_time() - c0
                out[side][1] += len(rs)
                out[side][2] += sum(r.status == "ok" for r in rs)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def breakdown(stamps: list) -> None:
    """Print the kit call's per-phase p50 and mean (ms); see kit.sandbox.timings.PHASES."""
    summ = summarize(stamps)
    usable = sum(1 for _ in filter(None, stamps))
    if not summ:
        print("kit phases: no timings in the replies (a kit without phase stamps)")
        return
    print(f"kit phases over {usable} calls (p50 / mean ms; the means add up to the mean latency):")
    for key in (*PHASES, "total"):
        p50, mean = summ.get(key, (float("nan"), float("nan")))
        print(f"  {key:10s} p50={p50:7.2f} mean={mean:7.2f}")
    for key in OFF_PATH:
        if key in summ:
            print(f"  {key:10s} p50={summ[key][0]:7.2f} mean={summ[key][1]:7.2f}  (between calls, off the critical path)")


def preload_costs() -> None:
    """Resident memory and fork + exit + reap time of a warm parent, one preload added at a time,
    with its heap on 4 KiB pages and then collapsed onto huge pages (what a worker does)."""
    from kit.sandbox import hugepages

    probe = (
        "import gc, importlib, os, sys, time\n"
        "import importlib.util as iu\n"  # the module alone: importing the kit package adds ~11 MB
        f"spec = iu.spec_from_file_location('hp', {str(Path(hugepages.__file__).resolve())!r})\n"
        "hp = iu.module_from_spec(spec); spec.loader.exec_module(hp); collapse_heap = hp.collapse_heap\n"
        "for m in sys.argv[1:]: importlib.import_module(m)\n"
        "gc.collect(); gc.freeze()\n"
        "def p50():\n"
        "    ts = []\n"
        "    for _ in range(300):\n"
        "        t = time.monotonic(); pid = os.fork()\n"
        "        if pid == 0: os._exit(0)\n"
        "        os.waitpid(pid, 0); ts.append(time.monotonic() - t)\n"
        "    return 1000 * sorted(ts)[len(ts) // 2]\n"
        "rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20\n"
        "plain = p50(); collapse_heap()\n"
        "print(f'{rss:.1f} {plain:.2f} {p50():.2f}')\n")
    env = {"OPENBLAS_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    print(f"{'preloads so far':22s} {'rss MB':>7s} {'fork+exit ms':>12s} {'added MB':>8s} {'added ms':>8s} "
          f"{'huge pages ms':>13s}")
    prev = None
    for i in range(len(PREIMPORTS) + 1):
        mods = list(PREIMPORTS[:i])
        out = subprocess.run([sys.executable, "-I", "-c", probe, *mods], capture_output=True, text=True,
                             env=env, check=True).stdout.split()
        rss, ms, huge = float(out[0]), float(out[1]), float(out[2])
        added = f"{'':8s} {'':8s}" if prev is None else f"{rss - prev[0]:8.1f} {ms - prev[1]:8.2f}"
        print(f"{(mods[-1] if mods else '(python only)'):22s} {rss:7.1f} {ms:12.2f} {added} {huge:13.2f}")
        prev = (rss, ms)


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
    ap.add_argument("--block", type=int, default=100, help="calls per alternating kit/bare block")
    ap.add_argument("--skip-released", action="store_true", help="no released-design run (speedup=nan)")
    ap.add_argument("--preload-costs", action="store_true", help="only print what each preload costs")
    ap.add_argument("--preimport-ab", action="store_true",
                    help="only compare CPU per call with the default preimport and with none (trivial calls)")
    ap.add_argument("--bare-huge", action="store_true",
                    help="also run bare forks whose heap is on huge pages, as the kit's workers' is")
    args = ap.parse_args()
    if args.preload_costs:
        preload_costs()
        return
    conc = os.cpu_count() or 1
    if args.preimport_ab:
        trivial = [w for w in snippets(args.n * len(KINDS) // len(TRIVIAL) + len(KINDS), args.seed) if w[0] in TRIVIAL][:args.n]
        got = asyncio.run(preimport_ab(trivial, conc, args.block))
        for side, (cpu, n, ok) in got.items():
            print(f"preimport {side:8s} calls={n} ok={ok} CPU per call {1000 * cpu / n:.2f} ms")
        per = {side: cpu / n for side, (cpu, n, _) in got.items()}
        print(f"load average {os.getloadavg()[0]:.1f}")
        print(f"preimport_none_over_default={per['none'] / per['default']:.2f} "
              f"none_cpu_ms={1000 * per['none']:.2f} default_cpu_ms={1000 * per['default']:.2f}")
        return
    cfg = SandboxConfig(isolation="bwrap", num_workers=conc)
    work = snippets(args.n, args.seed)
    print(f"machine: {conc} cores; {args.n} snippets; isolation={cfg.isolation}; concurrency={conc}; "
          f"load average {os.getloadavg()[0]:.1f}")
    rate_a = float("nan")
    if not args.skip_released:
        wall_a, res_a, _ = released(work, cfg, conc)
        rate_a = report("released", wall_a, res_a)
    walls, res, cpus, stats, stamps = asyncio.run(kit_and_bare(work, cfg, conc, args.block, args.bare_huge))
    rate = {side: report(side, walls[side], res[side]) for side in res}
    print("CPU per call (host + workers + children, load-independent): " + ", ".join(
        f"{side} {1000 * cpus[side] / len(res[side]):.2f} ms" for side in res))
    print(f"kit pool stats: {stats}")
    breakdown(stamps)
    p50 = {side: pct([t for _, t, _ in r], .5) for side, r in res.items()}
    rate_b, p50_b, p50_c = rate["kit"], p50["kit"], p50["bare"]
    if "bare_huge" in res:
        print(f"against bare forks on huge pages too: over_bare_huge={p50_b / p50['bare_huge']:.2f} "
              f"throughput_vs_bare_huge={rate_b / rate['bare_huge']:.2f} ({rate['bare_huge']:.1f} calls/s, "
              f"p50 {1000 * p50['bare_huge']:.1f} ms)")
    print(f"load average {os.getloadavg()[0]:.1f}; p50 kit {1000 * p50_b:.1f} ms, bare fork {1000 * p50_c:.1f} ms")
    print(summary_line(rate, p50, rate_a))


def summary_line(rate: dict[str, float], p50: dict[str, float], released_rate: float) -> str:
    """The last line: ``name=<x>`` tokens only (DEVELOPERS.md), issue #18's three first, then
    the absolute calls/s beside them.

    Args:
        rate: calls/s of ``"kit"`` and ``"bare"``; ``p50``: their p50 latency (s);
        released_rate: calls/s of the released design (nan with ``--skip-released``).
    """
    kit, bare = rate["kit"], rate["bare"]
    return (f"speedup={kit / released_rate:.1f} over_bare_fork={p50['kit'] / p50['bare']:.2f} "
            f"throughput_vs_bare={kit / bare:.2f} kit_calls_s={kit:.1f} bare_calls_s={bare:.1f} "
            f"released_calls_s={released_rate:.1f}")


if __name__ == "__main__":
    main()
