"""Agent-R's continuation fine-tune (issue #46): a few passes over an iteration's own rows, a warm-up and a decay
from the peak learning rate, the null arm on the Agent-R arm's steps, the null arm's accuracy change, and the
``invalid design`` verdict of a damaged null arm."""

from __future__ import annotations

import dataclasses
import json

import pytest
from doubles import load_benchmark

from kit.claims import RunDirs, evaluate_claims, evaluate_preconditions
from kit.config import ConfigError, load
from kit.models import build_tiny_model
from kit.studies.agent_r import chain, iterate
from kit.studies.agent_r.revision import RevisionRow


def _a(**kw):
    return dataclasses.replace(load("tiny", write=False).agent_r, **kw)


def test_steps_are_passes_over_the_own_rows_capped_by_sft_steps():
    a = _a(passes=3.0, sft_steps=30, eta=0.2)
    assert iterate.own_per_batch(48, 0.2) == 40  # 48 x 5/6
    assert iterate.iteration_steps(a, 40, 48) == 3  # 3 passes over 40 rows at 40 a batch
    assert iterate.iteration_steps(a, 41, 48) == 4  # rounded up
    assert iterate.iteration_steps(a, 1, 48) == 1
    assert iterate.iteration_steps(a, 500, 48) == 30  # capped
    assert iterate.iteration_steps(a, 0, 48) == 0  # no rows: no fine-tune
    assert iterate.iteration_steps(_a(passes=0.0, sft_steps=30), 7, 48) == 30  # the v1 loop


def test_the_fine_tune_warms_up_and_decays_and_the_null_arm_takes_the_steps_it_is_given(tok):
    cfg = load("tiny", {"agent_r.passes": 2.0, "agent_r.sft_steps": 10, "agent_r.batch_size": 6, "agent_r.lr": 1e-3, "agent_r.warmup_steps": 0,
                        "agent_r.warmup_ratio": 0.25, "agent_r.schedule": "cosine"}, write=False)
    model = build_tiny_model(cfg.model, tok, seed=0)
    ids = tok.encode("What is 6 * 7? <answer>42</answer>", add_special_tokens=False)
    rows = [RevisionRow(ids, [0] * 4 + [1] * (len(ids) - 4), [], "good", f"t{i}") for i in range(10)]
    general = [(ids, [1] * len(ids))] * 3
    fit = iterate.train_iteration(cfg, model, tok, rows, general, iteration=1, arm="agent_r")
    assert len(fit) == iterate.iteration_steps(cfg.agent_r, 10, 6) == 4  # ceil(2 x 10 / 5)
    lrs = [f["lr"] for f in fit]
    assert lrs[0] == pytest.approx(1e-3) and max(lrs) == pytest.approx(1e-3)  # one warm-up step (0.25 x 4) to the peak
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] < 1e-3  # then the cosine decay
    null = iterate.train_iteration(cfg, model, tok, [], general, iteration=1, arm="null", steps=len(fit))
    assert len(null) == len(fit) and [f["lr"] for f in null] == lrs  # the same schedule on cold-start data alone
    assert iterate.train_iteration(cfg, model, tok, [], general, iteration=1, arm="good_only") == []  # no rows: no step


def test_a_warm_up_floor_keeps_a_short_iteration_below_the_peak(tok):
    cfg = load("tiny", {"agent_r.passes": 1.0, "agent_r.sft_steps": 10, "agent_r.batch_size": 6, "agent_r.lr": 1e-3,
                        "agent_r.warmup_ratio": 0.1, "agent_r.warmup_steps": 4}, write=False)
    model = build_tiny_model(cfg.model, tok, seed=0)
    ids = tok.encode("What is 6 * 7? <answer>42</answer>", add_special_tokens=False)
    general = [(ids, [1] * len(ids))] * 3
    fit = iterate.train_iteration(cfg, model, tok, [], general, iteration=1, arm="null", steps=2)
    assert [f["lr"] for f in fit] == pytest.approx([2.5e-4, 5e-4])  # round(0.1 x 2) = 0 < 4: a 4-step ramp, cut at 2
    long = iterate.train_iteration(cfg, model, tok, [], general, iteration=2, arm="null", steps=10)
    assert [f["lr"] for f in long][3] == pytest.approx(1e-3) and long[-1]["lr"] < 1e-3  # the floor, then the decay


def test_recipe_keys_are_checked():
    for key, bad in (("warmup_steps", -1), ("warmup_ratio", 1.0), ("schedule", "linear"), ("train_from", "base"), ("passes", -1.0)):
        with pytest.raises((ConfigError, ValueError, TypeError), match=f"agent_r.{key}|{key}"):
            load("tiny", {f"agent_r.{key}": bad}, write=False)


def _eval_rows(cold: float, null: float, n: int = 40) -> list[dict]:
    rows = [{"policy": "cold_start", "iteration": 0, "problem": f"p{i}", "correct": int(i < cold * n)} for i in range(n)]
    for it, acc in ((1, 1.0), (2, null)):  # only the last iteration counts
        rows += [{"policy": "null", "iteration": it, "problem": f"p{i}", "correct": int(i < acc * n)} for i in range(n)]
    return rows


def test_null_accuracy_change_is_the_last_iteration_against_the_cold_start():
    assert chain.null_accuracy_change(_eval_rows(0.5, 0.4)) == pytest.approx(-0.1)
    assert chain.null_accuracy_change(_eval_rows(0.5, 0.5)) == 0.0
    assert chain.null_accuracy_change([r for r in _eval_rows(0.5, 0.4) if r["policy"] != "null"]) is None


def _run(tmp_path, change: float):
    """A run folder whose cold start learned and whose Agent-R summary says ``null_accuracy_change``."""
    (tmp_path / "sft").mkdir(parents=True)
    (tmp_path / "sft" / "summary.json").write_text(json.dumps({"heldout_sampled_reward": 0.6}))
    (tmp_path / "agent_r").mkdir()
    (tmp_path / "agent_r" / "summary.json").write_text(json.dumps({"null_accuracy_change": change}))
    return RunDirs.under(tmp_path)


NULL_PRE = {"name": "null_holds", "statement": "s", "folder": "agent_r", "file": "summary.json",
            "key": "null_accuracy_change", "comparison": ">=", "threshold": -0.05, "on_fail": "invalid design"}
CLAIM = {"id": "c", "source": "s", "claim": "c", "paper": "p", "section": "Agent-R", "requires": ["null_holds"],
         "tests": [{"name": "t", "kind": "agent_r_diff", "measure": "accuracy", "minuend": "agent_r_last",
                    "subtrahend": "good_only", "statistic": "s", "interval": "i", "comparison": ">", "threshold": 0.0}]}


@pytest.mark.parametrize("change, verdict", [(-0.2, "invalid design"), (-0.01, "inconclusive")])
def test_a_damaged_null_arm_makes_the_claims_invalid_design(tmp_path, change, verdict):
    dirs = _run(tmp_path, change)
    pre = evaluate_preconditions(dirs, [NULL_PRE])
    assert pre["null_holds"]["passed"] is (change >= -0.05) and pre["null_holds"]["on_fail"] == "invalid design"
    (res,) = evaluate_claims(dirs, [CLAIM], pre)
    assert res.verdict == verdict  # with the null arm intact: judged, and inconclusive here for want of eval rows
    assert ("design's own control" in res.tests[0].reason) is (verdict == "invalid design")
    # without the summary key the precondition was not checked: inconclusive, never "invalid design"
    (tmp_path / "agent_r" / "summary.json").write_text("{}")
    unchecked = evaluate_preconditions(dirs, [NULL_PRE])
    assert evaluate_claims(dirs, [CLAIM], unchecked)[0].verdict == "inconclusive"


def test_a_cold_start_that_did_not_learn_stays_inconclusive_even_with_a_damaged_null_arm(tmp_path):
    dirs = _run(tmp_path, -0.2)
    (tmp_path / "sft" / "summary.json").write_text(json.dumps({"heldout_sampled_reward": 0.05}))
    cold = {**NULL_PRE, "name": "cold", "folder": "sft", "key": "heldout_sampled_reward", "threshold": 0.2,
            "on_fail": "inconclusive"}
    pre = evaluate_preconditions(dirs, [cold, NULL_PRE])
    (res,) = evaluate_claims(dirs, [{**CLAIM, "requires": ["cold", "null_holds"]}], pre)
    assert res.verdict == "inconclusive" and "cold" in res.tests[0].reason


def test_pooled_runs_whose_null_arm_failed_read_invalid_design():
    from kit.claims.pool import pool_claims

    def doc(passed: bool) -> dict:
        test = {"name": "t", "kind": "agent_r_diff", "comparison": ">", "threshold": 0.0, "value": 0.1,
                "verdict": "invalid design" if not passed else "inconclusive"}
        return {"preconditions": {"null_holds": {"passed": passed, "on_fail": "invalid design", "reason": "r"}},
                "claims": [{"id": "c", "source": "s", "claim": "c", "section": "Agent-R", "tests": [test]}]}

    spec = [{**CLAIM, "requires": ["null_holds"]}]
    (c,) = pool_claims([("s1", doc(False)), ("s2", doc(False)), ("s3", doc(True))], spec)
    assert c["verdict"] == "invalid design" and c["tests"][0]["excluded"].keys() == {"s1", "s2"}
    (c,) = pool_claims([("s1", doc(False)), ("s2", doc(True)), ("s3", doc(True))], spec)
    assert c["verdict"] != "invalid design"  # two runs left to judge: an interval over runs


def test_the_recipe_rule_takes_the_largest_lr_that_holds_in_the_worst_run():
    bench = load_benchmark("agent_r_null_lr")
    recipes = ((3e-4, 0), (3e-4, 10), (1e-3, 0), (1e-3, 10))

    def rows(changes):  # recipe -> changes over run x schedule
        return [{"lr": lr, "floor": f, "change": c} for (lr, f), cs in changes.items() for c in cs]

    found = rows({(3e-4, 0): [0.0, 0.01], (3e-4, 10): [0.0, 0.0], (1e-3, 0): [-0.3, 0.1], (1e-3, 10): [-0.01, 0.0]})
    assert bench.choose(found, recipes, 0.02) == (1e-3, 10)  # 1e-3 without a floor fails in one run
    assert bench.choose(found, recipes, 0.02, "mean") == (1e-3, 10)  # -0.1 on average: still out
    found = rows({(3e-4, 0): [0.0], (3e-4, 10): [0.0], (1e-3, 0): [-0.03, 0.2], (1e-3, 10): [-0.03]})
    assert bench.choose(found, recipes, 0.02) == (3e-4, 0)  # the smallest floor among equal lrs
    assert bench.choose(found, recipes, 0.02, "mean") == (1e-3, 0)  # round 1's rule averages the bad run away
    assert bench.choose(rows({(3e-4, 0): [-0.5]}), recipes, 0.02) is None
