"""The search tree of Agent-R's Phase I: nodes at turn boundaries, UCT selection, backpropagation.

Agent-R (Yuan et al. 2025, §3.1) runs MCTS from each task's initial state: **selection** by UCT,

    UCT(s) = Q(s) + c_uct * sqrt(log N_parent(s) / N(s)),

**expansion** by sampling the next action from the current policy, **simulation** to the end, and
**backpropagation** of the final reward. Here a node is a prefix of a trajectory that ends at a
turn boundary: the root is the prompt, and each child adds one assistant turn (its sampled ids)
and the tool feedback that answered it. A finished simulation is inserted as a whole path (every
turn a node, identical turns merged), so every complete trajectory is a root-to-leaf path and two
trajectories share exactly the prefix of their lowest common node.

Pure Python, no model: :mod:`kit.studies.agent_r.search` drives it with the kit's agent loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Node:
    """One prefix ending at a turn boundary.

    Attributes:
        turn_ids: the model ids of the turn this node adds (empty for the root).
        depth: turns from the root (root 0).
        parent: the parent node (None for the root).
        children: in insertion order (canonical: a round's trajectories are inserted sorted).
        visits: N(s), simulations that passed through this node.
        value_sum: summed final rewards of those simulations; Q(s) = value_sum / visits.
        expansions: how many times this node was expanded (sampled from), merged samples included.
        terminal: the node's turn ended its trajectory (no tool call, eos, budget, turns).
        leaves: indices (into the search's trajectory list) of the trajectories ending here.
        failed_call: the node's turn made a tool call that failed (the model's fault).
        via: index of one trajectory passing through this node (its ids replay the prefix).
    """

    turn_ids: tuple[int, ...] = ()
    depth: int = 0
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    expansions: int = 0
    terminal: bool = False
    leaves: list[int] = field(default_factory=list)
    failed_call: bool = False
    via: int = -1

    @property
    def q(self) -> float:
        """Q(s): mean final reward of the simulations through this node (0 before any)."""
        return self.value_sum / self.visits if self.visits else 0.0

    def path(self) -> list[Node]:
        """Nodes from the root's first child down to this node (the root excluded)."""
        out, n = [], self
        while n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, depth first, children in order."""
        yield self
        for c in self.children:
            yield from c.walk()

    def child(self, turn_ids: Sequence[int]) -> Node | None:
        """The child that adds exactly ``turn_ids``, or None."""
        key = tuple(turn_ids)
        return next((c for c in self.children if c.turn_ids == key), None)


def uct(node: Node, c_uct: float) -> float:
    """UCT score of ``node`` (Agent-R §3.1): ``Q(s) + c_uct * sqrt(log N_parent(s) / N(s))``;
    ``inf`` for an unvisited node (it is tried first).

    Raises:
        ValueError: ``node`` is the root (no parent).
    """
    if node.parent is None:
        raise ValueError("uct: the root has no parent")
    if node.visits == 0:
        return math.inf
    return node.q + c_uct * math.sqrt(math.log(max(node.parent.visits, 1)) / node.visits)


def select(root: Node, c_uct: float, width: int, max_depth: int) -> Node:
    """Selection: from the root, descend to the child of highest UCT while the node is fully
    expanded (``expansions >= width``) and above ``max_depth``; only children whose trajectory
    goes on (not terminal) are candidates, and a node all of whose children are terminal is
    expanded again (more siblings for the same prefix) rather than revisiting a finished path, so
    every round spends its rollouts. Ties go to the first child (canonical order).
    """
    node = root
    while node.expansions >= width and node.depth < max_depth:
        best, best_s = None, -math.inf
        for c in node.children:
            s = uct(c, c_uct)
            if not c.terminal and s > best_s:
                best, best_s = c, s
        if best is None:
            break
        node = best
    return node


def backpropagate(node: Node, reward: float) -> None:
    """Backpropagation: add one visit and ``reward`` to ``node`` and every ancestor (the root too)."""
    n: Node | None = node
    while n is not None:
        n.visits += 1
        n.value_sum += float(reward)
        n = n.parent


def insert(root: Node, turns: Sequence[Sequence[int]], failed: Sequence[bool], index: int, terminal: bool = True) -> Node:
    """Insert one finished trajectory as a path of turn nodes (identical turns merge with an
    existing child) and return its leaf. Visits are not touched (:func:`backpropagate` does that).

    Args:
        turns: the trajectory's model turns, ids each (turn ``t`` is depth ``t + 1``).
        failed: per turn, whether one of its tool calls failed.
        index: the trajectory's index in the search's list (recorded in ``leaves`` and ``via``).
        terminal: mark the leaf terminal (a finished trajectory always is).
    Raises:
        ValueError: ``turns`` and ``failed`` differ in length, or no turn.
    """
    if len(turns) != len(failed) or not turns:
        raise ValueError(f"insert: {len(turns)} turns and {len(failed)} failure flags")
    node = root
    for t, (ids, bad) in enumerate(zip(turns, failed, strict=True)):
        nxt = node.child(ids)
        if nxt is None:
            nxt = Node(tuple(ids), t + 1, node, failed_call=bool(bad), via=index)
            node.children.append(nxt)
        node = nxt
    node.terminal = node.terminal or terminal
    node.leaves.append(index)
    return node


def lowest_common(a: Node, b: Node) -> Node:
    """The deepest node that is an ancestor of (or equal to) both ``a`` and ``b``."""
    seen = set()
    n: Node | None = a
    while n is not None:
        seen.add(id(n))
        n = n.parent
    n = b
    while id(n) not in seen:
        n = n.parent
    return n


def tree_stats(root: Node) -> dict[str, Any]:
    """``nodes``, ``leaves`` (distinct terminal nodes), ``depth`` (deepest), ``branching`` (mean
    children of an inner node) of a tree."""
    nodes = list(root.walk())
    inner = [n for n in nodes if n.children]
    return {"nodes": len(nodes) - 1, "leaves": sum(1 for n in nodes if n.terminal),
            "depth": max(n.depth for n in nodes),
            "branching": sum(len(n.children) for n in inner) / len(inner) if inner else 0.0}
