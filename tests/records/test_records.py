"""Rollout records: one schema filled from a local step and from VERL-shaped rows, written and read back."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kit.algo import RocParams, counters, group_advantage, roc_step
from kit.records import (
    RolloutRecorder,
    check_record,
    read_records,
    read_step,
    records_from_trajectories,
    records_from_verl,
    scan,
    step_path,
)
from kit.rollout.protocol import ERROR_KINDS

VERDICTS = ["correct"] * 2 + ["wrong", "no_answer"] + ["wrong"] * 4
PARAMS = RocParams(group_size=2, min_positive=1, min_negative=1, mode="rank", negative_order="rollout")


def _select(step):
    trs, rewards, gids, _ = step
    sel, _ = roc_step(np.asarray(rewards), gids, counters(trs), PARAMS, seed=0)
    adv = group_advantage(torch.tensor(rewards)[sel.kept], [gids[i] for i in sel.kept])
    return sel, adv


def _local(step, **kw):
    trs, rewards, gids, pids = step
    sel, adv = _select(step)
    return records_from_trajectories(trs, rewards, gids, stage="stage1", step=1, algorithm="grpo_roc", kept=sel,
                                     advantages=adv, problem_ids=pids, roc=PARAMS,
                                     verdicts=VERDICTS, **kw), sel, adv


def test_a_local_step_fills_every_column_and_reads_back_the_same(tmp_path, step):
    trs, rewards, gids, _ = step
    recs, sel, adv = _local(step)
    rec = RolloutRecorder(tmp_path, tokenizer_dir=tmp_path / "policy")
    path = rec.record_step(trs, rewards, gids, stage="stage1", step=1, algorithm="grpo_roc", kept=sel,
                           advantages=adv, problem_ids=step[3], roc=PARAMS, verdicts=VERDICTS)
    assert path == step_path(tmp_path, "stage1", "grpo_roc", 1) and rec.rows_written == 8
    back = read_records(tmp_path)
    assert len(back) == 8
    for a, b in zip(recs, back, strict=True):
        for k, v in a.items():
            if isinstance(v, float) and math.isnan(v):
                assert math.isnan(b[k]), k
            elif k == "logprobs":
                assert np.allclose(v, b[k]), k
            elif isinstance(v, float):
                assert b[k] == pytest.approx(v, rel=1e-6), k
            else:
                assert b[k] == v, k
    ok, err, nocall, cut = back[:4]
    assert ok["call_status"] == ["ok"] and err["call_status"] == ["error", "ok"]
    assert err["tool_errors"]["exception"] == 1 and err["p_err"] == 0.5 and ok["p_err"] == 0.0
    assert nocall["p_err"] == 0.5 and nocall["tool_calls"] == 0  # no call: the report's 0.5
    assert cut["truncated"] and cut["finish_reason"] == "length" and len(cut["response_ids"]) == 12
    assert err["p_total"] == pytest.approx(err["p_err"] + err["p_format"])
    assert [r["kept"] for r in back] == [i in set(sel.kept.tolist()) for i in range(8)]
    kept_adv = [r["advantage"] for r in back if r["kept"]]
    assert np.allclose(kept_adv, adv.numpy()) and all(math.isnan(r["advantage"]) for r in back if not r["kept"])
    assert back[0]["group_reward_std"] == pytest.approx(0.5) and not back[0]["group_zero_spread"]
    assert all(r["group_zero_spread"] and r["group_reward_std"] == 0 for r in back[4:])
    assert [r["traj_index"] for r in back] == [0, 1, 2, 3] * 2 and [r["prompt_index"] for r in back] == [0] * 4 + [1] * 4
    assert ok["response_mask"] == trs[0].response_mask and 0 in ok["response_mask"]
    assert all(lp == 0.0 for lp, m in zip(ok["logprobs"], ok["response_mask"], strict=True) if m == 0)
    assert ok["entropy"] is None  # no backend records it yet
    assert scan(tmp_path).meta(scan(tmp_path).files[0])["tokenizer_dir"] == str(tmp_path / "policy")


def test_every_and_max_prompts_choose_the_steps_and_groups(tmp_path, step):
    trs, rewards, gids, _ = step
    rec = RolloutRecorder(tmp_path, every=2, max_prompts=1)
    paths = [rec.record_step(trs, rewards, gids, stage="stage1", step=s, algorithm="grpo") for s in (1, 2, 3)]
    assert paths[1] is None and paths[0] and paths[2]
    rows = read_records(tmp_path)
    assert {r["step"] for r in rows} == {1, 3} and {r["prompt_index"] for r in rows} == {0}
    assert all(r["kept"] for r in rows)  # GRPO: every row kept, advantages computed over the group
    assert rows[0]["advantage"] > 0 > rows[2]["advantage"]


def test_a_half_written_last_file_is_skipped_and_named(tmp_path, step):
    recs, _, _ = _local(step)
    RolloutRecorder(tmp_path).write(recs)
    bad = step_path(tmp_path, "stage1", "grpo_roc", 2)
    bad.write_bytes(step_path(tmp_path, "stage1", "grpo_roc", 1).read_bytes()[:300])  # cut short
    (bad.parent / ".step_000003.parquet.tmp").write_bytes(b"PAR1")  # a write in progress: never listed
    index = scan(tmp_path)
    assert [f.step for f in index.files] == [1, 2]
    assert len(read_step(index.files[0], index=index)) == 8 and read_step(index.files[1], index=index) == []
    assert index.unreadable == [bad]
    assert len(read_records(tmp_path)) == 8
    with pytest.raises(Exception, match="step_000002.parquet"):
        read_step(bad)


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _verl_batch(trs, rewards, gids, pad=0):
    """The step as VERL's replay buffer holds it: left-padded prompts, right-padded responses, extra_fields."""
    n, tp, tr = len(trs), max(len(t.prompt_ids) for t in trs), max(len(t.response_ids) for t in trs) + 3
    prompts, resp, rmask, att = (np.full((n, tp), pad), np.full((n, tr), pad), np.zeros((n, tr), int),
                                 np.zeros((n, tp + tr), int))
    lps, scores = np.zeros((n, tr), np.float32), np.zeros((n, tr), np.float32)
    for i, t in enumerate(trs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        prompts[i, tp - p:], att[i, tp - p:tp] = t.prompt_ids, 1
        resp[i, :r], rmask[i, :r], att[i, tp:tp + r], lps[i, :r] = t.response_ids, t.response_mask, 1, t.logprobs
        lps[i, r:] = -9.0  # padding values a reader must not take
        scores[i, r - 1] = rewards[i]
    # the keys kit.bridge.agent_loop.trajectory_to_output writes into extra_fields
    extra = [{"tool_calls": t.tool_calls, "tool_errors": t.n_tool_errors, "infra_errors": t.infra_errors,
              "answer_tags": t.answer_tags, "truncated": t.truncated, "finish_reason": t.finish_reason, "turns": t.turns,
              "tool_wall_s": 0.0, **{f"tool_error_{k}": t.tool_errors[k] for k in ERROR_KINDS}} for t in trs]
    return {"uid": np.array(gids, dtype=object), "prompts": torch.tensor(prompts), "responses": torch.tensor(resp),
            "response_mask": torch.tensor(rmask), "attention_mask": torch.tensor(att),
            "rollout_log_probs": torch.tensor(lps), "rm_scores": torch.tensor(scores), "extra_fields": extra}


def _verl_v1(trs, rewards, gids):
    """The step as the v1 replay buffer reads it from TransferQueue: one unpadded tensor per session."""
    b = _verl_batch(trs, rewards, gids)
    scores = [torch.zeros(len(t.response_ids)) for t in trs]
    for s, r in zip(scores, rewards, strict=True):
        s[-1] = r
    return {"uid": gids, "prompts": [torch.tensor(t.prompt_ids) for t in trs],
            "responses": [torch.tensor(t.response_ids) for t in trs],
            "response_mask": [torch.tensor(t.response_mask) for t in trs],
            "rollout_log_probs": [torch.tensor(t.logprobs) for t in trs], "rm_scores": scores,
            "extra_fields": b["extra_fields"]}


@pytest.mark.parametrize("layout", ["v1", "v0_extra_fields", "v0_columns"])
def test_verl_rows_give_the_local_records_through_the_same_reader(tmp_path, step, layout):
    trs, rewards, gids, _ = step
    local, sel, adv = _local(step)
    batch = _verl_v1(trs, rewards, gids) if layout == "v1" else _verl_batch(trs, rewards, gids)
    if layout == "v0_columns":  # VERL v0 spreads extra_fields into one column per key
        extra = batch.pop("extra_fields")
        batch.update({k: np.array([e[k] for e in extra], dtype=object) for k in extra[0]})
    verl = records_from_verl(batch, stage="stage1", step=1, algorithm="grpo_roc", kept=sel.kept, roc=PARAMS)
    RolloutRecorder(tmp_path / "local").write(local)
    RolloutRecorder(tmp_path / "verl").write(verl)
    back = {r["runtime"]: r for r in read_records(tmp_path) if r["traj_index"] == 1 and r["prompt_index"] == 0}
    assert set(back) == {"local", "verl"}
    differ = {k for k in back["local"] if not _same(back["local"][k], back["verl"][k])}
    # VERL rows carry counts, not per-call lists or the verifier's reason; prompt ids without an index column
    assert differ == {"runtime", "prompt_id", "verdict", "call_turn", "call_status", "call_error_kind", "call_shown"}
    assert math.isnan(back["verl"]["advantage"]) and not back["verl"]["kept"]  # row 1 was dropped
    # the advantage the adapter computes over the kept rows equals the trainer's
    assert all(_same(a["advantage"], b["advantage"]) for a, b in zip(local, verl, strict=True))


def test_a_bad_record_is_named(step):
    recs, _, _ = _local(step)
    recs[3]["response_mask"] = recs[3]["response_mask"][:-1]
    with pytest.raises(ValueError, match="record 3: response_mask has"):
        check_record(recs[3], "record 3")
    del recs[0]["kept"]
    with pytest.raises(KeyError, match="missing columns \\['kept'\\]"):
        check_record(recs[0])
