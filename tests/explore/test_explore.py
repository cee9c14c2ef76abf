"""The explorer's HTML (pure functions), its static export and its widgets, on scripted records."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kit.algo import RocParams, counters, roc_step
from kit.explore import Explorer, export_html, pick_groups, tokens_html, trajectory_view_html
from kit.explore.render import FEEDBACK_OPACITY, feedback_statuses
from kit.records import RolloutRecorder, read_records

PARAMS = RocParams(group_size=2, min_positive=1, min_negative=1, mode="rank", negative_order="rollout")


def _write(run_dir, step, steps=(1,), flip=()):
    """Record ``steps``; at the steps in ``flip`` group 1's first answer is right (no zero spread)."""
    trs, rewards, gids, pids = step
    rec = RolloutRecorder(run_dir)
    for s in steps:
        r = list(rewards)
        if s in flip:
            r[4] = 1.0
        sel, _ = roc_step(np.asarray(r), gids, counters(trs), PARAMS, seed=0)
        # a fixed entropy per token (rising along the response), as a backend that records it would give
        ent = [list(np.linspace(0.1, 3.0, len(t.response_ids))) for t in trs]
        rec.record_step(trs, r, gids, stage="stage1", step=s, algorithm="grpo_roc", kept=sel, problem_ids=pids,
                        roc=PARAMS, entropies=ent)


def test_tokens_html_dims_feedback_marks_calls_and_colours_by_entropy():
    pieces = ["go ", "<tool_call>", "x", "</tool_call>", "<|im_end|>", "\nFEED", "so"]
    mask = [1, 1, 1, 1, 1, 0, 1]
    out = tokens_html(pieces, mask, [0.2, 1.0, 1.0, 1.0, 0.1, 5.0, 2.0], "entropy", feedback=[["error"]])
    spans = re.findall(r'<span data-kind="(\w+)"[^>]*?style="([^"]*)">', out)
    kinds = [k for k, _ in spans]
    assert kinds == ["model", "call", "call", "call", "model", "tool", "model"]
    alpha = [float(m) for m in re.findall(r"rgba\(255,140,0,([\d.]+)\)", out)]
    assert alpha == [0.16, 0.48, 0.48, 0.48, 0.12, 0.88]  # model tokens only, scaled to their max (2.0)
    tool_style = spans[5][1]
    assert f"opacity:{FEEDBACK_OPACITY}" in tool_style and "rgba" not in tool_style  # dimmed, never coloured
    assert 'data-call-status="error"' in out and "⚠ error" in out
    with pytest.raises(ValueError, match="7 pieces, 7 mask values, 2 values"):
        tokens_html(pieces, mask, [0.1, 0.2], "entropy")


def test_feedback_blocks_carry_their_calls_statuses(tmp_path, step):
    _write(tmp_path, step)
    recs = read_records(tmp_path)
    assert feedback_statuses(recs[1]) == [["error"], ["ok"]] and feedback_statuses(recs[0]) == [["ok"]]
    assert feedback_statuses({**recs[1], "call_status": None}) == [[], []]  # VERL records: counts only


def test_export_of_fixed_records_is_one_self_contained_page(tmp_path, step, tok):
    _write(tmp_path, step)
    assert pick_groups(tmp_path) == [("stage1", "grpo_roc", 1, 1), ("stage1", "grpo_roc", 1, 0)]
    path = export_html(tmp_path, groups=[("stage1", "grpo_roc", 1, 0), ("stage1", "grpo_roc", 1, 1)], tokenizer=tok,
                       also=())
    assert path == tmp_path / "explorer.html"
    page = path.read_text()
    assert not re.search(r"<script|<link|src=|url\(|https?://", page)  # nothing to fetch
    rows = re.findall(r"<tr data-traj='(\d)' data-kept='(\d)'", page)
    # group 0: RoC keeps one right and one wrong (rank: the clean positive; rollout order: the first negative)
    assert rows == [("0", "1"), ("1", "0"), ("2", "1"), ("3", "0")] + [(str(i), "0") for i in range(4)]
    assert page.count('data-kept="1"') == 2 * 2  # table + trajectory header of each kept one
    assert page.count('data-kept="0" style="color:#b3261e">✗ dropped') == 2 * 6
    assert page.count('data-zero-spread="1"') == 1  # group 1 only
    assert page.count('data-call-status="error"') == 1 and page.count('data-call-status="ok"') == 2
    assert page.count('data-kind="tool" data-call-status') == 3
    assert "rgba(255,140,0,0.88)" in page and "coloured by entropy" in page
    assert "&lt;tool_call&gt;" in page and 'data-kind="call"' in page
    assert page.count("What is 6 * 7?") == 2  # each group's prompt, decoded
    assert "\\boxed{42}" in re.sub(r"<[^>]+>", "", page)  # decoded text (one span per token), not ids
    both = export_html(tmp_path, groups=[("stage1", "grpo_roc", 1, 0)], tokenizer=tok).read_text()
    assert both.count("<details data-color='advantage'><summary>coloured by advantage</summary>") == 4  # each one
    assert "#e4e4e4" in both and 'title="advantage' in both  # by advantage too (dropped: no advantage)


def test_the_trajectory_view_falls_back_and_uses_the_rollout_view(tmp_path, step, tok):
    _write(tmp_path, step)
    rec = {**read_records(tmp_path)[0], "entropy": None}
    out = trajectory_view_html(rec, tok, "entropy")
    assert "coloured by surprisal (no entropy recorded" in out and "rgba(255,140,0," in out
    adv = trajectory_view_html(rec, tok, "advantage")
    assert "rgba(40,167,69," in adv and "rgba(255,140,0" not in adv
    spans = trajectory_view_html(rec, tok, "spans")  # kit.rollout.view's own span colours
    assert 'data-kind="tool" style="color:#1f4e9c;background:#e3ecfa"' in spans
    assert "⟨" in trajectory_view_html(rec, None, "entropy")  # no tokenizer: ids


def test_the_explorer_follows_step_prompt_filters_colour_and_new_steps(tmp_path, step, tok):
    _write(tmp_path, step, steps=(1, 2), flip=(2,))
    x = Explorer(tmp_path, tokenizer=tok)
    assert list(x.step.options) == [1, 2] and x.run.value == (".", "stage1", "grpo_roc") and x.step.value == 2
    x.step.value = 1
    assert x.prompt.value == 0 and "step 1" in x.group.value and x.group.value.count("<tr data-traj") == 4
    x.prompt.value = 1
    assert "zero reward spread" in x.group.value
    x.step.value = 2  # group 1 has one right answer at step 2
    assert x.prompt.value == 1 and "zero reward spread" not in x.group.value
    x.filters["zero_spread"].value = True
    assert list(x.prompt.options) == [] and "no group matches" in x.group.value
    x.step.value = 1
    assert [v for _, v in x.prompt.options] == [1]
    x.filters["zero_spread"].value = False
    x.filters["correct_with_tool_errors"].value = True
    assert [v for _, v in x.prompt.options] == [0] and x.traj.value == 1  # the correct one after 1/0
    assert "class='sel'><td>1</td>" in x.group.value and 'data-call-status="error"' in x.trajectory.value
    before = x.trajectory.value
    x.color.value = "advantage"
    assert x.trajectory.value != before and "#e4e4e4" in x.trajectory.value  # dropped: no advantage
    _write(tmp_path, step, steps=(3,))  # the run goes on writing
    x.refresh()
    assert list(x.step.options) == [1, 2, 3] and x.step.value == 1 and x.prompt.value == 0
    x.next_step.click()
    assert x.step.value == 2 and "step 2" in x.group.value
    x.next_step.click(), x.next_step.click()  # stops at the last step
    x.prev_step.click()
    assert x.step.value == 2


def test_two_seeds_of_one_arm_are_two_runs(tmp_path, step, tok):
    """An ablation writes one folder per arm and seed, all stage1/grpo_roc: each is its own run."""
    _write(tmp_path / "grpo_roc_seed0", step)
    _write(tmp_path / "grpo_roc_seed1", step, steps=(1, 2))
    x = Explorer(tmp_path, tokenizer=tok)
    assert [r.folder for _, r in x.run.options] == ["grpo_roc_seed0", "grpo_roc_seed1"]
    x.run.value = x.run.options[1][1]
    assert list(x.step.options) == [1, 2]
    with pytest.raises(KeyError, match="2 recorded runs of stage1/grpo_roc"):
        export_html(tmp_path, groups=[("stage1", "grpo_roc", 1, 0)], tokenizer=tok)
    page = export_html(tmp_path, groups=[("grpo_roc_seed1", "stage1", "grpo_roc", 2, 0)], tokenizer=tok).read_text()
    assert "step 2 · prompt 0" in page
    assert pick_groups(tmp_path)[0] == ("grpo_roc_seed0", "stage1", "grpo_roc", 1, 1)


def test_a_run_still_writing_or_a_foreign_file_is_named_and_the_last_readable_step_shown(tmp_path, step, tok):
    """Review of #32: a half-written last step opened the explorer on nothing, a foreign parquet raised a bare
    KeyError, a corrupt meta.json a JSONDecodeError naming no file, a mistyped folder read as "no records yet"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kit.explore import explore
    from kit.records import read_step

    _write(tmp_path, step, steps=(1, 2, 3))
    files = sorted((tmp_path / "rollouts" / "stage1" / "grpo_roc").glob("step_*.parquet"))
    files[2].write_bytes(files[2].read_bytes()[:200])  # still being written
    pq.write_table(pa.table({"a": [1]}), files[1])  # not a records file
    (tmp_path / "rollouts" / "meta.json").write_text("{bad")
    x = Explorer(tmp_path, tokenizer=tok)
    assert x.step.value == 1 and x.group.value.count("<tr data-traj") == 4
    assert "step_000002.parquet" in x.status.value and "step_000003.parquet" in x.status.value
    with pytest.raises(ValueError, match=r"step_000002\.parquet: not a rollout-records file: columns"):
        read_step(files[1])
    x2 = Explorer(tmp_path)  # no tokenizer given: the corrupt meta.json is listed, token ids shown
    assert "meta.json" in x2.status.value
    with pytest.raises(FileNotFoundError, match="no folder"):
        explore(tmp_path / "nope")
