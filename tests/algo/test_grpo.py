"""GRPO advantage and Clip-Higher loss: hand-computed cases and equality with VERL 0.9.1 core_algos."""

import math

import numpy as np
import pytest
import torch

from kit.algo.grpo import aggregate_loss, group_advantage, policy_loss


@pytest.fixture(scope="module")
def verl_algos():
    """VERL's core_algos and ActorConfig, imported once for the module (~4 s)."""
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    return core_algos, ActorConfig


def _actor_config(ActorConfig, agg="token-mean", low=0.2, high=0.28, c=3.0):
    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1, clip_ratio_low=low,
                       clip_ratio_high=high, clip_ratio_c=c, loss_agg_mode=agg)


# ------------------------------------------------------------------ advantage


def test_advantage_hand_computed_one_correct_of_four():
    # mean 0.25, unbiased std sqrt(0.25) = 0.5 -> (1-0.25)/0.5 = 1.5, (0-0.25)/0.5 = -0.5
    adv = group_advantage([1.0, 0.0, 0.0, 0.0], ["a", "a", "a", "a"], eps=0.0)
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])


def test_advantage_groups_are_independent_and_equal_rewards_give_zero():
    adv = group_advantage([1, 1, 1, 0, 1, 0, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1], eps=0.0)
    # group 0: mean .75, std .5 -> .5, .5, .5, -1.5; group 1: mean .5, std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5, 0.5 / s, -0.5 / s, 0.5 / s, -0.5 / s])
    assert group_advantage([1, 1, 1], [7, 7, 7]).abs().max() == 0


def test_advantage_singleton_group_follows_verl_convention():
    assert group_advantage([1.0], ["x"], eps=0.0).tolist() == [1.0]


def test_advantage_rejects_length_mismatch():
    with pytest.raises(ValueError, match="3 rewards but 2 group labels"):
        group_advantage([1, 0, 1], [0, 0])


def test_advantage_equals_verl_grpo_on_random_groups(verl_algos):
    core_algos, _ = verl_algos
    gen = torch.Generator().manual_seed(0)
    B, T = 48, 7
    rewards = torch.randint(0, 2, (B,), generator=gen).float()
    uids = np.array([f"u{int(i)}" for i in torch.randint(0, 9, (B,), generator=gen)], dtype=object)
    mask = (torch.rand(B, T, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    token_rewards = torch.zeros(B, T)
    last = (mask * torch.arange(T)).argmax(-1)
    token_rewards[torch.arange(B), last] = rewards
    ref, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, uids, epsilon=1e-6)
    ours = group_advantage(rewards, uids, eps=1e-6).unsqueeze(-1) * mask
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ loss


def test_loss_hand_computed_clip_higher():
    # one row, three tokens; A = +1: ratios 1.5 (clipped to 1.28), 1.0, 0.5 (not clipped for A>0)
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 1.0, 0.5]]))
    loss, m = policy_loss(new, old, torch.tensor([1.0]), torch.ones(1, 3))
    assert loss.item() == pytest.approx(-(1.28 + 1.0 + 0.5) / 3, rel=1e-6)
    assert m["clipfrac"] == pytest.approx(1 / 3, rel=1e-6)
    # A = -1: ratio 0.5 is clipped at 0.8 -> loss max(0.5, 0.8) = 0.8; ratio 4.0 hits dual clip c=3
    new = torch.log(torch.tensor([[0.5, 4.0, 1.0]]))
    loss, m = policy_loss(new, old, torch.tensor([-1.0]), torch.ones(1, 3))
    assert loss.item() == pytest.approx((0.8 + 3.0 + 1.0) / 3, rel=1e-6)
    assert m["clipfrac_lower"] == pytest.approx(1 / 3, rel=1e-6)


def test_loss_is_token_mean_over_the_batch_not_per_sequence():
    # row 0 has 1 kept token with loss 1, row 1 has 3 kept tokens with loss 0 -> token mean 1/4
    lp = torch.zeros(2, 4)
    adv = torch.tensor([-1.0, 0.0])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    loss, _ = policy_loss(lp, lp, adv, mask)
    assert loss.item() == pytest.approx(0.25)
    seq, _ = policy_loss(lp, lp, adv, mask, loss_agg_mode="seq-mean-token-mean")
    assert seq.item() == pytest.approx(0.5)


def test_tool_tokens_get_zero_gradient_and_do_not_change_the_loss():
    gen = torch.Generator().manual_seed(1)
    B, T = 4, 10
    old = -torch.rand(B, T, generator=gen)
    new = (old + 0.01 * torch.randn(B, T, generator=gen)).requires_grad_(True)  # inside the clip range
    adv = torch.randn(B, generator=gen)
    mask = torch.ones(B, T)
    mask[:, 3:6] = 0  # a tool-feedback span
    loss, _ = policy_loss(new, old, adv, mask)
    loss.backward()
    assert torch.all(new.grad[:, 3:6] == 0)
    assert torch.all(new.grad[mask.bool()] != 0)
    # garbage (even NaN) log-probs on tool tokens cannot leak into the loss
    poisoned = new.detach().clone()
    poisoned[:, 3:6] = float("nan")
    loss2, m2 = policy_loss(poisoned, old, adv, mask)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)
    # ... nor into the logged metrics (approx_kl was NaN here)
    _, m = policy_loss(new.detach(), old, adv, mask)
    assert all(math.isfinite(v) for v in m2.values())
    assert m2 == pytest.approx(m, rel=1e-6)


def test_micro_batches_with_global_token_count_sum_to_the_full_batch_loss():
    gen = torch.Generator().manual_seed(2)
    old = -torch.rand(6, 5, generator=gen)
    new = old + 0.2 * torch.randn(6, 5, generator=gen)
    adv = torch.randn(6, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.4).float()
    full, _ = policy_loss(new, old, adv, mask)
    n = mask.sum().item()
    parts = [policy_loss(new[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], batch_num_tokens=n)[0]
             for i in (0, 2, 4)]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), rel=1e-6)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_loss_equals_verl_vanilla_on_random_inputs(verl_algos, agg):
    core_algos, ActorConfig = verl_algos
    cfg = _actor_config(ActorConfig, agg=agg)
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        B, T = 8, 16
        old = -3 * torch.rand(B, T, generator=gen)
        new = old + 0.5 * torch.randn(B, T, generator=gen)
        adv = torch.randn(B, generator=gen).unsqueeze(-1).expand(B, T).contiguous()
        mask = (torch.rand(B, T, generator=gen) > 0.35).float()
        ref, ref_m = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, loss_agg_mode=agg, config=cfg)
        ours, m = policy_loss(new, old, adv, mask, 0.2, 0.28, 3.0, agg)
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)
        assert m["clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"], abs=1e-6)
        assert m["clipfrac_lower"] == pytest.approx(ref_m["actor/pg_clipfrac_lower"], abs=1e-6)
        assert m["approx_kl"] == pytest.approx(ref_m["actor/ppo_kl"], abs=1e-6)


def test_loss_gradient_equals_verl(verl_algos):
    core_algos, ActorConfig = verl_algos
    cfg = _actor_config(ActorConfig)
    gen = torch.Generator().manual_seed(9)
    old = -2 * torch.rand(5, 12, generator=gen)
    base = old + 0.4 * torch.randn(5, 12, generator=gen)
    adv = torch.randn(5, generator=gen)
    mask = (torch.rand(5, 12, generator=gen) > 0.3).float()
    a, b = base.clone().requires_grad_(True), base.clone().requires_grad_(True)
    core_algos.compute_policy_loss_vanilla(old, a, adv.unsqueeze(-1).expand(5, 12), mask, config=cfg)[0].backward()
    policy_loss(b, old, adv, mask)[0].backward()
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-6, atol=1e-8)


def test_aggregate_loss_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown mode"):
        aggregate_loss(torch.zeros(2, 2), torch.ones(2, 2), "seq-sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 2))
