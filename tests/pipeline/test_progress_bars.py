"""Progress bars (issue #20): the kit's own bar over each trainer's steps, drawn before the trainer's
first step and advanced by its metrics rows; no third-party bar when a policy is saved or loaded."""

from __future__ import annotations

import pytest

from kit import chain, progress
from kit.chain import training
from kit.config import load
from kit.models import build_tiny_model, load_policy, save_policy, train_tokenizer


@pytest.fixture
def text_bars(monkeypatch):
    monkeypatch.setenv("KIT_PROGRESS", "text")  # what the pipeline runner sets for its kernels


def test_step_bar_follows_steps_and_passes_rows_on(text_bars, capsys):
    seen = []
    bar = progress.StepBar(10, "cold-start SFT", seen.append, keys=("loss",))
    assert "cold-start SFT:   0%" in capsys.readouterr().out  # drawn before any row
    for step in (4, 5):  # a run resumed from its step-3 checkpoint sends rows from step 4 on
        bar({"step": step, "loss": step / 2})
    assert bar.bar.n == 5 and bar.bar.postfix == "loss=2.5"
    bar({"stage": "sft", "summary": {"steps": 10}})
    last = capsys.readouterr().out.strip().split("\r")[-1]
    assert "5/10" in last and "loss=2.5" in last, last  # the step's own loss beside it
    assert seen == [{"step": 4, "loss": 2.0}, {"step": 5, "loss": 2.5},
                                      {"stage": "sft", "summary": {"steps": 10}}]
    rows = progress.StepBar(6, "RoC ablation", count_rows=True)
    for step in (1, 2, 1, 2):  # two runs, each from step 1
        rows({"step": step})
    assert rows.bar.n == 4
    rows.close()


class _Runtime:
    """Stands in for kit.runtime's local engine: records what the cell showed before the first step."""

    def __init__(self, capsys):
        self.capsys, self.before_first_step = capsys, ""

    def run_stage(self, cfg, stage, *, run_dir, init_dir, data_dir, progress):
        self.before_first_step = self.capsys.readouterr().out
        for step in range(1, cfg.stages["stage1"].steps + 1):
            progress({"step": step, "accuracy": 0.5})
        progress({"stage": stage, "summary": {"steps": 2}})
        return {"steps": 2}

    def run_sft(self, cfg, *, progress, **kw):
        self.before_first_step = self.capsys.readouterr().out
        progress({"step": 1, "loss": 2.0})
        progress({"stage": "sft", "summary": {}})
        return {}


def test_training_cells_show_a_bar_before_the_first_step(text_bars, capsys, monkeypatch, tmp_path):
    cfg = load("smoke", write=False)
    rt = _Runtime(capsys)
    monkeypatch.setattr(training.runtime, "get", lambda cfg: rt)
    rows = []
    chain.train_stage(cfg, "stage1", tmp_path, tmp_path, tmp_path, progress=rows.append)
    assert "RL stage1:   0%" in rt.before_first_step
    assert "RL stage1: 100%" in capsys.readouterr().out and len(rows) == 3
    chain.cold_start(cfg, tmp_path)
    assert "cold-start SFT:   0%" in rt.before_first_step and f"| 0/{cfg.sft.steps} [" in rt.before_first_step


def test_no_third_party_bar_when_a_policy_is_saved_or_loaded(tmp_path, capfd):
    cfg = load("smoke", write=False)
    tok = train_tokenizer(["What is 12 * 34? <tool_call>print(12 * 34)</tool_call> 408"] * 20, 300)
    model = build_tiny_model(cfg.model, tok, seed=0)
    capfd.readouterr()
    save_policy(model, tok, tmp_path / "policy")
    load_policy(tmp_path / "policy")
    out, err = capfd.readouterr()
    assert "Writing model shards" not in err + out and "Loading weights" not in err + out
    assert "it/s" not in err + out
