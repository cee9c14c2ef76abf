"""kit.data.pool: data.source picks the stages' pool for both runtimes; bad curated files are named."""

import pandas as pd
import pytest

from kit.config import ConfigError, load
from kit.data import pool, tasks


def test_source_auto_follows_the_runtime_and_verl_refuses_the_task_family():
    assert pool.source(load("smoke", write=False)) == "tasks"
    assert pool.source(load("smoke", {"runtime": "verl"}, write=False)) == "curated"
    assert pool.source(load("paper-14b", write=False)) == "curated"
    assert pool.source(load("smoke", {"data.source": "curated"}, write=False)) == "curated"
    with pytest.raises(ConfigError, match="data.source: 'tasks' .* is the local runtime's pool"):
        load("paper-14b", {"data.source": "tasks"}, write=False)


def test_the_task_pool_is_the_stage_level_of_the_split():
    cfg = load("smoke", write=False)
    got = pool.pool(cfg, cfg.stages["stage2"], data_dir=None)
    assert got == tasks.task_split(cfg).level(2) and {p.level for p in got} == {2}


def test_curated_files_are_read_and_bad_ones_named(tmp_path):
    cfg = load("smoke", {"data.source": "curated"}, write=False)
    with pytest.raises(ValueError, match="pass data_dir, the 01_data_curation run folder"):
        pool.pool(cfg, cfg.stages["stage1"], None)
    with pytest.raises(FileNotFoundError, match=r"data/curated.parquet not found: notebook 01_data_curation"):
        pool.pool(cfg, cfg.stages["stage1"], tmp_path)
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "curated.parquet"
    pd.DataFrame({"source": ["gsm8k", "dapo"], "id": ["train-1", "dapo-9"], "problem": ["What is 6 * 7?", "Find n."],
                  "answer": ["42", "7"]}).to_parquet(path)
    got = pool.pool(cfg, cfg.stages["stage3"], tmp_path)
    assert [(p.id, p.question, p.answer) for p in got] == [("gsm8k/train-1", "What is 6 * 7?", "42"),
                                                          ("dapo/dapo-9", "Find n.", "7")]
    pd.DataFrame({"source": ["gsm8k"], "id": ["a"], "problem": ["x"], "answer": [""]}).to_parquet(path)
    with pytest.raises(ValueError, match=r"curated.parquet: row 0 \(gsm8k/a\) has an empty problem or answer"):
        pool.read_curated(path)
    pd.DataFrame({"source": ["gsm8k"], "problem": ["x"]}).to_parquet(path)
    with pytest.raises(ValueError, match="no column id, answer"):
        pool.read_curated(path)
