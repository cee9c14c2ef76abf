"""A saved policy for the notebooks: load a run's ``policy/`` folder, count its parameters, wrap it
in a rollout backend, and sample a few trajectories on held-out task problems through the real
sandbox.

Composes ``kit.models``, ``kit.rollout``, ``kit.sandbox`` and ``kit.train``; nothing here samples,
runs code or grades by itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from safetensors import safe_open

from kit.config import KitConfig
from kit.data.tasks import task_split
from kit.models import load_policy
from kit.rollout import HFBackend
from kit.train.rollouts import collect_sync


def load_run_policy(policy_dir: str | os.PathLike):
    """``(model, tokenizer)`` from a ``policy/`` folder written by a trainer.

    Raises:
        FileNotFoundError: the folder does not exist or holds no model (names it and the notebook
            that writes it).
    """
    p = Path(policy_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"policy folder not found: {p} (written by the upstream training notebook; "
                                "run it first, or pass the right run directory as a parameter)")
    if not (p / "config.json").exists():
        raise FileNotFoundError(f"{p} holds no model (no config.json): the upstream training notebook did not "
                                "finish; rerun it")
    return load_policy(p)


def count_parameters(policy_dir: str | os.PathLike) -> int | None:
    """Number of parameters in a saved policy (tied weights counted once), read from the
    safetensors headers without loading the model; None when the folder holds none."""
    files = sorted(Path(policy_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with safe_open(str(f), framework="np") as fh:
            for key in fh.keys():
                n = 1
                for d in fh.get_slice(key).get_shape():
                    n *= d
                total += n
    return total


def heldout_problems(cfg: KitConfig, n: int = 0) -> list:
    """The first ``n`` held-out problems of the profile's task family (all when ``n`` is 0)."""
    probs = list(task_split(cfg).heldout)
    return probs[:n] if n else probs


def sample_trajectories(cfg: KitConfig, policy_dir: str | os.PathLike, *, n_problems: int = 2, n: int = 1,
                        seed: int = 0, temperature: float = 1.0, problems: Sequence[Any] | None = None):
    """Roll out the policy in ``policy_dir`` on held-out task problems through the real sandbox.

    Args:
        cfg: the config (``cfg.sandbox``, ``cfg.rollout``; budgets from ``cfg.eval``).
        policy_dir: a ``policy/`` folder.
        n_problems: how many held-out problems (ignored when ``problems`` is given).
        n: samples per problem.
        seed: backend seed.
        temperature: sampling temperature (1.0 = as in RL training; 0 = greedy).
        problems: explicit ``kit.data.tasks.TaskProblem`` objects.
    Returns:
        ``(trajectories, tokenizer, batch)``: a flat list (problem-major), the policy's tokenizer
        and the graded :class:`kit.train.rollouts.Batch` (``batch.rewards`` is (P, n)).
    """
    model, tok = load_run_policy(policy_dir)
    probs = list(problems) if problems is not None else heldout_problems(cfg, n_problems)

    batch = collect_sync(cfg, model, tok, probs, n, seed=seed, max_response_tokens=cfg.eval.max_tokens,
                         max_turns=cfg.eval.max_turns, temperature=temperature)
    return batch.flat(), tok, batch


def model_context(model: Any) -> int:
    """The model's context length in tokens (unbounded when its config does not say)."""
    return int(getattr(getattr(model, "config", None), "max_position_embeddings", 1 << 30))


def policy_backend(cfg: KitConfig, policy_dir: str | os.PathLike):
    """``(backend, tokenizer, context)`` for a saved policy: an ``HFBackend`` (the backend of
    :func:`kit.chain.evaluation.evaluate_checkpoint`) seeded with ``cfg.seed``, its tokenizer, and
    its context in tokens. To use a served model instead, pass an ``OpenAIBackend`` and its
    tokenizer to the callers in :mod:`kit.chain.boundary`."""
    model, tok = load_run_policy(policy_dir)
    return HFBackend(model, tok, batch_size=cfg.rollout.batch_size, seed=cfg.seed), tok, model_context(model)
