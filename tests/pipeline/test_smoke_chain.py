"""The whole notebook series with the `smoke` profile plus a fourth RL stage (tests/profiles/four_stages.toml) through the same runner as `make reproduce`.

Slow (a few minutes on 2 cores): it trains the tiny model for a few steps, evaluates on the real
benchmark files and builds the report. It asserts the artifacts, not the (near-zero) scores; the
assertions are shared with the same chain through VERL's trainer (tests/smoke_checks.py).
"""

from __future__ import annotations

import json

import pytest
import smoke_checks as checks

from kit import pipeline

pytestmark = pytest.mark.slow


def test_every_notebook_executed_and_recorded(smoke_run):
    checks.every_notebook_executed_and_recorded(smoke_run[0])


def test_the_fourth_stage_of_the_test_profile_ran_after_stage_3(smoke_run):
    """The session's chain runs tests/profiles/four_stages.toml: its stage4 (no notebook of its own) ran
    the stage template from stage 3's policy, and 07/08 read its policy (issue #29)."""
    lay, cfg = smoke_run
    assert cfg.stages.names == ("stage1", "stage2", "stage3", "stage4")
    summary = json.loads((lay.root / "stage4" / "summary.json").read_text())
    assert summary["init_dir"] == str(lay.root / "stage3" / "policy") and (lay.root / "stage4" / "policy").is_dir()
    assert pipeline.read_state(lay)["05_rl_stage4"]["parameters"]["stage"] == "stage4"


def test_rl_metrics_have_documented_keys_and_step_counts(smoke_run):
    lay, cfg = smoke_run
    checks.rl_metrics_have_keys_and_step_counts(lay, cfg, checks.LOCAL_RL_KEYS)
    sft = checks.rows(lay.root / "sft" / "metrics.jsonl")  # the local cold start logs every SFT step
    assert len(sft) == cfg.sft.steps and all("loss" in r for r in sft)


def test_ablation_runs_both_algorithms_for_every_seed(smoke_run):
    checks.ablation_runs_both_algorithms_for_every_seed(*smoke_run, checks.LOCAL_RL_KEYS)


def test_retool_arms_and_inconclusive_verdicts(smoke_run):
    checks.retool_arms_and_inconclusive_verdicts(*smoke_run)


def test_evaluation_on_the_real_benchmarks(smoke_run):
    checks.evaluation_on_the_real_benchmarks(*smoke_run)


def test_consistency_filter_and_passk_curves(smoke_run):
    checks.consistency_filter_and_passk_curves(*smoke_run)


def test_figures_tables_and_report(smoke_run):
    checks.figures_tables_and_report(smoke_run[0])


def test_claims_file_and_summary_page(smoke_run):
    checks.claims_file_and_summary_page(smoke_run[0])


def test_agent_r_runs_both_arms_and_stays_inconclusive(smoke_run):
    checks.agent_r_runs_both_arms_and_stays_inconclusive(*smoke_run)


def test_bstar_runs_both_arms_and_stays_inconclusive(smoke_run):
    checks.bstar_runs_both_arms_and_stays_inconclusive(*smoke_run)
