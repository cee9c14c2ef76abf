"""The whole notebook series with the `smoke` profile through the same runner as `make reproduce`.

Slow (a few minutes on 2 cores): it trains the tiny model for a few steps, evaluates on the real
benchmark files and builds the report. It asserts the artifacts, not the (near-zero) scores; the
assertions are shared with the same chain through VERL's trainer (tests/smoke_checks.py).
"""

from __future__ import annotations

import time

import pytest
import smoke_checks as checks

from kit import pipeline
from kit.config import load

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    t0 = time.perf_counter()
    # a cell that hangs fails the test with the notebook and cell named instead of blocking the suite
    code = pipeline.main(["run", "--profile", "smoke", "--run", "t", "--reports-root", str(root), "--cell-timeout", "600"])
    seconds = time.perf_counter() - t0
    print(f"smoke chain: {seconds:.0f} s")
    assert code == 0, "the smoke chain failed; see the STOPPED message above"
    return pipeline.Layout.for_run("smoke", "t", root), load("smoke", write=False)


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
