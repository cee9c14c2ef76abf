"""The whole notebook series with the `smoke` profile through the same runner as `make reproduce`.

Slow (a few minutes on 2 cores): it trains the tiny model for a few steps, evaluates on the real
benchmark files and builds the report. It asserts the artifacts, not the (near-zero) scores; the
assertions are shared with the same chain through VERL's trainer (tests/smoke_checks.py).
"""

from __future__ import annotations

import pytest
import smoke_checks as checks

pytestmark = pytest.mark.slow


def test_every_notebook_executed_and_recorded(smoke_run):
    checks.every_notebook_executed_and_recorded(smoke_run[0])


def test_rl_metrics_have_documented_keys_and_step_counts(smoke_run):
    lay, cfg = smoke_run
    checks.rl_metrics_have_keys_and_step_counts(lay, cfg, checks.LOCAL_RL_KEYS)
    sft = checks.rows(lay.root / "sft" / "metrics.jsonl")  # the local cold start logs every SFT step
    assert len(sft) == cfg.sft.steps and all("loss" in r for r in sft)


def test_ablation_runs_both_algorithms_for_every_seed(smoke_run):
    checks.ablation_runs_both_algorithms_for_every_seed(*smoke_run, checks.LOCAL_RL_KEYS)


def test_evaluation_on_the_real_benchmarks(smoke_run):
    checks.evaluation_on_the_real_benchmarks(*smoke_run)


def test_consistency_filter_and_passk_curves(smoke_run):
    checks.consistency_filter_and_passk_curves(*smoke_run)


def test_figures_tables_and_report(smoke_run):
    checks.figures_tables_and_report(smoke_run[0])


def test_claims_file_and_summary_page(smoke_run):
    checks.claims_file_and_summary_page(smoke_run[0])
