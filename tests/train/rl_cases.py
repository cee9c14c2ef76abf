"""Shared inputs of the RL tests (tests/train/test_rl*.py): a small smoke config, a tiny random
policy on disk and hand-built trajectories."""

from pathlib import Path

from kit.config import KitConfig, load
from kit.data import tasks
from kit.models import build_tiny_model, save_policy, train_tokenizer
from kit.rollout import Trajectory


def rl_cfg(**over) -> KitConfig:
    """The smoke profile shrunk to a few tokens, problems and steps, with ``over`` applied."""
    base = {"data.task_train_size": 60, "data.task_heldout_size": 4, "model.torch_threads": 1,
            "sandbox.num_workers": 1, "rollout.batch_size": 16, "rollout.max_response_tokens": 24,
            "algorithm.prompts_per_step": 2, "algorithm.group_size": 4, "algorithm.oversample": 8,
            "algorithm.lr": 1e-3, "stages.stage1.max_response_tokens": 24, "stages.stage1.max_turns": 2,
            "stages.stage1.steps": 4, "stages.stage1.checkpoint_every": 2,
            "stages.stage3.max_response_tokens": 24, "stages.stage3.max_turns": 2, "stages.stage3.steps": 1,
            "stages.stage3.hard_filter_samples": 2, "ablation.steps": 2, "ablation.workers": 1}
    base.update(over)
    return load("smoke", overrides=base, write=False)


def build_policy(root: Path) -> Path:
    """A randomly initialised tiny policy (tokenizer trained on the task split) saved under ``root``."""
    split = tasks.make_split(60, 4, 0)
    corpus = [p.question + " " + p.code for p in split.train] * 3
    tok = train_tokenizer(corpus, 400)
    save_policy(build_tiny_model(rl_cfg().model, tok, seed=0), tok, root / "policy")
    return root / "policy"


def traj(calls=1, fails=0, tags=1, turns=2, resp=(5, 6, 7)) -> Trajectory:
    """A trajectory with prompt ``[1, 2]``, response ``resp`` (all model tokens) and the given counters."""
    t = Trajectory(problem="q", prompt_ids=[1, 2], response_ids=list(resp), response_mask=[1] * len(resp))
    t.tool_calls, t.turns, t.answer_tags = calls, turns, tags
    t.tool_errors = {"exception": fails, "timeout": 0, "memory": 0, "malformed": 0}
    return t
