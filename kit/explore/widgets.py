"""The rollout explorer: ipywidgets over a run folder's records (issue #32).

    from kit.explore import explore
    explore(run_dir)          # the last expression of a cell shows it

Controls: stage/arm, a step slider over the recorded steps (and ◀ ▶ buttons beside it), the prompt (groups matching the
filters), the trajectory, the colouring (:data:`kit.explore.render.COLORS`), three filters
(zero reward spread, correct with tool errors, truncated) and *refresh*, which re-scans the
folder (a run still writing: new steps appear, the slider grows). It opens at the latest
recorded step of the first run. The views are the pure HTML
of :mod:`kit.explore.render`; this module only wires widgets to them. Each view is one
``ipywidgets.HTML`` (``.group``, ``.trajectory``), which tests and the browser test read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ipywidgets as w
from IPython.display import display

from kit.explore import query, render
from kit.records import RecordIndex, read_step, scan


class Explorer:
    """Widgets over ``run_dir``'s rollout records; ``.widget`` is the box to display.

    Args:
        run_dir: a run folder or a pipeline run folder (every ``rollouts/`` below it is found).
        tokenizer: decodes token ids; default the one :func:`kit.explore.query.find_tokenizer_dir` finds.
        color: initial colouring.
    """

    def __init__(self, run_dir: str | os.PathLike, tokenizer: Any = None, color: str = "entropy"):
        self.root = Path(run_dir)
        self.tokenizer = tokenizer
        self._tok_given = tokenizer is not None
        self._tokenizers: dict[Any, Any] = {}  # tokenizer folder -> tokenizer, loaded once
        self.index: RecordIndex = scan(self.root)
        self.records: list[dict[str, Any]] = []
        self._busy = False
        self.run = w.Dropdown(description="stage/arm")
        self.step = w.SelectionSlider(description="step", options=[0], continuous_update=False)
        self.prompt = w.Dropdown(description="prompt")
        self.traj = w.Dropdown(description="trajectory")
        self.color = w.ToggleButtons(options=list(render.COLORS), value=color, description="colour")
        self.filters = {f: w.Checkbox(description=f.replace("_", " "), value=False, indent=False) for f in query.FILTERS}
        self.prev_step = w.Button(description="◀", tooltip="previous recorded step", layout=w.Layout(width="36px"))
        self.next_step = w.Button(description="▶", tooltip="next recorded step", layout=w.Layout(width="36px"))
        self.refresh_button = w.Button(description="refresh", icon="refresh")
        self.status = w.HTML()
        self.group = w.HTML()
        self.trajectory = w.HTML()
        self.run.observe(lambda _: self._on_run(), "value")
        self.step.observe(lambda _: self._on_step(keep_prompt=True), "value")
        self.prompt.observe(lambda _: self._on_prompt(), "value")
        self.traj.observe(lambda _: self._draw(), "value")
        self.color.observe(lambda _: self._draw(), "value")
        for cb in self.filters.values():
            cb.observe(lambda _: self._on_step(keep_prompt=True), "value")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.prev_step.on_click(lambda _: self.move_step(-1))
        self.next_step.on_click(lambda _: self.move_step(1))
        self.widget = w.VBox([
            w.HBox([self.run, self.prev_step, self.step, self.next_step, self.refresh_button]),
            w.HBox([self.prompt, self.traj]), w.HBox(list(self.filters.values())), self.color,
            self.status, self.group, self.trajectory])
        self.refresh()

    # -------------------------------------------------------------- state changes

    def refresh(self) -> None:
        """Re-scan the folder: new runs and steps appear; the current choice is kept when it still exists."""
        self.index = scan(self.root)
        runs = self.index.runs()
        labels = [(r.label(), r) for r in runs]
        keep = self.run.value
        self._busy = True
        self.run.options = labels
        if runs:
            self.run.value = keep if keep in runs else runs[0]
        self._busy = False
        if not runs:
            self.status.value = f"<i>no rollout records under {self.root} yet</i>"
            return
        self._on_run(keep_step=True)

    def move_step(self, by: int) -> None:
        """Go ``by`` recorded steps on (negative: back), stopping at the first and the last."""
        steps = list(self.step.options)
        i = min(max(steps.index(self.step.value) + by, 0), len(steps) - 1)
        self.step.value = steps[i]

    def _on_run(self, keep_step: bool = False) -> None:
        if self._busy or self.run.value is None:
            return
        steps = self.index.steps(self.run.value) or [0]
        old = self.step.value
        self._busy = True
        self.step.options = steps
        self.step.value = old if keep_step and old in steps else steps[-1 if keep_step and old not in steps else 0]
        self._busy = False
        if not self._tok_given:
            where = query.find_tokenizer_dir(self.index, self._file())
            if where not in self._tokenizers:
                self._tokenizers[where] = query.load_tokenizer(where)
            self.tokenizer = self._tokenizers[where]
        self._on_step(keep_prompt=keep_step)

    def _file(self):
        return self.index.file(self.run.value, self.step.value)

    def _on_step(self, keep_prompt: bool = False) -> None:
        if self._busy or self.run.value is None:
            return
        self.records = read_step(self._file(), index=self.index)
        steps = list(self.step.options)
        if not self.records and self._file().path in self.index.unreadable and steps.index(self.step.value) > 0:
            # a step still being written (or cut short): show the step before it
            self.step.value = steps[steps.index(self.step.value) - 1]
            return
        active = [f for f, cb in self.filters.items() if cb.value]
        shown = query.matching_groups(self.records, active)
        gs = query.groups(self.records)
        old = self.prompt.value
        self._busy = True
        self.prompt.options = [(f"{p}: {gs[p][0]['prompt_id']}", p) for p in shown]
        self.prompt.value = old if keep_prompt and old in shown else (shown[0] if shown else None)
        self._busy = False
        bad = (" · unreadable (still being written?): "
               + ", ".join(_short(p, self.root) for p in self.index.unreadable)) if self.index.unreadable else ""
        self.status.value = (f"{len(self.records)} trajectories in {len(gs)} groups at step {self.step.value}; "
                             f"{len(shown)} groups match{bad}")
        self._on_prompt()

    def _on_prompt(self) -> None:
        if self._busy:
            return
        group = self.current_group()
        self._busy = True
        self.traj.options = [(f"#{r['traj_index']} r={r['reward']:.0f} {'kept' if r['kept'] else 'dropped'}",
                              r["traj_index"]) for r in group]
        active = [f for f, cb in self.filters.items() if cb.value]
        self.traj.value = query.first_match(group, active) if group else None
        self._busy = False
        self._draw()

    def current_group(self) -> list[dict[str, Any]]:
        """The records of the chosen prompt's group ([] when none)."""
        if self.prompt.value is None:
            return []
        return list(query.groups(self.records).get(self.prompt.value, []))

    def _draw(self) -> None:
        if self._busy:
            return
        group = self.current_group()
        if not group:
            self.group.value, self.trajectory.value = "<i>no group matches</i>", ""
            return
        self.group.value = render.group_html(group, self.tokenizer, self.traj.value)
        rec = next(r for r in group if r["traj_index"] == self.traj.value)
        self.trajectory.value = render.trajectory_view_html(rec, self.tokenizer, self.color.value)

    def _ipython_display_(self) -> None:  # shown as the widget when it is a cell's last value
        data = dict(self.widget._repr_mimebundle_() or {})  # the widget, and a plain-text line for the PDF
        runs = self.index.runs()
        data["text/plain"] = (f"rollout explorer over {self.root.name}: " + "; ".join(
            f"{r.label()} steps {self.index.steps(r)[0]}-{self.index.steps(r)[-1]}" for r in runs)
            if runs else f"rollout explorer: no records under {self.root} yet")
        display(data, raw=True)


def _short(path: Path, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def explore(run_dir: str | os.PathLike, tokenizer: Any = None, color: str = "entropy") -> Explorer:
    """An :class:`Explorer` over ``run_dir`` (a cell's last expression shows it).

    Raises:
        FileNotFoundError: ``run_dir`` does not exist (a folder without records yet is shown as such).
    """
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"explore: no folder {run_dir} (a run folder, e.g. reports/tiny/main/stage1)")
    return Explorer(run_dir, tokenizer=tokenizer, color=color)
