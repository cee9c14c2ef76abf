"""The Agent-R claim kind (kit/studies/agent_r/kinds.py, registered by its study record) on hand-written
policy_eval rows."""

import json

from kit.claims import RunDirs, results
from kit.claims.kinds import all_kinds


def _rows(policy, iteration, recover_p, n_problems=30, samples=4):
    out = []
    for p in range(n_problems):
        for s in range(samples):
            fail = int(s % 2 == 0)
            ok = int((p * samples + s) % 100 < recover_p * 100) if fail else 1
            out.append({"policy": policy, "iteration": iteration, "problem": f"p{p}", "correct": ok,
                        "failed_call": fail, "reflection": 2 * ok, "high": 10})
    return out


def _run(tmp_path, rows, spec):
    d = tmp_path / "agent_r"
    d.mkdir(exist_ok=True)
    (d / "policy_eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"comparison": ">", "threshold": 0.0, **spec}
    res = results.TestResult("t", "agent_r_diff", "s", spec["comparison"], spec["threshold"])
    return all_kinds()["agent_r_diff"](RunDirs.under(tmp_path), spec, res)


def test_recovery_difference_and_last_iteration(tmp_path):
    rows = _rows("cold_start", 0, 0.1) + _rows("agent_r", 1, 0.3) + _rows("agent_r", 3, 0.9)
    res = _run(tmp_path, rows, {"measure": "recovery", "minuend": "agent_r_last", "subtrahend": "cold_start",
                                "min_problems": 20, "min_units": 30})
    assert res.verdict == "reproduced", res.reason
    assert abs(res.value - (res.detail["agent_r_last"]["ratio"] - res.detail["cold_start"]["ratio"])) < 1e-9
    assert res.detail["agent_r_last"]["ratio"] > 0.8  # iteration 3, not iteration 1
    first = _run(tmp_path, rows, {"measure": "recovery", "minuend": "agent_r_first", "subtrahend": "cold_start"})
    assert first.value < res.value


def test_below_minimum_is_missing(tmp_path):
    import pytest

    from kit.claims.files import Missing
    rows = _rows("cold_start", 0, 0.1, n_problems=3) + _rows("agent_r", 1, 0.9, n_problems=3)
    with pytest.raises(Missing, match="problems"):
        _run(tmp_path, rows, {"measure": "accuracy", "minuend": "agent_r_last", "subtrahend": "cold_start",
                              "min_problems": 20})


def test_a_baseline_arm_means_its_last_iteration(tmp_path):
    rows = (_rows("agent_r", 3, 0.6) + _rows("direct", 1, 0.9) + _rows("direct", 3, 0.2)
            + _rows("good_only", 3, 0.9))
    res = _run(tmp_path, rows, {"measure": "recovery", "minuend": "agent_r_last", "subtrahend": "direct",
                                "min_problems": 20, "min_units": 30})
    early = _run(tmp_path, [r for r in rows if (r["policy"], r["iteration"]) != ("direct", 3)],
                 {"measure": "recovery", "minuend": "agent_r_last", "subtrahend": "direct"})
    assert res.detail["direct"]["ratio"] < early.detail["direct"]["ratio"]  # direct's iteration 3, not 1
    assert res.verdict == "reproduced", res.reason


def test_the_registered_timely_claim_reads_the_probes_and_can_fail(tmp_path):
    from kit.claims import load_claims

    spec = next(c for c in load_claims() if c["id"] == "agentr_timely_above_direct")["tests"][0]
    d = tmp_path / "agent_r"
    d.mkdir()

    def probes(agent_r_p, direct_p):
        rows = []
        for policy, p in (("agent_r", agent_r_p), ("direct", direct_p)):
            rows += [{"policy": policy, "iteration": 3, "problem": f"p{i}", "correct": int((i * 4 + s) % 10 < p * 10)}
                     for i in range(40) for s in range(4)]
        (d / "probe_eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        res = results.TestResult("t", spec["kind"], spec["statistic"], spec["comparison"], spec["threshold"])
        return all_kinds()[spec["kind"]](RunDirs.under(tmp_path), spec, res)

    assert probes(0.8, 0.2).verdict == "reproduced"
    assert probes(0.2, 0.8).verdict == "not reproduced"  # the wrong side
