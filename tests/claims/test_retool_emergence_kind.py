"""ReTool's emergence kind (kit/studies/retool/kinds.py, registered by its study record) on hand-written
``retool/emergence/eval.jsonl`` rows: each measure on both sides of its threshold, the minimums, bad specs."""

import json

import pytest

from kit.claims import RunDirs, results
from kit.claims.files import Missing
from kit.claims.kinds import all_kinds


def _rows(policy, fix_p, position, n_problems=24, samples=8, fail_every=2):
    """Trajectories of ``policy``: every ``fail_every``-th has a failed call, ``fix_p`` of those are fixed (by a
    deterministic pattern), and every trajectory calls the tool at ``position`` (+0.01 per problem)."""
    out = []
    for p in range(n_problems):
        for s in range(samples):
            failed = int(s % fail_every == 0)
            fixed = int(failed and (p * samples + s) % 100 < fix_p * 100)
            out.append({"policy": policy, "seed": 0 if policy == "ppo" else -1, "problem": f"p{p}", "sample": s,
                        "correct": int(not failed or fixed), "calls": 1 + failed, "failed_calls": failed,
                        "failed_call": failed, "self_corrected": fixed, "first_call_position": position + 0.01 * (p % 3)})
    return out


def _judge(tmp_path, rows, **spec):
    d = tmp_path / "retool" / "emergence"
    d.mkdir(parents=True, exist_ok=True)
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"comparison": ">", "threshold": 0.0, "minuend": "ppo", "subtrahend": "cold_start", **spec}
    res = results.TestResult("t", "retool_emergence_diff", "s", spec["comparison"], spec["threshold"])
    return all_kinds()["retool_emergence_diff"](RunDirs.under(tmp_path), spec, res)


def test_self_correction_that_emerges_is_reproduced_and_one_that_does_not_is_not(tmp_path):
    up = _judge(tmp_path, _rows("cold_start", 0.0, 0.2) + _rows("ppo", 0.6, 0.2), measure="fix_after_failure",
                min_problems=16, min_units=20)
    assert up.verdict == "reproduced", up.reason
    assert up.detail["cold_start"]["ratio"] == 0.0 and up.detail["ppo"]["units"] == 24 * 4
    assert abs(up.value - (up.detail["ppo"]["ratio"] - up.detail["cold_start"]["ratio"])) < 1e-12
    down = _judge(tmp_path, _rows("cold_start", 0.6, 0.2) + _rows("ppo", 0.0, 0.2), measure="fix_after_failure")
    assert down.verdict == "not reproduced", down.reason


def test_first_call_position_earlier_and_later(tmp_path):
    earlier = _judge(tmp_path, _rows("cold_start", 0.0, 0.30) + _rows("ppo", 0.0, 0.10), measure="first_call_position",
                     comparison="<")
    assert earlier.verdict == "reproduced" and abs(earlier.value + 0.20) < 1e-9, earlier.reason
    later = _judge(tmp_path, _rows("cold_start", 0.0, 0.10) + _rows("ppo", 0.0, 0.30), measure="first_call_position",
                   comparison="<")
    assert later.verdict == "not reproduced", later.reason
    # trajectories without a call count for neither side's position
    rows = _rows("cold_start", 0.0, 0.30) + _rows("ppo", 0.0, 0.10)
    for r in rows[::2]:
        r["first_call_position"] = None
    half = _judge(tmp_path, rows, measure="first_call_position", comparison="<")
    assert half.detail["ppo"]["units"] == 24 * 8 / 2 and abs(half.value - earlier.value) < 0.02


def test_too_few_failures_or_problems_is_inconclusive_not_a_verdict(tmp_path):
    rows = _rows("cold_start", 0.0, 0.2) + _rows("ppo", 0.9, 0.2, fail_every=64)  # PPO fails once per problem: 24
    with pytest.raises(Missing, match="ppo: 24 trajectories with a failed call, the test needs at least 30"):
        _judge(tmp_path, rows, measure="fix_after_failure", min_units=30)
    with pytest.raises(Missing, match="problems"):
        _judge(tmp_path, _rows("cold_start", 0, 0.2, n_problems=4) + _rows("ppo", 0.5, 0.2, n_problems=4),
               measure="accuracy", min_problems=16)
    with pytest.raises(Missing, match="no rows of 'ppo'"):
        _judge(tmp_path, _rows("cold_start", 0, 0.2), measure="accuracy")


def test_a_claims_file_mistake_is_named(tmp_path):
    rows = _rows("cold_start", 0, 0.2) + _rows("ppo", 0.5, 0.2)
    with pytest.raises(KeyError, match="unknown measure 'recovery'"):
        _judge(tmp_path, rows, measure="recovery")
    with pytest.raises(KeyError, match="minuend 'agent_r'"):
        _judge(tmp_path, rows, measure="accuracy", minuend="agent_r")
