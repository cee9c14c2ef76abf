"""The local policy update (kit.train.update.policy_update): direction, the one-pass old log-probs, and
rows with advantage 0 skipped with the same update (issue #16: faster RL steps)."""

import copy

import pytest
import torch
from rl_cases import build_policy, rl_cfg, traj

from kit.algo import policy_loss
from kit.models import load_policy
from kit.train import common, rl, update
from kit.train.batching import pad_rows


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_policy(tmp_path_factory.mktemp("rl_update"))


def _trained(policy):
    model, tok = load_policy(policy)
    model.train()
    return model, tok, common.make_optimizer(model, 1e-2)


def _count_forwards(monkeypatch):
    real, rows = update.token_logprobs, []  # policy_update (kit.train.update) looks it up in its module
    monkeypatch.setattr(update, "token_logprobs", lambda m, ids, *a, **k: (rows.append(ids.shape[0]), real(m, ids, *a, **k))[1])
    return rows


def _full_batch_step(cfg, model, opt, trajs, adv, pad_id, lr):
    """The update over every row in one micro-batch, as before rows with advantage 0 were skipped."""
    a = cfg.algorithm
    rows = [(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + list(t.response_mask)) for t in trajs]
    ids, att, msk = pad_rows(rows, pad_id)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    lp = rl.token_logprobs(model, ids, att, msk)
    n_tok = float(msk.sum())
    loss, _ = policy_loss(lp, lp.detach(), adv, msk, a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c,
                          a.loss_agg_mode, batch_num_tokens=n_tok, batch_num_seqs=float(len(rows)))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
    opt.step()
    return float(loss.detach()), float(-(lp.detach() * msk).sum()) / n_tok


def test_policy_update_follows_the_advantage(policy):
    model, tok = load_policy(policy)
    model.train()
    cfg = rl_cfg()
    good, bad = traj(resp=(10, 11, 12, 13)), traj(resp=(20, 21, 22, 23))
    good.response_mask = [1, 1, 0, 1]  # a feedback token in the middle carries no loss

    @torch.no_grad()
    def seq_logp(t):
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        lp = rl.token_logprobs(model, ids, torch.ones_like(ids))[0, len(t.prompt_ids):]
        return float((lp * torch.tensor(t.response_mask, dtype=torch.float32)).sum())

    before = (seq_logp(good), seq_logp(bad))
    opt = common.make_optimizer(model, 1e-2)
    out = rl.policy_update(cfg, model, opt, [good, bad], torch.tensor([1.0, -1.0]), tok.pad_token_id, 1e-2)
    after = (seq_logp(good), seq_logp(bad))
    assert after[0] > before[0] and after[1] < before[1]
    assert out["update_tokens"] == 3 + 4 and out["grad_norm"] > 0 and out["update_rows_skipped"] == 0


def test_one_pass_update_without_the_old_forward_is_the_same_update(policy, monkeypatch):
    """ppo_epochs = 1: the old log-probs are the current ones detached instead of a second forward
    pass; parameters and statistics come out bitwise the same."""
    cfg = rl_cfg()
    trajs = [traj(resp=(10, 11, 12, 13)), traj(resp=(20, 21, 22)), traj(resp=(30, 31, 32, 33, 34))]
    adv = torch.tensor([1.0, -0.5, -0.5])
    calls = _count_forwards(monkeypatch)
    outs, params, forwards = [], [], []
    for recompute in (True, False):
        model, tok, opt = _trained(policy)
        n0 = len(calls)
        outs.append(rl.policy_update(cfg, model, opt, trajs, adv, tok.pad_token_id, 1e-2, recompute_old=recompute))
        forwards.append(len(calls) - n0)
        params.append([p.detach().clone() for p in model.parameters()])
    assert forwards == [2, 1]  # one micro-batch here: old + current forward, or the current one only
    assert all(torch.equal(a, b) for a, b in zip(*params, strict=True))
    assert outs[0] == outs[1]


def test_rows_with_zero_advantage_run_no_forward_and_give_the_full_batch_update(policy, monkeypatch):
    """A group with one reward has advantage 0 on every row: those rows add nothing to the clipped
    loss, so skipping them leaves the step of the whole batch (token-mean over all its tokens)."""
    cfg = rl_cfg()
    trajs = [traj(resp=(10, 11, 12, 13)), traj(resp=(20, 21, 22)), traj(resp=(30, 31, 32, 33, 34)),
             traj(resp=(40, 41))]
    adv = torch.tensor([0.7, 0.0, -0.7, 0.0])
    model, tok, opt = _trained(policy)
    ref_model = copy.deepcopy(model)
    ref_opt = common.make_optimizer(ref_model, 1e-2)
    ref_loss, ref_neg_logp = _full_batch_step(cfg, ref_model, ref_opt, trajs, adv, tok.pad_token_id, 1e-2)
    rows = _count_forwards(monkeypatch)
    out = rl.policy_update(cfg, model, opt, trajs, adv, tok.pad_token_id, 1e-2)
    assert rows[0] == 2  # the update's forward ran the two rows with a non-zero advantage
    assert sum(rows[1:]) == 2  # the skipped rows' entropy proxy: one no-grad forward (no sampling log-probs here)
    assert out["update_rows_skipped"] == 2 and out["update_tokens"] == 4 + 3 + 5 + 2
    assert out["loss"] == pytest.approx(ref_loss, abs=1e-6)
    assert out["neg_logp"] == pytest.approx(ref_neg_logp, rel=1e-5)
    # the same step up to float summation order; AdamW's first step moves a weight by about lr * sign(grad),
    # so a gradient of ~1e-9 (a rarely predicted vocabulary row) turns rounding into moves of ~1e-5: 0.1% of lr
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-2 * 1e-2)
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), load_policy(policy)[0].parameters(), strict=True))


def test_an_all_zero_advantage_step_still_moves_adam(policy):
    """No row to run is a zero-gradient optimizer step, not a skipped one: AdamW's moments from the
    previous step move the weights exactly as the full batch's zero gradient would."""
    cfg = rl_cfg()
    first = [traj(resp=(10, 11, 12)), traj(resp=(20, 21, 22))]
    flat = [traj(resp=(30, 31)), traj(resp=(40, 41, 42))]
    model, tok, opt = _trained(policy)
    rl.policy_update(cfg, model, opt, first, torch.tensor([1.0, -1.0]), tok.pad_token_id, 1e-2)
    ref_model = copy.deepcopy(model)
    ref_opt = common.make_optimizer(ref_model, 1e-2)
    ref_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # its own moments, not views of opt's
    before = [p.detach().clone() for p in model.parameters()]
    out = rl.policy_update(cfg, model, opt, flat, torch.zeros(2), tok.pad_token_id, 1e-2)
    _full_batch_step(cfg, ref_model, ref_opt, flat, torch.zeros(2), tok.pad_token_id, 1e-2)
    assert out["update_rows_skipped"] == 2 and out["grad_norm"] == 0.0 and out["loss"] == 0.0
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_skipped_rows_read_their_sampling_logprobs_only_when_those_are_the_policys(policy, monkeypatch):
    cfg = rl_cfg()
    model, tok, _ = _trained(policy)
    t = traj(resp=(10, 11, 12, 13))
    t.response_mask = [1, 1, 0, 1]
    ids = torch.tensor([t.prompt_ids + t.response_ids])
    with torch.no_grad():
        lp = rl.token_logprobs(model, ids, torch.ones_like(ids))[0, len(t.prompt_ids):]
    exact = float(-(lp * torch.tensor(t.response_mask, dtype=torch.float32)).sum())
    t.logprobs = [float(x) if m else 0.0 for x, m in zip(lp, t.response_mask, strict=True)]
    assert update.sampling_neg_logp(cfg, t) == pytest.approx(exact, rel=1e-6)
    rows = [(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + t.response_mask)]
    forwards = _count_forwards(monkeypatch)
    t.logprobs = [-1.0 if m else 0.0 for m in t.response_mask]  # read as given at T = 1, top_p = 1
    assert update.skipped_neg_logp(cfg, model, [t], rows, tok.pad_token_id) == pytest.approx(3.0) and not forwards
    for over in ({"rollout.temperature": 0.6}, {"rollout.top_p": 0.9}):  # sampling log-probs of another distribution
        assert update.sampling_neg_logp(rl_cfg(**over), t) is None
        assert update.skipped_neg_logp(rl_cfg(**over), model, [t], rows, tok.pad_token_id) == pytest.approx(exact, rel=1e-5)
    t.logprobs = None
    assert update.sampling_neg_logp(cfg, t) is None


def test_policy_update_rejects_advantages_of_another_length(policy):
    model, tok, opt = _trained(policy)
    with pytest.raises(ValueError, match=r"advantages: shape \(3,\), expected \(2,\)"):
        rl.policy_update(rl_cfg(), model, opt, [traj(), traj()], torch.zeros(3), tok.pad_token_id, 1e-2)
