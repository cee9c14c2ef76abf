"""Review of issue #16's advantage-0 skip (kit.train.update.policy_update): the skipped-row update
is the full update for every ``algorithm.loss_agg_mode``, for several PPO epochs (old log-probs
recomputed, ratios away from 1, clipping active) and without the dual clip; the existing tests
cover token-mean with one epoch only."""

import dataclasses

import pytest
import torch
from rl_cases import build_policy, rl_cfg, traj

from kit.models import load_policy
from kit.train import common, update


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_policy(tmp_path_factory.mktemp("rl_update_modes"))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("epochs,dual_clip", [(1, True), (2, False)])
def test_skipping_zero_advantage_rows_is_the_full_update_in_every_mode(policy, mode, epochs, dual_clip):
    cfg = rl_cfg(**{"algorithm.loss_agg_mode": mode, "algorithm.ppo_epochs": epochs})
    if not dual_clip:
        cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, clip_ratio_c=None))
    trajs = [traj(resp=(10, 11, 12, 13)), traj(resp=(20, 21, 22)), traj(resp=(30, 31, 32, 33, 34)),
             traj(resp=(40, 41)), traj(resp=(50, 51, 52, 53, 54, 55))]
    trajs[2].response_mask = [1, 1, 0, 0, 1]  # tool feedback inside a row that runs
    adv = torch.tensor([0.7, 0.0, -0.7, 0.0, -0.3])
    outs, params = [], []
    for skip in (True, False):
        model, tok = load_policy(policy)
        model.train()
        opt = common.make_optimizer(model, 1e-2)
        for _ in range(2):  # the second step starts from moved weights and AdamW moments
            out = update.policy_update(cfg, model, opt, trajs, adv, tok.pad_token_id, 1e-2, skip_zero_advantage=skip)
        outs.append(out)
        params.append([p.detach().clone() for p in model.parameters()])
    assert outs[0]["update_rows_skipped"] == 2 and outs[1]["update_rows_skipped"] == 0
    for key in ("loss", "grad_norm", "clipfrac", "neg_logp", "update_tokens"):
        assert outs[0][key] == pytest.approx(outs[1][key], rel=1e-5, abs=1e-6), key
    for p, q in zip(*params, strict=True):  # tolerance as in test_rl_update: AdamW turns rounding into ~1e-5 moves
        torch.testing.assert_close(p, q, rtol=0, atol=1e-4)


def test_loss_and_clipfrac_are_means_over_ppo_epochs_not_sums(policy, monkeypatch):
    """Each epoch's summed chunk losses is the full-batch loss, so the update reports their mean
    over ``ppo_epochs`` (VERL averages its per-mini-batch metrics; a sum read 3x the loss). At a
    real learning rate the later epochs' ratios leave 1 and clip, so clipfrac is checked too."""
    trajs = [traj(resp=(10, 11, 12, 13)), traj(resp=(20, 21, 22)), traj(resp=(30, 31, 32, 33, 34))]
    adv = torch.tensor([0.7, -0.4, -0.3])
    seen = []
    real = update.policy_loss

    def spy(*args, **kwargs):
        loss, m = real(*args, **kwargs)
        seen.append((float(loss.detach()), float(m.get("clipfrac", 0.0))))
        return loss, m

    monkeypatch.setattr(update, "policy_loss", spy)
    cfg = rl_cfg(**{"algorithm.ppo_epochs": 3, "algorithm.clip_ratio_low": 0.01, "algorithm.clip_ratio_high": 0.01})
    model, tok = load_policy(policy)
    model.train()
    out = update.policy_update(cfg, model, common.make_optimizer(model, 0.05), trajs, adv, tok.pad_token_id, 0.05)
    assert len(seen) == 3  # one chunk a pass
    assert max(c for _, c in seen) > 0  # the later passes clip
    assert out["loss"] == pytest.approx(sum(v for v, _ in seen) / 3, rel=1e-6)
    assert out["clipfrac"] == pytest.approx(sum(c for _, c in seen) / 3, rel=1e-6)
