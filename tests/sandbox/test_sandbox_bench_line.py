"""benchmarks/sandbox_bench.py ends with one line of ``name=<x>`` tokens (DEVELOPERS.md), the
three of issue #18 first; the absolute calls/s beside them are tokens too. The line used to end
in a parenthesis of prose ("(kit 93.5 calls/s, bare fork ...)") that a key=value reader chokes on."""

import asyncio
import math

import pytest
from doubles import load_benchmark

from kit.sandbox import isolation


def _bench():
    return load_benchmark("sandbox_bench")


def _tokens(line: str) -> dict[str, float]:
    out = {}
    for tok in line.split():
        key, sep, val = tok.partition("=")
        assert sep and key and val, f"not a name=<x> token: {tok!r} in {line!r}"
        out[key] = float(val)
    return out


def test_last_line_is_name_value_tokens_with_the_three_targets_first():
    line = _bench().summary_line({"kit": 93.5, "bare": 75.9}, {"kit": 0.0120, "bare": 0.0146}, 4.0)
    toks = _tokens(line)
    assert list(toks)[:3] == ["speedup", "over_bare_fork", "throughput_vs_bare"]
    assert toks["speedup"] == pytest.approx(93.5 / 4.0, abs=0.05)
    assert toks["over_bare_fork"] == pytest.approx(0.0120 / 0.0146, abs=0.005)
    assert toks["throughput_vs_bare"] == pytest.approx(93.5 / 75.9, abs=0.005)
    assert toks["kit_calls_s"] == 93.5 and toks["bare_calls_s"] == 75.9 and toks["released_calls_s"] == 4.0


def test_without_the_released_run_speedup_is_nan_but_the_line_still_parses():
    toks = _tokens(_bench().summary_line({"kit": 90.0, "bare": 80.0}, {"kit": 0.01, "bare": 0.01}, float("nan")))
    assert math.isnan(toks["speedup"]) and toks["throughput_vs_bare"] == pytest.approx(1.125, abs=0.005)


def test_the_preimport_comparison_runs_the_same_calls_through_both_pools():
    """``--preimport-ab``: every trivial call runs once per pool, and each side's CPU is counted."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed (make setup installs it)")
    b = _bench()
    work = [w for w in b.snippets(20, 0) if w[0] in b.TRIVIAL]
    got = asyncio.run(b.preimport_ab(work, 2, 4))
    assert set(got) == {"default", "none"}
    for cpu, n, ok in got.values():
        assert n == ok == len(work) == 12 and cpu > 0
