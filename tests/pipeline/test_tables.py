"""Tables 3-6: reproduced beside published values, captions naming profile and model, absent stays absent."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kit.report import tables
from kit.report.tables import RunInfo

RUN = RunInfo("smoke", "tiny Qwen3 (0.45M params)", n_samples=2, temperature=0.6)
SUMMARY = {"aime24": {"accuracy": 0.0, "response_len_mean": 87.5}, "math500": {"accuracy": 0.125},
           "hmmt25": {"accuracy": None}}


def test_table3_reproduced_beside_paper_with_absent_as_nan():
    df = tables.table3_math(SUMMARY, RUN)
    col = RUN.column
    assert list(df.columns)[0] == col and col == "reproduced: smoke, tiny Qwen3 (0.45M params)"
    assert df.loc["MATH-500", col] == pytest.approx(12.5)  # percent
    assert df.loc["AIME24", col] == 0.0  # a measured zero stays zero
    assert math.isnan(df.loc["AIME25", col]) and math.isnan(df.loc["HMMT25", col])  # not measured: absent
    assert df.loc["AIME24", "paper: rStar2-Agent-14B"] == 80.6
    assert math.isnan(df.loc["MATH-500", "paper: o3-mini (medium)"])  # not published: absent
    cap = df.attrs["caption"]
    assert "smoke" in cap and "tiny Qwen3" in cap and "avg@2" in cap and "reference only" in cap


@pytest.mark.parametrize("fn,rows,paper_col", [
    (tables.table4_response_tokens, 4, "paper: DeepSeek-R1-Zero (671B)"),
    (tables.table5_generalization, 4, "paper: rStar2-Agent SFT checkpoint"),
    (tables.table6_32b, 3, "paper: ReTool-32B (400 steps)"),
])
def test_every_table_has_reproduced_and_paper_columns(fn, rows, paper_col):
    df = fn(SUMMARY, RUN)
    assert len(df) == rows and df.columns[0].startswith("reproduced: ") and paper_col in df.columns
    assert df[paper_col].notna().any()


def test_table4_uses_token_lengths_not_percent():
    df = tables.table4_response_tokens(SUMMARY, RUN)
    assert df.loc["AIME24", RUN.column] == 87.5
    assert df.loc["AIME24", "paper: rStar2-Agent-14B"] == pytest.approx(9339.7)


def test_csv_and_latex_keep_absent_visible(tmp_path):
    df = tables.table3_math(SUMMARY, RUN)
    csv, tex = tables.write_table(df, tmp_path)
    back = pd.read_csv(csv, index_col=0)
    assert math.isnan(back.loc["AIME25", RUN.column]) and back.loc["AIME24", RUN.column] == 0.0
    text = tex.read_text()
    assert "---" in text and "\\caption{" in text and "smoke" in text and "80.6" in text
    assert "12.5" in text and "\\%" in text  # percent sign escaped in the caption
    html = tables.show(df)._repr_html_()
    assert tables.ABSENT in html and "reproduced: smoke" in html


def test_missing_reference_section_is_named(tmp_path):
    p = tmp_path / "ref.yaml"
    p.write_text("rstar2_agent: {table3_math: {}}\n")
    ref = tables.paper_values(p)
    with pytest.raises(tables.ReferenceError, match="table6_32b"):
        tables.table6_32b(SUMMARY, RUN, ref)
    with pytest.raises(tables.ReferenceError, match="not found"):
        tables.paper_values(tmp_path / "nope.yaml")


def _result(path, bench, avg, n_problems, size, skipped=()):
    import json

    path.mkdir(parents=True, exist_ok=True)
    (path / f"{bench}.json").write_text(json.dumps({
        "benchmark": bench, "avg_at_n": avg, "n_samples": 4, "n_problems": n_problems, "response_tokens_mean": 100.0,
        "manifest": {"model": "runs/x/policy", "sampling": {"temperature": 0.6}, "benchmark_size": size,
                     "skipped_prompt_too_long": list(skipped)}}))


def test_eval_summary_reads_results_and_caption_states_coverage(tmp_path):
    _result(tmp_path / "eval", "aime24", 0.0, 30, 30)
    _result(tmp_path / "eval", "math500", 0.01, 496, 500, skipped=["a", "b", "c", "d"])
    _result(tmp_path / "eval", "gpqa", 0.25, 198, 198)
    summary = tables.eval_summary(tmp_path)
    assert set(summary) == {"aime24", "math500", "gpqa_diamond"}
    assert summary["math500"]["accuracy"] == 0.01 and summary["math500"]["skipped"] == 4
    info = tables.run_info("tiny", tables.describe_model("tiny", 447_000), summary)
    assert info.n_samples == 4 and info.temperature == 0.6 and info.model == "tiny Qwen3 trained from scratch (0.45M params)"
    cap = tables.table3_math(summary, info).attrs["caption"]
    assert "MATH-500 496 of 500" in cap and "exceeds the model's context: MATH-500 4" in cap
    assert tables.table5_generalization(summary, info).loc["GPQA-Diamond", info.column] == 25.0
    with pytest.raises(FileNotFoundError, match="no evaluation results"):
        tables.eval_summary(tmp_path, tag="sft")
    (tmp_path / "eval" / "aime25.json").write_text("{}")
    with pytest.raises(ValueError, match="aime25.json"):
        tables.eval_summary(tmp_path)


def test_csv_keeps_published_values_exact(tmp_path):
    df = tables.table4_response_tokens(SUMMARY, RUN)
    csv, _ = tables.write_table(df, tmp_path)
    back = pd.read_csv(csv, index_col=0)
    assert back.loc["AIME24", "paper: DeepSeek-R1-Zero (671B)"] == 14246.8
    assert back.loc["AIME25", "paper: rStar2-Agent-14B"] == 10943.4
