"""Phase II of Agent-R: iterative self-training on revision and good trajectories.

Iteration ``k`` (1-based) of an arm, from the arm's current policy:

1. search ``agent_r.tasks`` training tasks (a new slice each iteration) with the current policy
   (:func:`kit.studies.agent_r.search.search`, ``agent_r.simulations`` rollouts per task);
2. build rows: good trajectories (``score >= alpha_k``) and, for the ``agent_r`` arm, the revision
   trajectories of each tree's good/bad pairs (:func:`kit.studies.agent_r.revision.tree_rows`); the
   ``good_only`` baseline (rejection-sampling fine-tuning) takes the good ones only, from the same
   search budget;
3. fine-tune with the cold-start trainer (:func:`kit.train.sft.fit_rows`): the rows mixed with the
   cold-start data, a share ``eta / (1 + eta)`` of each batch, loss where the row's mask is 1.

``alpha_k`` follows ``agent_r.alphas`` (the paper: 0.5, 0.7, 1.0), the last value repeating.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kit.studies.agent_r.revision import RevisionRow, tree_rows
from kit.studies.agent_r.search import SearchParams, TaskTree, make_engine, search, stop_engine
from kit.train import common
from kit.train.sft import fit_rows

ARMS = ("agent_r", "good_only")


def alpha_at(alphas: Sequence[float], iteration: int) -> float:
    """The good threshold of 1-based ``iteration``: ``alphas[iteration - 1]``, the last value after the list.

    Raises:
        ValueError: ``iteration < 1`` or no alphas.
    """
    if iteration < 1 or not alphas:
        raise ValueError(f"alpha_at: need iteration >= 1 and alphas, got {iteration}, {list(alphas)}")
    return float(alphas[min(iteration, len(alphas)) - 1])


def mix_fraction(eta: float) -> float:
    """Share of a batch drawn from the general data so that its weight relative to the Agent-R
    rows is ``eta``: ``eta / (1 + eta)`` (0.2 -> 1/6)."""
    return eta / (1.0 + eta)


def task_slice(problems: Sequence[Any], n: int, iteration: int) -> list[Any]:
    """The ``n`` training tasks of 1-based ``iteration``: consecutive slices, wrapping around."""
    if not problems:
        return []
    start = (iteration - 1) * n
    return [problems[(start + i) % len(problems)] for i in range(min(n, len(problems)))]


async def collect_trees(model, tokenizer, problems: Sequence[Any], executor, p: SearchParams, cfg_rollout, *,
                        seed: int) -> tuple[list[TaskTree], dict[str, float]]:
    """One search with a fresh engine seeded ``seed`` (:func:`kit.studies.agent_r.search.search`)."""
    engine = make_engine(model.eval(), tokenizer, cfg_rollout, seed)
    try:
        return await search(engine, tokenizer, problems, executor, p, cfg_rollout)
    finally:
        stop_engine(engine)


def build_rows(trees: Sequence[TaskTree], tokenizer, *, arm: str, alpha: float, beta: float, rule: str,
               max_pairs: int, seed: int) -> tuple[list[RevisionRow], dict[str, int]]:
    """Training rows of an arm from its trees and the summed counts (``good``, ``pairs``,
    ``revision``, ``skipped``); revision signals drawn from ``Random(seed)``.

    Raises:
        ValueError: an unknown arm (one of :data:`ARMS`).
    """
    if arm not in ARMS:
        raise ValueError(f"unknown Agent-R arm {arm!r}; known: {ARMS}")
    rng = random.Random(seed)
    rows, counts = [], {"good": 0, "pairs": 0, "revision": 0, "skipped": 0}
    for t in trees:
        r, c = tree_rows(t, tokenizer, alpha=alpha, beta=beta, rule=rule, max_pairs=max_pairs, rng=rng,
                         revisions=arm == "agent_r")
        rows += r
        for k, v in c.items():
            counts[k] += v
    return rows, counts


def train_iteration(cfg, model, tokenizer, rows: Sequence[RevisionRow], cold_rows: list, *, iteration: int,
                    arm: str, progress=None) -> list[dict[str, Any]]:
    """Fine-tune ``model`` in place on an iteration's rows with the cold-start data at ``eta``
    (:func:`kit.train.sft.fit_rows`); returns its per-step metrics. Without rows (nothing good was
    found) only the cold-start data is trained on, so both arms take the same number of steps."""
    a, s = cfg.agent_r, cfg.sft
    return fit_rows(model, tokenizer, [(r.ids, r.mask) for r in rows], cold_rows, steps=a.sft_steps,
                    batch_size=a.batch_size or s.batch_size, mix_fraction=mix_fraction(a.eta), lr=a.lr or s.lr,
                    seed=common.step_seed(cfg.seed, "agent_r", arm, iteration), tag=f"agent_r-{arm}-{iteration}",
                    progress=progress)
