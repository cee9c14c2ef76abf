"""Scoring a VERL validation dump (the format of RayPPOTrainer._write_generations)."""

import json

import pytest

from kit.eval.verl_val import VerlDumpError, score_verl_dump


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_groups_by_prompt_and_scores(tmp_path):
    rows = []
    for q, gold, outs in [("Q1", "5", ["\\boxed{5}", "\\boxed{5}", "\\boxed{4}", "no box"]),
                          ("Q2", "9", ["\\boxed{1}", "\\boxed{2}", "\\boxed{1}", "\\boxed{9}"])]:
        for o in outs:
            rows.append({"input": q, "output": o, "gts": gold, "score": float(o == f"\\boxed{{{gold}}}"), "step": 7,
                         "tool_calls": 1})
    p = tmp_path / "7.jsonl"
    _write(p, rows)
    r = score_verl_dump(p, "aime24", sampling={"temperature": 0.6}, bootstrap_samples=100)
    assert (r.n_problems, r.n_samples) == (2, 4)
    assert r.avg_at_n == pytest.approx(3 / 8)
    assert r.pass_at_k[4] == 1.0
    assert r.maj_at_k[4] == pytest.approx(0.5)  # Q1 votes 5 (right); Q2 votes 1 (wrong)
    assert r.tool_calls_per_traj == 1.0
    assert r.per_problem[0]["response_tokens"] == [None] * 4  # no tokenizer: lengths unknown
    assert r.manifest["step"] == 7 and str(p) in r.manifest["data_files"]


def test_unequal_groups_and_bad_rows(tmp_path):
    p = tmp_path / "1.jsonl"
    _write(p, [{"input": "a", "output": "", "gts": "1", "score": 0}] * 2 + [{"input": "b", "output": "", "gts": "1", "score": 0}])
    with pytest.raises(VerlDumpError, match="different sample counts"):
        score_verl_dump(p, "x")
    _write(p, [{"input": "a", "output": "", "gts": "1"}])
    with pytest.raises(VerlDumpError, match=r"line 1: missing keys \['score'\]"):
        score_verl_dump(p, "x")
