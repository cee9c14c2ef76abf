"""kit.claims.pool (issue #42): claims judged over pipeline seeds, against hand-computed cases."""

import json
import math

import numpy as np
import pytest

from kit import cli
from kit.claims import ClaimsError
from kit.claims.pool import (
    BOOTSTRAP_FROM,
    holm,
    interval_p,
    pool_claims,
    pool_runs,
    pooled_interval,
    probability_of_improvement,
    seeds_needed,
    write_pooled,
)


def _test(value, verdict="inconclusive", kind="ablation_drop", comparison=">", threshold=0.0, name="t0"):
    return {"name": name, "kind": kind, "comparison": comparison, "threshold": threshold, "value": value,
            "verdict": verdict, "reason": "r"}


def _claim(cid, tests, section="rStar2-Agent"):
    return {"id": cid, "source": "Figure 4 (x)", "claim": f"claim {cid}", "paper": "p", "verdict": "inconclusive",
            "value": tests[0]["value"], "ci95": [None, None], "interval": "", "note": "", "section": section,
            "tests": tests}


def _doc(claims, **extra):
    return {"schema_version": 3, "profile": "tiny", "counts": {}, "claims": claims, "environment": {},
            "repeatable": {"bitwise": True, "why": ""}, **extra}


def _spec(cid, role="secondary", requires=()):
    return {"id": cid, "role": role, "requires": list(requires)}


def _run(root, name, claims, seed=None, **extra):
    p = root / name
    p.mkdir()
    (p / "claims.json").write_text(json.dumps(_doc(claims, **extra)))
    if seed is not None:
        (p / "pipeline_state.json").write_text(json.dumps({"01_data_curation": {"parameters": {"seed": seed}}}))
    return p


# --------------------------------------------------------------------------- numbers by hand


def test_t_interval_over_three_runs():
    # mean 2, sd 1, t(0.975, 2) = 4.302653: half width 4.302653 / sqrt(3) = 2.484138
    m, lo, hi, how = pooled_interval([1.0, 2.0, None, 3.0, float("nan")])
    assert m == 2.0 and lo == pytest.approx(-0.484138, abs=1e-6) and hi == pytest.approx(4.484138, abs=1e-6)
    assert how == "t over 3 runs"
    assert math.isnan(pooled_interval([1.0])[1]) and math.isnan(pooled_interval([])[0])


def test_interval_p_is_twice_the_one_sided_t_p_and_agrees_with_the_interval():
    # [1, 2, 3, 4] against 0: t = 2.5 / (1.290994 / 2) = 3.872983, df 3, one-sided p = 0.0152331
    assert interval_p([1.0, 2.0, 3.0, 4.0], ">", 0.0) == pytest.approx(0.0304663, abs=1e-6)
    assert interval_p([1.0, 2.0, 3.0, 4.0], "<", 0.0) == pytest.approx(1.0)
    # [1, 2, 3] against 0: t = 3.464102, df 2, one-sided p = 0.0370900: the 95% interval contains 0
    p = interval_p([1.0, 2.0, 3.0], ">", 0.0)
    assert p == pytest.approx(0.0741799, abs=1e-6) and pooled_interval([1.0, 2.0, 3.0])[1] < 0
    assert interval_p([0.5, 0.5], ">", 0.0) == 0.0 and interval_p([0.5, 0.5], "<", 0.0) == 1.0
    with pytest.raises(ValueError, match="comparison"):
        interval_p([1.0, 2.0], ">=", 0.0)


def test_holm_step_down_by_hand():
    # sorted: a 0.01 x 3 = 0.03; c 0.03 x 2 = 0.06; b 0.04 x 1 = 0.04 -> kept monotone at 0.06
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"a": 0.6, "b": 0.7}) == pytest.approx({"a": 1.0, "b": 1.0})
    assert holm({}) == {}


def test_probability_of_improvement_counts_ties_half():
    assert probability_of_improvement([0.1, -0.2, 0.0, 0.3], ">") == 0.625
    assert probability_of_improvement([0.1, -0.2, 0.0, 0.3], "<") == 0.375


def test_seeds_needed_from_mean_and_spread():
    # mean 0.02, sd 0.01: n = 3 gives 4.303 x 0.01 / 1.732 = 0.0248 > 0.02; n = 4 gives 3.182 x 0.01 / 2 = 0.0159
    assert seeds_needed([0.01, 0.03, 0.02], ">", 0.0) == 4
    assert seeds_needed([0.01, 0.03, 0.02], "<", 0.0) is None  # the runs point the other way
    assert seeds_needed([0.02], ">", 0.0) is None


def test_from_ten_runs_the_interval_is_a_bca_bootstrap_consistent_with_its_p():
    clear = [0.05 + 0.01 * k for k in range(BOOTSTRAP_FROM + 2)]
    m, lo, hi, how = pooled_interval(clear)
    assert how == f"BCa bootstrap over {BOOTSTRAP_FROM + 2} runs" and lo < m < hi and lo > 0
    assert interval_p(clear, ">", 0.0) < 0.05
    near = [(-1) ** k * 0.1 + 0.01 for k in range(BOOTSTRAP_FROM)]
    m, lo, hi, _ = pooled_interval(near)
    assert lo < 0 < hi and interval_p(near, ">", 0.0) >= 0.05


# --------------------------------------------------------------------------- pooling runs


def test_runs_on_either_side_of_the_threshold(tmp_path):
    up, down, mixed = [0.05, 0.06, 0.07, 0.04, 0.05], [-0.05, -0.03, -0.04, -0.06, -0.02], [0.3, -0.3, 0.2, -0.1, 0.0]
    runs = [_run(tmp_path, f"s{i}", [_claim("up", [_test(up[i], "reproduced")]),
                                     _claim("down", [_test(down[i], "not reproduced")]),
                                     _claim("mixed", [_test(mixed[i])])], seed=i + 1) for i in range(5)]
    doc = pool_runs(runs)
    got = {c["id"]: c for c in doc["claims"]}
    assert got["up"]["verdict"] == "reproduced" and got["down"]["verdict"] == "not reproduced"
    assert got["mixed"]["verdict"] == "inconclusive"
    t = got["up"]["tests"][0]
    assert t["value"] == pytest.approx(0.054) and t["n"] == 5 and t["interval"] == "t over 5 runs"
    assert t["share_claimed_side"] == 1.0 and t["share_runs_reproduced"] == 1.0
    assert got["mixed"]["tests"][0]["share_claimed_side"] == 0.4
    assert [r["seed"] for r in doc["runs"]] == [1, 2, 3, 4, 5] and doc["counts"]["reproduced"] == 1
    paths = write_pooled(doc, tmp_path / "pooled")
    assert [p.name for p in paths] == ["pooled_claims.json", "pooled_claims.csv", "over_seeds.pdf"]
    assert paths[2].read_bytes()[:4] == b"%PDF"
    assert json.loads(paths[0].read_text())["claims"][0]["tests"][0]["per_run"]["s0"] == 0.05


def test_a_paired_arm_comparison_reports_the_probability_of_improvement(tmp_path):
    diffs = [0.02, 0.03, -0.01, 0.04]
    runs = [_run(tmp_path, f"s{i}", [_claim("c", [_test(d, kind="ablation_paired_last", comparison="<")])], seed=i)
            for i, d in enumerate(diffs)]
    t = pool_runs(runs)["claims"][0]["tests"][0]
    assert t["probability_of_improvement"] == 0.25  # one run of four has RoC below GRPO
    # by hand: the per-seed differences' mean 0.02, sd sqrt(0.0014 / 3) = 0.021602, t(0.975, 3) = 3.182446,
    # half-width 3.182446 * 0.021602 / 2 = 0.034374
    assert t["value"] == pytest.approx(0.02) and t["ci95"] == pytest.approx([-0.014374, 0.054374], abs=1e-6)
    assert t["interval"] == "t over 4 runs" and t["verdict"] == "inconclusive"


def test_holm_over_primary_claims_turns_a_marginal_pair_inconclusive(tmp_path):
    vals = [1.0, 2.0, 3.0, 4.0]  # p_interval 0.0305 each: reproduced alone, not after Holm over two
    docs = [(f"s{i}", _doc([_claim("a", [_test(v)]), _claim("b", [_test(v)])])) for i, v in enumerate(vals)]
    alone = pool_claims(docs, [_spec("a"), _spec("b")])
    assert [c["verdict"] for c in alone] == ["reproduced", "reproduced"]
    assert alone[0]["tests"][0]["p_holm"] is None
    both = pool_claims(docs, [_spec("a", "primary"), _spec("b", "primary")])
    assert [c["verdict"] for c in both] == ["inconclusive", "inconclusive"]
    assert both[0]["tests"][0]["p_holm"] == pytest.approx(2 * 0.0304663, abs=1e-6)
    assert "Holm" in both[0]["tests"][0]["reason"]
    one = pool_claims(docs, [_spec("a", "primary"), _spec("b")])
    assert [c["verdict"] for c in one] == ["reproduced", "reproduced"]  # a family of one: no correction


def test_a_run_failing_a_precondition_is_listed_and_left_out_by_that_rule(tmp_path):
    ok = {"cold_start_learns": {"passed": True}}
    bad = {"cold_start_learns": {"passed": False, "reason": "held-out accuracy 0.15 < 0.30"}}
    docs = [("s1", _doc([_claim("a", [_test(0.05)])], preconditions=ok)),
            ("s2", _doc([_claim("a", [_test(-0.9)])], preconditions=bad)),
            ("s3", _doc([_claim("a", [_test(0.06)])], preconditions=ok)),
            ("s4", _doc([_claim("a", [_test(0.04)])])),
            ("s5", _doc([_claim("a", [_test(None)])], preconditions=ok))]
    t = pool_claims(docs, [_spec("a", requires=["cold_start_learns"])])[0]["tests"][0]
    assert t["used"] == ["s1", "s3"] and t["n"] == 2
    assert "failed: held-out accuracy 0.15 < 0.30" in t["excluded"]["s2"]
    assert "not recorded" in t["excluded"]["s4"] and "no statistic" in t["excluded"]["s5"]
    assert t["per_run"]["s2"] == -0.9  # listed with its number, not hidden
    t = pool_claims(docs, [_spec("a")])[0]["tests"][0]
    assert t["used"] == ["s1", "s2", "s3", "s4"]  # without the rule nothing is left out by outcome


def test_runs_that_cannot_be_pooled_are_named(tmp_path):
    a = _run(tmp_path, "a", [_claim("x", [_test(0.1)])], seed=3)
    b = _run(tmp_path, "b", [_claim("x", [_test(0.2)])], seed=3)
    with pytest.raises(ClaimsError, match="both pipeline seed 3"):
        pool_runs([a, b])
    c = _run(tmp_path, "c", [_claim("x", [_test(0.2, threshold=0.5)])], seed=4)
    with pytest.raises(ClaimsError, match="different claims files"):
        pool_runs([a, c])
    d = _run(tmp_path, "d", [], seed=5)
    with pytest.raises(ClaimsError, match="'x' is in a/claims.json but not in d"):
        pool_runs([a, d])
    assert cli.main(["claims", "pool", str(a), str(b)]) == 2
    assert cli.main(["claims", "pool", str(a), str(c), "--section", "bogus"]) == 2  # no paper's: named, not empty


def test_one_paper_pools_over_runs_judged_by_different_claims_files(tmp_path):
    """A run whose claims.json also holds another paper's claims (a later --only run of another study) pools with
    the others on one --section; the note says the claims files differ."""
    old = [_run(tmp_path, f"s{i}", [_claim("x", [_test(0.1 + 0.01 * i)], section="Agent-R")], seed=i,
                claims_sha256="aaa") for i in range(2)]
    new = _run(tmp_path, "s2", [_claim("x", [_test(0.12)], section="Agent-R"), _claim("y", [_test(0.3)], section="B-STaR")],
               seed=2, claims_sha256="bbb")
    with pytest.raises(ClaimsError, match="'y' is in s2/claims.json but not in s0"):
        pool_runs([new, *old])
    doc = pool_runs([new, *old], section="Agent-R")
    assert [c["id"] for c in doc["claims"]] == ["x"] and doc["claims"][0]["tests"][0]["n"] == 3
    assert any("different claims files: s2 (bbb); s0, s1 (aaa)" in n for n in doc["notes"])


def test_the_cli_prints_one_row_per_test_and_writes_the_folder(tmp_path, capsys):
    runs = [_run(tmp_path, f"s{i}", [_claim("x", [_test(0.1 + 0.01 * i, "reproduced")])], seed=i) for i in range(3)]
    assert cli.main(["claims", "pool", *map(str, runs), "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("section,claim,test,runs,pooled") and out[1].startswith("rStar2-Agent,Figure 4: claim x,t0,3,")
    assert (tmp_path / "p" / "over_seeds.pdf").exists()


def test_the_constants_are_the_registered_rules():
    import yaml

    from kit.claims import CLAIMS_FILE, pool

    rules = yaml.safe_load(CLAIMS_FILE.read_text())["rules"]["pooling"]
    assert rules["t_below_runs"] == pool.BOOTSTRAP_FROM
    assert rules["bootstrap_over_runs"] == {"method": "BCa", "resamples": pool.BOOTSTRAP_RESAMPLES,
                                            "seed": pool.BOOTSTRAP_SEED}


# --------------------------------------------------------------------------- review of issue #42: rules a broken pool would pass


def test_tests_are_matched_by_name_not_by_position(tmp_path):
    """A run whose tests of a claim come in another order pools the same numbers; one that lacks a test, or has
    one more, is refused with the claim and the test named (the pool crossed two tests' values before)."""
    two = lambda a, b: [_claim("c", [_test(a, name="minus good-only"), _test(b, name="minus null arm")])]  # noqa: E731
    ordered = [_run(tmp_path, f"s{i}", two(0.1 + 0.01 * i, -0.5 - 0.01 * i), seed=i) for i in range(3)]
    flipped = tmp_path / "s2f"
    flipped.mkdir()
    doc = json.loads((ordered[2] / "claims.json").read_text())
    doc["claims"][0]["tests"].reverse()
    (flipped / "claims.json").write_text(json.dumps(doc))
    (flipped / "pipeline_state.json").write_text((ordered[2] / "pipeline_state.json").read_text())
    a = pool_runs(ordered)["claims"][0]["tests"]
    b = pool_runs([*ordered[:2], flipped])["claims"][0]["tests"]
    assert [(t["name"], t["value"], t["ci95"]) for t in a] == [(t["name"], t["value"], t["ci95"]) for t in b]
    assert a[0]["value"] == pytest.approx(0.11) and a[1]["value"] == pytest.approx(-0.51)
    short = _run(tmp_path, "s9", [_claim("c", [_test(0.1, name="minus good-only")])], seed=9)
    with pytest.raises(ClaimsError, match="s9/claims.json has no test 'minus null arm'"):
        pool_runs([ordered[0], short])
    with pytest.raises(ClaimsError, match="s0/claims.json has a test 'minus null arm' that s9/claims.json has not"):
        pool_runs([short, ordered[0]])


def test_a_claim_only_a_later_run_holds_is_refused_not_dropped(tmp_path):
    a = _run(tmp_path, "a", [_claim("x", [_test(0.1)])], seed=1)
    b = _run(tmp_path, "b", [_claim("x", [_test(0.2)]), _claim("y", [_test(0.3)])], seed=2)
    with pytest.raises(ClaimsError, match="'y' is in b/claims.json but not in a/claims.json"):
        pool_runs([a, b])


def test_unfinished_unseeded_single_and_unreadable_runs_are_refused_by_name(tmp_path, capsys):
    a = _run(tmp_path, "a", [_claim("x", [_test(0.1)])], seed=1)
    b = _run(tmp_path, "b", [_claim("x", [_test(0.2)])], seed=2)
    state = {"01_data_curation": {"status": "done", "parameters": {"seed": 2}},
             "06_roc_ablation": {"status": "failed", "parameters": {"seed": 2}}}
    (b / "pipeline_state.json").write_text(json.dumps(state))
    with pytest.raises(ClaimsError, match=r"b has not finished \(06_roc_ablation failed\)"):
        pool_runs([a, b])
    c = _run(tmp_path, "c", [_claim("x", [_test(0.2)])])  # no pipeline_state.json: its seed is unknown
    with pytest.raises(ClaimsError, match="c: no pipeline seed recorded"):
        pool_runs([a, c])
    with pytest.raises(ClaimsError, match="at least 2 runs"):
        pool_runs([a])
    d = _run(tmp_path, "d", [_claim("x", [_test(0.2)])], seed=4)
    (d / "claims.json").write_text((d / "claims.json").read_text()[:40])
    with pytest.raises(ClaimsError, match=r"d/claims.json is not valid JSON"):
        pool_runs([a, d])
    e = _run(tmp_path, "e", [_claim("x", [_test(0.3)])], seed=5)
    (tmp_path / "afile").write_text("")
    assert cli.main(["claims", "pool", str(a), str(e), "--out", str(tmp_path / "afile")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_claims_pool_judges_every_paper_by_default(tmp_path, capsys):
    runs = [_run(tmp_path, f"s{i}", [_claim("x", [_test(0.1 + 0.01 * i)]),
                                     _claim("y", [_test(0.2 + 0.01 * i)], section="B-STaR")], seed=i) for i in range(2)]
    assert cli.main(["claims", "pool", *map(str, runs)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == ["rStar2-Agent", "B-STaR"]


def test_holm_runs_within_each_paper_not_over_all_papers():
    """One primary in each of two papers, each p = 0.0305: a family of one per paper, so both stay reproduced
    (Holm over both papers' primaries together would double each p past 0.05)."""
    vals = [1.0, 2.0, 3.0, 4.0]
    docs = [(f"s{i}", _doc([_claim("a", [_test(v)]), _claim("b", [_test(v)], section="ReTool")]))
            for i, v in enumerate(vals)]
    got = pool_claims(docs, [_spec("a", "primary"), _spec("b", "primary")])
    assert [c["verdict"] for c in got] == ["reproduced", "reproduced"]
    assert [c["tests"][0]["p_holm"] for c in got] == pytest.approx([0.0304663] * 2, abs=1e-6)


def test_the_switch_to_the_bootstrap_is_at_ten_runs_and_the_bootstrap_is_bca():
    from scipy import stats

    from kit.claims.pool import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

    skewed = [0.01, 0.02, 0.02, 0.03, 0.03, 0.04, 0.05, 0.08, 0.15, 0.40]  # ten runs, a long right tail
    assert pooled_interval(skewed[:BOOTSTRAP_FROM - 1])[3] == f"t over {BOOTSTRAP_FROM - 1} runs"
    m, lo, hi, how = pooled_interval(skewed[:BOOTSTRAP_FROM])
    assert how == f"BCa bootstrap over {BOOTSTRAP_FROM} runs"

    def boot(method):
        r = stats.bootstrap((skewed,), np.mean, n_resamples=BOOTSTRAP_RESAMPLES, method=method,
                            random_state=np.random.default_rng(BOOTSTRAP_SEED))
        return r.confidence_interval.low, r.confidence_interval.high

    assert (lo, hi) == pytest.approx(boot("BCa"), rel=1e-12)
    assert abs(lo - boot("percentile")[0]) > 1e-3  # the skew separates BCa from the percentile interval


def test_only_a_failed_control_precondition_makes_a_design_invalid():
    from kit.claims import INVALID

    ok = {"control": {"passed": True}}
    fails = lambda on_fail: {"control": {"passed": False, "reason": "r", "on_fail": on_fail}}  # noqa: E731
    for on_fail, expected in ((INVALID, INVALID), ("not judged", "inconclusive")):
        docs = [("s1", _doc([_claim("a", [_test(0.05)])], preconditions=ok)),
                ("s2", _doc([_claim("a", [_test(0.06)])], preconditions=fails(on_fail))),
                ("s3", _doc([_claim("a", [_test(0.07)])], preconditions=fails(on_fail)))]
        got = pool_claims(docs, [_spec("a", requires=["control"])])[0]
        assert got["verdict"] == expected, (on_fail, got)


def test_duplicate_test_names_a_file_on_the_out_path_and_a_dot_run(tmp_path, capsys, monkeypatch):
    """Second review of #42: two tests of one name made the pool count one twice and lose the other; an --out
    under a file gave a traceback; a run given as "." had an empty name."""
    dup = [_claim("c", [_test(0.1, name="same"), _test(-0.5, name="same")])]
    runs = [_run(tmp_path, f"s{i}", dup, seed=i) for i in range(2)]
    with pytest.raises(ClaimsError, match="'c' in s0/claims.json has two tests named 'same'"):
        pool_runs(runs)
    ok = [_run(tmp_path, f"k{i}", [_claim("x", [_test(0.1 + 0.01 * i)])], seed=10 + i) for i in range(2)]
    (tmp_path / "afile").write_text("")
    assert cli.main(["claims", "pool", *map(str, ok), "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert "cannot make the folder" in capsys.readouterr().err
    monkeypatch.chdir(ok[0])
    assert [r["name"] for r in pool_runs([".", str(ok[1])])["runs"]] == ["k0", "k1"]
