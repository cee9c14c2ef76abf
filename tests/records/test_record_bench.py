"""benchmarks/record_bench.py runs and ends with its ``name=record_bench`` line (one small real step, two synthetic)."""

from __future__ import annotations

import re
import sys

import pytest
from doubles import load_benchmark


def test_record_bench_prints_its_measurements(monkeypatch, capsys):
    bench = load_benchmark("record_bench")
    monkeypatch.setattr(sys, "argv", ["record_bench", "--steps", "2", "--prompts", "2", "--rollouts", "4", "--real-steps",
                                      "1", "--set", "algorithm.prompts_per_step=2", "--set",
                                      "stages.stage1.max_response_tokens=24", "--set", "sandbox.num_workers=1"])
    bench.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r"name=record_bench real_step_s=([\d.]+) real_record_ms=([\d.]+) real_overhead_pct=([\d.]+) "
                     r"real_bytes_per_traj=(\d+) record_ms_per_step=([\d.]+) bytes_per_traj=(\d+) "
                     r"bytes_per_traj_entropy=(\d+)", last)
    assert m, last
    step_s, record_ms, pct = (float(m.group(i)) for i in (1, 2, 3))
    assert step_s > 0 and record_ms > 0 and pct == pytest.approx(100 * record_ms / 1e3 / step_s, rel=0.05)  # printed rounded
    assert 0 < int(m.group(6)) < int(m.group(7)) and int(m.group(4)) > 0  # entropy adds a float per token
