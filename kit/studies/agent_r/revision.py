"""Good/bad pairs from one tree, the transition point, and revision trajectories with loss masks.

Agent-R §3.1-3.2: a good trajectory ``tau_g`` and a bad one ``tau_b`` that share a prefix come out
of the same tree, with ``r(bad) < beta < r(good)`` and ``alpha <= r(good)``. The actor names the
first erroneous action of the bad trajectory (the *transition point*); the revision trajectory is

    shared prefix + bad branch up to and including that action and its observation
    + a revision signal rs + the good branch's continuation,

trained with loss on ``rs`` and after it (the wrong part is not imitated; the signal is, as the
reference code trains its revision turn, ``path_collection.py``: the model learns to *emit* a
reflection after a bad observation). Here rewards are the
search's :func:`kit.studies.agent_r.search.score`; the transition point is a stated rule, not the
actor's judgement (the tiny model cannot critique; see :mod:`kit.studies.agent_r`):

- ``first_failed_call``: the first turn of the bad branch (below the shared node) with a failed
  tool call; without one, the ``value_drop`` rule;
- ``value_drop``: the first turn of the bad branch whose node value ``Q`` falls below ``beta``.

The chosen turn must carry an observation (a feedback block); a pair whose bad branch has none
there is skipped. Token layout of a revision row (mask 1 = loss)::

    prompt (0) | shared turns + feedback (0) | bad turns ... transition turn + its feedback (0)
    | rs (1; 0 with ``train_signal=False``, the kit's v1 rows) | good turns from the branch point on:
    model tokens 1, tool feedback 0
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.studies.agent_r.replay import turn_bounds
from kit.studies.agent_r.search import TaskTree
from kit.studies.agent_r.tree import Node, lowest_common

#: Hand-written revision signals (Agent-R §3.2 uses about ten such sentences, sampled at random).
REVISION_SIGNALS = (
    "Wait, that result shows my approach went wrong. Let me go back and do it correctly.",
    "I made a mistake above. Let me revise my approach.",
    "That did not work. I should reconsider and try again properly.",
    "Hmm, this output means my last step was wrong. Let me redo it.",
    "I realize my previous action was flawed. Let me correct it.",
    "Looking at the result, I need to change my approach.",
    "That was an error on my part. Let me start this step over.",
    "The tool output tells me I went off track. Let me fix it.",
    "Let me double-check: my earlier step was wrong, so I will take a different path.",
    "I should not continue down this path. Let me revise what I did.",
)
TRANSITION_RULES = ("first_failed_call", "value_drop")


@dataclass(frozen=True)
class Pair:
    """A good and a bad trajectory of one tree and their shared node (index into the tree's lists)."""

    good: int
    bad: int
    shared: Node = field(compare=False)


def good_indices(tree: TaskTree, alpha: float, beta: float) -> list[int]:
    """Trajectories with ``score >= alpha`` and ``score > beta``, distinct responses, in order."""
    seen, out = set(), []
    for i, s in enumerate(tree.scores):
        key = tuple(tree.trajectories[i].response_ids)
        if s >= alpha and s > beta and key not in seen:
            seen.add(key)
            out.append(i)
    return out


def find_pairs(tree: TaskTree, alpha: float, beta: float, max_pairs: int) -> list[Pair]:
    """Up to ``max_pairs`` good/bad pairs of one tree; each bad trajectory at most once.

    Pairs with the longest shared prefix first (deepest shared node), then by index: the pair
    whose bad branch is closest to its good sibling.
    """
    goods = good_indices(tree, alpha, beta)
    bads = [i for i, s in enumerate(tree.scores) if s < beta]
    cands = []
    for b in bads:
        for g in goods:
            shared = lowest_common(tree.leaves[g], tree.leaves[b])
            if shared is tree.leaves[b] or shared is tree.leaves[g]:
                continue
            cands.append((-shared.depth, b, g, shared))
    cands.sort(key=lambda c: c[:3])
    out, used = [], set()
    for _, b, g, shared in cands:
        if b in used:
            continue
        used.add(b)
        out.append(Pair(g, b, shared))
        if len(out) >= max_pairs:
            break
    return out


def transition_turn(tree: TaskTree, pair: Pair, rule: str, beta: float) -> int | None:
    """The 0-based turn of the bad trajectory where the revision cuts in, or None when the chosen
    turn has no observation (its trajectory ended there).

    Raises:
        ValueError: an unknown ``rule`` (one of :data:`TRANSITION_RULES`).
    """
    if rule not in TRANSITION_RULES:
        raise ValueError(f"agent_r.transition: unknown rule {rule!r}; known: {TRANSITION_RULES}")
    branch = [n for n in tree.leaves[pair.bad].path() if n.depth > pair.shared.depth]
    pick = None
    if rule == "first_failed_call":
        pick = next((n for n in branch if n.failed_call), None)
    if pick is None:
        pick = next((n for n in branch if n.q < beta), branch[0])
    t = pick.depth - 1
    bad = tree.trajectories[pair.bad]
    start, end_model, end_fb = turn_bounds(bad)[t]
    return t if end_fb > end_model else None


@dataclass
class RevisionRow:
    """One training row: ``ids`` (prompt included), ``mask`` (1 = loss) and labelled segments.

    Attributes:
        segments: ``[(kind, start, end), ...]`` over ``ids``, kind in ``prompt``, ``shared``,
            ``bad``, ``signal``, ``good`` (end exclusive), for display and checks.
        kind: ``revision`` or ``good``.
        task: the task id; transition: the bad trajectory's transition turn (revision rows).
        signal: the revision sentence (revision rows).
        good, bad: the pair's trajectory indices in the tree (revision rows).
    """

    ids: list[int]
    mask: list[int]
    segments: list[tuple[str, int, int]]
    kind: str
    task: str
    transition: int = -1
    signal: str = ""
    good: int = -1  # indices of the pair's trajectories in the tree (revision rows)
    bad: int = -1


def last_observed_turn(tree: TaskTree, pair: Pair) -> int | None:
    """The last turn of the pair's bad branch that carries an observation (a tool call and its feedback), where
    *direct revision* cuts in: as late in the bad trajectory as a revision can follow an observation (Agent-R
    §4's direct-revision baseline revises at the end of the bad trajectory; in the kit's chat format a
    trajectory's final answer has no observation after it, and the agent loop never continues past it).
    None when the bad branch has none: the pair is skipped, as :func:`transition_turn` skips it."""
    bad = tree.trajectories[pair.bad]
    bounds = turn_bounds(bad)
    for t in range(len(bounds) - 1, pair.shared.depth - 1, -1):
        if bounds[t][2] > bounds[t][1]:
            return t
    return None


def revision_row(tree: TaskTree, pair: Pair, t: int, signal: str, tokenizer: Any, *,
                 train_signal: bool = True) -> RevisionRow:
    """Assemble one revision trajectory (the layout in the module docstring).

    Args:
        t: the bad trajectory's turn whose observation the signal follows: its transition turn
            (:func:`transition_turn`) or, for direct revision, its last observed turn (:func:`last_observed_turn`).
        signal: the revision sentence; it is tokenized on its own and ends with a newline.
        train_signal: loss on the signal's tokens (``agent_r.train_signal``).
    """
    bad, good = tree.trajectories[pair.bad], tree.trajectories[pair.good]
    d = pair.shared.depth
    bb, gb = turn_bounds(bad), turn_bounds(good)
    shared_end = bb[d][0]  # response offset where the branches part
    bad_end = bb[t][2]
    rs = tokenizer.encode(signal + "\n", add_special_tokens=False)
    g0 = gb[d][0]
    P = len(bad.prompt_ids)
    ids = list(bad.prompt_ids) + bad.response_ids[:bad_end] + rs + good.response_ids[g0:]
    mask = [0] * (P + bad_end) + [int(train_signal)] * len(rs) + list(good.response_mask[g0:])
    a, b, c = P + shared_end, P + bad_end, P + bad_end + len(rs)
    segs = [("prompt", 0, P), ("shared", P, a), ("bad", a, b), ("signal", b, c), ("good", c, len(ids))]
    return RevisionRow(ids, mask, [s for s in segs if s[2] > s[1]], "revision", tree.problem.id, t, signal,
                       pair.good, pair.bad)


def good_row(tree: TaskTree, i: int) -> RevisionRow:
    """A good trajectory as a training row: loss on its model tokens, none on prompt or feedback."""
    tr = tree.trajectories[i]
    P = len(tr.prompt_ids)
    ids = list(tr.prompt_ids) + list(tr.response_ids)
    return RevisionRow(ids, [0] * P + list(tr.response_mask), [("prompt", 0, P), ("good", P, len(ids))], "good",
                       tree.problem.id)


def tree_rows(tree: TaskTree, tokenizer: Any, *, alpha: float, beta: float, rule: str, max_pairs: int,
              rng: random.Random, revisions: bool = True, train_signal: bool = True, direct: bool = False
              ) -> tuple[list[RevisionRow], dict[str, int]]:
    """Training rows of one tree: good trajectories (``score >= alpha``) and, with ``revisions``,
    revision trajectories of its pairs (the signal drawn from ``rng``, trained with ``train_signal``),
    cut at the transition turn or, with ``direct``, at the bad branch's last observed turn
    (:func:`last_observed_turn`); both skip a pair whose chosen turn has no observation.

    Returns:
        ``(rows, counts)``; counts: ``good``, ``pairs``, ``revision``, ``skipped`` (a pair whose
        transition turn had no observation).
    """
    rows = [good_row(tree, i) for i in good_indices(tree, alpha, beta)]
    counts = {"good": len(rows), "pairs": 0, "revision": 0, "skipped": 0}
    if not revisions:
        return rows, counts
    for pair in find_pairs(tree, alpha, beta, max_pairs):
        counts["pairs"] += 1
        t = last_observed_turn(tree, pair) if direct else transition_turn(tree, pair, rule, beta)
        if t is None:
            counts["skipped"] += 1
            continue
        rows.append(revision_row(tree, pair, t, rng.choice(REVISION_SIGNALS), tokenizer, train_signal=train_signal))
        counts["revision"] += 1
    return rows, counts


def loss_tokens(rows: Sequence[RevisionRow]) -> int:
    """Tokens that carry loss over ``rows``."""
    return sum(sum(r.mask) for r in rows)
