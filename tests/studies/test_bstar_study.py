"""Issue #47: B-STaR's loop pieces on hand-built pools (vote share, balance, sweep, choice, selection), the claims'
kind on a synthetic eval file, the config checks, and the paper profile's dry run."""

import json
import math

import pytest

from kit import claims, studies
from kit.bridge import study_runs
from kit.claims.files import Missing, RunDirs
from kit.claims.results import TestResult as Result  # not collected as a test class
from kit.config import ConfigError, load
from kit.studies.bstar import ARMS, kinds, loop


def test_vote_share_is_the_share_of_samples_with_the_same_answer():
    assert loop.vote_shares(["3", " 3", "4", None]) == [0.5, 0.5, 0.25, 0.0]
    assert loop.vote_shares([]) == []


def _pools():
    # q1: 4 samples, answers 7,7,7,9 (7 correct); texts a,b,a,c: the two "a" are one sample after dedup
    q1 = loop.make_pool("q1", ["a", "b", "a", "c"], ["7", "7", "7", "9"], [True, True, True, False])
    # q2: the majority is wrong: 5,5,5 wrong, 6 right
    q2 = loop.make_pool("q2", ["x", "y", "z", "w"], ["5", "5", "5", "6"], [False, False, False, True])
    return [q1, q2]


def test_pool_stats_by_hand():
    q1, q2 = _pools()
    assert q1.scores == (0.75, 0.75, 0.75, 0.25) and q2.scores == (0.75, 0.75, 0.75, 0.25)
    # threshold 0.5: q1 keeps a, b (the second "a" is a duplicate): c=2 of s=2 -> min(2/8, 1) * 1 = 0.25;
    # q2 keeps x, y, z: c=0 of 3 -> 0. Mean 0.125; precision 2/5; 5 kept over 2 queries
    st = loop.pool_stats([q1, q2], 0.5, n_star=8)
    assert st["balance"] == pytest.approx(0.125) and st["precision"] == pytest.approx(2 / 5)
    assert st["selected"] == pytest.approx(2.5) and st["accuracy"] == pytest.approx(4 / 8)
    assert st["pass_at_n"] == 1.0 and st["distinct_correct"] == pytest.approx((2 + 1) / 2)
    # threshold 0.0: q1 keeps a, b, c (c wrong): 2 of 3 -> 0.25 * 2/3; q2 keeps all 4: 1 of 4 -> 1/8 * 1/4
    assert loop.balance([q1, q2], 0.0, 8) == pytest.approx((0.25 * 2 / 3 + 1 / 32) / 2)
    # nothing above 0.75: no query selects, the balance is undefined and the precision too
    st = loop.pool_stats([q1, q2], 0.75, 8)
    assert math.isnan(st["balance"]) and math.isnan(st["precision"]) and st["selected"] == 0


def test_selection_is_what_the_balance_score_counts():
    q1, q2 = _pools()
    assert [(p.problem, i) for p, i in loop.selection([q1, q2], 0.5)] == [("q1", 0), ("q1", 1), ("q2", 0), ("q2", 1),
                                                                         ("q2", 2)]


def test_sweep_and_choose_take_the_best_pair_with_a_stated_tie_rule():
    q1, q2 = _pools()
    hot = [loop.make_pool("q1", ["a", "b", "c", "d"], ["7", "7", "7", "7"], [True] * 4)]
    rows = loop.sweep({0.6: [q1, q2], 1.2: hot}, [0.0, 0.5], n_star=4)
    assert [(r["temperature"], r["threshold"]) for r in rows] == [(0.6, 0.0), (0.6, 0.5), (1.2, 0.0), (1.2, 0.5)]
    best = loop.choose(rows)
    assert (best["temperature"], best["balance"]) == (1.2, 1.0) and best["threshold"] == 0.0  # tie at 1.0: lower threshold
    # a tie across temperatures goes to the lower one; rows with no balance never win; none at all: None
    tie = [{"temperature": 1.0, "threshold": 0.5, "balance": 0.3}, {"temperature": 0.8, "threshold": 0.5, "balance": 0.3},
           {"temperature": 0.6, "threshold": 0.0, "balance": math.nan}]
    assert loop.choose(tie)["temperature"] == 0.8
    assert loop.choose([{"temperature": 1.0, "threshold": 0.5, "balance": math.nan}]) is None
    assert loop.choose([{"temperature": 1.0, "threshold": 0.5, "balance": None}]) is None  # as read from sweep.jsonl


def _eval_file(tmp_path, rows):
    d = tmp_path / "bstar"
    d.mkdir()
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return RunDirs.under(tmp_path)  # root/bstar is the study's folder


def _res():
    return Result(name="t", kind="bstar_diff", statistic="", comparison=">", threshold=0.0)


def test_the_kind_compares_two_policies_paired_over_tasks(tmp_path):
    rows = []
    for i in range(30):
        rows.append({"policy": "cold_start", "iteration": 0, "problem": f"p{i}", "samples": 4, "correct": 1,
                     "pass_at_k": 1, "distinct_correct": 1})
        for arm, correct in (("bstar", 3), ("fixed", 2)):
            for k in (1, 2):
                rows.append({"policy": arm, "iteration": k, "problem": f"p{i}", "samples": 4, "correct": correct - (k == 1),
                             "pass_at_k": 1, "distinct_correct": correct})
    dirs = _eval_file(tmp_path, rows)
    spec = {"kind": "bstar_diff", "measure": "accuracy", "minuend": "bstar_last", "subtrahend": "fixed_last",
            "comparison": ">", "threshold": -0.05, "min_problems": 20, "min_units": 80}
    res = kinds.stat_bstar_diff(dirs, spec, _res())
    assert res.value == pytest.approx(0.25) and res.n == 30 and res.verdict == "reproduced"
    first = kinds.stat_bstar_diff(dirs, {**spec, "measure": "distinct_correct", "minuend": "cold_start",
                                         "subtrahend": "fixed_last", "threshold": 0.0, "min_units": 20},
                                  _res())
    assert first.value == pytest.approx(-1.0) and first.verdict == "not reproduced"
    assert kinds.policy_rows(rows, "fixed_first")[0]["iteration"] == 1
    with pytest.raises(Missing, match="unknown policy label"):
        kinds.policy_rows(rows, "agent_r_last")
    with pytest.raises(Missing, match="needs at least 40"):
        kinds.stat_bstar_diff(dirs, {**spec, "min_problems": 40}, _res())


def test_the_study_is_registered_with_its_kind_and_arms():
    assert studies.BSTAR in studies.STUDIES and studies.BSTAR.paired_kinds == ("bstar_diff",)
    assert "bstar_diff" in claims.kinds.all_kinds()
    assert ARMS == studies.BSTAR.arms == ("bstar", "fixed")  # one record: the bridge's dry run reads it too


@pytest.mark.parametrize("bad, key", [({"bstar.thresholds": [0.5, 1.0]}, "bstar.thresholds"),
                                      ({"bstar.temperatures": [1.0, 1.0]}, "bstar.temperatures"),
                                      ({"bstar.samples": 0}, "bstar.samples"),
                                      ({"bstar.fixed_threshold": 1.0}, "bstar.fixed_threshold"),
                                      ({"bstar.lr": -1.0}, "bstar.lr")])
def test_bad_bstar_values_are_named(bad, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load("tiny", bad, write=False)


def test_the_paper_dry_run_samples_through_a_server_and_fine_tunes_with_verl(tmp_path):
    from kit.bridge.stages import Cluster

    cfg = load("paper-14b", {}, write=False)
    lines = study_runs.bstar_dry_run(cfg, tmp_path / "bstar", {"sft": str(tmp_path / "sft")}, Cluster())
    text = "\n".join(lines)
    assert "sglang.launch_server" in text and "OpenAIBackend" in text
    for arm in ARMS:
        line = next(x for x in lines if x.strip().startswith(f"{arm}: $"))
        assert "verl.trainer.sft_trainer" in line and "TokenSFTDataset" in line
        assert f"optim.lr={cfg.bstar.lr or cfg.sft.lr!r}" in line  # the [bstar] recipe, 0 = sft.lr
