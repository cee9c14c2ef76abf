"""The explorer's views for a handful of groups as one self-contained HTML file (issue #32).

A reader without a kernel sees what :class:`kit.explore.Explorer` shows for the chosen groups:
each group's header and table (reward, p_err / p_format / p_total, RoC kept or dropped, advantage,
tool errors) and every trajectory of the group rendered by :func:`kit.explore.render.trajectory_view_html`,
each in a ``<details>`` block. No scripts, no external stylesheets, fonts or images.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.explore import query, render
from kit.records import read_step, scan

#: (stage, arm, step, prompt_index), or (folder, stage, arm, step, prompt_index) when several run folders
#: below the root record the same stage and arm (ablation seeds); folder as in ``kit.records.RunKey``
GroupKey = tuple


def pick_groups(root: str | os.PathLike, limit: int = 4) -> list[GroupKey]:
    """A handful of telling groups: per filter of :data:`kit.explore.query.FILTERS` the first group
    matching it (earliest step), then the last recorded step's first group; at most ``limit``."""
    index = scan(root)
    picked: list[GroupKey] = []
    wanted = list(query.FILTERS)
    for f in index.files:
        recs = read_step(f, render_columns(), index)
        for flt in list(wanted):
            hit = query.matching_groups(recs, [flt])
            if hit:
                key = (*_short(index, f.run), f.step, hit[0])
                if key not in picked:
                    picked.append(key)
                wanted.remove(flt)
        if not wanted:
            break
    if index.files:
        last = index.files[-1]
        key = (*_short(index, last.run), last.step, 0)
        if key not in picked:
            picked.append(key)
    return picked[:limit]


def _short(index, run) -> tuple:
    """(stage, arm) when that names one run below the root, else (folder, stage, arm)."""
    same = [r for r in index.runs() if (r.stage, r.arm) == (run.stage, run.arm)]
    return (run.stage, run.arm) if len(same) == 1 else tuple(run)


def render_columns() -> list[str]:
    """Columns the filters read (no token lists): what :func:`pick_groups` loads per step."""
    return ["stage", "arm", "step", "prompt_index", "traj_index", "group_zero_spread", "correct", "tool_errors",
            "truncated"]


def group_section_html(group: Sequence[dict[str, Any]], tokenizer: Any = None, color: str = "entropy",
                       also: Sequence[str] = ()) -> str:
    """One group: header, table, then each trajectory (the first one open) coloured by ``color``,
    and under it, folded, the same trajectory coloured by each of ``also``."""
    parts = [f"<section class='kit-x' data-group='{html.escape(group[0]['group_id'])}'>",
             render.group_header_html(group), render.prompt_html(group[0], tokenizer), render.group_table_html(group)]
    for k, rec in enumerate(group):
        summary = (f"#{rec['traj_index']} reward {rec['reward']:.0f} · {'kept' if rec['kept'] else 'dropped'} · "
                   f"{rec['finish_reason']}")
        more = "".join(f"<details data-color='{html.escape(c)}'><summary>coloured by {html.escape(c)}</summary>"
                       f"{render.trajectory_view_html(rec, tokenizer, c)}</details>" for c in also if c != color)
        parts.append(f"<details data-traj='{rec['traj_index']}'{' open' if k == 0 else ''}><summary>"
                     f"{html.escape(summary)}</summary>{render.trajectory_view_html(rec, tokenizer, color)}{more}</details>")
    return "".join(parts) + "</section><hr>"


def export_html(run_dir: str | os.PathLike, groups: Sequence[GroupKey] | None = None,
                out: str | os.PathLike | None = None, tokenizer: Any = None, color: str = "entropy",
                limit: int = 4, also: Sequence[str] = ("advantage",)) -> Path:
    """Write the chosen groups' views to one HTML file.

    Args:
        run_dir: a run folder (or pipeline run folder) with rollout records.
        groups: ``(stage, arm, step, prompt_index)`` keys (``(folder, stage, arm, ...)`` when several run
            folders record that stage and arm); default :func:`pick_groups` (``limit``).
        out: the file; default ``run_dir/explorer.html``.
        tokenizer: decodes ids; default the run's (:func:`kit.explore.query.find_tokenizer_dir`).
        color: the colouring of every trajectory (:data:`kit.explore.render.COLORS`).
        also: further colourings, each folded under the trajectory (default: by advantage, the
            explorer's other view; ``()`` for none).
    Returns:
        The file's path.
    Raises:
        KeyError: a requested group has no records, or its key names several runs (names them).
        FileNotFoundError: no records below ``run_dir``.
    """
    root = Path(run_dir)
    index = scan(root)
    if not index.files:
        raise FileNotFoundError(f"export_html: no rollout records (rollouts/*/*/step_*.parquet) under {root}")
    keys = list(groups) if groups is not None else pick_groups(root, limit)
    if tokenizer is None:
        tokenizer = query.load_tokenizer(query.find_tokenizer_dir(index, index.files[0]))
    sections = []
    for key in keys:
        *names, step, prompt = key
        run = index.run(*names[1:], folder=names[0]) if len(names) == 3 else index.run(*names)
        recs = query.groups(read_step(index.file(run, step)))
        if prompt not in recs:
            raise KeyError(f"export_html: {run.label()} step {step} has no prompt {prompt} (has {sorted(recs)})")
        sections.append(group_section_html(recs[prompt], tokenizer, color, also))
    title = f"Rollouts of {root.name}"
    page = ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title>{render.page_css()}</head><body class='kit-x'>"
            f"<h2>{html.escape(title)}</h2><p>{len(keys)} groups; RoC's decision per trajectory (✓ kept, ✗ dropped), "
            f"tokens coloured by {html.escape(color)} (folded under each: by {html.escape(', '.join(also) or 'nothing else')}), tool feedback dimmed, failed tool calls in red.</p>"
            + "".join(sections) + "</body></html>")
    path = Path(out) if out is not None else root / "explorer.html"
    path.write_text(page, encoding="utf-8")
    return path
