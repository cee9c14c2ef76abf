"""PPO on the local engine (issue #33): ``algorithm.adv_estimator = "gae"`` with ``selection = "all"`` trains a critic beside the
policy, samples G per prompt and keeps all (no RoC), and interpreter feedback enters no loss."""

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from rl_cases import build_policy, rl_cfg

from kit.models import load_policy
from kit.rollout import Trajectory
from kit.train import common, critic, rl, rollouts
from kit.train.update import policy_update


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_policy(tmp_path_factory.mktemp("ppo_init"))


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_two_local_ppo_steps_train_the_critic_and_the_policy(policy, tmp_path, monkeypatch):
    async def grade(pairs):  # a random policy is never right: reward even-length texts so rewards are mixed
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    monkeypatch.setattr(rollouts, "cut_truncated", lambda verdicts, trajectories: list(verdicts))  # the double decides
    cfg = rl_cfg(**{"algorithm.adv_estimator": "gae", "algorithm.selection": "all", "stages.stage1.steps": 2, "stages.stage1.checkpoint_every": 1,
                                "critic.lr": 1e-3})
    assert critic.sampling(cfg) == (cfg.algorithm.group_size, "all", "ppo")  # ReTool: no RoC
    rl.run_stage(cfg, "stage1", policy, tmp_path, evaluate=False)
    rows = common.metric_rows(tmp_path)
    assert [r["algorithm"] for r in rows] == ["ppo", "ppo"]
    P, G = cfg.algorithm.prompts_per_step, cfg.algorithm.group_size
    assert all(r["sampled"] == r["kept"] == P * G for r in rows)
    assert all(math.isfinite(r["value_loss"]) and r["value_loss"] > 0 and r["critic_grad_norm"] > 0 for r in rows)
    assert all(-10 < r["vf_explained_var"] <= 1 for r in rows)
    start = critic.critic_from(policy, cfg, optimizer=False, seed=common.step_seed(cfg.seed, "critic-init"))
    trained = critic.critic_from(tmp_path / critic.CRITIC_DIR, cfg)
    assert (tmp_path / critic.CRITIC_DIR / "optimizer.pt").exists()
    assert (common.latest_checkpoint(tmp_path) / critic.CRITIC_DIR / "config.json").exists()  # resumes with its critic
    assert not torch.equal(_params(start.model), _params(trained.model))
    init_policy, _ = load_policy(policy)
    assert not torch.equal(_params(init_policy), _params(load_policy(tmp_path / "policy")[0]))
    # the critic's backbone started as the policy's (VERL: the critic's model path is the actor's)
    assert torch.equal(start.model.model.embed_tokens.weight, init_policy.model.embed_tokens.weight)


def _feedback_trajs():
    """Three rows: model tokens, a tool-feedback block (mask 0), more model tokens."""
    out = []
    for k in range(3):
        resp = [5 + k, 6, 7, 40, 41, 42, 8, 9 + k][: 6 + k]
        mask = [1, 1, 1, 0, 0, 0, 1, 1][: 6 + k]
        out.append(Trajectory(problem="q", prompt_ids=[1, 2, 3], response_ids=resp, response_mask=mask))
    return out


def test_feedback_tokens_contribute_nothing_to_the_value_or_the_policy_loss(policy):
    cfg = rl_cfg(**{"algorithm.adv_estimator": "gae", "algorithm.selection": "all", "critic.cliprange_value": 0.05})
    model, tok = load_policy(policy)
    trs = _feedback_trajs()
    c0 = critic.critic_from(policy, cfg, optimizer=False, seed=0)
    adv, inputs = critic.ppo_advantages(cfg, c0, trs, torch.tensor([1.0, 0.0, 1.0]), tok.pad_token_id)
    fb = inputs["mask"] == 0
    assert adv.shape == inputs["values"].shape == (3, 8) and fb.any()
    noise = torch.randn(adv.shape, generator=torch.Generator().manual_seed(0)) * 5
    perturbed = {k: torch.where(fb, v + noise, v) if k != "mask" else v for k, v in inputs.items()}
    a, b = copy.deepcopy(c0), copy.deepcopy(c0)
    ma = a.update(trs, **inputs, pad_id=tok.pad_token_id, lr=1e-2)
    mb = b.update(trs, **perturbed, pad_id=tok.pad_token_id, lr=1e-2)
    assert ma["value_loss"] == mb["value_loss"] and ma["critic_grad_norm"] == mb["critic_grad_norm"] > 0
    assert torch.equal(_params(a.model), _params(b.model))
    pa, pb = copy.deepcopy(model), copy.deepcopy(model)
    ua = policy_update(cfg, pa, common.make_optimizer(pa, 1e-2), trs, adv, tok.pad_token_id, 1e-2)
    ub = policy_update(cfg, pb, common.make_optimizer(pb, 1e-2), trs, torch.where(fb, adv + noise, adv),
                       tok.pad_token_id, 1e-2)
    assert ua["loss"] == ub["loss"] and ua["grad_norm"] == ub["grad_norm"] > 0
    assert torch.equal(_params(pa), _params(pb))


def test_rl_step_refuses_gae_without_a_critic_and_roc_comes_back_only_when_asked():
    cfg = rl_cfg(**{"algorithm.adv_estimator": "gae", "algorithm.selection": "roc"})
    assert critic.sampling(cfg) == (cfg.algorithm.oversample, "roc", "ppo_roc")
    assert critic.sampling(rl_cfg()) == (cfg.algorithm.oversample, "roc", "grpo_roc")
    assert critic.open_critic(rl_cfg(), "/nonexistent/policy", "/nonexistent/run") is None
    from kit.rollout import run_coroutine
    from kit.train.step import rl_step

    with pytest.raises(ValueError, match="needs the stage's critic"):
        run_coroutine(rl_step(cfg, cfg.stages["stage1"], None, None, None, [], 0, None))


def test_a_killed_ppo_stage_resumes_with_its_critic_and_writes_the_same_rows(policy, tmp_path, monkeypatch):
    async def grade(pairs):
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    cfg = rl_cfg(**{"algorithm.adv_estimator": "gae", "algorithm.selection": "all", "stages.stage1.steps": 3, "stages.stage1.checkpoint_every": 1,
                    "critic.lr": 1e-3, "model.torch_threads": 1})
    rl.run_stage(cfg, "stage1", policy, tmp_path / "a", evaluate=False)

    class Killed(Exception):
        pass

    def die(row):
        if row.get("step") == 3:
            raise Killed  # after step 3's row; the last checkpoint (policy and critic) is step 2

    with pytest.raises(Killed):
        rl.run_stage(cfg, "stage1", policy, tmp_path / "b", progress=die, evaluate=False)
    rl.run_stage(cfg, "stage1", policy, tmp_path / "b", evaluate=False)

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("time_", "perf_"))} for r in rows]

    assert strip(common.metric_rows(tmp_path / "b")) == strip(common.metric_rows(tmp_path / "a"))
    a, b = (critic.critic_from(tmp_path / d / critic.CRITIC_DIR, cfg) for d in ("a", "b"))
    assert torch.equal(_params(a.model), _params(b.model))
