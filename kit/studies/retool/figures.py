"""ReTool's Figure panels for this run (Feng et al. 2025, ReTool §3.3; issue #33): how RL changes the
use of the code interpreter, PPO (ReTool's algorithm) against GRPO-RoC, from the arms' ``metrics.jsonl``.

Six panels in ReTool's order of quantities: (a) response length, (b) code ratio, (c) code lines per
call, (d) training accuracy (ReTool: AIME accuracy), (e) code pass rate in correct responses and over all
(ReTool: correct and incorrect), (f) first-call position (ReTool's code invocation timing), plus the
self-correction rate of correct responses drawn into (e)'s twin quantity panel as a dotted line. Each
arm is the mean over its seeds with a min-max band, as :mod:`kit.report.figures` draws the ablation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kit.report.figures import ALGO_COLOR, ALGO_LABEL, require_keys

#: the arms' labels and colours beside the ablation's (``algorithm`` of the rows: ``ppo`` from kit.train.critic)
LABEL = {**ALGO_LABEL, "ppo": "PPO (ReTool)"}
COLOR = {**ALGO_COLOR, "ppo": "#2ca02c"}
#: (panel title, key, y label, y limits or None)
PANELS = (
    ("(a) response length", "response_len_mean", "tokens (tool feedback included)", None),
    ("(b) code ratio", "code_ratio", "share of responses calling the interpreter", (-0.02, 1.02)),
    ("(c) code lines", "code_lines_per_call", "non-blank lines per call", None),
    ("(d) training accuracy", "accuracy", "fraction correct (training rollouts)", (-0.02, 1.02)),
    ("(e) code pass rate", "code_pass_rate_correct", "calls without error / calls", (-0.02, 1.02)),
    ("(f) code invocation timing", "first_call_position", "tokens before the first call / response tokens", None),
)
#: keys every row has on both runtimes; the other behaviour keys may be absent (a VERL row leaves out a ratio
#: that is undefined at its step: no call, no correct response), and their panels then say so
KEYS = ("step", "algorithm", "seed", "response_len_mean", "accuracy", "code_ratio")
OPTIONAL = ("code_lines_per_call", "code_pass_rate_correct", "first_call_position", "code_pass_rate",
            "self_correction_rate_correct")


def _curves(df: pd.DataFrame, key: str, smooth: int):
    """(algorithm, steps, mean, lo, hi, seeds) per algorithm, over seeds per step; NaN steps left out."""
    for algo, g in sorted(df.groupby("algorithm"), key=lambda kv: str(kv[0])):
        wide = g.pivot_table(index="step", columns="seed", values=key, aggfunc="mean", dropna=False).sort_index()
        if smooth > 1:
            wide = wide.rolling(smooth, min_periods=1).mean()
        v = wide.to_numpy(dtype=float)
        ok = ~np.all(np.isnan(v), axis=1)
        if ok.any():
            with np.errstate(all="ignore"):
                yield (str(algo), wide.index.to_numpy()[ok], np.nanmean(v[ok], axis=1), np.nanmin(v[ok], axis=1),
                       np.nanmax(v[ok], axis=1), wide.shape[1])


def _draw(ax, df: pd.DataFrame, key: str, smooth: int, style: str = "-", suffix: str = "") -> None:
    for algo, steps, mean, lo, hi, n in _curves(df, key, smooth):
        (line,) = ax.plot(steps, mean, style, color=COLOR.get(algo), lw=1.6, marker="o" if len(steps) <= 30 else None,
                          ms=2.5, label=f"{LABEL.get(algo, algo)}{suffix} ({n} seed{'s' if n != 1 else ''})")
        if n > 1:
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, lw=0)


def figure_retool_behaviour(metrics: pd.DataFrame, *, note: str = "", smooth: int = 1) -> Figure:
    """ReTool's Figure (a)-(f) for PPO against GRPO-RoC (see the module docstring).

    Args:
        metrics: rows of both arms (``kit.report.figures.collect_metrics``) with :data:`KEYS` (and :data:`OPTIONAL` where defined).
        note: the profile/model line under the title.
        smooth: trailing moving-average window in steps.
    Returns:
        The Figure (2 x 3 axes).
    Raises:
        kit.metrics.MetricsError: a key of :data:`KEYS` is missing.
    """
    require_keys(metrics, KEYS, "the ReTool figure")
    metrics = metrics.assign(**{k: np.nan for k in OPTIONAL if k not in metrics.columns})
    fig = Figure(figsize=(12, 6.6), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for ax, (title, key, ylabel, ylim) in zip(axes, PANELS, strict=True):
        _draw(ax, metrics, key, smooth, suffix=", correct" if key == "code_pass_rate_correct" else "")
        if key == "code_pass_rate_correct":  # ReTool's panel (e) has two lines; here: all responses, and fixes
            _draw(ax, metrics, "code_pass_rate", smooth, "--", ", all")
            _draw(ax, metrics, "self_correction_rate_correct", smooth, ":", ", self-corrected share of correct")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel("training step", fontsize=8)
        if ylim:
            ax.set_ylim(*ylim)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=6.5)
        else:
            ax.text(0.5, 0.5, "no defined value in this run", transform=ax.transAxes, ha="center", fontsize=8, color="0.35")
    fig.suptitle("ReTool §3.3 on this run: code-interpreter behaviour under PPO and GRPO-RoC"
                 + (f"\n{note}" if note else ""), fontsize=10)
    return fig
