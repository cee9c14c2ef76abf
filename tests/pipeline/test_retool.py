"""Notebook 10's pieces without training (issue #33): ReTool's arms as configs, its figure, findings and
verdicts from synthetic arm folders (the smoke chain runs the notebook itself)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kit.analysis import code_behaviour
from kit.config import load
from kit.plan import ablation_arms, retool_arms
from kit.report.figures import copy_study_figures
from kit.studies.retool import chain as retool
from kit.studies.retool.figures import figure_retool_behaviour


def _arm(root: Path, folder: str, alg: str, seed: int, steps: int = 12, ratio=(0.8, 0.95)) -> None:
    rows = []
    for s in range(steps):
        f = s / (steps - 1)
        rows.append({"stage": "stage1", "step": s + 1, "algorithm": alg, "seed": seed, "accuracy": 0.6 + 0.2 * f,
                     "response_len_mean": 120 - 10 * f, "code_ratio": ratio[0] + (ratio[1] - ratio[0]) * f,
                     "code_lines_per_call": 1.5, "code_pass_rate": 0.9, "code_pass_rate_correct": 0.95,
                     "self_corrections": 2.0, "self_correction_rate_correct": 0.1 + 0.01 * seed,
                     "first_call_position": None if s == 0 else 0.08})  # null: no call at that step
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_retool_arms_are_the_ablation_s_roc_arms_with_the_gae_estimator(tmp_path):
    cfg = load("tiny", write=False, seed=7)
    arms = retool_arms(cfg, tmp_path)
    roc = [a for a in ablation_arms(cfg) if a.algorithm.label == "grpo_roc"][:3]
    assert [name for name, _ in arms] == ["ppo_seed7", "ppo_seed8", "ppo_seed9"]  # the run's first 3 ablation seeds
    for (name, arm), base in zip(arms, roc, strict=True):
        assert arm.algorithm.adv_estimator == "gae" and arm.run_dir == str(tmp_path / name)
        assert arm.stages == base.stages and arm.seed == base.seed and arm.data == base.data
    assert len(retool_arms(load("smoke", write=False))) == 1  # the smoke profile's one ablation seed


def test_figure_findings_and_verdicts_from_synthetic_arms(tmp_path):
    root = tmp_path / "tiny" / "r"
    for s in (0, 1, 2):
        _arm(root / "retool", f"ppo_seed{s}", "ppo", s)
        _arm(root / "ablation", f"grpo_roc_seed{s}", "grpo_roc", s, ratio=(0.8, 0.8))
    df = retool.arm_metrics(root / "retool", root / "ablation", [0, 1, 2])
    assert set(df["algorithm"]) == {"ppo", "grpo_roc"}
    fig = figure_retool_behaviour(df, note="synthetic")
    assert len(fig.axes) == 6 and fig.axes[1].get_title() == "(b) code ratio"
    # VERL rows leave out a ratio undefined at every step (the VERL smoke chain's): its panel says so
    bare = figure_retool_behaviour(df.drop(columns=["code_lines_per_call", "first_call_position"]))
    assert "no defined value in this run" in [t.get_text() for t in bare.axes[2].texts]
    labels = [t.get_text() for t in fig.axes[4].get_legend().get_texts()]
    assert "PPO (ReTool), correct (3 seeds)" in labels and "GRPO-RoC, all (3 seeds)" in labels
    (root / "sft").mkdir(parents=True)  # a cold start that learned (the precondition of every ReTool claim)
    (root / "sft" / "summary.json").write_text(json.dumps({"heldout_sampled_reward": 0.5, "heldout_n": 128}))
    results, table = retool.retool_verdicts(root, root / "retool", root / "ablation")
    verdicts = {r.id: r.verdict for r in results}
    assert set(verdicts) == {"retool_code_ratio_rises", "retool_first_call_moves_earlier",
                             "retool_self_correction_emerges", "retool_ppo_accuracy_not_far_below_roc"}
    assert verdicts["retool_code_ratio_rises"] == "reproduced"
    # no emergence arm in this run (no retool/emergence/): its claims are not judged
    assert verdicts["retool_self_correction_emerges"] == verdicts["retool_first_call_moves_earlier"] == "inconclusive"
    assert verdicts["retool_ppo_accuracy_not_far_below_roc"] == "reproduced"  # equal accuracy: 0 > -0.10
    (root / "retool" / "verdicts.json").write_text(json.dumps(verdicts))
    text = retool.retool_findings(root / "retool")
    assert "PPO (3 seeds" in text and "code ratio 0.8" in text and "retool_code_ratio_rises` reproduced" in text
    retool.save_figure(fig, root / "retool", "retool_behaviour", formats=("png",))
    copies = copy_study_figures({"retool": root / "retool", "agent_r": root / "agent_r", "bstar": root / "bstar"},
                                root / "figures")
    assert {nb: [p.name for p in c] for nb, c in copies.items()} == {"10_retool": ["retool_behaviour.png"], "11_agent_r": [],
                                                                     "12_bstar": []}
    last = retool.last_rows(root / "retool")
    assert list(last["arm"]) == ["ppo_seed0", "ppo_seed1", "ppo_seed2"] and not math.isnan(last["code_ratio"][0])
    assert set(code_behaviour.KEYS) <= set(last.columns)


def test_train_retool_runs_each_arm_through_the_runtime_and_shows_finished_ones(tmp_path, monkeypatch):
    cfg = load("smoke", {"retool.emergence_seeds": 0}, write=False)  # the emergence arm: the next test
    calls, shown = [], []

    class Runtime:  # the runtime contract's run_stage; an arm with rows already is one the background job trained
        @staticmethod
        def run_stage(arm, stage, *, run_dir, init_dir, data_dir, progress):
            calls.append((arm.algorithm.adv_estimator, stage, run_dir, init_dir))
            _arm(Path(run_dir).parent, Path(run_dir).name, "ppo", arm.seed, steps=2)  # finished: reports no row
            return {"stage": stage, "steps": 2}

    monkeypatch.setattr(retool.runtime, "get", lambda c: Runtime)
    out = retool.train_retool(cfg, tmp_path / "retool", tmp_path / "sft", tmp_path / "data", progress=shown.append)
    assert calls == [("gae", "stage1", str(tmp_path / "retool" / "ppo_seed0"), tmp_path / "sft")]
    assert out["arms"] == {"ppo_seed0": {"stage": "stage1", "steps": 2}} and out["baseline"] == "grpo_roc"
    assert out["emergence"] == {} and not (tmp_path / "retool" / "emergence").exists()
    assert json.loads((tmp_path / "retool" / "retool.json").read_text()) == out
    assert [r.get("step") for r in shown] == [1, 2, None] and "summary" in shown[-1]  # its rows, then the end


def test_the_emergence_arm_trains_a_clean_cold_start_then_ppo_from_it(tmp_path, monkeypatch):
    """Issue #45: the clean cold start is the run's cold start with two data keys changed (no fixed demos, varied
    preambles), trained by the kit's SFT trainer into emergence/cold_start/; PPO per emergence seed starts from
    it; the evaluation follows; retool.emergence_seeds = 0 trains nothing; a non-tiny model is refused."""
    from kit.studies.retool import emergence

    cfg = load("smoke", {"retool.emergence_seeds": 1, "retool.clean_preamble_max": 2, "retool.clean_sft_steps": 5},
               write=False)
    order = []

    def fake_sft(clean, run_dir, progress=None):
        order.append(("sft", clean.data.demo_error_fraction, clean.data.demo_preamble_max, clean.seed, str(run_dir)))
        return {"steps": clean.sft.steps}

    class Runtime:
        @staticmethod
        def run_stage(arm, stage, *, run_dir, init_dir, data_dir, progress):
            order.append(("ppo", arm.algorithm.adv_estimator, arm.algorithm.selection, run_dir, str(init_dir)))
            return {"stage": stage}

    monkeypatch.setattr(emergence.sft, "run_sft", fake_sft)
    monkeypatch.setattr(emergence.runtime, "get", lambda c: Runtime)
    monkeypatch.setattr(emergence, "evaluate_emergence",
                        lambda c, root, arms: order.append(("eval", str(root), arms)) or {"rows": 0})
    out = emergence.train_emergence(cfg, tmp_path / "retool", None)
    em = tmp_path / "retool" / "emergence"
    assert order == [("sft", 0.0, 2, cfg.seed, str(em / "cold_start")),
                     ("ppo", "gae", "all", str(em / "ppo_seed0"), str(em / "cold_start")), ("eval", str(em), {"ppo_seed0": cfg.seed})]
    saved = json.loads((em / "cold_start" / "config.json").read_text())
    assert saved["data"]["demo_error_fraction"] == 0.0 and saved["sft"] == {**json.loads(json.dumps(cfg.to_dict()["sft"])), "steps": 5}
    assert json.loads((em / "emergence.json").read_text()) == out and list(out["arms"]) == ["ppo_seed0"]
    # a finished arm is reused only under the config it was trained with; asking for more seeds than exist is named
    with pytest.raises(ValueError, match=r"trained with another config \(differs in: data\)"):
        emergence.train_emergence(load("smoke", {"retool.clean_preamble_max": 1, "retool.clean_sft_steps": 5}, write=False),
                                  tmp_path / "retool", None)
    with pytest.raises(ValueError, match="ReTool arm seeds"):
        emergence.train_emergence(load("smoke", {"retool.emergence_seeds": 5}, write=False), tmp_path / "more", None)
    off = load("smoke", {"retool.emergence_seeds": 0}, write=False)
    assert emergence.train_emergence(off, tmp_path / "off", None) == {} and not (tmp_path / "off").exists()
    with pytest.raises(ValueError, match="retool.emergence_seeds = 0"):
        emergence.train_emergence(load("paper-14b", {"retool.emergence_seeds": 1}, write=False), tmp_path / "p", None)
