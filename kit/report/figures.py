"""The report's training figures, redrawn from a run's ``metrics.jsonl`` files.

One function per figure; each takes metrics (a DataFrame from :func:`collect_metrics`, or paths)
and returns a matplotlib Figure, so notebooks show it and :func:`save_figure` writes it.

- :func:`figure4_tool_errors`: tool-error ratio among correct trajectories against training step,
  GRPO vs GRPO-RoC (rStar2-Agent §2.2.2, Figure 4).
- :func:`figure8_stages`: accuracy and mean response length across the three RL stages, stage
  boundaries marked (rStar2-Agent §4.3, Figure 8).
- :func:`figure9_roc_ablation`: accuracy and mean training response length against step, GRPO vs
  GRPO-RoC (rStar2-Agent §5.3, Figure 9).

The metrics keys are those :mod:`kit.metrics` declares. Accuracy here is what the
metrics hold: the training rollouts' accuracy on the profile's own problems (for the tiny profile,
generated tool tasks), not AIME accuracy as in the paper's panels; the axis labels say so. Several
seeds of one algorithm are drawn as their mean with a min-max band.
"""

from __future__ import annotations

import io
import os
import shutil
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from IPython import get_ipython
from IPython.display import display
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kit.metrics import MetricsError, read_rows
from kit.studies import STUDIES

ALGO_LABEL = {"grpo": "GRPO", "grpo_roc": "GRPO-RoC"}
ALGO_COLOR = {"grpo": "#d62728", "grpo_roc": "#1f77b4"}
#: the stages' colours in training order (Figure 8): stage k takes entry k of the palette (tab10)
STAGE_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                 "#17becf")

FIGURE_KEYS = {
    "figure4": ("step", "algorithm", "seed", "tool_error_ratio_correct_before"),
    "figure8": ("stage", "global_step", "accuracy", "response_len_mean"),
    "figure9": ("step", "algorithm", "seed", "accuracy", "response_len_mean"),
}


def _figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _register_notebook_display() -> None:
    """Show Figures (built without pyplot, so no global state) as PNG in notebooks and the PDF."""
    ip = get_ipython()
    if ip is not None:
        ip.display_formatter.formatters["image/png"].for_type(Figure, _figure_png)


_register_notebook_display()


# --------------------------------------------------------------------------- reading


def read_metrics(path: str | os.PathLike) -> pd.DataFrame:
    """Read one ``metrics.jsonl`` (one JSON object per step) into a DataFrame.

    Args:
        path: the file, read by :func:`kit.metrics.read_rows`. Blank lines are ignored; JSON
            ``null`` becomes NaN.
    Returns:
        One row per line, columns as in the file, plus ``source`` (the file path).
    Raises:
        MetricsError: the file is missing, empty or not UTF-8 text, or a line is not a JSON object
            (the message names the file and the line number).
    """
    path = Path(path)
    rows = read_rows(path)  # the one reader (kit.metrics): MetricsError names the file and the line
    if not rows:
        raise MetricsError(f"{path}: no metrics rows")
    df = pd.DataFrame(rows)
    for col in df.columns[df.dtypes.eq(object)]:  # a ratio undefined at every step is all null
        if all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in df[col]):
            df[col] = pd.to_numeric(df[col].astype(float))
    df["source"] = str(path)
    return df


def collect_metrics(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate metrics files; a directory contributes every ``metrics.jsonl`` below it.

    Raises:
        MetricsError: a given path does not exist, or no metrics file was found at all.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("metrics.jsonl")))
        elif p.exists():
            files.append(p)
        else:
            raise MetricsError(f"metrics path not found: {p}")
    if not files:
        raise MetricsError(f"no metrics.jsonl under {', '.join(map(str, paths))}")
    return pd.concat([read_metrics(f) for f in files], ignore_index=True)


def require_keys(df: pd.DataFrame, keys: Sequence[str], what: str) -> None:
    """Raise :class:`MetricsError` naming the first of ``keys`` absent from ``df`` and its files."""
    missing = [k for k in keys if k not in df.columns]
    if missing:
        files = ", ".join(sorted(set(df.get("source", pd.Series(["?"])).astype(str))))
        raise MetricsError(f"{what} needs metrics key(s) {missing}; not found in {files}")


def _as_frame(metrics: pd.DataFrame | str | os.PathLike | Iterable, what: str) -> pd.DataFrame:
    df = metrics if isinstance(metrics, pd.DataFrame) else collect_metrics(metrics)
    require_keys(df, FIGURE_KEYS[what], what)
    return df


# --------------------------------------------------------------------------- drawing helpers


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points, ignoring NaN."""
    if window <= 1:
        return y
    s = pd.Series(y)
    return s.rolling(window, min_periods=1).mean().to_numpy()


def _per_algorithm(df: pd.DataFrame, key: str, window: int):
    """Yield (algorithm, steps, mean, lo, hi, n_seeds) for ``key`` across seeds, per step.

    Steps where ``key`` is NaN for every seed are left out; an algorithm with no defined value at
    all (e.g. no correct trajectory ever called the tool) yields nothing. ``n_seeds`` counts every
    seed that ran, including those whose values are all NaN."""
    for algo, g in sorted(df.groupby("algorithm"), key=lambda kv: str(kv[0])):
        wide = g.pivot_table(index="step", columns="seed", values=key, aggfunc="mean", dropna=False).sort_index()
        wide = wide.apply(lambda col: pd.Series(_smooth(col.to_numpy(dtype=float), window), index=col.index))
        values = wide.to_numpy(dtype=float)
        with np.errstate(all="ignore"):
            ok = ~np.all(np.isnan(values), axis=1)
            steps = wide.index.to_numpy()[ok]
            v = values[ok]
            if not v.size:
                continue
            yield str(algo), steps, np.nanmean(v, axis=1), np.nanmin(v, axis=1), np.nanmax(v, axis=1), wide.shape[1]


def _plot_algorithms(ax, df: pd.DataFrame, key: str, window: int, linestyle: str = "-", suffix: str = "") -> None:
    for algo, steps, mean, lo, hi, n in _per_algorithm(df, key, window):
        color = ALGO_COLOR.get(algo, None)
        label = f"{ALGO_LABEL.get(algo, algo)}{suffix} ({n} seed{'s' if n != 1 else ''})"
        marker = "o" if len(steps) <= 30 else None  # a run of a few steps stays visible
        (line,) = ax.plot(steps, mean, linestyle, color=color, label=label, lw=1.8, marker=marker, ms=3)
        if n > 1:
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, lw=0)


def _legend(ax, empty: str) -> None:
    """The legend of ``ax``, or, when nothing was drawn (every value undefined), ``empty`` in its middle."""
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.35", wrap=True)


def _subtitle(fig, note: str) -> None:
    """The profile/model line, as a suptitle (constrained layout keeps it clear of the axes)."""
    if note:
        width = int(fig.get_figwidth() * 15)  # characters of 8 pt text per line
        fig.suptitle("\n".join(textwrap.fill(line, width) for line in note.splitlines()), fontsize=8, color="0.35")


# --------------------------------------------------------------------------- figures


def figure4_tool_errors(metrics, *, smooth: int = 1, note: str = "", paper_plateau: float | None = None,
                        show_after: bool = True) -> Figure:
    """Figure 4: tool-error ratio among correct trajectories against step, GRPO vs GRPO-RoC.

    Args:
        metrics: ablation metrics (DataFrame or metrics paths/dirs) with ``step, algorithm, seed,
            tool_error_ratio_correct_before`` (failed tool calls / tool calls over the correct
            trajectories the policy sampled, a fraction in [0, 1]); ``..._after`` (over the ones
            RoC kept) is drawn dashed when present and ``show_after``.
        smooth: trailing moving-average window in steps (1 = raw).
        note: a line under the axes naming the profile and model, so a tiny run is not mistaken
            for the paper's.
        paper_plateau: if given, a dotted reference line labelled as the paper's GRPO plateau.
    Returns:
        The Figure (one axes). Runs that never logged ``tool_error_ratio_correct_before`` (VERL's
        GRPO arm; a VERL RoC run without a correct trajectory that called the tool) draw nothing,
        and the axes say why.
    Raises:
        MetricsError: ``step``, ``algorithm`` or ``seed`` is missing (names the key and the files).
    """
    df = metrics if isinstance(metrics, pd.DataFrame) else collect_metrics(metrics)
    key = "tool_error_ratio_correct_before"
    require_keys(df, [k for k in FIGURE_KEYS["figure4"] if k != key], "figure4")
    logged = key in df.columns  # VERL runs log it only from the RoC sampler hook (kit.bridge.roc_hook)
    if not logged:
        df = df.assign(**{key: np.nan})
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    _plot_algorithms(ax, df, key, smooth, suffix=", sampled")
    if show_after and "tool_error_ratio_correct_after" in df.columns:
        roc = df[df["algorithm"] == "grpo_roc"]
        if len(roc) and roc["tool_error_ratio_correct_after"].notna().any():
            _plot_algorithms(ax, roc, "tool_error_ratio_correct_after", smooth, "--", suffix=", kept by RoC")
    if paper_plateau is not None:
        ax.axhline(paper_plateau, color="0.4", ls=":", lw=1)
        ax.annotate(f"paper: GRPO plateau {paper_plateau:.2f} (Qwen3-14B, reference)", (0.01, paper_plateau),
                    xycoords=("axes fraction", "data"), va="bottom", fontsize=7, color="0.3")
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel("tool-error ratio in correct trajectories")
    hi = ax.get_ylim()[1]
    ax.set_ylim(-0.02 * max(hi, 0.1), hi)  # a ratio of 0 stays visible above the axis
    ax.set_title("Figure 4: tool errors in correct trajectories")
    ax.grid(alpha=0.3)
    _legend(ax, "no value to draw: no correct trajectory called the tool in any step\n"
                "(expected of a run too short to learn, e.g. the smoke profile)" if logged else
                f"no value to draw: no metrics file logs {key}\n(VERL runs log it only from the GRPO-RoC "
                "sampler hook, for steps with a correct trajectory that called the tool)")
    _subtitle(fig, note)
    return fig


def figure8_stages(metrics, *, smooth: int = 1, note: str = "", stage_end_reference: dict | None = None) -> Figure:
    """Figure 8: accuracy and mean response length across the RL stages, boundaries marked.

    Args:
        metrics: the stages' metrics (DataFrame or the stage run dirs) with ``stage, global_step,
            accuracy`` (fraction of correct training rollouts) and ``response_len_mean`` (tokens).
        smooth: trailing moving-average window in steps, applied within each stage.
        note: profile and model line under the axes.
        stage_end_reference: optional ``{stage: {benchmark: percent}}`` of published stage-end
            accuracies, printed as a labelled reference box (never plotted as our data).
    Returns:
        The Figure (two axes: accuracy, response length).
    Raises:
        MetricsError: a required key is missing.
    """
    df = _as_frame(metrics, "figure8").sort_values("global_step")
    fig = Figure(figsize=(10, 4.0), layout="constrained")
    ax_acc, ax_len = fig.subplots(1, 2)
    stages = sorted(df["stage"].astype(str).unique(), key=lambda s: df.loc[df["stage"].astype(str) == s, "global_step"].min())
    for k, stage in enumerate(stages):
        g = df[df["stage"].astype(str) == stage]
        x = g["global_step"].to_numpy()
        color = STAGE_PALETTE[k % len(STAGE_PALETTE)]
        ax_acc.plot(x, _smooth(g["accuracy"].to_numpy(dtype=float), smooth), "-o", ms=2.5, color=color, label=stage)
        ax_len.plot(x, _smooth(g["response_len_mean"].to_numpy(dtype=float), smooth), "-o", ms=2.5, color=color,
                    label=stage)
    for stage in stages[1:]:
        start = df.loc[df["stage"].astype(str) == stage, "global_step"].min()
        for ax in (ax_acc, ax_len):
            ax.axvline(start - 0.5, color="0.5", ls="--", lw=1)
    ax_acc.set_ylabel("training accuracy (fraction correct)")
    ax_acc.set_ylim(-0.02, 1.02)
    ax_len.set_ylabel("mean response length (tokens)")
    for ax in (ax_acc, ax_len):
        ax.set_xlabel("global training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_acc.set_title("Figure 8: accuracy across RL stages")
    ax_len.set_title("response length across RL stages")
    if stage_end_reference:
        ends = "; ".join(f"{stage} " + "/".join(f"{v:g}" for v in vals.values()) for stage, vals in stage_end_reference.items())
        benches = "/".join(next(iter(stage_end_reference.values())).keys())
        note = (note + "\n" if note else "") + f"paper, Qwen3-14B, stage-end {benches} avg@16 % (reference, not this run): {ends}"
    _subtitle(fig, note)
    return fig


def figure9_roc_ablation(metrics, *, smooth: int = 1, note: str = "") -> Figure:
    """Figure 9: the RoC ablation, accuracy and mean training response length against step.

    Args:
        metrics: ablation metrics with ``step, algorithm, seed, accuracy, response_len_mean``.
        smooth: trailing moving-average window in steps.
        note: profile and model line under the axes.
    Returns:
        The Figure (two axes).
    Raises:
        MetricsError: a required key is missing.
    """
    df = _as_frame(metrics, "figure9")
    fig = Figure(figsize=(10, 4.0), layout="constrained")
    ax_acc, ax_len = fig.subplots(1, 2)
    _plot_algorithms(ax_acc, df, "accuracy", smooth)
    _plot_algorithms(ax_len, df, "response_len_mean", smooth)
    ax_acc.set_ylabel("training accuracy (fraction correct)")
    ax_acc.set_ylim(-0.02, 1.02)
    ax_len.set_ylabel("mean training response length (tokens)")
    for ax in (ax_acc, ax_len):
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_acc.set_title("Figure 9: RoC ablation, accuracy")
    ax_len.set_title("RoC ablation, response length")
    _subtitle(fig, note)
    return fig


class LiveCurves:
    """Learning curves that redraw in place while a trainer runs; pass it as ``progress=``.

    Each call receives one metrics row (a dict with ``x`` and the ``keys``); every ``every`` rows
    the figure is redrawn into one notebook output (``display_id``), titled with the step count,
    the latest values and the elapsed time. A row holding ``"summary"`` ends the run: the final
    curves are drawn and the summary kept in ``self.summary``. Outside a notebook nothing is
    displayed (``figure()`` still works).

    Args:
        keys: metrics keys to plot, one axes each (e.g. ``("loss",)`` or ``("accuracy", "response_len_mean")``).
        total: planned number of steps (for the title and the x range), or None.
        every: redraw period in rows (drawing costs ~0.1 s, more as the rows grow).
        min_interval_s: and at least this many seconds (wall) since the last redraw, so a burst
            of rows does not redraw once per row (notebook 06 replaying 400 finished ablation rows
            at ``every=1`` spent 90 s drawing, issue #16). A row at ``x == total`` (a run's last
            step) and a summary row always redraw.
        x: the step key.
        title: prefix of the figure title.
        group: keys whose values split the rows into separate lines (e.g. ``("algorithm", "seed")``
            for the ablation, whose runs restart at step 1).
    """

    def __init__(self, keys: Sequence[str], total: int | None = None, every: int = 10, x: str = "step",
                 title: str = "", group: Sequence[str] = (), min_interval_s: float = 2.0):
        if not keys:
            raise ValueError("LiveCurves needs at least one metrics key")
        self.keys, self.total, self.every, self.x, self.title = tuple(keys), total, max(1, every), x, title
        self.group = tuple(group)
        self.rows: list[dict] = []
        self.summary: dict | None = None
        self._handle = None
        self._t0 = time.perf_counter()
        self.min_interval_s = min_interval_s
        self._last_draw = float("-inf")
        self.draws = 0  # redraws so far (a count, for tests and benchmarks)
        self._drawn_rows = 0

    def __call__(self, row: dict) -> None:
        if "summary" in row:
            self.summary = row["summary"]
            self.draw()
            return
        self.rows.append(row)
        last = self.total is not None and row.get(self.x) == self.total
        due = len(self.rows) % self.every == 0 and time.perf_counter() - self._last_draw >= self.min_interval_s
        if last or due:
            self.draw()

    def flush(self) -> None:
        """Redraw if rows came in since the last redraw (a run that stopped between the
        throttled redraws: an exception, an interrupted cell). :class:`kit.progress.StepBar`
        calls it when its ``with`` block ends."""
        if self.rows and self._drawn_rows != len(self.rows):
            self.draw()

    def status(self) -> str:
        """``"<title> step 40/500  loss 0.512  (12 s)"`` for the latest row."""
        if not self.rows:
            return f"{self.title} waiting for the first step".strip()
        last = self.rows[-1]
        of = f"/{self.total}" if self.total else ""
        vals = "  ".join(f"{k} {last[k]:.4g}" for k in self.keys if isinstance(last.get(k), int | float))
        return f"{self.title} {self.x} {last.get(self.x)}{of}  {vals}  ({time.perf_counter() - self._t0:.0f} s)".strip()

    def figure(self) -> Figure:
        """The current curves (one axes per key) as a Figure."""
        fig = Figure(figsize=(3.6 * len(self.keys), 2.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(self.keys)))
        groups: dict[tuple, list[dict]] = {}
        for r in self.rows:
            groups.setdefault(tuple(r.get(g) for g in self.group), []).append(r)
        for ax, key in zip(axes, self.keys, strict=True):
            for gkey, rows in groups.items():
                ys = [r[key] if isinstance(r.get(key), int | float) else np.nan for r in rows]
                label = " ".join(f"{g}={v}" for g, v in zip(self.group, gkey, strict=True)) or None
                ax.plot([r.get(self.x) for r in rows], ys, lw=1.2, label=label)
            if self.group and len(groups) > 1:
                ax.legend(fontsize=6)
            ax.set_xlabel(self.x)
            ax.set_ylabel(key)
            if self.total:
                ax.set_xlim(0, self.total)
            ax.grid(alpha=0.3)
        fig.suptitle(self.status(), fontsize=9)
        return fig

    def draw(self) -> None:
        """Redraw into the notebook output (no-op outside IPython)."""
        self._last_draw, self.draws, self._drawn_rows = time.perf_counter(), self.draws + 1, len(self.rows)
        if get_ipython() is None:
            return
        fig = self.figure()
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)


def copy_figure(src_dir: str | os.PathLike, fig_dir: str | os.PathLike, name: str) -> list[Path]:
    """Copy ``src_dir/name.{png,pdf}`` (a figure a notebook drew into its run folder) into the
    report's figures folder ``fig_dir`` (notebook 20), where the summary pages find it; returns the
    copies ([] when there are none)."""
    found = [Path(src_dir) / f"{name}.{ext}" for ext in ("png", "pdf")]
    found = [p for p in found if p.exists()]
    if found:
        Path(fig_dir).mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(p, Path(fig_dir) / p.name)) for p in found]


def copy_study_figures(study_dirs: Mapping[str, str | os.PathLike], fig_dir: str | os.PathLike) -> dict[str, list[Path]]:
    """Copy each study's figures (:data:`kit.studies.STUDIES`, its ``figures``) from its run folder in
    ``study_dirs`` (notebook 20's ``{study key: folder}``) into ``fig_dir``, where its summary page
    finds them; returns ``{notebook: copies}`` ([] for a study that drew none).

    Raises:
        KeyError: ``study_dirs`` lacks a registered study.
    """
    return {s.notebook: [p for name, _ in s.figures for p in copy_figure(study_dirs[s.key], fig_dir, name)]
            for s in STUDIES}


def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str, formats: Sequence[str] = ("png", "pdf"),
                dpi: int = 150) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for each format; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = out / f"{name}.{fmt}"
        fig.savefig(p, dpi=dpi)
        paths.append(p)
    return paths
