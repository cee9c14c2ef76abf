"""Trajectory display for notebooks: :class:`TrajectoryView` shows one trajectory as coloured HTML
in JupyterLab (under a legend of its colours), coloured LaTeX in the PDF report, and marked plain
text elsewhere; :func:`learning_note` is the line a profile too small to learn shows beside its results.
"""

from __future__ import annotations

import html as _html
from typing import Any

from IPython.display import Markdown, display

from kit.config import KitConfig
from kit.report.tables import LATEX_SPECIALS
from kit.rollout import legend_html, trajectory_html

#: fewer cold-start steps than this and the tiny model has not learned the task format yet (it learns
#: to copy numbers around step 200: reports/LOG.md, 2026-11-29; the smoke profile runs 40)
MIN_LEARNING_SFT_STEPS = 200
LATEX_LEGEND = r"black: model tokens (mask 1, trained on); \textcolor{gray}{grey: tool response (mask 0, no loss)}"


def learning_note(cfg: KitConfig) -> str:
    """The one line a profile too small to learn shows where its results appear, else ``""``.

    The local engine's model starts from scratch: with fewer than :data:`MIN_LEARNING_SFT_STEPS`
    cold-start steps (the smoke profile: 40) it has not learned the answer format, so rewards of
    zero, NaN statistics and gibberish trajectories are what a correct run shows. Paper profiles
    (``runtime = "verl"``) start from a pretrained model and get no note.
    """
    if cfg.runtime != "local" or cfg.sft.steps >= MIN_LEARNING_SFT_STEPS:
        return ""
    return (f"Profile {cfg.profile} is too small to learn ({cfg.sft.steps} cold-start steps; the tiny model learns "
            f"the format after about {MIN_LEARNING_SFT_STEPS}): zeros, NaNs and gibberish trajectories are expected "
            "here; it checks that the chain runs, not what it learns.")


def show_learning_note(cfg: KitConfig) -> None:
    """Display :func:`learning_note` as one italic Markdown line (nothing when the profile can learn)."""
    note = learning_note(cfg)
    if note:
        display(Markdown(f"*{note}*"))


def _latex_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in LATEX_SPECIALS:
            out.append(LATEX_SPECIALS[ch])
        elif ch == "\n":
            out.append("\\newline\n")
        elif ord(ch) < 32 or ord(ch) > 0x2000:  # control characters and glyphs the PDF font lacks
            out.append("?")
        else:
            out.append(ch)
        if not ch.isalnum() and ch != "\n":  # long lines of code or garbage may break after symbols
            out.append(r"\allowbreak{}")
    return "".join(out)


class TrajectoryView:
    """One trajectory for notebooks: the rollout view's coloured HTML in JupyterLab, coloured LaTeX
    in the PDF report, and marked plain text elsewhere (model tokens plain, tool-response tokens,
    which carry no loss, between ``[tool response, mask 0]`` markers)."""

    def __init__(self, tr: Any, tokenizer: Any, title: str = ""):
        self.tr, self.tok, self.title = tr, tokenizer, title

    def _spans(self):
        for m, s, e in self.tr.spans():
            yield m, self.tok.decode(self.tr.response_ids[s:e], skip_special_tokens=False)

    def _head(self) -> str:
        tr = self.tr
        errs = ", ".join(f"{k} {v}" for k, v in tr.tool_errors.items() if v) or "none"
        return (f"{self.title + ': ' if self.title else ''}{tr.finish_reason}, {tr.turns} turns, "
                f"{tr.tool_calls} tool calls (errors: {errs}), {len(tr.response_ids)} response tokens "
                f"({sum(tr.response_mask)} sampled by the model)")

    def _repr_html_(self) -> str:
        title = f"<div><b>{_html.escape(self.title)}</b></div>" if self.title else ""
        return title + legend_html() + trajectory_html(self.tr, self.tok)

    def _repr_latex_(self) -> str:
        parts = [r"\begin{flushleft}\small\textbf{" + _latex_escape(self._head()) + r"}\par{\scriptsize "
                 + LATEX_LEGEND + r"}\par\ttfamily\footnotesize "]
        for m, text in self._spans():
            body = _latex_escape(text)
            parts.append(body if m == 1 else r"\textcolor{gray}{" + body + "}")
        parts.append(r"\end{flushleft}")
        return "".join(parts)

    def __repr__(self) -> str:
        out = [self._head()]
        for m, text in self._spans():
            out.append(text if m == 1 else f"[tool response, mask 0]{text}[/tool response]")
        return "\n".join(out[:1]) + "\n" + "".join(out[1:])
