"""The closing cell of the training notebooks: Markdown computed from the run's own files (kit.chain.findings)."""

from __future__ import annotations

import json

import pytest

from kit.chain.findings import ablation_findings, sft_findings, stage_findings
from kit.metrics import MetricsError


def test_stage_findings_reads_the_trend_and_roc_from_metrics(tmp_path, rl_metrics):
    run = tmp_path / "stage1"
    rl_metrics(run / "metrics.jsonl", stage="stage1", algorithm="grpo_roc", seed=0, steps=9,
                     acc0=0.3, acc_slope=0.02, err0=0.3, err_slope=-0.01)
    (run / "summary.json").write_text(json.dumps({"heldout_sampled_reward": 0.8125}))
    md = stage_findings(run)
    assert md.startswith("**What this run showed (9 steps; first and last 3 steps)**")
    # accuracy: steps 1-3 mean 0.34, steps 7-9 mean 0.46; length 104 -> 116 tokens
    assert "Training accuracy" in md and "went from 0.340 to 0.460 (rose by 0.120)" in md
    assert "went from 104.0 tokens to 116.0 tokens (rose by 12.0 tokens)" in md
    # errors before: mean over steps 0.25; after (RoC keeps half): 0.125
    assert "tool-error ratio of 0.250 as sampled and 0.125 among those RoC kept: the selection lowered" in md
    assert "held-out sampled reward (T = 1, the RL objective) is 0.812" in md


def test_stage_findings_says_what_is_missing_and_when_steps_are_too_few(tmp_path, rl_metrics):
    run = tmp_path / "s"
    rl_metrics(run / "metrics.jsonl", stage="stage1", algorithm="grpo", seed=0, steps=2)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r["tool_error_ratio_correct_before"] = r["tool_error_ratio_correct_after"] = None
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = stage_findings(run)
    assert "too few steps to read a trend" in md and "has no value here" in md and "held-out" not in md
    with pytest.raises(MetricsError, match="metrics file not found"):
        stage_findings(tmp_path / "missing")


def test_sft_findings_reports_loss_and_heldout_scores(tmp_path):
    run = tmp_path / "sft"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 7.0 - s}) + "\n" for s in range(1, 7)))
    (run / "summary.json").write_text(json.dumps({"heldout_accuracy": 0.914, "heldout_sampled_reward": 0.711,
                                                  "heldout_tool_rate": 1.0}))
    md = sft_findings(run)
    assert "The training loss went from 5.500 to 1.500 (fell by 4.000)" in md
    assert "91.4% correctly greedily (tool allowed) and 71.1% when sampled" in md and "on 100% of held-out" in md


def test_ablation_findings_compares_the_arms_per_seed(tmp_path, rl_metrics):
    for seed, roc_err in ((0, 0.1), (1, 0.3)):
        rl_metrics(tmp_path / f"grpo_seed{seed}" / "metrics.jsonl", stage="stage1", algorithm="grpo", seed=seed,
                         steps=6, err0=0.2, err_slope=0.0)
        rl_metrics(tmp_path / f"grpo_roc_seed{seed}" / "metrics.jsonl", stage="stage1", algorithm="grpo_roc",
                         seed=seed, steps=6, err0=roc_err, err_slope=0.0)
    md = ablation_findings(tmp_path)
    assert "`grpo` (2 seeds" in md and "tool-error ratio among correct trajectories 0.200" in md
    assert "`grpo_roc` (2 seeds" in md
    assert "RoC ended with the lower tool-error ratio on 1 of 2 seeds (GRPO minus RoC, mean +0.000)" in md


def test_sft_findings_names_a_linked_cold_start_instead_of_failing(tmp_path):
    """The VERL runtime's ``sft_checkpoint`` links a policy: no metrics.jsonl, summary engine "linked"."""
    (tmp_path / "summary.json").write_text(json.dumps({"stage": "sft", "engine": "linked",
                                                       "sft_checkpoint": "/x/sft/policy"}))
    text = sft_findings(tmp_path)
    assert "linked from `/x/sft/policy`" in text and "no SFT steps" in text
    (tmp_path / "summary.json").write_text(json.dumps({"stage": "sft", "engine": "local"}))
    with pytest.raises(MetricsError, match="metrics.jsonl"):
        sft_findings(tmp_path)
