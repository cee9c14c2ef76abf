"""B-STaR's curves for this run (Zeng et al., ICLR 2025, Figures 2-4; issue #47), from notebook 12's
``bstar/iterations.jsonl`` and ``bstar/eval.jsonl``.

Six panels over the self-training iterations, both arms: (a) the balance score of each iteration's pool at the
pair used; (b) the temperature and (c) the threshold used (B-STaR's chosen pair against the fixed one);
(d) exploration of the pool (distinct correct responses per query) and (e) exploitation (precision of the
selected samples); (f) the held-out accuracy and pass@k of each policy (iteration 0: the cold start), with 95%
bootstrap intervals over tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kit.claims.stats import bootstrap_ratio

#: the arms' labels and colours
LABEL = {"bstar": "B-STaR (retuned every iteration)", "fixed": "fixed pair (online RFT)"}
COLOR = {"bstar": "#d62728", "fixed": "#1f77b4"}
#: x offsets of the arms' points, so equal values do not hide one arm behind the other
OFFSET = {"bstar": -0.05, "fixed": 0.05}
#: (panel title, column of iterations.jsonl)
POOL_PANELS = (("(a) balance score of the pool", "balance"), ("(b) temperature used", "temperature"),
               ("(c) vote-share threshold used", "threshold"),
               ("(d) exploration: distinct correct per query", "distinct_correct"),
               ("(e) exploitation: precision of the selected", "precision"))


def figure_bstar(iterations: pd.DataFrame, evals: pd.DataFrame, note: str = "") -> Figure:
    """The six panels (module docstring).

    Args:
        iterations: rows of ``iterations.jsonl`` (``arm``, ``iteration`` and the panels' columns).
        evals: rows of ``eval.jsonl`` (``policy``, ``iteration``, ``problem``, ``samples``, ``correct``,
            ``pass_at_k``).
        note: a line under the title (e.g. the run folder).
    Returns:
        A matplotlib Figure (not shown, not saved).
    """
    fig = Figure(figsize=(15, 8.5), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for ax, (title, col) in zip(axes, POOL_PANELS, strict=False):
        for arm, df in iterations.groupby("arm", sort=False):
            df = df.sort_values("iteration")
            ax.plot(df["iteration"] + OFFSET.get(arm, 0.0), df[col], "o-", color=COLOR.get(arm, "0.3"),
                    label=LABEL.get(arm, arm))
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax = axes[5]
    cold = evals[evals["policy"] == "cold_start"]
    for arm in LABEL:
        rows = pd.concat([cold, evals[evals["policy"] == arm]])
        for measure, style in (("accuracy", "o-"), ("pass_at_k", "s--")):
            pts = []
            for it, df in rows.groupby("iteration"):
                num = df["correct"].to_numpy(float) if measure == "accuracy" else df["pass_at_k"].to_numpy(float)
                den = df["samples"].to_numpy(float) if measure == "accuracy" else np.ones(len(df))
                pts.append((it, *bootstrap_ratio(num, den)))  # 95% interval over tasks
            if pts:
                x, y, lo, hi = map(np.array, zip(*pts, strict=True))
                ax.errorbar(x + OFFSET[arm], y, yerr=[y - lo, hi - y], fmt=style, color=COLOR[arm], capsize=3,
                            label=f"{arm}: {'accuracy' if measure == 'accuracy' else 'pass@k'}")
    ax.set_title("(f) held-out accuracy and pass@k (0: cold start)")
    ax.set_xlabel("iteration")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    axes[0].legend(fontsize=8)
    fig.suptitle("B-STaR against a fixed pair: the pool each iteration trains on, and the policies on held-out tasks"
                 + (f"\n{note}" if note else ""))
    return fig
