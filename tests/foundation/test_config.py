import dataclasses
import json
import re

import pytest

from kit import config
from kit.algo import sampling_plan
from kit.config import ConfigError, from_json, load
from kit.config.keyhelp import config_rows


def test_tiny_profile_loads_with_tiny_values():
    cfg = load("tiny")
    assert cfg.profile == "tiny"
    assert cfg.model.name_or_path == "tiny"
    assert cfg.model.hidden_size == 128 and cfg.model.num_layers == 2
    # paper defaults survive where the profile is silent (report §2.2.1 Clip-Higher)
    assert (cfg.algorithm.clip_ratio_low, cfg.algorithm.clip_ratio_high) == (0.2, 0.28)
    assert cfg.algorithm.oversample == 2 * cfg.algorithm.group_size


@pytest.mark.parametrize("name", ["tiny", "smoke", "paper-14b", "paper-32b"])
def test_every_profile_loads(name):
    cfg = load(name)
    assert cfg.profile == name
    assert cfg.stages["stage1"].max_response_tokens > 0


def test_paper_profile_matches_reference_recipe():
    cfg = load("paper-14b")
    assert cfg.model.name_or_path == "Qwen/Qwen3-14B-Base"
    assert cfg.algorithm.lr == 1e-6 and cfg.algorithm.prompts_per_step == 512
    assert (cfg.algorithm.oversample, cfg.algorithm.group_size) == (32, 16)
    s = cfg.stages
    assert [s["stage1"].max_response_tokens, s["stage2"].max_response_tokens, s["stage3"].max_response_tokens] == [8192, 12288, 12288]
    assert [s["stage1"].max_turns, s["stage2"].max_turns, s["stage3"].max_turns] == [10, 10, 15]
    assert s["stage3"].problems == "hard" and s["stage3"].reset_optimizer


def test_smoke_inherits_tiny_and_shrinks_steps():
    tiny, smoke = load("tiny"), load("smoke")
    assert smoke.model == tiny.model
    assert smoke.sft.steps < tiny.sft.steps


def test_overrides_dotted_double_underscore_and_cli_strings():
    cfg = load("tiny", {"algorithm.lr": 1e-4}, seed=7, sandbox__timeout_s=2)
    assert cfg.algorithm.lr == 1e-4 and cfg.seed == 7 and cfg.sandbox.timeout_s == 2.0
    cfg = load("tiny", ["stages.stage2.steps=3", "rollout.scheduler=static", "ablation.seeds=1,2"])
    assert cfg.stages["stage2"].steps == 3 and cfg.rollout.scheduler == "static"
    assert cfg.ablation.seeds == (1, 2)
    # other stages keep their profile values
    assert cfg.stages["stage1"].steps == load("tiny").stages["stage1"].steps


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"algorithm\.lrr"):
        load("tiny", {"algorithm.lrr": 1.0})
    with pytest.raises(ConfigError, match="bogus"):
        load("tiny", bogus=1)


@pytest.mark.parametrize(
    "key,value,match",
    [("algorithm.lr", "fast", "algorithm.lr"), ("seed", 1.5, "seed"), ("sandbox.isolation", "docker", "sandbox.isolation"),
     ("algorithm.roc_use_error_ratio", 3, "roc_use_error_ratio"), ("model", 3, "model")],
)
def test_wrong_type_is_named(key, value, match):
    with pytest.raises(ConfigError, match=match):
        load("tiny", {key: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", "-inf", "Infinity"])
def test_a_non_finite_float_is_refused_naming_the_key(value, tmp_path):
    # config.json must stay strict JSON (json.dumps would write bare NaN / Infinity into it)
    with pytest.raises(ConfigError, match=r"algorithm\.lr: expected a finite float"):
        load("smoke", {"algorithm.lr": value, "run_dir": str(tmp_path)})
    assert not (tmp_path / "config.json").exists()


def test_roc_minimums_that_do_not_fit_the_group_are_refused_when_the_config_is_built(tmp_path):
    # before: accepted here, and the local trainer failed only at its first RoC selection, after
    # the rollouts of its first step (and after every notebook before it)
    with pytest.raises(ConfigError, match=r"algorithm: RoC: min_positive \(5\) \+ min_negative \(4\) exceeds "
                                          r"group_size \(8\)"):
        load("smoke", {"algorithm.min_positive": 5, "algorithm.min_negative": 4, "run_dir": str(tmp_path)})
    assert not (tmp_path / "config.json").exists()
    assert load("smoke", {"algorithm.min_positive": 4, "algorithm.min_negative": 4}, write=False).algorithm.min_positive == 4


def test_unknown_profile():
    with pytest.raises(ConfigError, match="unknown profile"):
        load("nope")


def test_run_dir_gets_config_json_roundtrip(tmp_path):
    cfg = load("smoke", run_dir=str(tmp_path / "r"), seed=5)
    data = json.loads((tmp_path / "r" / "config.json").read_text())
    assert data["seed"] == 5 and data["profile"] == "smoke"
    assert config.from_json(tmp_path / "r" / "config.json") == cfg


def test_config_is_frozen():
    cfg = load("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]


def test_stages_take_rollouts_budget_unless_they_set_their_own():
    tiny = load("tiny", write=False)
    # tiny stage 1: its own binding budget (issue #16), rollout's turns
    assert (tiny.stages["stage1"].max_response_tokens, tiny.stages["stage1"].max_turns) == (256, 4)
    short = load("tiny", {"rollout.max_response_tokens": 64, "rollout.max_turns": 2}, write=False)
    assert (short.stages["stage1"].max_response_tokens, short.stages["stage1"].max_turns) == (256, 2)
    bare = load("tiny", {"stages.stage1.max_response_tokens": 0, "rollout.max_response_tokens": 64}, write=False)
    assert bare.stages["stage1"].max_response_tokens == 64  # 0: rollout's
    assert (short.stages["stage2"].max_response_tokens, short.stages["stage2"].max_turns) == (576, 2)  # own budget
    assert (short.stages["stage3"].max_response_tokens, short.stages["stage3"].max_turns) == (576, 6)  # both its own
    paper = load("paper-14b", {"rollout.max_turns": 12}, write=False)
    assert [st.max_turns for st in paper.stages] == [12, 12, 15]
    assert [st.max_response_tokens for st in paper.stages] == [8192, 12288, 12288]
    assert config.KitConfig().stages == load("paper-14b", write=False).stages  # built without load: resolved too



@pytest.mark.parametrize("key,value", [
    ("sandbox.timeout_s", 0), ("sandbox.timeout_s", -1.0), ("sandbox.cpu_s", 0), ("sandbox.memory_mb", 0),
    ("sandbox.max_output_chars", -5), ("sandbox.max_procs", 0), ("sandbox.recycle_after", 0),
    ("sandbox.batch_size", 0), ("sandbox.send_workers", 0), ("data.max_answer_digits", 0),
])
def test_a_sandbox_or_verifier_limit_that_is_not_positive_is_refused_naming_the_key(key, value, tmp_path):
    """Issue #30: ``sandbox.timeout_s = 0`` was accepted and made every tool call a timeout."""
    with pytest.raises(ConfigError, match=rf"{key}: must be a finite number > 0, got {value}"):
        load("smoke", {key: value, "run_dir": str(tmp_path)})
    assert not (tmp_path / "config.json").exists()


def test_positive_limits_hold_for_a_sandbox_config_built_in_code_too():
    from kit.sandbox import SandboxPool

    with pytest.raises(ConfigError, match=r"sandbox\.timeout_s: must be a finite number > 0, got 0"):
        SandboxPool(config.SandboxConfig(timeout_s=0))
    with pytest.raises(ConfigError, match=r"sandbox\.num_workers: must be >= 0"):
        config.check_limits(config.SandboxConfig(num_workers=-1))
    assert load("smoke", {"sandbox.num_workers": 0}, write=False).sandbox.num_workers == 0  # 0: one per core


@pytest.mark.parametrize("key,value,rule", [
    ("algorithm.lr", -1.0, "a finite number > 0"), ("sft.lr", 0.0, "a finite number > 0"),
    ("rollout.temperature", -0.5, r"a finite number >= 0 \(0: greedy\)"), ("eval.top_p", 0.0, r"a number in \(0, 1\]"),
    ("eval.n_samples", 0, "an integer >= 1"), ("algorithm.group_size", 0, "an integer >= 1"),
    ("sft.steps", -3, r"an integer >= 0 \(0: derive from sft\.epochs\)"), ("stages.stage2.steps", -1, "an integer >= 0"),
    ("critic.lr", -1.0, "a finite number > 0"), ("critic.cliprange_value", -1.0, "a finite number > 0"),
    ("algorithm.lam", 1.5, r"a number in \[0, 1\]"), ("algorithm.gamma", -1.0, r"a number in \[0, 1\]"),
])
def test_a_training_or_sampling_value_out_of_range_is_refused_naming_the_key(key, value, rule, tmp_path):
    """Stop 36's note: ``stages.stage2.steps=-1``, ``algorithm.lr=-1`` or ``eval.n_samples=0`` were accepted and
    trained (or divided) on; now the load refuses them before the run folder is written."""
    with pytest.raises(ConfigError, match=rf"{key}: must be {rule}, got {value}"):
        load("smoke", {key: value, "run_dir": str(tmp_path)})
    assert not (tmp_path / "config.json").exists()
    assert load("smoke", {"rollout.temperature": 0.0, "stages.stage2.steps": 0}, write=False).rollout.temperature == 0.0


def test_an_ablation_seed_listed_twice_is_refused():
    with pytest.raises(ConfigError, match=r"ablation\.seeds: seed 1 is listed twice in \[0, 1, 1\]"):
        load("smoke", {"ablation.seeds": [0, 1, 1]}, write=False)
@pytest.mark.parametrize(("key", "value"), [("logging.records_every", -1), ("logging.records_max_prompts", -2)])
def test_a_negative_rollout_record_setting_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"{key}: must be a whole number >= 0 .*got {value}"):
        load("smoke", {key: value}, write=False)


def test_records_default_to_every_prompt_on_tiny_and_a_sample_on_the_paper_profiles():
    tiny, paper = load("smoke", write=False).logging, load("paper-32b", write=False).logging
    assert (tiny.records_every, tiny.records_max_prompts) == (1, 0)
    assert paper.records_every == 1 and 0 < paper.records_max_prompts < load("paper-32b", write=False).algorithm.prompts_per_step


@pytest.mark.parametrize(("key", "value", "names"), [("algorithm.name", "grpo", 'algorithm.selection ("grpo_roc" is'),
                                                     ("algorithm.roc_with_gae", True, 'algorithm.selection = "roc" with')])
def test_a_retired_key_is_refused_naming_what_replaces_it(key, value, names, tmp_path):
    """Issue #43: one meaning per knob; the old keys say which key took their place (profiles, --set)."""
    with pytest.raises(ConfigError, match=f"config key '{key}' is retired: use {re.escape(names)}"):
        load("smoke", {key: value}, write=False)
    with pytest.raises(ConfigError, match=f"config key '{key}' is retired: use {re.escape(names)}"):
        config_rows(load("smoke", write=False), "smoke", key)


@pytest.mark.parametrize(("old", "selection"), [({"name": "grpo_roc"}, "roc"), ({"name": "grpo"}, "all"),
                                                ({"name": "grpo_roc", "adv_estimator": "gae"}, "all"),
                                                ({"name": "grpo_roc", "adv_estimator": "gae", "roc_with_gae": True}, "roc")])
def test_a_config_json_written_before_the_rename_is_read_with_the_same_meaning(old, selection, tmp_path):
    stored = load("smoke", write=False).to_dict()
    del stored["algorithm"]["selection"]
    stored["algorithm"].update(old)
    (tmp_path / "config.json").write_text(json.dumps(stored))
    assert from_json(tmp_path / "config.json").algorithm.selection == selection


@pytest.mark.parametrize(("fields", "label", "n"), [({}, "grpo_roc", "oversample"), ({"selection": "all"}, "grpo", "group_size"),
                                                    ({"adv_estimator": "gae", "selection": "all"}, "ppo", "group_size"),
                                                    ({"adv_estimator": "gae"}, "ppo_roc", "oversample")])
def test_an_arm_s_label_follows_from_its_selection_and_estimator(fields, label, n):
    algo = dataclasses.replace(load("smoke", write=False).algorithm, **fields)
    assert algo.label == label and sampling_plan(algo) == (getattr(algo, n), "roc" if "roc" in label else "all", label)
