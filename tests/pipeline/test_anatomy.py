"""kit.chain.anatomy: one RoC step on one prompt, replayed from the stage's own seeds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from kit.chain.anatomy import pick_group, roc_step_anatomy
from kit.config import load
from kit.data import tasks
from kit.models import build_tiny_model, save_policy, train_tokenizer
from kit.train import rl, rollouts

OVER = {"data.task_train_size": 60, "data.task_heldout_size": 4, "model.torch_threads": 1, "sandbox.num_workers": 1,
        "rollout.batch_size": 16, "algorithm.prompts_per_step": 2, "algorithm.group_size": 4,
        "algorithm.oversample": 8, "stages.stage1.max_response_tokens": 24, "stages.stage1.max_turns": 2,
        "stages.stage1.steps": 1}


def test_pick_group_prefers_a_mixed_group_with_a_failed_call_in_a_correct_trajectory():
    rewards = np.array([[0, 0, 0], [1, 0, 1], [1, 0, 0], [1, 1, 1]])
    fails = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 0, 0]])
    assert pick_group(rewards, fails) == 2
    assert pick_group(rewards, np.zeros_like(fails)) == 1  # mixed, no errors
    assert pick_group(np.zeros((2, 3)), np.zeros((2, 3))) == 0  # nothing mixed: the first


def test_anatomy_replays_the_stage_first_step(tmp_path, monkeypatch):
    async def grade(pairs):  # a random model is never right: reward responses of even length
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    cfg = load("smoke", overrides=OVER, write=False)
    split = tasks.make_split(60, 4, 0)
    tok = train_tokenizer([p.question + " " + p.code for p in split.train] * 3, 400)
    init = save_policy(build_tiny_model(cfg.model, tok, seed=0), tok, tmp_path / "policy")
    rl.run_stage(cfg, "stage1", init, tmp_path / "stage1", evaluate=False)
    (row,) = [json.loads(line) for line in (tmp_path / "stage1" / "metrics.jsonl").read_text().splitlines()]

    a = roc_step_anatomy(cfg, init, stage_name="stage1")
    assert a.step_kept == row["kept"] and a.step_reward_mean == pytest.approx(row["reward_mean"])
    t = a.table
    assert len(t) == 8 and len(a.trajectories) == 8
    assert set(t.columns) >= {"reward", "p_err", "p_format", "p_total", "kept", "advantage"}
    assert np.allclose(t.p_total, t.p_err + t.p_format)
    kept = t[t.kept]  # the parity grader gives mixed groups: G rows kept, zero-mean advantages
    assert len(kept) == cfg.algorithm.group_size
    assert kept.advantage.mean() == pytest.approx(0.0, abs=1e-5)
    assert t[~t.kept].advantage.isna().all()
    assert (np.sign(kept.advantage) == np.where(kept.reward > 0, 1, -1)).all()
    assert "stage1 step 1" in a.note
    # the group as the explorer shows it: the step's records of that prompt, the same numbers as the table
    assert [r["traj_index"] for r in a.records] == list(range(8)) and {r["prompt_index"] for r in a.records} == {a.group}
    assert [r["kept"] for r in a.records] == t.kept.tolist()
    assert np.allclose([r["p_total"] for r in a.records], t.p_total) and np.allclose(
        [r["advantage"] for r in a.records], t.advantage, equal_nan=True)
    page = a.group_view(selected=0)._repr_html_()
    assert page.count("<tr data-traj=") == 8 and "class='sel'" in page and "kit-group-table" in page
    assert "p_total" in repr(a.group_view())  # the table as text where HTML does not show (the PDF)
    with pytest.raises(ValueError, match="outside the step's 2 prompts"):
        roc_step_anatomy(cfg, init, group=5)
