"""GAE advantages/returns and the clipped value loss: hand-computed cases and equality with VERL 0.9.1 core_algos
on random inputs whose masks have interpreter-feedback holes inside the response."""

import pytest
import torch

from kit.algo import compute_advantage
from kit.algo.gae import explained_variance, gae_advantage_return, outcome_token_rewards, value_loss
from kit.config import load


@pytest.fixture(scope="module")
def core_algos():
    from verl.trainer.ppo import core_algos

    return core_algos


def _random_batch(seed, B=24, T=17):
    """Rewards on the last token, values, and a response mask with feedback holes and right padding."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=gen)
    mask = torch.zeros(B, T)
    for b, n in enumerate(lengths.tolist()):
        mask[b, :n] = 1
        start = int(torch.randint(1, max(2, n - 1), (1,), generator=gen))
        mask[b, start:start + int(torch.randint(0, 4, (1,), generator=gen))] = 0  # a tool-feedback block
        mask[b, n - 1] = 1  # the answer turn's last token is the model's
    rewards = torch.randint(0, 2, (B,), generator=gen).float()
    values = torch.randn(B, T, generator=gen)
    return outcome_token_rewards(rewards, lengths, T), values, mask, rewards, lengths


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.5)])
def test_gae_equals_verl_on_random_masked_inputs(core_algos, gamma, lam):
    token_rewards, values, mask, _, _ = _random_batch(int(gamma * 100 + lam * 10))
    ref_adv, ref_ret = core_algos.compute_gae_advantage_return(token_rewards, values, mask, gamma, lam)
    adv, ret = gae_advantage_return(token_rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, ref_adv, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ret, ref_ret, rtol=1e-6, atol=1e-6)


def test_gae_hand_computed_feedback_tokens_are_skipped_not_counted():
    # tokens: model, feedback, model(last, reward 1); gamma = lam = 1: the carry jumps the feedback token
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.2, 9.0, 0.5]])
    m = torch.tensor([[1.0, 0.0, 1.0]])
    _, ret = gae_advantage_return(r, v, m, 1.0, 1.0)
    # A_2 = 1 - 0.5 = 0.5; A_0 = 0 + V_2 - V_0 + A_2 = 0.5 - 0.2 + 0.5 = 0.8 (V_1 = 9 never enters)
    assert ret[0, 2].item() == pytest.approx(1.0) and ret[0, 0].item() == pytest.approx(1.0)
    # gamma = lam = 0.5 tells skipping from counting: delta_0 = 0 + 0.5 * V_2 - V_0 = 0.05 and
    # A_0 = 0.05 + 0.25 * A_2 = 0.175, return 0.375 (through V_1 = 9 it would be 4.3 + ...)
    _, ret_half = gae_advantage_return(r, v, m, 0.5, 0.5)
    assert ret_half[0, 0].item() == pytest.approx(0.375) and ret_half[0, 2].item() == pytest.approx(1.0)
    v2 = v.clone()
    v2[0, 1] = -123.0  # a feedback token's value changes nothing a loss reads
    _, ret2 = gae_advantage_return(r, v2, m, 0.9, 0.8)
    _, ret1 = gae_advantage_return(r, v, m, 0.9, 0.8)
    assert torch.equal(ret1[m.bool()], ret2[m.bool()])


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("clip", [0.5, 0.05])
def test_value_loss_equals_verl_on_random_masked_inputs(core_algos, agg, clip):
    _, values, mask, _, _ = _random_batch(3)
    gen = torch.Generator().manual_seed(4)
    returns = torch.randn(values.shape, generator=gen)
    vpreds = (values + 0.3 * torch.randn(values.shape, generator=gen)).requires_grad_(True)
    ref, ref_cf = core_algos.compute_value_loss(vpreds, returns, values, mask, clip, loss_agg_mode=agg)
    ours, cf = value_loss(vpreds, returns, values, mask, clip, agg)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(cf, ref_cf, rtol=1e-6, atol=1e-7)
    assert 0 < cf < 1 if clip == 0.05 else True
    (g,) = torch.autograd.grad(ours, vpreds)
    assert g[mask == 0].abs().max() == 0  # feedback and padding get no value loss


def test_value_loss_split_in_micro_batches_sums_to_the_batch_loss():
    _, values, mask, _, _ = _random_batch(5)
    returns = values.flip(0)
    vpreds = values + 0.1
    full, _ = value_loss(vpreds, returns, values, mask, 0.2)
    n = float(mask.sum())
    parts = sum(value_loss(vpreds[s], returns[s], values[s], mask[s], 0.2, batch_num_tokens=n)[0]
                for s in (slice(0, 10), slice(10, None)))
    torch.testing.assert_close(parts, full)


def test_explained_variance_is_verl_s_formula():
    _, values, mask, _, _ = _random_batch(6)
    returns = values + 0.1 * torch.randn(values.shape, generator=torch.Generator().manual_seed(1))
    sel = mask.bool()
    want = 1.0 - torch.var(returns[sel] - values[sel]) / (torch.var(returns[sel]) + 1e-5)
    assert explained_variance(returns, values, mask) == pytest.approx(float(want), rel=1e-6)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0, abs=1e-6)


def test_gae_is_registered_and_reads_gamma_lam_from_the_config(core_algos):
    cfg = load("smoke", {"algorithm.adv_estimator": "gae", "algorithm.gamma": 0.95, "algorithm.lam": 0.9}, write=False)
    token_rewards, values, mask, rewards, lengths = _random_batch(7)
    adv = compute_advantage(cfg.algorithm, rewards, list(range(len(rewards))), values=values, response_mask=mask,
                            lengths=lengths)
    ref, _ = core_algos.compute_gae_advantage_return(token_rewards, values, mask, 0.95, 0.9)
    torch.testing.assert_close(adv, ref, rtol=1e-6, atol=1e-6)


def test_bad_shapes_and_lengths_are_refused():
    with pytest.raises(ValueError, match="must all be"):
        gae_advantage_return(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="response lengths must be in 1..3"):
        outcome_token_rewards(torch.ones(2), torch.tensor([3, 4]), 3)
    with pytest.raises(ValueError, match="whitening needs at least 2"):
        gae_advantage_return(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([[0.0, 1.0, 0.0]]))
