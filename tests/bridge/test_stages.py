"""kit.bridge.stages/hard_subset/sft: the VERL chain across notebook run dirs, with a fake VERL."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from test_checkpoints import fake_checkpoint, fake_merger

from kit import plan
from kit.bridge import hard_subset, sft, stages
from kit.config import load
from kit.report import figures

CLUSTER = stages.Cluster(nnodes=1, gpus_per_node=8, rollout_tp=4, python="python3")


def _dirs(tmp_path):
    d = {k: tmp_path / k for k in ("data", "sft", "stage1", "stage2", "stage3", "ablation")}
    (d["data"] / "data").mkdir(parents=True)
    (d["sft"] / "policy").mkdir(parents=True)
    return d


def fake_verl(log):
    """A stand-in for kit.bridge.launch.launch: records its arguments, writes VERL's checkpoint and file-logger output."""
    def launch(cfg, stage, **kw):
        kw = {**kw, "run_dir": cfg.run_dir, "config": cfg}
        log.append((stage, kw))
        end = kw["start_step"] + cfg.stages[stage].steps
        fake_checkpoint(Path(cfg.run_dir) / "checkpoints", end)
        m = Path(kw["metrics_file"])
        m.parent.mkdir(parents=True, exist_ok=True)
        m.write_text("".join(json.dumps({"step": s, "data": {"rstar2/reward_mean": 0.5, "response_length/mean": 100.0,
                                                             "rstar2/roc/tool_error_ratio_correct_before": 0.1}}) + "\n"
                             for s in range(kw["start_step"] + 1, end + 1))
                     + json.dumps({"step": end, "data": {"val-core/aime24/acc/mean@16": 0.2}}) + "\n")
        return 0
    return launch


def test_three_stages_chain_through_merged_policies(tmp_path):
    d = _dirs(tmp_path)
    log, merges = [], []
    steps = {"stages.stage1.steps": 3, "stages.stage2.steps": 2, "stages.stage3.steps": 2}
    prev = d["sft"]
    for stage in ("stage1", "stage2", "stage3"):
        cfg = load("paper-14b", steps, run_dir=str(d[stage]))
        s = stages.run_stage(cfg, stage, d[stage], prev, d["data"], cluster=CLUSTER, launcher=fake_verl(log),
                             merge_runner=fake_merger(merges))
        assert json.loads((d[stage] / "summary.json").read_text()) == s
        assert s["policy_dir"] == str(d[stage].resolve() / "policy") and (d[stage] / "policy" / "config.json").exists()
        prev = d[stage]
    (s1, k1), (s2, k2), (s3, k3) = log
    assert k1["resume_from"] is None and k1["model_path"] == str(d["sft"].resolve() / "policy")
    assert k2["start_step"] == 3 and k2["resume_from"] == str(d["stage1"].resolve() / "checkpoints" / "global_step_3")
    assert k2["model_path"] == str(d["stage1"].resolve() / "policy")
    assert k3["start_step"] == 5 and k3["train_files"] == str(d["stage3"].resolve() / "data" / "hard.parquet")
    assert s["end_step"] == 7 and s["steps"] == 2 and s["start_step"] == 5
    rows = [json.loads(x) for x in (d["stage3"] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["global_step"] == 6  # validation-only line skipped
    assert rows[0]["reward_mean"] == 0.5 and rows[0]["tool_error_ratio_correct_before"] == 0.1
    assert rows[0]["algorithm"] == "grpo_roc" and rows[0]["stage"] == "stage3"


def test_the_launch_kwargs_build_a_command_that_resets_the_optimizer_only_at_stage_start(tmp_path):
    from kit.bridge import launch

    d = _dirs(tmp_path)
    fake_checkpoint(d["stage2"] / "checkpoints", 385)
    (d["stage2"] / "policy").mkdir()
    cfg = load("paper-14b", write=False)
    plan = stages.plan_stage(cfg, "stage3", d["stage3"], d["stage2"], d["data"], cluster=CLUSTER)
    assert "actor_rollout_ref.actor.checkpoint.load_contents=[model]" in plan.launch_command
    assert "trainer.total_training_steps=510" in plan.launch_command
    assert f"trainer.resume_from_path={d['stage2'].resolve()}/checkpoints/global_step_385" in plan.launch_command
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={d['stage3'].resolve()}/{stages.METRICS_FILE}" \
        in plan.launch_command and "trainer.logger=[console,file,tensorboard]" in plan.launch_command
    assert launch.build_launch(plan.config, "stage3", **plan.launch_kwargs)[1] == plan.launch_command
    assert plan.config == dataclasses.replace(cfg, run_dir=str(d["stage3"].resolve()))  # the caller's config, unchanged
    fake_checkpoint(d["stage3"] / "checkpoints", 400)  # interrupted stage 3: resumes its own optimizer
    again = stages.plan_stage(cfg, "stage3", d["stage3"], d["stage2"], d["data"], cluster=CLUSTER)
    assert again.reads["resume_from"].endswith("stage3/checkpoints/global_step_400") and again.notes
    assert not any("load_contents" in a for a in again.launch_command)


def test_finished_stage_is_not_launched_again_and_missing_upstream_is_named(tmp_path):
    d = _dirs(tmp_path)
    cfg = load("paper-14b", {"stages.stage2.steps": 2}, write=False)
    with pytest.raises(FileNotFoundError, match="stage1/policy not found"):
        stages.run_stage(cfg, "stage2", d["stage2"], d["stage1"], d["data"], cluster=CLUSTER)
    (d["stage1"] / "policy").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=f"no VERL checkpoint under {d['stage1'].resolve()}/checkpoints"):
        stages.run_stage(cfg, "stage2", d["stage2"], d["stage1"], d["data"], cluster=CLUSTER)
    fake_checkpoint(d["stage1"] / "checkpoints", 300)
    fake_checkpoint(d["stage2"] / "checkpoints", 302)
    s = stages.run_stage(cfg, "stage2", d["stage2"], d["stage1"], d["data"], cluster=CLUSTER,
                         launcher=lambda *a, **k: pytest.fail("launched again"), merge_runner=fake_merger([]))
    assert not s["launched"] and s["merged"] and s["end_step"] == 302 and s["metric_rows"] == 0


def test_ablation_runs_one_stage1_per_algorithm(tmp_path):
    d = _dirs(tmp_path)
    log = []
    cfg = load("paper-14b", {"ablation.steps": 2}, write=False)
    out = stages.run_ablation(cfg, d["ablation"], d["sft"], d["data"], cluster=CLUSTER, launcher=fake_verl(log),
                              merge_runner=fake_merger([]))
    assert sorted(out["runs"]) == ["grpo_roc_seed0", "grpo_seed0"]
    sels = {k: json.loads((d["ablation"] / k / "config.json").read_text())["algorithm"]["selection"] for k in out["runs"]}
    assert sels == {"grpo_seed0": "all", "grpo_roc_seed0": "roc"} and (d["ablation"] / "ablation.json").exists()
    # each arm launches the caller's config with only seed, algorithm, steps, budget, split seed and run_dir replaced
    for stage, kw in log:
        arm = kw["config"]
        assert stage == "stage1" and arm.stages["stage1"].steps == 2 and arm.run_dir.startswith(str(d["ablation"]))
        assert arm.stages["stage1"].max_response_tokens == cfg.rollout.max_response_tokens
        assert dataclasses.replace(arm, run_dir="", algorithm=cfg.algorithm, stages=cfg.stages, data=cfg.data) == cfg
    assert (d["ablation"] / "grpo_seed0" / "metrics.jsonl").exists()
    # the readers of an ablation folder (figures 4 and 9, the claims) take every metrics.jsonl below it:
    # only the kit rows, not VERL's raw log beside them (before, verl/metrics.jsonl added rows without
    # an algorithm and a `data` column to 06's and 20's frames)
    df = figures.collect_metrics(d["ablation"])
    assert len(df) == 4 and set(df["algorithm"]) == {"grpo", "grpo_roc"} and "data" not in df


def test_describe_chain_prints_every_command_and_directory(tmp_path):
    d = {k: str(v) for k, v in _dirs(tmp_path).items()}
    text = stages.describe_chain(load("paper-14b", write=False), d, cluster=CLUSTER)
    cmds = [shlex.split(line.split("$ ", 1)[1].split("  (")[0]) for line in text.splitlines() if "$ " in line]
    assert sum("verl.trainer.main_ppo" in c for c in cmds) == 5  # 3 stages + 2 ablation runs
    assert sum("verl.model_merger" in c for c in cmds) == 6 and sum("verl.trainer.sft_trainer" in c for c in cmds) == 1
    assert "global steps 300 -> 385" in text and f"{tmp_path}/stage3/data/hard.parquet" in text
    # cut like `--until 04`: only the notebooks that would run are described
    cut = stages.describe_chain(load("paper-14b", write=False), d, cluster=CLUSTER,
                                notebooks=["00_setup_and_sandbox_check", "03_rl_stage1", "04_rl_stage2"])
    assert "## 03_rl_stage1" in cut and "## 04_rl_stage2" in cut and "global steps 385 -> 510" not in cut
    assert "02_cold_start_sft" not in cut and "05_rl_stage3" not in cut and "06_roc_ablation" not in cut


def test_hard_parquet_keeps_problems_not_always_solved(tmp_path):
    from kit.data.curate import CurationResult, write_curated
    from kit.data.pools import Problem

    probs = [Problem("dapo", str(i), f"What is {i}+{i}?", str(2 * i)) for i in range(4)]
    curated = write_curated(tmp_path / "data", CurationResult(probs, {}, []))["parquet"]
    counts = {"dapo/0": 8, "dapo/1": 3, "dapo/2": 0, "dapo/3": 8}
    info = hard_subset.build_hard_parquet(curated, counts, tmp_path / "s3")
    import pandas as pd

    df = pd.read_parquet(info["parquet"])
    assert list(df["id"]) == ["1", "2"] and info["solved_all"] == 2 and "reward_model" in df.columns
    with pytest.raises(KeyError, match="no solve count"):
        hard_subset.build_hard_parquet(curated, {"dapo/0": 1}, tmp_path / "s3")
    cfg = load("paper-14b", write=False)
    with pytest.raises(RuntimeError, match="sampler_url="):
        hard_subset.prepare_stage3_data(cfg, tmp_path / "s3b", tmp_path / "data", tmp_path / "stage2")


def test_sft_command_composes_with_verls_sft_config(tmp_path):
    from hydra import compose, initialize_config_module

    cfg = load("paper-14b", write=False)
    cmd = sft.sft_command(cfg, str(tmp_path / "sft.parquet"), tmp_path / "sft", python="python3")
    assert cmd[:5] == ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8"]
    with initialize_config_module("verl.trainer.config", version_base=None):
        c = compose(config_name="sft_trainer_engine", overrides=cmd[cmd.index("verl.trainer.sft_trainer") + 1:])
    assert c.optim.lr == 5e-6 and c.data.train_batch_size == 128 and c.trainer.total_epochs == 3
    assert c.trainer.default_local_dir == str(tmp_path / "sft" / "checkpoints")


def test_a_zero_step_stage_links_the_upstream_policy_and_launches_nothing(tmp_path):
    from kit import chain
    from kit.bridge.checkpoints import CheckpointError
    from kit.config import load

    cfg = load("paper-32b", write=False)
    assert cfg.stages["stage3"].steps == 0
    up = tmp_path / "stage2"
    with pytest.raises(CheckpointError, match="holds no model"):
        stages.skip_stage(cfg, "stage3", tmp_path / "stage3", up)
    (up / "policy").mkdir(parents=True)
    (up / "policy" / "config.json").write_text("{}")
    s = chain.train_stage(cfg, "stage3", tmp_path / "stage3", up, tmp_path / "data")  # no sampler, no VERL
    assert s["skipped"] and s["steps"] == 0
    assert (tmp_path / "stage3" / "policy").resolve() == (up / "policy").resolve()
    assert json.loads((tmp_path / "stage3" / "summary.json").read_text())["skipped"] is True
    assert stages.skip_stage(cfg, "stage3", tmp_path / "stage3", up)["skipped"]  # rerun: same link, fine


def test_converted_metrics_are_strict_json_and_a_killed_runs_partial_line_is_skipped(tmp_path):
    # VERL's file logger writes json.dumps lines: an undefined ratio is a bare NaN; a run killed
    # mid-write leaves a partial line, after which the resumed run appends its own lines
    src = tmp_path / "verl" / "metrics.jsonl"
    src.parent.mkdir()
    good = [{"step": s, "data": {"rstar2/reward_mean": 0.5, "roc/tool_error_ratio_correct_before": float("nan")}}
            for s in (11, 12)]
    src.write_text(json.dumps(good[0]) + "\n" + '{"step": 12, "data": {"critic/sco' + "\n" + json.dumps(good[1]) + "\n")
    out = tmp_path / "metrics.jsonl"
    with pytest.warns(UserWarning, match=rf"{src}:2: .*skipped"):
        n = stages.convert_metrics(src, out, stage="stage2", start_step=10, algorithm="grpo_roc", seed=0)

    def strict(line):
        return json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in {out}"))

    rows = [strict(x) for x in out.read_text().splitlines()]
    assert n == 2 and [r["step"] for r in rows] == [1, 2] and [r["global_step"] for r in rows] == [11, 12]
    assert rows[0]["reward_mean"] == 0.5 and rows[0]["tool_error_ratio_correct_before"] is None


def test_a_failed_stage_keeps_its_checkpoint_and_the_rerun_resumes_from_it(tmp_path):
    # VERL saves step 1 of 3, then dies (a crash, Ray lost, a kill): the stage raises, nothing saved is
    # removed, and running the stage again resumes from its own step-1 checkpoint (model + optimizer)
    d = _dirs(tmp_path)
    cfg = load("paper-14b", {"stages.stage1.steps": 3}, run_dir=str(d["stage1"]))
    calls = []

    def dies_after_step_1(cfg, stage, **kw):
        calls.append(kw)
        fake_checkpoint(Path(cfg.run_dir) / "checkpoints", 1)
        return 1

    with pytest.raises(RuntimeError, match="VERL stage1 exited with status 1"):
        stages.run_stage(cfg, "stage1", d["stage1"], d["sft"], d["data"], cluster=CLUSTER, launcher=dies_after_step_1,
                         merge_runner=fake_merger([]))
    assert calls[0]["resume_from"] is None and (d["stage1"] / "checkpoints" / "global_step_1" / "actor").is_dir()
    log = []
    s = stages.run_stage(cfg, "stage1", d["stage1"], d["sft"], d["data"], cluster=CLUSTER, launcher=fake_verl(log),
                         merge_runner=fake_merger([]))
    ((_, kw),) = log
    assert kw["resume_from"] == str(d["stage1"].resolve() / "checkpoints" / "global_step_1")
    assert s["end_step"] == 3 and s["launched"]


def test_ablation_arm_seeds_are_offsets_from_the_run_seed_as_on_the_local_runtime(tmp_path):
    cfg = load("paper-14b", {"seed": 7, "ablation.seeds": [0, 2]}, write=False)
    arms = stages.ablation_configs(cfg, tmp_path)
    assert sorted(p.name for p, _ in arms) == ["grpo_roc_seed7", "grpo_roc_seed9", "grpo_seed7", "grpo_seed9"]
    assert sorted({c.seed for _, c in arms}) == [7, 9]


def test_verl_ablation_arms_run_at_the_local_arms_budget_not_stage_1s(tmp_path):
    """tiny gives its main stage 1 a 256-token budget and its ablation rollout's 384 (issue #16): the
    VERL arms are kit.plan.ablation_arms, the local runtime's, so they train at 384 too (issue #29)."""
    cfg = load("tiny", {"runtime": "verl", "ablation.seeds": [0, 1]}, write=False)
    assert cfg.stages["stage1"].max_response_tokens == 256 and cfg.rollout.max_response_tokens == 384
    verl_arms = stages.ablation_configs(cfg, tmp_path)
    assert [c for _, c in verl_arms] == plan.ablation_arms(cfg, tmp_path)
    assert {c.stages["stage1"].max_response_tokens for _, c in verl_arms} == {384}
    assert {c.stages["stage1"].steps for _, c in verl_arms} == {cfg.ablation.steps}
    assert [(p.name, c.run_dir) for p, c in verl_arms][0] == ("grpo_seed0", str(tmp_path / "grpo_seed0"))
    plans = [stages.plan_stage(c, "stage1", p, tmp_path / "sft", tmp_path / "data", cluster=CLUSTER, check=False)
             for p, c in verl_arms]
    assert all("data.max_response_length=384" in pl.launch_command for pl in plans)


def test_the_metric_map_reads_names_verl_s_v1_trainer_and_the_roc_hook_really_log(tmp_path):
    golden = Path(__file__).parent / "golden" / "verl_step_metrics.txt"
    emitted = {ln.strip() for ln in golden.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    for key, sources in stages.METRIC_MAP.items():
        # the first name of each key is a real one; the rest are fallbacks (roc/: the hook's name before rstar2/roc/)
        assert sources[0] in emitted, (key, sources[0])
        assert all(s in emitted or s.startswith("roc/") for s in sources), (key, sources)
    # a stage resumed across the rename: its early lines carry roc/, its later ones rstar2/roc/
    src = tmp_path / "verl" / "metrics.jsonl"
    src.parent.mkdir()
    src.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "roc/kept": 4.0, "roc/accuracy_before": 0.75}})
                   + "\n" + json.dumps({"step": 2, "data": {"critic/score/mean": 0.25, "rstar2/roc/kept": 8.0,
                                                                "response_length/mean": 30.0,
                                                                "rstar2/response_len_mean": 40.0,
                                                                "rstar2/roc/accuracy_before": 0.5,
                                                                "rstar2/roc/tool_error_ratio_correct_before": 0.2}})
                   + "\n" + json.dumps({"step": 3, "data": {"critic/score/mean": 0.25}}) + "\n")
    out = tmp_path / "metrics.jsonl"
    assert stages.convert_metrics(src, out, stage="stage1", start_step=0, algorithm="grpo_roc", seed=0) == 2
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    # accuracy and reward_mean over every sampled rollout (RoC's "before"), as the local rows are;
    # VERL's critic/score/mean and response_length/mean (the kept rows) fill no key of the sampled
    # population (kit.metrics), so step 3, which has only them, gives no row
    assert [(r.get("kept"), r["accuracy"], r["reward_mean"]) for r in rows] == [(4.0, 0.75, 0.75), (8.0, 0.5, 0.5)]
    assert "response_len_mean" not in rows[0] and rows[1]["response_len_mean"] == 40.0
    assert rows[1]["tool_error_ratio_correct_before"] == 0.2 and "time_verify_s" not in rows[1]
