"""kit.algo.advantage: ``algorithm.adv_estimator`` picks a registered estimator for the local update and the
VERL overrides alike; an unregistered name is an error naming the key and the registered names."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kit.algo import advantage
from kit.algo.grpo import group_advantage
from kit.bridge.overrides import RecipePaths, to_hydra_overrides
from kit.config import AlgorithmConfig, load
from kit.train.update import advantages


def _batch(rewards):
    """The two fields of a ``kit.train.rollouts.Batch`` the advantage reads: (P, n) rewards, P groups."""
    rewards = np.asarray(rewards, dtype=float)
    return SimpleNamespace(rewards=rewards, groups=[[None] * rewards.shape[1]] * rewards.shape[0])


def _verl_estimator(cfg):
    ov = to_hydra_overrides(cfg, "stage1", paths=RecipePaths.default("/RUN", "stage1"), model_path="/M")
    return [o for o in ov if o.startswith("algorithm.adv_estimator=")]


def test_grpo_is_registered_and_the_local_update_and_verl_read_the_key():
    cfg = load("smoke", write=False)
    assert cfg.algorithm.adv_estimator == "grpo" and list(advantage.ADV_ESTIMATORS) == ["grpo", "gae"]
    batch = _batch([[1, 0, 0, 0], [1, 1, 0, 1]])
    kept = np.array([0, 1, 2, 4, 5, 7])  # rows of the flat (P * n,) batch, group 0 then group 1
    want = group_advantage(torch.tensor([1.0, 0, 0, 1, 1, 1]), [0, 0, 0, 1, 1, 1], cfg.algorithm.adv_eps)
    assert torch.equal(advantages(cfg, batch, kept), want)  # what rl.py computed before the registry
    assert _verl_estimator(load("paper-14b", write=False)) == ["algorithm.adv_estimator=grpo"]


def test_an_unknown_estimator_names_the_key_and_the_registered_ones():
    cfg = load("smoke", {"algorithm.adv_estimator": "opo"}, write=False)
    msg = r"algorithm.adv_estimator: 'opo' is not a registered advantage estimator; registered: grpo, gae"
    with pytest.raises(ValueError, match=msg):
        advantages(cfg, _batch([[1, 0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=msg):
        _verl_estimator(load("paper-14b", {"algorithm.adv_estimator": "opo"}, write=False))
    with pytest.raises(ValueError, match="registered twice"):
        advantage.register_adv_estimator("grpo")(lambda r, g, a: r)


def test_a_new_estimator_is_one_registered_function_plus_config(monkeypatch):
    monkeypatch.setattr(advantage, "ADV_ESTIMATORS", dict(advantage.ADV_ESTIMATORS))
    monkeypatch.setattr(advantage, "ADV_NEEDS", dict(advantage.ADV_NEEDS))

    @advantage.register_adv_estimator("rloo")  # VERL's leave-one-out baseline, as an example
    def rloo(rewards, group_ids, algo):
        r = torch.as_tensor(rewards, dtype=torch.float32)
        g = torch.as_tensor(group_ids)
        n = torch.bincount(g)[g].float()
        total = torch.zeros(int(g.max()) + 1).index_add_(0, g, r)[g]
        return r - (total - r) / (n - 1)

    cfg = load("smoke", {"algorithm.adv_estimator": "rloo"}, write=False)
    got = advantages(cfg, _batch([[1, 0, 0]]), np.array([0, 1, 2]))
    assert got.tolist() == pytest.approx([1.0, -0.5, -0.5])
    assert _verl_estimator(load("paper-14b", {"algorithm.adv_estimator": "rloo"}, write=False)) == \
        ["algorithm.adv_estimator=rloo"]


def test_each_estimator_is_registered_with_what_it_needs(monkeypatch):
    """Issue #43: the estimator says whether it needs a group baseline or a critic; the trainers ask it."""
    assert advantage.ADV_NEEDS["grpo"] == {"group"} and advantage.ADV_NEEDS["gae"] == {"critic"}  # and any added
    grpo = load("smoke", write=False).algorithm
    assert not advantage.needs_critic(grpo) and advantage.needs_critic(dataclasses.replace(grpo, adv_estimator="gae"))
    with pytest.raises(ValueError, match=r"'vtrace': needs \['replay'\] unknown; known: \['critic', 'group'\]"):
        advantage.register_adv_estimator("vtrace", needs=("replay",))
    monkeypatch.setattr(advantage, "ADV_ESTIMATORS", dict(advantage.ADV_ESTIMATORS))
    monkeypatch.setattr(advantage, "ADV_NEEDS", dict(advantage.ADV_NEEDS))
    advantage.register_adv_estimator("my_ppo", needs=("critic",))(lambda r, g, a, **kw: r)
    assert advantage.needs_critic(dataclasses.replace(grpo, adv_estimator="my_ppo"))


@pytest.mark.parametrize("selection", ["roc", "all"])
def test_every_registered_estimator_s_arm_label_says_whether_it_trains_a_critic(selection, monkeypatch):
    """Issue #43: an arm's label (``AlgorithmConfig.label``, its folder, records and tracker name) is ``ppo*``
    exactly when its estimator needs a critic, and no two estimators share one (a new ``rloo`` is its own
    arm, not a second ``grpo``); an estimator registered with a critic under another name fails here until
    ``kit.config.schema.ESTIMATOR_FAMILY`` names its family."""
    monkeypatch.setitem(advantage.ADV_ESTIMATORS, "rloo", advantage.ADV_ESTIMATORS["grpo"])
    monkeypatch.setitem(advantage.ADV_NEEDS, "rloo", frozenset({"group"}))
    labels = {}
    for name in advantage.ADV_ESTIMATORS:
        algo = dataclasses.replace(AlgorithmConfig(), adv_estimator=name, selection=selection)
        assert algo.label.startswith("ppo") == advantage.needs_critic(algo), (name, algo.label)
        labels[algo.label] = labels.get(algo.label, ()) + (name,)
    assert all(len(names) == 1 for names in labels.values()), labels  # an arm's folder names one estimator
