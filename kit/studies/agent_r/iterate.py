"""Phase II of Agent-R: iterative self-training on revision and good trajectories.

Iteration ``k`` (1-based) of an arm, from the arm's current policy:

1. search ``agent_r.tasks`` training tasks (a new slice each iteration) with the current policy
   (:func:`kit.studies.agent_r.search.search`, ``agent_r.simulations`` rollouts per task);
2. build rows: good trajectories (``score >= alpha_k``) and, for the ``agent_r`` arm, the revision
   trajectories of each tree's good/bad pairs (:func:`kit.studies.agent_r.revision.tree_rows`); the
   ``direct`` arm the same pairs revised at the bad branch's last observed turn instead of its transition
   point (the reference's direct-revision baseline, revising at the end: what *timely* revision adds); the
   ``good_only`` baseline (rejection-sampling fine-tuning) takes the good ones only, from the same
   search budget; the ``null`` arm searches nothing and has no rows of its own;
3. fine-tune with the cold-start trainer (:func:`kit.train.sft.fit_rows`): the rows mixed with the
   cold-start data, a share ``eta / (1 + eta)`` of each batch, loss where the row's mask is 1, for
   :func:`iteration_steps` steps (``agent_r.passes`` over the own rows, at most ``agent_r.sft_steps``)
   with a warm-up and a decay (``agent_r.warmup_ratio``, at least ``agent_r.warmup_steps``;
   ``agent_r.schedule``) from the peak
   ``agent_r.lr``. The null arm takes the Agent-R arm's steps of the same iteration on the cold-start
   data alone: what the fine-tune itself does to the policy, the design's control (issue #46).

``alpha_k`` follows ``agent_r.alphas`` (the paper: 0.5, 0.7, 1.0), the last value repeating.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kit.data.tasks import task_slice  # noqa: F401  (re-exported: the Agent-R loop's name)
from kit.studies.agent_r.revision import RevisionRow, tree_rows
from kit.studies.agent_r.search import SearchParams, TaskTree, make_engine, search, stop_engine
from kit.train import common
from kit.train.sft import fit_rows, main_per_batch, mix_fraction, pass_steps

#: the arms in training order: the null arm copies the Agent-R arm's steps, so it comes after it
ARMS = ("agent_r", "direct", "good_only", "null")
#: the arms that search and train on their own rows
SEARCHED = ("agent_r", "direct", "good_only")
#: the arms whose rows include revision trajectories (``direct``: revised at the bad branch's last observed turn)
REVISING = ("agent_r", "direct")


def alpha_at(alphas: Sequence[float], iteration: int) -> float:
    """The good threshold of 1-based ``iteration``: ``alphas[iteration - 1]``, the last value after the list.

    Raises:
        ValueError: ``iteration < 1`` or no alphas.
    """
    if iteration < 1 or not alphas:
        raise ValueError(f"alpha_at: need iteration >= 1 and alphas, got {iteration}, {list(alphas)}")
    return float(alphas[min(iteration, len(alphas)) - 1])


async def collect_trees(model, tokenizer, problems: Sequence[Any], executor, p: SearchParams, cfg_rollout, *,
                        seed: int) -> tuple[list[TaskTree], dict[str, float]]:
    """One search with a fresh engine seeded ``seed`` (:func:`kit.studies.agent_r.search.search`)."""
    engine = make_engine(model.eval(), tokenizer, cfg_rollout, seed)
    try:
        return await search(engine, tokenizer, problems, executor, p, cfg_rollout)
    finally:
        stop_engine(engine)


def build_rows(trees: Sequence[TaskTree], tokenizer, *, arm: str, alpha: float, beta: float, rule: str,
               max_pairs: int, seed: int, train_signal: bool = True) -> tuple[list[RevisionRow], dict[str, int]]:
    """Training rows of an arm from its trees and the summed counts (``good``, ``pairs``,
    ``revision``, ``skipped``); revision signals drawn from ``Random(seed)``, trained with ``train_signal``.

    Raises:
        ValueError: an unknown arm (one of :data:`ARMS`).
    """
    if arm not in SEARCHED:
        raise ValueError(f"unknown Agent-R arm with rows {arm!r}; known: {SEARCHED}")
    rng = random.Random(seed)
    rows, counts = [], {"good": 0, "pairs": 0, "revision": 0, "skipped": 0}
    for t in trees:
        r, c = tree_rows(t, tokenizer, alpha=alpha, beta=beta, rule=rule, max_pairs=max_pairs, rng=rng,
                         revisions=arm in REVISING, train_signal=train_signal, direct=arm == "direct")
        rows += r
        for k, v in c.items():
            counts[k] += v
    return rows, counts


def own_per_batch(batch_size: int, eta: float) -> int:
    """Own rows (revision and good trajectories) in a batch of ``batch_size``: the rest of the
    general share :func:`mix_fraction` (as :func:`kit.train.sft.batch_rows` draws them)."""
    return main_per_batch(batch_size, mix_fraction(eta))


def iteration_steps(a, n_rows: int, batch_size: int) -> int:
    """Optimizer steps of an iteration with ``n_rows`` own rows (``a``: the ``[agent_r]`` section):
    ``ceil(a.passes * n_rows / own rows per batch)``, at least 1 and at most ``a.sft_steps``;
    ``a.sft_steps`` when ``a.passes`` is 0; 0 without rows (nothing to fine-tune on: the policy is kept).
    :func:`kit.train.sft.pass_steps`, which VERL's launch uses too (``kit.bridge.revision_sft``).
    """
    return pass_steps(n_rows, a.passes, batch_size, mix_fraction(a.eta), a.sft_steps)


def train_iteration(cfg, model, tokenizer, rows: Sequence[RevisionRow], cold_rows: list, *, iteration: int,
                    arm: str, steps: int | None = None, progress=None) -> list[dict[str, Any]]:
    """Fine-tune ``model`` in place on an iteration's rows with the cold-start data at ``eta``
    (:func:`kit.train.sft.fit_rows`, a fresh AdamW warmed up to the peak ``agent_r.lr`` and decayed by
    ``agent_r.schedule`` to ``sft.min_lr_ratio`` of it, as VERL's launch does, ``kit.bridge.revision_sft``); returns its per-step metrics (``[]`` when it took no step).

    Args:
        rows: the arm's own rows (empty for the null arm).
        steps: the step count (the null arm: the Agent-R arm's of this iteration); default
            :func:`iteration_steps` of ``rows``.
    """
    a, s = cfg.agent_r, cfg.sft
    batch = a.batch_size or s.batch_size
    n = iteration_steps(a, len(rows), batch) if steps is None else steps
    if n == 0:
        return []
    return fit_rows(model, tokenizer, [(r.ids, r.mask) for r in rows], cold_rows, steps=n, batch_size=batch,
                    mix_fraction=mix_fraction(a.eta), lr=a.lr or s.lr, warmup_ratio=a.warmup_ratio, schedule=a.schedule,
                    warmup_steps=a.warmup_steps, min_lr_ratio=s.min_lr_ratio,
                    seed=common.step_seed(cfg.seed, "agent_r", arm, iteration), tag=f"agent_r-{arm}-{iteration}",
                    progress=progress)
