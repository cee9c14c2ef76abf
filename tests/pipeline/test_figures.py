"""Figures 4, 8 and 9 drawn from synthetic metrics files with the documented keys."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from kit.metrics import MetricsError
from kit.progress import StepBar
from kit.report import figures


def _ablation(tmp_path, rl_metrics, seeds=(0, 1)):
    for seed in seeds:
        rl_metrics(tmp_path / "ablation" / f"grpo_seed{seed}" / "metrics.jsonl", stage="ablation",
                   algorithm="grpo", seed=seed, steps=6, err_slope=0.0, err0=0.2 + 0.02 * seed)
        rl_metrics(tmp_path / "ablation" / f"grpo_roc_seed{seed}" / "metrics.jsonl", stage="ablation",
                   algorithm="grpo_roc", seed=seed, steps=6, err0=0.2 + 0.02 * seed)
    return tmp_path / "ablation"


def test_figure4_draws_mean_over_seeds_per_algorithm(tmp_path, rl_metrics):
    fig = figures.figure4_tool_errors(_ablation(tmp_path, rl_metrics), note="profile smoke", paper_plateau=0.1)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    grpo = lines["GRPO, sampled (2 seeds)"]
    roc = lines["GRPO-RoC, sampled (2 seeds)"]
    assert list(grpo.get_xdata()) == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(grpo.get_ydata(), 0.21)  # mean of 0.20 and 0.22, flat
    np.testing.assert_allclose(roc.get_ydata(), 0.21 - 0.01 * np.arange(1, 7))
    assert "GRPO-RoC, kept by RoC (2 seeds)" in lines
    assert any("paper" in t.get_text() and "reference" in t.get_text() for t in ax.texts)
    assert fig.get_suptitle() == "profile smoke"
    long = figures.figure4_tool_errors(_ablation(tmp_path, rl_metrics), note="word " * 60)
    assert all(len(line) <= 6.4 * 15 for line in long.get_suptitle().splitlines())


def test_figure4_with_undefined_tool_error_ratios(tmp_path):
    # NaN: no correct trajectory called the tool that step (the trainers write it so)
    nan = float("nan")
    for alg in ("grpo", "grpo_roc"):
        for seed in (0, 1):
            d = tmp_path / f"{alg}_seed{seed}"
            d.mkdir()
            rows = [{"step": s, "algorithm": alg, "seed": seed, "tool_error_ratio_correct_before":
                     nan if alg == "grpo" or seed == 1 else 0.1 * s} for s in (1, 2, 3)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = figures.figure4_tool_errors(tmp_path, smooth=2)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")]
    # GRPO has no defined value: no line (and no crash); RoC counts both seeds that ran
    assert labels == ["GRPO-RoC, sampled (2 seeds)"]


def test_figure4_with_no_defined_value_says_so_without_a_warning(tmp_path):
    # a smoke run: no correct trajectory ever called the tool, every ratio NaN; before, the empty
    # axes asked for a legend (matplotlib's "No artists with labels" warning in notebook 06)
    rows = [{"step": s, "algorithm": alg, "seed": 0, "tool_error_ratio_correct_before": float("nan"),
             "tool_error_ratio_correct_after": float("nan")} for alg in ("grpo", "grpo_roc") for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.figure4_tool_errors(tmp_path)
    ax = fig.axes[0]
    assert ax.get_legend() is None and not ax.get_lines()
    assert any("no correct trajectory called the tool" in t.get_text() for t in ax.texts)


def test_figure8_marks_stage_boundaries(tmp_path, rl_metrics):
    dirs = []
    for i, (stage, n) in enumerate([("stage1", 4), ("stage2", 2), ("stage3", 3)]):
        start = [0, 4, 6][i]
        rl_metrics(tmp_path / stage / "metrics.jsonl", stage=stage, algorithm="grpo_roc", seed=0, steps=n,
                   start_global=start)
        dirs.append(tmp_path / stage)
    fig = figures.figure8_stages(figures.collect_metrics(dirs), stage_end_reference={"stage1": {"aime24": 72.1}})
    ax_acc, ax_len = fig.axes
    data_lines = [ln for ln in ax_acc.get_lines() if ln.get_label() in ("stage1", "stage2", "stage3")]
    assert [list(ln.get_xdata()) for ln in data_lines] == [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    boundaries = sorted(ln.get_xdata()[0] for ln in ax_len.get_lines() if ln.get_linestyle() == "--")
    assert boundaries == [4.5, 6.5]
    assert "response length" in ax_len.get_ylabel()
    assert "paper, Qwen3-14B, stage-end aime24 avg@16 % (reference, not this run): stage1 72.1" in fig.get_suptitle()


def test_figure9_two_panels_and_saved_files(tmp_path, rl_metrics):
    fig = figures.figure9_roc_ablation(_ablation(tmp_path, rl_metrics, seeds=(0,)), smooth=3)
    assert len(fig.axes) == 2
    acc = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    # smoothed accuracy: trailing mean of 0.32, 0.34, 0.36 ... over 3 steps
    np.testing.assert_allclose(acc["GRPO (1 seed)"].get_ydata()[2], np.mean([0.32, 0.34, 0.36]))
    paths = figures.save_figure(fig, tmp_path / "figs", "figure9")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)


def test_missing_key_is_named_with_file(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(json.dumps({"step": 1, "algorithm": "grpo", "seed": 0, "accuracy": 0.5}) + "\n")
    with pytest.raises(MetricsError, match=r"response_len_mean.*metrics.jsonl"):
        figures.figure9_roc_ablation(p)


def test_bad_json_line_is_named(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n\n{"step": 2,\n')
    with pytest.raises(MetricsError, match=r"metrics.jsonl:3"):
        figures.read_metrics(p)
    with pytest.raises(MetricsError, match="not found"):
        figures.collect_metrics(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MetricsError, match="no metrics.jsonl"):
        figures.collect_metrics(tmp_path / "empty")


def test_live_curves_keep_rows_and_title_latest_values():
    live = figures.LiveCurves(("loss", "lr"), total=4, every=2, title="SFT")
    for s in range(1, 5):
        live({"step": s, "loss": 1.0 / s, "lr": 0.1})
    live({"stage": "sft", "summary": {"final_loss": 0.25}})
    assert live.summary == {"final_loss": 0.25} and len(live.rows) == 4
    assert live.status().startswith("SFT step 4/4  loss 0.25  lr 0.1")
    fig = live.figure()
    assert len(fig.axes) == 2
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [1, 0.5, 1 / 3, 0.25])
    with pytest.raises(ValueError):
        figures.LiveCurves(())


def test_live_curves_redraw_a_burst_of_rows_at_most_every_min_interval_but_always_each_runs_last_step():
    """Issue #16: notebook 06 replays the background job's 400 finished rows at every=1 and spent
    90 s redrawing once per row; now a burst redraws at most every min_interval_s, plus each run's
    last step (x == total) and the summary."""
    live = figures.LiveCurves(("accuracy",), total=40, every=1, group=("algorithm", "seed"), min_interval_s=60.0)
    for seed in range(10):
        for s in range(1, 41):
            live({"step": s, "accuracy": 0.5, "algorithm": "grpo", "seed": seed})
    assert len(live.rows) == 400
    assert live.draws == 1 + 10  # the first row (none drawn yet), then each run's step 40
    live({"summary": {}})
    assert live.draws == 12
    cut = figures.LiveCurves(("accuracy",), total=40, every=1, min_interval_s=60.0)  # a run stopped at step 7
    with StepBar(40, "stage", cut):
        for s in range(1, 8):
            cut({"step": s, "accuracy": 0.5})
        assert cut.draws == 1
    assert cut.draws == 2  # the with block's end redrew the rows the throttle held back
    cut.flush()
    assert cut.draws == 2  # nothing new: no redraw
    eager = figures.LiveCurves(("accuracy",), total=40, every=1, min_interval_s=0.0)
    for s in range(1, 6):
        eager({"step": s, "accuracy": 0.5})
    assert eager.draws == 5  # with no interval every row redraws, as before


def test_live_curves_split_groups_into_lines():
    live = figures.LiveCurves(("accuracy",), group=("algorithm", "seed"))
    for alg in ("grpo", "grpo_roc"):
        for s in (1, 2):
            live({"step": s, "accuracy": 0.5, "algorithm": alg, "seed": 0})
    lines = live.figure().axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["algorithm=grpo seed=0", "algorithm=grpo_roc seed=0"]
    assert all(list(ln.get_xdata()) == [1, 2] for ln in lines)


def test_figure4_of_runs_that_never_logged_the_ratio_says_so(tmp_path):
    # VERL's rows (kit.bridge.metric_map.METRIC_MAP): the GRPO arm never has the key, a RoC step without a
    # correct tool-calling trajectory neither; before, figure 4 raised MetricsError and stopped 06 and 20
    for alg in ("grpo", "grpo_roc"):
        (tmp_path / alg).mkdir()
        (tmp_path / alg / "metrics.jsonl").write_text(json.dumps({"step": 1, "algorithm": alg, "seed": 0,
                                                                  "accuracy": 0.0, "engine": "verl"}) + "\n")
    ax = figures.figure4_tool_errors(tmp_path).axes[0]
    assert not ax.get_lines() and any("no metrics file logs tool_error_ratio_correct_before" in t.get_text()
                                      for t in ax.texts)
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"step": 1, "accuracy": 0.0}) + "\n")
    with pytest.raises(MetricsError, match=r"\['algorithm', 'seed'\]"):  # what it cannot do without
        figures.figure4_tool_errors(bare)
