"""The two test lanes, timed (issue #43): `make test-fast` (the inner loop, budget 5 minutes on 2 cores) and,
with ``--full``, `make test` (what CI runs, budget 30 minutes), each test's seconds from pytest's own JUnit XML.

Usage::

    .venv/bin/python benchmarks/test_lanes.py [--full] [--over 3] [--top 15]

Each lane runs as its Makefile target runs it (the marker expression is read from the Makefile, so the two
cannot drift), in a subprocess, with ``-p no:cacheprovider``. Printed per lane: wall seconds, tests passed,
failed and skipped, the slowest tests, and every test of the fast lane over ``--over`` seconds that is not
marked ``slow`` (a candidate for the mark: the inner loop keeps what is quick). The load average before and
after is printed beside the figures: a loaded machine inflates every second here, so compare runs only at
similar load, on the same machine type.

Last line: ``test_fast_s=<x> fast_tests=<n> fast_over=<k>`` and, with ``--full``, `` test_s=<y> tests=<m>``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lane_marker(target: str) -> str:
    """The ``-m`` expression of a Makefile target's pytest line ("" where the target passes none).

    Raises:
        ValueError: the Makefile has no such target with a pytest line.
    """
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    if not m or "pytest" not in m.group(1):
        raise ValueError(f"Makefile: no target {target!r} running pytest")
    args = shlex.split(next(ln for ln in m.group(1).splitlines() if "pytest" in ln).replace("$(", "_("))
    args = args[args.index("pytest") + 1:]  # pytest's own options (the first -m is python's)
    return args[args.index("-m") + 1] if "-m" in args else ""


def run_lane(marker: str) -> tuple[float, list[tuple[str, float, str]]]:
    """Run pytest on ``marker`` (the configured default where ""); ``(wall seconds, [(test id, seconds,
    outcome)])`` with outcome ``passed``, ``failed``, ``error`` or ``skipped``."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
               *(["-m", marker] if marker else [])]
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        rows = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            rows.append((f"{case.get('classname')}::{case.get('name')}", float(case.get("time", 0.0)),
                         {"failure": "failed"}.get(outcome, outcome)))
    return wall, rows


def report(name: str, wall: float, rows: list[tuple[str, float, str]], top: int) -> None:
    counts = {o: sum(r[2] == o for r in rows) for o in ("passed", "failed", "error", "skipped")}
    print(f"{name}: {wall:.0f} s wall, " + ", ".join(f"{n} {o}" for o, n in counts.items()))
    for tid, sec, _ in sorted(rows, key=lambda r: -r[1])[:top]:
        print(f"  {sec:7.2f} s  {tid}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="also time `make test` (about 30 minutes here)")
    ap.add_argument("--over", type=float, default=3.0, help="flag fast-lane tests over this many seconds")
    ap.add_argument("--top", type=int, default=15, help="how many of the slowest tests to print per lane")
    args = ap.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    fast_wall, fast = run_lane(lane_marker("test-fast"))
    report("make test-fast", fast_wall, fast, args.top)
    over = [(t, s) for t, s, o in fast if s > args.over and o != "skipped"]
    for tid, sec in sorted(over, key=lambda r: -r[1]):
        print(f"  over {args.over:g} s and not marked slow: {sec:.2f} s {tid}")
    last = f"test_fast_s={fast_wall:.0f} fast_tests={len(fast)} fast_over={len(over)}"
    full: list[tuple[str, float, str]] = []
    if args.full:
        full_wall, full = run_lane(lane_marker("test"))
        report("make test", full_wall, full, args.top)
        last += f" test_s={full_wall:.0f} tests={len(full)}"
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(last)
    failed = [t for t, _, o in fast + full if o in ("failed", "error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
