"""Preflight of notebook 00: missing data files and packages are listed and stop the chain."""

from __future__ import annotations

import pytest

from kit import preflight


def test_missing_data_files_are_named_and_stop_the_chain(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "aime2024.json").write_text("[]")
    rows = preflight.preflight(str(tmp_path))
    by = {r["check"]: r for r in rows}
    assert by["data: benchmarks/aime2024.json"]["status"] == "ok"
    assert by["data: train/dapo_math_17k.parquet"]["status"] == "missing"
    assert "KIT_DATA_DIR" in by["data: train/dapo_math_17k.parquet"]["detail"]
    with pytest.raises(RuntimeError) as info:
        preflight.require_preflight(rows)
    assert "train/dapo_math_17k.parquet" in str(info.value) and "aime2024.json" not in str(info.value)


def test_warnings_do_not_stop_the_chain():
    rows = [{"check": "xelatex (notebook PDF)", "status": "warning", "detail": "absent"},
            {"check": "torch", "status": "ok", "detail": "2.13"}]
    preflight.require_preflight(rows)  # no exception
