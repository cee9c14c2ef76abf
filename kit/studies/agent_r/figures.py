"""Agent-R's figure for this run (Yuan et al. 2025, issue #34): the compared policies on the same
held-out tasks, by self-training iteration, from notebook 11's ``agent_r/policy_eval.jsonl``.

Four panels: (a) held-out accuracy, (b) recovery after the same forced failing call (the forced-error probes
of ``probe_eval.jsonl``, the primary claim's measure; without probes, recovery after the policy's own failed
calls: the share of trajectories with a failed call that end correct), (c) share of
trajectories with a failed call, (d) reflection share of high-entropy tokens (the §5.4 labeller of
:mod:`kit.analysis`). Each point is the mean over the held-out trajectories with a 95% bootstrap
interval over problems (samples of one problem are not independent); the cold-start policy is
iteration 0 of every arm. The first Agent-R tree (:func:`kit.studies.agent_r.views.tree_figure`) is
drawn beneath when one is given.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kit.studies.agent_r.views import tree_figure

#: the arms' labels and colours (``policy`` of the rows)
LABEL = {"agent_r": "Agent-R (revision + good)", "direct": "direct revision (at the bad branch's last observation)",
         "good_only": "good only (rejection-sampling FT)",
         "null": "null arm (cold-start data only)", "cold_start": "cold start"}
COLOR = {"agent_r": "#d62728", "direct": "#ff7f0e", "good_only": "#1f77b4", "null": "0.55", "cold_start": "0.35"}
#: x offsets of the arms' points at one iteration, so their intervals do not overlap
OFFSET = {"agent_r": -0.09, "direct": -0.03, "good_only": 0.03, "null": 0.09}
#: (panel title, y label, statistic over a policy's rows: (numerator column, denominator column or None, row filter))
PANELS = (
    ("(a) held-out accuracy", "fraction correct", ("correct", None, None)),
    ("(b) recovery after a failed tool call", "correct among trajectories with a failed call", ("correct", None, "failed_call")),
    ("(c) trajectories with a failed call", "share of trajectories", ("failed_call", None, None)),
    ("(d) reflection among high-entropy tokens", "reflection tokens / high-entropy tokens", ("reflection", "high", None)),
)
COLUMNS = ("policy", "iteration", "problem", "correct", "failed_call", "reflection", "high")
#: panel (b) when the run has forced-error probes (``probe_eval.jsonl``, issue #46): the primary claim's measure,
#: recovery after the same failing call in every policy's context, in place of recovery after the policy's own
PROBE_PANEL = ("(b) recovery after the same forced failing call", "correct after the forced failure (probes)",
               ("correct", None, None))


def bootstrap_ratio(df: pd.DataFrame, num: str, den: str | None, *, draws: int = 1000, seed: int = 0) -> tuple[float, float, float, int]:
    """Ratio of sums ``sum(num) / sum(den)`` (den None: the mean of ``num``, a 0/1 or count column
    clipped to 1) over ``df``'s rows, with a 95% percentile bootstrap interval resampling problems.

    Args:
        df: rows of one policy, with ``problem``, ``num`` and (if given) ``den`` columns.
    Returns:
        (statistic, lo, hi, rows); NaN for all three on no rows or a zero denominator.
    """
    if df.empty:
        return float("nan"), float("nan"), float("nan"), 0
    x = (df[num] > 0).astype(float) if den is None else df[num].astype(float)
    d = pd.Series(1.0, index=df.index) if den is None else df[den].astype(float)
    per = pd.DataFrame({"x": x, "d": d, "p": df["problem"]}).groupby("p")[["x", "d"]].sum().to_numpy()
    total = per.sum(axis=0)
    if total[1] <= 0:
        return float("nan"), float("nan"), float("nan"), len(df)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(per), size=(draws, len(per)))
    s = per[idx].sum(axis=1)
    with np.errstate(all="ignore"):
        boots = s[:, 0] / s[:, 1]
    lo, hi = np.nanpercentile(boots, [2.5, 97.5])
    return float(total[0] / total[1]), float(lo), float(hi), len(df)


def panels(probes: pd.DataFrame | None = None) -> tuple:
    """The four panels drawn: :data:`PANELS`, with :data:`PROBE_PANEL` as (b) when ``probes`` has rows."""
    return PANELS if probes is None or probes.empty else (PANELS[0], PROBE_PANEL, *PANELS[2:])


def policy_curves(rows: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm, iteration and panel of :func:`panels`: statistic, 95% interval, rows (the cold start as iteration
    0 of every arm; an arm without rows, e.g. the null arm of a run from before issue #46, is left out). The probe
    panel reads ``probes`` (``probe_eval.jsonl`` rows: ``policy``, ``iteration``, ``problem``, ``correct``).

    Raises:
        KeyError: a column of :data:`COLUMNS` is missing (named).
    """
    missing = [c for c in COLUMNS if c not in rows]
    if missing:
        raise KeyError(f"Agent-R policy rows lack column(s) {missing} (expected {list(COLUMNS)})")
    out = []
    for title, _, (num, den, where) in panels(probes):
        src = probes if title == PROBE_PANEL[0] else rows
        cold = src[src["policy"] == "cold_start"]
        for arm in OFFSET:  # the arms, in training order
            mine = src[src["policy"] == arm]
            if mine.empty:
                continue
            for it, g in [(0, cold), *sorted(mine.groupby("iteration"), key=lambda kv: kv[0])]:
                sub = g[g[where] > 0] if where else g
                stat, lo, hi, n = bootstrap_ratio(sub, num, den)
                out.append({"arm": arm, "iteration": int(it), "panel": title, "stat": stat, "lo": lo, "hi": hi, "n": n})
    return pd.DataFrame(out)


def figure_agent_r(rows: pd.DataFrame, *, probes: pd.DataFrame | None = None, tree: str | os.PathLike | None = None,
                   note: str = "") -> Figure:
    """The four panels of the module docstring over ``rows`` (``policy_eval.jsonl`` as a DataFrame; panel (b) from
    ``probes``, ``probe_eval.jsonl``, when given), with the search tree ``tree`` (a ``trees/*.json``) beneath when
    given; one legend under the panels.

    Returns:
        A Figure (8 x 7.5 in, or 8 x 11 with the tree).
    Raises:
        KeyError: a column of :data:`COLUMNS` is missing.
    """
    curves = policy_curves(rows, probes)
    fig = Figure(figsize=(8, 11.5 if tree else 8), layout="constrained")
    grid = fig.add_gridspec(3 if tree else 2, 2, height_ratios=[1, 1, 1.3] if tree else [1, 1])
    legend: dict[str, object] = {}
    for k, (title, ylabel, _) in enumerate(panels(probes)):
        ax = fig.add_subplot(grid[k // 2, k % 2])
        for arm, g in curves[curves["panel"] == title].groupby("arm", sort=False):
            g = g.sort_values("iteration")
            ok = g["stat"].notna()
            if ok.any():
                its = g["iteration"][ok]
                gaps = bool((its.diff().dropna() > 1).any())  # good-only: sampled at the last iteration only
                ax.errorbar(its + OFFSET[arm], g["stat"][ok],
                            yerr=[(g["stat"] - g["lo"])[ok], (g["hi"] - g["stat"])[ok]], color=COLOR[arm],
                            marker="o", ms=4, capsize=3, lw=1.0 if gaps else 1.5, ls=":" if gaps else "-",
                            label=LABEL[arm] + (" (evaluated at the last iteration)" if gaps else ""))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("self-training iteration (0 = cold start)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xticks(sorted(curves["iteration"].unique()))
        ax.tick_params(labelsize=7)
        if ax.has_data():
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(lab, h)
        else:
            ax.text(0.5, 0.5, "no trajectory with this quantity", ha="center", transform=ax.transAxes, fontsize=8, color="0.4")
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=2, fontsize=7)
    if tree:
        tree_figure(tree, ax=fig.add_subplot(grid[2, :]))
    fig.suptitle("Agent-R on this run: the policies on the same held-out tasks (95% intervals over problems)"
                 + (f"\n{note}" if note else ""), fontsize=10)
    return fig
