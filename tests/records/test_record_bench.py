"""benchmarks/record_bench.py runs and ends with its ``name=record_bench`` line (two steps)."""

from __future__ import annotations

import re
import sys

from doubles import load_benchmark


def test_record_bench_prints_its_measurements(monkeypatch, capsys):
    bench = load_benchmark("record_bench")
    monkeypatch.setattr(sys, "argv", ["record_bench", "--steps", "2", "--prompts", "2", "--rollouts", "4"])
    bench.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r"name=record_bench record_ms_per_step=([\d.]+) overhead_pct=([\d.]+) bytes_per_traj=(\d+) "
                     r"bytes_per_traj_entropy=(\d+)", last)
    assert m, last
    assert 0 < int(m.group(3)) < int(m.group(4))  # entropy adds a float per token
