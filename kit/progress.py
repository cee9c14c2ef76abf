"""The kit's progress bars: one front end for JupyterLab, the terminal and papermill logs.

:func:`bar` is tqdm's auto front end (a widget in JupyterLab, text in a terminal). Executed by
papermill, a widget's output is saved as its first state and logged once; with ``KIT_PROGRESS=text``
(the pipeline runner sets it for its kernels) the bar is text on the kernel's stdout instead, so
``--log-output`` and the executed notebook show it advance. :class:`StepBar` is a trainer's
``progress`` callback (metrics rows, :mod:`kit.runtime`) that advances a bar and passes each row on
(to :class:`kit.report.figures.LiveCurves`, say); it is drawn when created, before the trainer's first
step, so a cell shows something from its first second.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm as text_tqdm
from tqdm.auto import tqdm as auto_tqdm

#: seconds between redraws of a text bar (each redraw is a line in papermill's log)
TEXT_INTERVAL_S = 2.0


def bar(total: int | None, desc: str, unit: str = "step", **kwargs: Any):
    """A progress bar (``tqdm``) for ``total`` units labelled ``desc``.

    Args:
        total: planned number of units, or None (then a counter without percentage).
        desc: the label, e.g. ``"cold-start SFT"``.
        unit: what one update counts (``"step"``, ``"benchmark"``, ...).
        kwargs: further ``tqdm`` options.
    Returns:
        ``tqdm.auto.tqdm`` (a widget in a notebook frontend, text elsewhere), or a text ``tqdm``
        on stdout redrawn every :data:`TEXT_INTERVAL_S` seconds when ``KIT_PROGRESS=text``.
    """
    if os.environ.get("KIT_PROGRESS") == "text":
        return text_tqdm(total=total, desc=desc, unit=unit, file=sys.stdout, mininterval=TEXT_INTERVAL_S,
                         ncols=100, **kwargs)
    return auto_tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, **kwargs)


class StepBar:
    """A trainer's ``progress`` callback that advances a bar over its metrics rows, then passes
    each row on to ``inner``.

    Args:
        total: planned steps (rows, with ``count_rows``), or None.
        desc: the bar's label.
        inner: the callback each row is passed on to (e.g. a ``LiveCurves``), or None.
        keys: metrics shown beside the bar (the latest row's values).
        x: the row's step key; the bar stands at that step (a resumed run starts where it left).
        count_rows: advance by one per row instead (the ablation: several runs restart at step 1).

    A row holding ``"summary"`` ends the bar (and is passed on); so does leaving a ``with`` block,
    also on an exception.
    """

    def __init__(self, total: int | None, desc: str, inner: Callable[[dict], None] | None = None,
                 keys: Sequence[str] = (), x: str = "step", count_rows: bool = False):
        self.inner, self.keys, self.x, self.count_rows = inner, tuple(keys), x, count_rows
        self.bar = bar(total, desc)

    def __call__(self, row: dict) -> None:
        if "summary" in row:
            self.close()
        else:
            shown = {k: f"{row[k]:.4g}" for k in self.keys if isinstance(row.get(k), int | float)}
            if shown:  # before the update, which draws it
                self.bar.set_postfix(shown, refresh=False)
            step = row.get(self.x)
            if self.count_rows or not isinstance(step, int):
                self.bar.update(1)
            elif step > self.bar.n:
                self.bar.update(step - self.bar.n)
        if self.inner is not None:
            self.inner(row)

    def close(self) -> None:
        """Draw the final state and stop (idempotent): the bar, and the inner callback's
        figure where it has a ``flush`` (``LiveCurves`` redraws rows its throttle held back)."""
        self.bar.close()
        flush = getattr(self.inner, "flush", None)
        if callable(flush):
            flush()

    def __enter__(self) -> StepBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
