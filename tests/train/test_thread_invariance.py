"""A training step computes the same bits at one and at two torch threads (issue #41).

The tiny profile's SFT step (:func:`kit.train.sft.sft_step`: 48 rows of 60-384 tokens in
length-sorted micro-batches, clipping, AdamW) and its RL policy update
(:func:`kit.train.update.policy_update`: 32 trajectories of 100-380 tokens with tool feedback
masked out, token-mean clipped loss) are run three steps each at 1 and at 2 threads from the same
weights; every parameter must be bitwise equal. This is what lets an ablation arm at one thread
and a notebook at two agree, and what a change of thread count inside a run could never break.
Measured on the project's VM (torch 2.13, MKL): equal with and without ``MKL_CBWR=AUTO,STRICT``.
"""

from __future__ import annotations

import hashlib
import random

import pytest
import torch
from rl_cases import build_policy, rl_cfg, traj

from kit.models import load_policy
from kit.train import common, update
from kit.train.sft import sft_step

pytestmark = pytest.mark.slow


def _digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_policy(tmp_path_factory.mktemp("threads"))


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _sft(policy, threads: int) -> tuple[str, list]:
    torch.set_num_threads(threads)
    model, tok = load_policy(policy)
    model.train()
    rng = random.Random(3)
    rows = []
    for _ in range(48):
        n = rng.randint(60, 384)
        ids = [rng.randrange(len(tok)) for _ in range(n)]
        k = rng.randint(10, n - 10)
        rows.append((ids, [0] * k + [1] * (n - k)))
    opt = common.make_optimizer(model, 2e-3)
    out = [sft_step(model, opt, rows, tok.pad_token_id) for _ in range(3)]
    return _digest(model), out


def _rl(policy, threads: int) -> tuple[str, list]:
    torch.set_num_threads(threads)
    model, tok = load_policy(policy)
    model.train()
    rng = random.Random(5)
    trajs = []
    for _ in range(32):
        t = traj(resp=[rng.randrange(3, len(tok)) for _ in range(rng.randint(100, 380))])
        cut = rng.randint(20, len(t.response_ids) - 40)
        t.response_mask[cut:cut + 30] = [0] * 30  # a tool feedback block
        trajs.append(t)
    adv = torch.tensor([rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0]) for _ in trajs])
    cfg = rl_cfg()
    opt = common.make_optimizer(model, 1e-2)
    out = [update.policy_update(cfg, model, opt, trajs, adv, tok.pad_token_id, 1e-2) for _ in range(3)]
    return _digest(model), [(o["loss"], o["grad_norm"], o["neg_logp"]) for o in out]


@pytest.mark.parametrize("step", [_sft, _rl], ids=["sft_step", "policy_update"])
def test_one_and_two_threads_give_bitwise_the_same_step(policy, restore_threads, step):
    one, two = step(policy, 1), step(policy, 2)
    assert torch.get_num_threads() == 2
    assert one[1] == two[1]  # losses and gradient norms, exactly
    assert one[0] == two[0], "the weights after three steps differ between 1 and 2 threads"
