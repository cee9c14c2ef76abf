"""Issue #44 defect 5, the trainer's side: items the verifier could not grade (``infra_error``,
:mod:`kit.reward.pool`) are left out of the local update, as never the model's fault."""

import numpy as np
import torch
from rl_cases import rl_cfg, traj

from kit.algo import group_advantage
from kit.data import tasks
from kit.train import update as rl
from kit.train.rollouts import Batch


def test_the_trainer_leaves_ungraded_rows_out_of_the_update():
    # one group of 4: rows 0 and 1 correct, row 2 wrong, row 3 the verifier could not grade
    probs = [tasks.TaskProblem("p0", "product", 1, "q0", "1", "print(1)")]
    trajs = [[traj(), traj(), traj(), traj()]]
    rewards = np.array([[1.0, 1.0, 0.0, 0.0]])
    batch = Batch(probs, trajs, rewards, [["correct", "correct", "wrong", "infra_error"]], 0.0, 0.0, 0.0)
    cfg = rl_cfg()
    kept, _ = rl.select(cfg, batch, "all", seed=0)
    assert kept.tolist() == [0, 1, 2]
    adv = rl.advantages(cfg, batch, kept)
    # the group's mean and std are those of (1, 1, 0): the 0 of row 3 is not the model's
    expected = group_advantage(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0, 0, 0]))
    assert torch.allclose(adv.float(), expected.float()) and float(adv[2]) < 0
    # without the infra row's verdict the same batch keeps every row (the old behaviour)
    batch.verdict_reasons = [["correct", "correct", "wrong", "wrong"]]
    assert rl.select(cfg, batch, "all", seed=0)[0].tolist() == [0, 1, 2, 3]


def test_roc_selects_among_the_graded_rows_only():
    # 2G = 8 rows, G = 4: RoC never keeps an ungraded row, and returns indices into the full batch
    probs = [tasks.TaskProblem("p0", "product", 1, "q0", "1", "print(1)")]
    trajs = [[traj() for _ in range(8)]]
    rewards = np.array([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    reasons = [["correct"] * 4 + ["infra_error", "wrong", "infra_error", "wrong"]]
    batch = Batch(probs, trajs, rewards, reasons, 0.0, 0.0, 0.0)
    cfg = rl_cfg(**{"algorithm.roc_mode": "rank"})
    kept, _ = rl.select(cfg, batch, "roc", seed=0)
    assert kept.size == 4 and not {4, 6} & set(kept.tolist())
    assert {5, 7} & set(kept.tolist())  # a negative is kept: the graded ones
