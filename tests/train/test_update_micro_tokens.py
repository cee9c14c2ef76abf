"""algorithm.update_micro_tokens (issue #35, opt-in): the update in smaller length-sorted micro-batches is the
same step up to float summation order; the default keeps one micro-batch for a small batch."""

import copy

import torch
from rl_cases import build_policy, rl_cfg, traj

from kit.models import load_policy
from kit.train import common, update


def test_smaller_micro_batches_give_the_same_update_up_to_rounding(tmp_path, monkeypatch):
    model, tok = load_policy(build_policy(tmp_path))
    model.train()
    trajs = [traj(resp=tuple(range(10, 10 + n))) for n in (3, 9, 4, 8)]
    adv = torch.tensor([0.7, -0.7, 0.5, -0.5])
    real, sizes = update.token_logprobs, []
    monkeypatch.setattr(update, "token_logprobs", lambda m, ids, *a, **k: (sizes.append(tuple(ids.shape)), real(m, ids, *a, **k))[1])
    ref = copy.deepcopy(model)
    common_out = update.policy_update(rl_cfg(), ref, common.make_optimizer(ref, 1e-2), trajs, adv, tok.pad_token_id, 1e-2)
    assert sizes == [(4, 11)]  # default: every row in one micro-batch, padded to the longest
    sizes.clear()
    small = update.policy_update(rl_cfg(**{"algorithm.update_micro_tokens": 24}), model, common.make_optimizer(model, 1e-2),
                                 trajs, adv, tok.pad_token_id, 1e-2)
    assert sizes == [(2, 6), (2, 11)]  # length-sorted groups of at most 24 padded tokens
    assert abs(small["loss"] - common_out["loss"]) < 1e-6
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):  # AdamW's first step: ~lr * sign(grad)
        torch.testing.assert_close(p, q, rtol=0, atol=1e-4)
