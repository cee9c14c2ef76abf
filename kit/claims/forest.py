"""The "over seeds" page (issue #42): a forest plot per pooled test.

One panel per test of each claim: every run's statistic (a dot, labelled by run), the pooled mean
with its 95% interval over runs (a bar), and the pre-registered threshold (a dashed line), with the
verdict, the share of runs on the claimed side and of runs that reproduced it on their own, the runs
left out (and why) and, for arm comparisons, the probability of improvement written beside it. The
shares describe the runs, not the verdict: the verdict is the pooled interval's (:mod:`kit.claims.pool`).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

__all__ = ["PANELS_PER_PAGE", "over_seeds_page"]

PANELS_PER_PAGE = 7
COLOURS = {"reproduced": "#1b7837", "not reproduced": "#b2182b", "inconclusive": "#7f7f7f"}


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def _first_clause(why: str) -> str:
    """A left-out reason up to its first ``": "`` or ``"; "``, with its brackets closed."""
    head = why.split("; ")[0].split(": ")[0]
    return head + ")" * max(0, head.count("(") - head.count(")"))


def _panel(ax, claim: Mapping[str, Any], test: Mapping[str, Any]) -> None:
    runs = list(test["per_run"])
    used = set(test["used"])
    ranked = sorted((v, name) for name, v in test["per_run"].items() if _finite(v))
    lift = {name: k % 3 for k, (_, name) in enumerate(ranked)}  # neighbours by value on three label rows
    for name in runs:
        v = test["per_run"][name]
        if _finite(v):
            ax.plot([v], [0.0], "o", ms=5, color="#404040" if name in used else "#c0c0c0", zorder=3)
            ax.annotate(name, (v, 0.0), textcoords="offset points", xytext=(0, 5 + 6 * lift[name]), ha="center",
                        fontsize=6, color="#404040")
    lo, hi = test["ci95"]
    colour = COLOURS.get(test["verdict"], "#7f7f7f")
    if _finite(test["value"]):
        ax.plot([test["value"]], [-0.5], "D", ms=6, color=colour, zorder=3)
        if _finite(lo) and _finite(hi):
            ax.plot([lo, hi], [-0.5, -0.5], "-", lw=3, color=colour, solid_capstyle="butt")
    ax.axvline(test["threshold"], ls="--", lw=1, color="#2166ac")
    ax.set_yticks([0.0, -0.5], ["runs", "pooled"], fontsize=7)
    ax.set_ylim(-1.0, 1.0)
    ax.tick_params(axis="x", labelsize=7)
    share = test.get("share_claimed_side")
    desc = f"{test['verdict']} ({test['interval']}); claimed {test['comparison']} {test['threshold']:g}"
    if _finite(share):
        desc += f"; {share:.0%} of runs on the claimed side"
    if _finite(test.get("share_runs_reproduced")):
        desc += f", {test['share_runs_reproduced']:.0%} reproduced it alone"
    if "probability_of_improvement" in test and _finite(test["probability_of_improvement"]):
        desc += f"; P(improvement) {test['probability_of_improvement']:.2f}"
    if test["excluded"]:  # each run with the first clause of its reason (the CSV and the JSON hold it whole)
        desc += "; left out: " + ", ".join(f"{n} ({_first_clause(why)})" for n, why in test["excluded"].items())
    title = f"{claim['source'].split(' (')[0]} [{claim['role']}]: {claim['claim']}"
    if len(claim["tests"]) > 1:
        title += f" -- test '{test['name']}'"
    ax.set_title("\n".join(textwrap.wrap(title, 130) + textwrap.wrap(desc, 140)), fontsize=7, loc="left")


def over_seeds_page(doc: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write the forest plots of a pooled document (:func:`kit.claims.pool.pool_runs`) to the PDF
    ``path``, :data:`PANELS_PER_PAGE` tests a page, a header on the first (profile, runs, counts,
    environment notes). Returns the path."""
    p = Path(path)
    panels = [(c, t) for c in doc["claims"] for t in c["tests"]]
    counts = ", ".join(f"{n} {v}" for v, n in doc["counts"].items())
    runs = ", ".join(f"{r['name']}" + (f" (seed {r['seed']})" if r.get("seed") is not None else "") for r in doc["runs"])
    header = (f"Claims over pipeline seeds ({doc['profile']}): {len(doc['runs'])} runs: {runs}. Claims: {counts}. "
              "Dots: each run's statistic; diamond and bar: the pooled mean and its 95% interval over runs; "
              "dashed: the pre-registered threshold. The share of runs on the claimed side describes the runs; "
              "the verdict is the pooled interval's.")
    notes = " ".join(doc.get("notes") or [])
    with PdfPages(p) as pdf:
        for start in range(0, max(1, len(panels)), PANELS_PER_PAGE):
            chunk = panels[start:start + PANELS_PER_PAGE]
            fig, axes = plt.subplots(max(1, len(chunk)), 1, figsize=(8.27, 11.69), squeeze=False)
            for ax, (c, t) in zip(axes[:, 0], chunk, strict=False):
                _panel(ax, c, t)
            if start == 0:
                fig.suptitle("\n".join(textwrap.wrap(header + (" " + notes if notes else ""), 150)), fontsize=7, x=0.02,
                             ha="left")
            fig.tight_layout(rect=(0, 0, 1, 0.95 if start == 0 else 1))
            pdf.savefig(fig)
            plt.close(fig)
    return p
