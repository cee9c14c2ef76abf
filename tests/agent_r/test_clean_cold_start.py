"""Issue #46 item 4: ``agent_r.cold_start = "clean"`` trains the arms' base in ``agent_r/cold_start/`` with the run's
recipe and seed and no failed-then-fixed demo, so recovery is left to be learned (the paper's premise); "run" keeps
notebook 02's cold start. The clean cold start is trained for real (a few SFT steps of the smoke profile)."""

import json

import pytest

from kit.config import load
from kit.studies.agent_r.chain import base_cold_start, cold_start_rows
from kit.train import sft


def test_run_keeps_notebook_02s_cold_start_and_trains_nothing(tmp_path):
    cfg = load("smoke", {}, write=False)
    assert cfg.agent_r.cold_start == "run"
    assert base_cold_start(cfg, tmp_path / "agent_r", tmp_path / "sft", progress=None) == tmp_path / "sft"
    assert not (tmp_path / "agent_r").exists()


@pytest.mark.slow  # a real 3-step cold start with its sandboxed demo calls and held-out evaluation
def test_clean_trains_a_cold_start_without_fixed_demos_once_and_its_demos_are_the_general_data(tmp_path, tok):
    small = {"data.task_train_size": 40, "data.task_heldout_size": 8}  # 40 demos, 8 held-out tasks: a few seconds
    cfg = load("smoke", {**small, "agent_r.cold_start": "clean", "sft.steps": 3}, write=False)
    said = []
    base = base_cold_start(cfg, tmp_path / "agent_r", tmp_path / "sft", progress=said.append)
    assert base == tmp_path / "agent_r" / "cold_start" and (base / "policy" / "config.json").exists()
    saved = json.loads((base / "config.json").read_text())
    assert saved["data"]["demo_error_fraction"] == 0.0 and saved["seed"] == cfg.seed and saved["sft"]["steps"] == 3
    kinds = {d["kind"] for d in json.loads((base / sft.SFT_DATA_FILE).read_text())["demos"]}
    assert "tool_error" not in kinds and "tool" in kinds
    # the run's own demos do have them: the two cold starts differ in exactly that
    run_demos = sft.prepare_sft_data(cfg, tmp_path / "run_sft")["demos"]
    assert "tool_error" in {d["kind"] for d in run_demos}
    assert len(cold_start_rows(cfg, tok, base, tmp_path / "agent_r")) > 0
    # a finished clean cold start is reused (not retrained), and refused under another recipe
    stamp = (base / "policy" / "config.json").stat().st_mtime_ns
    assert base_cold_start(cfg, tmp_path / "agent_r", tmp_path / "sft", progress=said.append) == base
    assert (base / "policy" / "config.json").stat().st_mtime_ns == stamp and len(said) == 1
    other = load("smoke", {**small, "agent_r.cold_start": "clean", "sft.steps": 4}, write=False)
    with pytest.raises(ValueError, match=r"trained with another config \(differs in: sft\)"):
        base_cold_start(other, tmp_path / "agent_r", tmp_path / "sft", progress=said.append)
    # agent_r's own keys do not reach the cold start
    more = load("smoke", {**small, "agent_r.cold_start": "clean", "sft.steps": 3, "agent_r.iterations": 3}, write=False)
    assert base_cold_start(more, tmp_path / "agent_r", tmp_path / "sft", progress=said.append) == base


def test_clean_is_refused_for_a_model_not_made_of_the_task_demos(tmp_path):
    cfg = load("paper-14b", {"agent_r.cold_start": "clean"}, write=False)
    with pytest.raises(ValueError, match="agent_r.cold_start = 'run'"):
        base_cold_start(cfg, tmp_path / "agent_r", tmp_path / "sft", progress=None)
