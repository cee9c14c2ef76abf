"""benchmarks/test_lanes.py reads each lane's marker expression from the Makefile (so the benchmark times the
lane `make` runs) and reports a lane from pytest's JUnit XML: here a throwaway test folder stands in for tests/."""

from __future__ import annotations

import subprocess

import pytest
from doubles import load_benchmark


@pytest.mark.slow  # a pytest subprocess (~10 s)
def test_the_lanes_are_the_makefile_s_and_a_lane_s_tests_are_read_with_their_outcomes(tmp_path, monkeypatch, capsys):
    bench = load_benchmark("test_lanes")
    assert bench.lane_marker("test-fast") == "not gpu and not slow and not verl_cpu and not browser"
    assert bench.lane_marker("test") == ""  # the configured default (pyproject: not gpu)
    (tmp_path / "test_probe.py").write_text("import pytest\n\ndef test_ok():\n    pass\n\n"
                                            "def test_bad():\n    assert False\n\n"
                                            "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    real = subprocess.run
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **kw: real([*cmd, "test_probe.py"], **kw))
    wall, rows = bench.run_lane("")
    assert wall > 0 and sorted((t.split("::")[-1], o) for t, _, o in rows) == [
        ("test_bad", "failed"), ("test_ok", "passed"), ("test_skipped", "skipped")]
    bench.report("lane", wall, rows, 2)
    assert "1 passed, 1 failed, 0 error, 1 skipped" in capsys.readouterr().out
