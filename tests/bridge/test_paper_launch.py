"""kit.runtime.paper (`python -m kit launch`) and kit.bridge.launch: prints the VERL command, writes what it points
at, finds the Ray cluster, runs it."""

import json
import shlex
import stat
import sys

import pytest

from kit import cli
from kit.bridge import launch
from kit.config import load
from kit.runtime import paper as recipe


def _paper(run_dir=None, **over):
    return load("paper-14b", {**over, **({"run_dir": str(run_dir)} if run_dir else {})}, write=False)


def test_dry_run_prints_the_verl_command(capsys, tmp_path):
    rc = cli.main(["launch", "--profile", "paper-14b", "--stage", "stage2", "--run-dir", str(tmp_path / "r"),
                   "--dry-run", "--", "trainer.nnodes=8"])
    out = capsys.readouterr().out
    assert rc == 0 and "-m verl.trainer.main_ppo" in out
    assert f"trainer.resume_from_path={tmp_path}/r/checkpoints/global_step_300" in out
    assert out.strip().endswith("trainer.nnodes=8")  # extra overrides come last and win


def test_agent_loop_yaml_is_what_verl_loads(tmp_path):
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    cfg = load("paper-14b", write=False)
    path = launch.write_agent_loop_config(cfg, tmp_path / "agent_loop.yaml")
    (entry,) = OmegaConf.load(path)  # how AgentLoopWorker reads agent_loop_config_path
    assert entry.name == "rstar2_kit" and entry.sandbox.timeout_s == cfg.sandbox.timeout_s
    from kit.bridge.agent_loop import KitAgentLoop

    assert get_class(entry._target_) is KitAgentLoop


def _fake_python(tmp_path):
    """An interpreter stand-in that records its argv and RAY_ADDRESS, then exits 0."""
    script = tmp_path / "fake_python"
    log = tmp_path / "log.json"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"json.dump({{'argv': sys.argv[1:], 'ray': os.environ.get('RAY_ADDRESS')}}, open({str(log)!r}, 'w'))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def test_launch_runs_on_the_cluster_it_finds(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    for f in ("curated.parquet", "val.parquet"):
        (run / "data" / f).write_bytes(b"")
    python, log = _fake_python(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert launch.launch(_paper(run), "stage1", python=python) == 0
    got = json.loads(log.read_text())
    assert got["ray"] == "10.0.0.1:6379" and got["argv"][:2] == ["-m", "verl.trainer.main_ppo"]
    assert f"actor_rollout_ref.rollout.agent.agent_loop_config_path={run}/verl/agent_loop.yaml" in got["argv"]
    assert (run / "verl" / "agent_loop.yaml").exists() and (run / "config.json").exists()


def test_launch_without_cluster_or_data_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(launch, "RAY_CLUSTER_FILE", tmp_path / "none")
    run = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="prepare-data"):
        launch.launch(_paper(run), "stage1")
    with pytest.raises(FileNotFoundError, match="build_hard_subset"):
        launch.launch(_paper(run), "stage3")
    (run / "data").mkdir(parents=True, exist_ok=True)
    for f in ("curated.parquet", "val.parquet"):
        (run / "data" / f).write_bytes(b"")
    with pytest.raises(RuntimeError, match="ray start --head"):
        launch.launch(_paper(run), "stage1")


def test_prepare_data_writes_rows_verls_dataset_reads(tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from kit.data.curate import curate
    from kit.data.pools import Problem
    from kit.models import train_tokenizer

    cfg = load("paper-14b", overrides={"run_dir": str(tmp_path)}, write=False)
    pools = {"dapo": [Problem("dapo", str(i), f"What is {i} + {i}?", str(2 * i)) for i in range(1, 6)]}
    paths = launch.prepare_data(cfg, curated=curate(pools), val_benchmarks=("aime24",))
    tok = train_tokenizer(["What is 1 + 1? <answer>2</answer>"] * 10, 400)
    data_cfg = OmegaConf.create({"max_prompt_length": 4096, "return_raw_chat": True, "filter_overlong_prompts": False,
                                 "truncation": "error", "prompt_key": "prompt"})
    train = RLHFDataset(str(paths["train"]), tok, data_cfg)
    row = train[0]
    assert row["raw_prompt"][-1]["content"].startswith("What is") and row["reward_model"]["ground_truth"]
    val = RLHFDataset(str(paths["val"]), tok, data_cfg)
    assert len(val) == 30 and val[0]["data_source"] == "rstar2_kit/aime24"


def test_smoke_run_is_prepared_offline_and_its_overrides_compose(tmp_path, capsys):
    from hydra import compose, initialize_config_module
    from transformers import AutoConfig, AutoTokenizer

    assert recipe.smoke(str(tmp_path / "smoke"), dry_run=True) == 0
    argv = shlex.split(capsys.readouterr().out.strip().split("\n")[-1])
    overrides = argv[argv.index("verl.trainer.main_ppo") + 1:]
    with initialize_config_module("verl.trainer.config", version_base=None):
        c = compose(config_name="ppo_trainer", overrides=overrides)
    assert c.trainer.total_training_steps == 2 and c.actor_rollout_ref.rollout.n == 8
    assert c.trainer.v1.sampler.sampler_kwargs.oversample == 16
    assert c.trainer.v1.sampler.sampler_kwargs.drop_equal_reward_groups is False
    model = c.actor_rollout_ref.model.path
    assert AutoConfig.from_pretrained(model).model_type == "qwen3"
    tok = AutoTokenizer.from_pretrained(model)
    assert tok.decode(tok.encode("<answer>\\boxed{42}</answer>", add_special_tokens=False)) == "<answer>\\boxed{42}</answer>"


def test_later_stages_need_the_previous_stage_checkpoint(tmp_path, monkeypatch):
    """stage2/3 resume from run_dir/checkpoints/global_step_<offset>: a missing one is named before VERL starts."""
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    for f in ("curated.parquet", "val.parquet"):
        (run / "data" / f).write_bytes(b"")
    python, log = _fake_python(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with pytest.raises(FileNotFoundError, match=r"global_step_300 does not exist; stage2 resumes from the end of stage1"):
        launch.launch(_paper(run), "stage2", python=python)
    assert not log.exists()
    (run / "checkpoints" / "global_step_300").mkdir(parents=True)
    assert launch.launch(_paper(run), "stage2", python=python) == 0
    assert f"trainer.resume_from_path={run}/checkpoints/global_step_300" in json.loads(log.read_text())["argv"]
    # an explicit resume override is the user's call
    other = ["trainer.resume_from_path=/elsewhere/global_step_300"]
    (run / "checkpoints" / "global_step_300").rmdir()
    assert launch.launch(_paper(run), "stage2", python=python, extra_overrides=other) == 0


def test_stage1_without_model_path_says_it_starts_from_the_base_model(capsys, tmp_path):
    assert cli.main(["launch", "--profile", "paper-14b", "--run-dir", str(tmp_path), "--dry-run"]) == 0
    assert "stage 1 starts from Qwen/Qwen3-14B-Base (no --model-path)" in capsys.readouterr().err
    assert cli.main(["launch", "--profile", "paper-14b", "--run-dir", str(tmp_path), "--dry-run",
                     "--model-path", "/sft"]) == 0
    assert "no --model-path" not in capsys.readouterr().err
