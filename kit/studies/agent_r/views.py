"""Notebook 11's pictures: one search tree with its good and bad branches and the transition point,
and revision trajectories coloured by segment (what carries loss and what does not)."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

#: segment colours of a revision row: no loss on prompt, shared prefix, bad branch, signal, feedback
COLOURS = {"prompt": "#eeeeee", "shared": "#dde6f0", "bad": "#f6c6c6", "signal": "#ffe58a", "good": "#c8ecc8",
           "feedback": "#f3f3f3"}


def _layout(nodes: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """x = depth, y = the mean of the leaves' rows below a node (leaves in depth-first order)."""
    kids: dict[int, list[int]] = {}
    for n in nodes:
        if n["parent"] is not None:
            kids.setdefault(n["parent"], []).append(n["id"])
    pos: dict[int, tuple[float, float]] = {}
    row = [0]

    def place(i: int, depth: int) -> float:
        ch = kids.get(i, [])
        y = float(row[0]) if not ch else sum(place(c, depth + 1) for c in ch) / len(ch)
        if not ch:
            row[0] += 1
        pos[i] = (depth, y)
        return y

    place(0, 0)
    return pos


def _path(nodes_by_id: dict[int, dict], leaf: int) -> set[int]:
    out, n = set(), nodes_by_id.get(leaf)
    while n is not None:
        out.add(n["id"])
        n = nodes_by_id.get(n["parent"]) if n["parent"] is not None else None
    return out


def tree_figure(path: str | os.PathLike, ax=None):
    """Draw ``trees/<arm>_iter<k>.json``: nodes at (turn depth, leaf order), size ~ visits, colour Q;
    the good branch green, the bad branch red, the shared node ringed, the transition turn a star,
    failed tool calls a cross. Returns the matplotlib figure."""
    doc = json.loads(Path(path).read_text())
    nodes = doc["nodes"]
    by = {n["id"]: n for n in nodes}
    pos = _layout(nodes)
    pair = doc.get("pair") or {}
    good = _path(by, pair["good"]) if pair else set()
    bad = _path(by, pair["bad"]) if pair else set()
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(8, 0.5 + 0.45 * max(3, len(pos) ** 0.8)))
    for n in nodes:
        if n["parent"] is None:
            continue
        (x0, y0), (x1, y1) = pos[n["parent"]], pos[n["id"]]
        colour = "tab:green" if n["id"] in good and n["parent"] in good else "tab:red" if n["id"] in bad else "0.7"
        ax.plot([x0, x1], [y0, y1], color=colour, lw=2.5 if colour != "0.7" else 1, zorder=1)
    xs, ys = zip(*(pos[n["id"]] for n in nodes), strict=True)
    sc = ax.scatter(xs, ys, s=[30 + 20 * n["visits"] for n in nodes], c=[n["q"] for n in nodes], cmap="RdYlGn",
                    vmin=0, vmax=1, edgecolors="k", zorder=2)
    for n in nodes:
        x, y = pos[n["id"]]
        if n["failed_call"]:
            ax.scatter([x], [y], marker="x", color="k", s=60, zorder=3)
        if n["reward"] is not None:
            ax.annotate(f"r={n['reward']:.0f}", (x, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
    if pair:
        ax.scatter(*pos[pair["transition"]], marker="*", s=320, color="gold", edgecolors="k", zorder=4,
                   label="transition point")
        ax.scatter(*pos[pair["shared"]], s=260, facecolors="none", edgecolors="tab:blue", lw=2, zorder=4,
                   label="shared prefix ends")
        ax.legend(loc="best", fontsize=7, framealpha=0.8)
    fig.colorbar(sc, ax=ax, label="Q(s)")
    ax.set_xlabel("turn (node depth)")
    ax.set_yticks([])
    ax.set_title(f"search tree of task {doc['task']} (green: good branch, red: bad branch, x: failed call)", fontsize=9)
    return fig


def first_tree_figure(run_dir: str | os.PathLike):
    """:func:`tree_figure` of the first Agent-R iteration's tree in ``run_dir/trees``, or a line
    saying there is none (a run that searched nothing)."""
    trees = sorted(Path(run_dir, "trees").glob("agent_r_iter*.json"))
    if not trees:
        print(f"no search tree in {run_dir}/trees")
        return None
    return tree_figure(trees[0])


def revisions_html(run_dir: str | os.PathLike, limit: int = 2) -> str:
    """The first ``limit`` rows of ``revisions.jsonl`` as HTML: each segment in its colour
    (:data:`COLOURS`), loss-carrying text bold, with a legend."""
    path = Path(run_dir) / "revisions.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()][:limit] if path.exists() else []
    legend = " ".join(f'<span style="background:{c};padding:0 4px">{k}</span>' for k, c in COLOURS.items())
    parts = [f"<div style='font-size:12px'>segments: {legend}; <b>bold</b> = loss</div>"]
    if not rows:
        parts.append("<p>No revision trajectory in this run (no tree held a good and a bad branch).</p>")
    for r in rows:
        body = "".join(
            f'<span style="background:{COLOURS.get(s["kind"], "#fff")}">'
            f'{"<b>" if s["loss"] else ""}{html.escape(s["text"])}{"</b>" if s["loss"] else ""}</span>'
            for s in r["segments"] if s["kind"] != "prompt")
        parts.append(f"<h4>task {html.escape(r['task'])}, iteration {r['iteration']}, transition at turn "
                     f"{r['transition'] + 1}</h4><pre style='white-space:pre-wrap;font-size:11px'>{body}</pre>")
    return "\n".join(parts)
