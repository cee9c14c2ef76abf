"""Pool loaders on the real shared files (row counts from the data directory's SOURCES.md) and on
malformed copies (errors name the file and the row)."""

import json
import shutil

import pytest

from kit.config.paths import data_dir
from kit.data import pools

REAL = data_dir()
needs_data = pytest.mark.skipif(not (REAL / "train").is_dir(), reason=f"no shared data at {REAL}")


@pytest.fixture(scope="module")
def loaded():
    return pools.load_pools(pools.POOLS)


@needs_data
def test_row_counts_match_sources_md(loaded):
    assert {k: len(v) for k, v in loaded.items()} == {
        "dapo": 17917, "gsm8k": 7473, "project_euler": 476, "aime_history": 982, "openmathreasoning": 5}
    assert len(pools.load_gsm8k(split="test")) == 1319


@needs_data
def test_every_row_has_source_and_unique_id(loaded):
    for name, rows in loaded.items():
        assert all(p.source == name and p.problem.strip() for p in rows)
        assert len({p.id for p in rows}) == len(rows), name


@needs_data
def test_gsm8k_answer_is_text_after_hashes(loaded):
    first = loaded["gsm8k"][0]
    assert first.answer == "72" and first.problem.startswith("Natalia sold clips")
    assert any("," in p.answer for p in loaded["gsm8k"])  # thousands commas are kept raw


@needs_data
def test_project_euler_md5_join_and_data_files(loaded):
    pe = {p.id: p for p in loaded["project_euler"]}
    assert sum(p.meta["md5_ok"] for p in pe.values()) == 455  # SOURCES.md: confirms 455 of 476
    assert pe["pe-1"].answer == "233168" and pe["pe-1"].meta["md5_ok"]
    assert not pe["pe-59"].meta["md5_ok"]  # statement changed since the answer list was made
    assert pe["pe-22"].meta["needs_file"] and not pe["pe-1"].meta["needs_file"]
    assert "Answer:" not in pe["pe-1"].problem and "Visible links" not in pe["pe-22"].problem


@needs_data
def test_aime_history_keeps_benchmark_rows_for_decontamination(loaded):
    ids = [p.id for p in loaded["aime_history"]]
    assert sum(i.startswith(("2024_", "2025_")) for i in ids) == 64
    assert all(p.meta["year"] == int(p.id[:4]) for p in loaded["aime_history"])


def _copy_train(tmp_path):
    dst = tmp_path / "train"
    shutil.copytree(REAL / "train", dst, ignore=shutil.ignore_patterns("dapo*"))
    return dst


@needs_data
def test_bad_jsonl_line_names_file_and_line(tmp_path):
    dst = _copy_train(tmp_path)
    lines = (dst / "gsm8k_train.jsonl").read_text().splitlines()
    lines[4] = '{"question": "x", "answer": "no final marker"}'
    (dst / "gsm8k_train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(pools.PoolFormatError, match=r"gsm8k_train\.jsonl: row 5: .*####"):
        pools.load_gsm8k(tmp_path)
    lines[4] = json.dumps({"question": "x", "answer": "#### 3"})
    lines[9] = "{not json"
    (dst / "gsm8k_train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(pools.PoolFormatError, match=r"gsm8k_train\.jsonl: row 10: invalid JSON"):
        pools.load_gsm8k(tmp_path)


@needs_data
def test_bad_csv_row_and_missing_key(tmp_path):
    dst = _copy_train(tmp_path)
    rows = (dst / "aime_1983_2025.csv").read_text().splitlines()
    rows.insert(3, 'AIME_no_year,"A problem",5')
    (dst / "aime_1983_2025.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(pools.PoolFormatError, match=r"aime_1983_2025\.csv: row 3: id 'AIME_no_year'"):
        pools.load_aime_history(tmp_path)
    (dst / "openmathreasoning_sample.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(pools.PoolFormatError, match=r"openmathreasoning_sample\.jsonl: row 1: missing key 'expected_answer'"):
        pools.load_openmathreasoning(tmp_path)


@needs_data
def test_extra_csv_field_non_utf8_line_and_corrupt_parquet_are_named(tmp_path):
    # review #8: an extra (unquoted-comma) CSV field was silently ignored, a non-UTF-8 line and
    # a corrupt parquet raised errors that named no row or were not PoolFormatError
    dst = _copy_train(tmp_path)
    rows = (dst / "aime_1983_2025.csv").read_text().splitlines()
    rows.insert(2, '1999_AIME_1,Find a, b,3')
    (dst / "aime_1983_2025.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(pools.PoolFormatError, match=r"aime_1983_2025\.csv: row 2: 1 more field"):
        pools.load_aime_history(tmp_path)
    data = (dst / "gsm8k_train.jsonl").read_bytes().split(b"\n")
    data[6] = b'{"question": "caf\xe9", "answer": "#### 1"}'
    (dst / "gsm8k_train.jsonl").write_bytes(b"\n".join(data))
    with pytest.raises(pools.PoolFormatError, match=r"gsm8k_train\.jsonl: row 7: not UTF-8"):
        pools.load_gsm8k(tmp_path)
    (dst / "dapo_math_17k.parquet").write_bytes((REAL / "train" / "dapo_math_17k.parquet").read_bytes()[:4096])
    with pytest.raises(pools.PoolFormatError, match=r"dapo_math_17k\.parquet: .*not a readable"):
        pools.load_dapo(tmp_path)


def test_unknown_pool_lists_known():
    with pytest.raises(KeyError, match="project_euler"):
        pools.load_pool("aops")
