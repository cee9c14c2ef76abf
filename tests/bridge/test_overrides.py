"""Hydra overrides for VERL: golden files, and every key accepted by VERL 0.9.1's own config.

Regenerate the golden files after an intended change with
``KIT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/bridge/test_overrides.py`` and review the diff.
"""

import os
from pathlib import Path

import pytest

from kit.algo import sampling_plan
from kit.bridge.overrides import GRPO_SAMPLER, RecipePaths, command, stage_step_offset, to_hydra_overrides
from kit.config import load

GOLDEN = Path(__file__).parent / "golden"
CASES = [("paper-14b", "stage1"), ("paper-14b", "stage2"), ("paper-14b", "stage3"), ("paper-32b", "stage1")]


def _overrides(profile, stage):
    cfg = load(profile, write=False)
    return to_hydra_overrides(cfg, stage, paths=RecipePaths.default("/RUN", hard=cfg.stages[stage].problems == "hard"), model_path="/MODELS/sft")


@pytest.mark.parametrize(("profile", "stage"), CASES)
def test_overrides_match_golden_file(profile, stage):
    text = "\n".join(_overrides(profile, stage)) + "\n"
    path = GOLDEN / f"{profile}_{stage}.txt"
    if os.environ.get("KIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with KIT_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.fixture(scope="module")
def composed():
    """VERL's ppo_trainer config composed with our overrides, for each case (hydra, no Ray)."""
    from hydra import compose, initialize_config_module

    out = {}
    with initialize_config_module("verl.trainer.config", version_base=None):
        for profile, stage in CASES:
            out[(profile, stage)] = compose(config_name="ppo_trainer", overrides=_overrides(profile, stage))
    return out


def test_every_key_exists_in_verl_config_and_values_land(composed):
    c = composed[("paper-14b", "stage1")]
    a = c.actor_rollout_ref
    assert (a.rollout.name, a.rollout.mode, a.rollout.n) == ("sglang", "async", 16)
    assert c.trainer.v1.sampler.sampler_kwargs.oversample == 32 and c.data.train_batch_size == 512
    assert (a.actor.clip_ratio_low, a.actor.clip_ratio_high, a.actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert a.actor.optim.lr == 1e-6 and not a.actor.use_kl_loss and a.actor.entropy_coeff == 0
    assert not c.algorithm.use_kl_in_reward and c.algorithm.adv_estimator == "grpo"
    assert c.data.max_response_length == 8192 and a.rollout.multi_turn.max_assistant_turns == 10
    assert a.rollout.agent.agent_loop_manager_class == "kit.bridge.roc_hook.RocAgentLoopManager"
    assert c.trainer.v1.sampler.custom_sampler.name == "RocReplayBuffer"


def test_stage_lengths_turns_steps_and_resumption(composed):
    s2, s3 = composed[("paper-14b", "stage2")], composed[("paper-14b", "stage3")]
    assert s2.data.max_response_length == 12288 and s3.data.max_response_length == 12288
    assert s2.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 10
    assert s3.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 15
    assert (s2.trainer.total_training_steps, s3.trainer.total_training_steps) == (385, 510)
    assert s2.trainer.resume_from_path == "/RUN/checkpoints/global_step_300"
    assert list(s2.actor_rollout_ref.actor.checkpoint.load_contents) == ["model", "optimizer", "extra"]
    assert s3.trainer.resume_from_path == "/RUN/checkpoints/global_step_385"
    assert list(s3.actor_rollout_ref.actor.checkpoint.load_contents) == ["model"]  # reset optimizer


def test_verl_accepts_the_config_objects(composed):
    """VERL's own validation and dataclass conversion (what main_ppo does before starting Ray)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    c = composed[("paper-14b", "stage1")]
    assert not need_reference_policy(c) and not need_critic(c)
    validate_config(config=c, use_reference_policy=False, use_critic=False)
    actor = omega_conf_to_dataclass(c.actor_rollout_ref.actor)
    assert actor.rollout_n == 16 and actor.clip_ratio_c == 3.0
    rollout = omega_conf_to_dataclass(c.actor_rollout_ref.rollout)
    assert rollout.agent.agent_loop_manager_class.endswith("RocAgentLoopManager")


def test_plain_grpo_ablation_has_no_roc_pieces_but_the_kit_s_tool_metrics_buffer():
    from hydra import compose, initialize_config_module

    cfg = load("paper-14b", write=False, overrides={"algorithm.selection": "all"})
    ov = to_hydra_overrides(cfg, "stage1")
    assert not any("roc_hook" in o or "oversample" in o for o in ov)
    assert "actor_rollout_ref.rollout.n=16" in ov
    # GRPO's step rows carry tool_calls_per_traj and time_tool_s too: VERL's buffer with the kit's metrics
    with initialize_config_module("verl.trainer.config", version_base=None):
        c = compose(config_name="ppo_trainer", overrides=ov)
    sampler = c.trainer.v1.sampler
    assert (sampler.custom_sampler.path, sampler.custom_sampler.name) == GRPO_SAMPLER
    kw = dict(sampler.sampler_kwargs)
    records = {k: kw.pop(k) for k in list(kw) if k.startswith("records_")}  # rollout records (kit.bridge.verl_records)
    assert kw == {"train_batch_size": 512} and c.data.train_batch_size == 512
    assert records["records_dir"] == "runs/paper-14b" and records["records_algorithm"] == "grpo"
    assert (records["records_every"], records["records_max_prompts"], records["records_step_offset"]) == (1, 4, 0)


def test_release_text_reading_passes_the_tokenizer():
    cfg = load("paper-14b", write=False, overrides={"algorithm.roc_reading": "text", "algorithm.roc_mode": "rank"})
    ov = to_hydra_overrides(cfg, "stage1", model_path="/MODELS/sft")
    assert "+trainer.v1.sampler.sampler_kwargs.reading=text" in ov
    assert "+trainer.v1.sampler.sampler_kwargs.tokenizer_path=/MODELS/sft" in ov
    assert "+trainer.v1.sampler.sampler_kwargs.mode=rank" in ov


def test_release_negative_order_reaches_the_roc_hook():
    from kit.bridge.roc_hook import roc_params_from_kwargs

    assert not any("negative_order" in o for o in to_hydra_overrides(load("paper-14b", write=False), "stage1"))
    cfg = load("paper-14b", write=False, overrides={"algorithm.roc_negative_order": "rollout"})
    ov = to_hydra_overrides(cfg, "stage1")
    assert "+trainer.v1.sampler.sampler_kwargs.negative_order=rollout" in ov
    kw = {o.split("sampler_kwargs.")[1].split("=")[0]: o.split("=", 1)[1] for o in ov if "sampler_kwargs." in o}
    params, _ = roc_params_from_kwargs(kw)
    assert params.negative_order == "rollout"


def test_bad_stage_and_bad_roc_settings_are_rejected():
    cfg = load("paper-14b", write=False)
    with pytest.raises(ValueError, match="unknown stage 'stage4'"):
        to_hydra_overrides(cfg, "stage4")
    bad = load("paper-14b", write=False, overrides={"algorithm.oversample": 8})
    with pytest.raises(ValueError, match="oversample"):
        to_hydra_overrides(bad, "stage1")


def test_offsets_and_command():
    cfg = load("paper-14b", write=False)
    assert [stage_step_offset(cfg, s) for s in ("stage1", "stage2", "stage3")] == [0, 300, 385]
    assert command(["a=1"], python="py")[:3] == ["py", "-m", "verl.trainer.main_ppo"]


def test_check_minimums_is_the_one_roc_count_check():
    with pytest.raises(ValueError, match=r"min_positive \(5\) \+ min_negative \(2\) exceeds group_size \(6\)"):
        to_hydra_overrides(load("paper-14b", {"algorithm.group_size": 6, "algorithm.oversample": 12,
                                              "algorithm.min_positive": 5}, write=False), "stage1")


def test_ppo_is_verl_s_gae_with_its_critic_from_the_actor_s_model_and_no_roc():
    """Issue #33: ``algorithm.adv_estimator = "gae"`` (``selection = "all"``) gives VERL's critic worker (initialised from the
    model the actor starts from, the kit's [critic] settings), G sampled and all kept; stage 3's fresh
    optimizer resets the critic's too (VERL's critic config loads the model, so the live check is the verl_cpu e2e run)."""
    from hydra import compose, initialize_config_module
    from verl.trainer.ppo.utils import need_critic
    over = {"algorithm.adv_estimator": "gae", "algorithm.selection": "all", "algorithm.gamma": 0.99, "algorithm.lam": 0.95, "critic.lr": 2e-6,
            "critic.cliprange_value": 0.2}
    cfg = load("paper-14b", write=False, overrides=over)
    with initialize_config_module("verl.trainer.config", version_base=None):
        c1 = compose(config_name="ppo_trainer", overrides=to_hydra_overrides(cfg, "stage1", model_path="/MODELS/sft"))
        c3 = compose(config_name="ppo_trainer", overrides=to_hydra_overrides(
            cfg, "stage3", paths=RecipePaths.default("/RUN", hard=True), model_path="/MODELS/sft"))
    assert need_critic(c1) and c1.algorithm.adv_estimator == "gae" and (c1.algorithm.gamma, c1.algorithm.lam) == (0.99, 0.95)
    assert c1.critic.model.path == c1.actor_rollout_ref.model.path == "/MODELS/sft"
    assert (c1.critic.optim.lr, c1.critic.cliprange_value, c1.critic.ppo_epochs) == (2e-6, 0.2, 1)
    assert c1.actor_rollout_ref.rollout.n == 16 and c1.trainer.v1.sampler.custom_sampler.name == GRPO_SAMPLER[1]
    assert "agent_loop_manager_class" not in c1.actor_rollout_ref.rollout.agent
    assert list(c3.critic.checkpoint.load_contents) == ["model"] and list(c1.critic.checkpoint.load_contents)[1] == "optimizer"
    roc = load("paper-14b", write=False, overrides={**over, "algorithm.selection": "roc"})
    assert "trainer.v1.sampler.custom_sampler.name=RocReplayBuffer" in to_hydra_overrides(roc, "stage1")


@pytest.mark.parametrize(("fields", "label"), [({}, "grpo_roc"), ({"algorithm.selection": "all"}, "grpo"),
                                               ({"algorithm.adv_estimator": "gae", "algorithm.selection": "all"}, "ppo"),
                                               ({"algorithm.adv_estimator": "gae", "algorithm.selection": "roc"},
                                                "ppo_roc")])
def test_rollout_records_of_an_arm_carry_the_label_its_local_rows_carry(fields, label):
    """Issue #43: a PPO arm's records were filed as ``grpo_roc`` on VERL and ``ppo`` on the local trainer."""
    cfg = load("paper-14b", write=False, overrides=fields)
    (value,) = [o.split("=", 1)[1] for o in to_hydra_overrides(cfg, "stage1") if "records_algorithm=" in o]
    assert value == label == sampling_plan(cfg.algorithm)[2]


@pytest.mark.parametrize(("fields", "name"), [({}, "paper-14b-stage1-grpo_roc-seed0"),
                                              ({"algorithm.selection": "all", "seed": 3}, "paper-14b-stage1-grpo-seed3"),
                                              ({"algorithm.adv_estimator": "gae", "algorithm.selection": "all"},
                                               "paper-14b-stage1-ppo-seed0")])
def test_an_arm_s_tracker_run_has_its_label_and_seed_on_both_runtimes(fields, name, tmp_path):
    """Issue #43: every arm of a stage was ``<profile>-<stage>`` in the tracker on both runtimes, so the
    ablation's arms and seeds shared one wandb run. VERL's ``trainer.experiment_name`` and the local
    tracker's name are now the one :meth:`KitConfig.tracker_name`."""
    from kit.train import tracking

    cfg = load("paper-14b", write=False, overrides={**fields, "logging.backends": ["file"]})
    (value,) = [o.split("=", 1)[1] for o in to_hydra_overrides(cfg, "stage1") if o.startswith("trainer.experiment_name=")]
    local = tracking.open_tracker(cfg, tmp_path, "stage1")
    try:
        assert value == name == local.experiment
    finally:
        local.finish()


def test_the_main_chain_an_ablation_arm_and_another_pipeline_run_are_different_tracker_runs():
    """The reviewer's case: stage 1 of the main chain and the ablation's ``grpo_roc_seed0`` arm have the same
    label and seed; their run folders tell them apart, on both runtimes (the VERL overrides read the same name)."""
    from kit.plan import ablation_arms

    main = load("tiny", run_dir="reports/tiny/main/stage1", write=False)
    (arm,) = [a for a in ablation_arms(load("tiny", run_dir="reports/tiny/main/ablation", write=False),
                                       "reports/tiny/main/ablation") if a.algorithm.label == "grpo_roc" and a.seed == 0]
    other = load("tiny", run_dir="/elsewhere/tiny/s1/stage1", write=False)
    names = [c.tracker_name("stage1") for c in (main, arm, other)]
    assert names == ["tiny-main-stage1-grpo_roc-seed0", "tiny-main-ablation-stage1-grpo_roc-seed0",
                     "tiny-s1-stage1-grpo_roc-seed0"]
    assert main.tracker_name("sft") == "tiny-main-sft-seed0"
