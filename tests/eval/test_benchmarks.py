"""Benchmark loaders on the real shared files, and GPQA from a user-supplied CSV."""

import csv

import pytest

from kit.config.paths import data_dir
from kit.eval.benchmarks import (
    HMMT_SUFFIX,
    BenchmarkFormatError,
    benchmark_path,
    load_benchmark,
    load_gpqa,
    strip_hmmt_suffix,
)

needs_data = pytest.mark.skipif(not (data_dir() / "benchmarks").is_dir(), reason="no shared data")


@needs_data
@pytest.mark.parametrize("name, rows", [("aime24", 30), ("aime24_figures", 30), ("aime25", 30), ("math500", 500),
                                        ("hmmt25", 30)])
def test_row_counts(name, rows):
    items = load_benchmark(name)
    assert len(items) == rows and len({i.id for i in items}) == rows
    assert all(i.question.strip() and i.answer for i in items)


@needs_data
def test_quirks():
    hmmt = load_benchmark("hmmt25")
    assert not any("Please reason step by step" in i.question for i in hmmt)
    assert hmmt[0].answer == "103" and hmmt[0].question.endswith("units digit $1$.")
    assert "Please reason step by step" in benchmark_path("hmmt25").read_text()
    aime25 = load_benchmark("aime25")
    assert aime25[0].id == "0" and aime25[0].answer == "70"
    assert all(i.answer.isdigit() for i in load_benchmark("aime24") + aime25)
    assert [i.id for i in load_benchmark("math500", max_problems=3)] == ["0", "1", "2"]
    assert "[asy]" in " ".join(i.question for i in load_benchmark("aime24_figures"))


def test_strip_suffix_only_when_present():
    assert strip_hmmt_suffix("Find x.\n" + HMMT_SUFFIX) == "Find x."
    assert strip_hmmt_suffix("Find x.") == "Find x."


def test_gpqa_needs_user_path_and_letters_answers(tmp_path):
    with pytest.raises(ValueError, match="gpqa_path"):
        load_benchmark("gpqa")
    path = tmp_path / "gpqa_diamond.csv"
    cols = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i in range(6):
            w.writerow([f"rec{i}", f"Question {i}?", f"right{i}", f"wrong{i}a", f"wrong{i}b", f"wrong{i}c"])
    items = load_benchmark("gpqa", gpqa_path=str(path))
    assert len(items) == 6
    for i, it in enumerate(items):
        assert it.answer in "ABCD" and it.meta["choices"]["ABCD".index(it.answer)] == f"right{i}"
        assert f"{it.answer}) right{i}" in it.question
    assert len({it.answer for it in items}) > 1  # shuffled, not always "A"
    assert [it.answer for it in load_gpqa(path)] == [it.answer for it in items]  # deterministic
    with path.open("a", newline="") as fh:
        csv.writer(fh).writerow(["rec9", "Q?", "", "a", "b", "c"])
    with pytest.raises(BenchmarkFormatError, match="row 7"):
        load_gpqa(path)


def test_unknown_benchmark():
    with pytest.raises(KeyError, match="math500"):
        load_benchmark("aime23")


def _gpqa_records():
    return [{"Record ID": f"rec{i}", "Question": f"Question {i}?", "Correct Answer": f"right{i}",
             "Incorrect Answer 1": f"wrong{i}a", "Incorrect Answer 2": f"wrong{i}b",
             "Incorrect Answer 3": f"wrong{i}c", "Subdomain": "x"} for i in range(6)]


def test_gpqa_other_formats_and_bom_give_the_same_items(tmp_path):
    # review #8: a CSV saved with a byte-order mark lost its first column ("Record ID", so the
    # shuffle changed; "Question" first -> missing column), and JSONL/parquet copies did not load
    import json

    import pandas as pd

    recs = _gpqa_records()
    plain = tmp_path / "gpqa.csv"
    pd.DataFrame(recs).to_csv(plain, index=False)
    bom = tmp_path / "gpqa_bom.csv"
    bom.write_text(plain.read_text(encoding="utf-8"), encoding="utf-8-sig")
    jsonl = tmp_path / "gpqa.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs))
    parquet = tmp_path / "gpqa.parquet"
    pd.DataFrame(recs).to_parquet(parquet)
    ref = [(it.id, it.question, it.answer) for it in load_gpqa(plain)]
    assert [r[0] for r in ref] == [f"rec{i}" for i in range(6)]
    for path in (bom, jsonl, parquet):
        assert [(it.id, it.question, it.answer) for it in load_benchmark("gpqa", gpqa_path=str(path))] == ref, path
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(recs[0]) + "\n" + json.dumps({**recs[1], "Correct Answer": ""}) + "\n")
    with pytest.raises(BenchmarkFormatError, match="row 2"):
        load_gpqa(bad)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(parquet.read_bytes()[:50])
    with pytest.raises(BenchmarkFormatError, match="corrupt.parquet"):
        load_gpqa(corrupt)
