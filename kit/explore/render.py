"""HTML of rollout records (:mod:`kit.records`): a group's table and one trajectory's tokens.

Pure functions, records (dicts of :data:`kit.records.SCHEMA`'s columns) in, HTML strings out, so
the widgets (:mod:`kit.explore.widgets`) and the static export (:mod:`kit.explore.export`) only
compose them and tests read them. The colours are :mod:`kit.rollout.view`'s (``SPAN_STYLE``,
``legend_html``); ``color="spans"`` is that view itself (:func:`kit.rollout.view.trajectory_html`).
The per-token modes colour each model token's background:

* ``entropy``: the rollout's per-token entropy, orange, darker = higher (0 .. the trajectory's
  max). The local runtime records it; VERL's records have none (``entropy`` null); the view then
  falls back to ``surprisal`` and says so.
* ``surprisal``: ``-log p`` of the sampled token from the rollout's log-probs, same scale.
* ``advantage``: the trajectory's advantage (one value for all its tokens; GRPO's outcome
  advantage, rStar2-Agent §2.2.1): green > 0, red < 0, intensity ``|A| / 2``; grey for a
  trajectory RoC dropped (no advantage, §2.2.3).

Tool feedback (response mask 0) is dimmed (``data-kind="tool"``, ``opacity``), never coloured; a
feedback block whose calls failed carries ``data-call-status="error"``, a red rule and a badge
naming the statuses; the model's ``<tool_call>`` tokens are underlined (``data-kind="call"``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.rollout.loop import mask_spans
from kit.rollout.view import MARKS, SPAN_STYLE, legend_html, trajectory_html

COLORS = ("entropy", "surprisal", "advantage", "spans")
FEEDBACK_OPACITY = 0.55
CSS = (
    ".kit-x{font-family:sans-serif;font-size:12px}"
    ".kit-x table{border-collapse:collapse;margin:4px 0}"
    ".kit-x td,.kit-x th{border:1px solid #ddd;padding:1px 6px;text-align:right}"
    ".kit-x tr[data-kept='0']{color:#999}"
    ".kit-x tr.sel{outline:2px solid #1f4e9c}"
    ".kit-x .badge{border-radius:3px;padding:0 4px;margin-right:4px;color:#fff}"
    ".kit-x pre{white-space:pre-wrap;font-size:12px;line-height:1.5}"
)


def piece_texts(ids: Sequence[int], tokenizer: Any = None) -> list[str]:
    """(T,) text of each token (special tokens kept); ``⟨id⟩`` without a tokenizer. A byte-level
    tokenizer may show a character split over two tokens as replacement characters."""
    if tokenizer is None:
        return [f"⟨{int(i)}⟩" for i in ids]
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def token_kinds(pieces: Sequence[str], mask: Sequence[int]) -> list[str]:
    """(T,) ``data-kind`` of each token: ``tool`` on mask 0; on mask 1 ``call`` / ``answer`` inside
    a ``<tool_call>`` / ``<answer>`` block of its model span (:data:`kit.rollout.view.MARKS`), else ``model``."""
    kinds = ["tool" if m == 0 else "model" for m in mask]
    t = 0
    while t < len(mask):
        e = t
        while e < len(mask) and mask[e] == mask[t]:
            e += 1
        if mask[t] == 1:
            starts, pos = [], 0
            for p in pieces[t:e]:
                starts.append(pos)
                pos += len(p)
            text = "".join(pieces[t:e])
            for m in MARKS.finditer(text):
                kind = "call" if m.group(0).startswith("<tool_call>") else "answer"
                for j, s in enumerate(starts):
                    if s < m.end() and s + len(pieces[t + j]) > m.start():
                        kinds[t + j] = kind
        t = e
    return kinds


def feedback_statuses(rec: Mapping[str, Any]) -> list[list[str]]:
    """Statuses of the calls each feedback block answers, in block order (the k-th mask-0 span
    answers the k-th turn whose calls were shown); ``[]`` per block when the record has no
    per-call lists (VERL records: counts only)."""
    n_blocks = sum(1 for t, m in enumerate(rec["response_mask"]) if m == 0 and (t == 0 or rec["response_mask"][t - 1] == 1))
    if not rec.get("call_status"):
        return [[] for _ in range(n_blocks)]
    by_turn: dict[int, list[str]] = {}
    for turn, status, shown in zip(rec["call_turn"], rec["call_status"], rec["call_shown"], strict=True):
        if shown:
            by_turn.setdefault(turn, []).append(status)
    blocks = [by_turn[k] for k in sorted(by_turn)]
    return (blocks + [[] for _ in range(n_blocks)])[:n_blocks]


def _alpha(x: float) -> float:
    return round(0.08 + 0.8 * min(max(x, 0.0), 1.0), 2)


def value_color(value: float | None, color: str, vmax: float = 1.0) -> str:
    """CSS background of one model token: ``rgba(...)`` by :data:`COLORS` mode (see module doc);
    ``""`` for no value; grey for an advantage that is NaN (a dropped trajectory)."""
    if value is None:
        return ""
    if color == "advantage":
        if math.isnan(value):
            return "background:#e4e4e4"
        rgb = "40,167,69" if value > 0 else "220,53,69"
        return f"background:rgba({rgb},{_alpha(abs(value) / 2.0)})" if value != 0 else ""
    if math.isnan(value):
        return ""
    return f"background:rgba(255,140,0,{_alpha(value / vmax if vmax > 0 else 0.0)})"


def token_values(rec: Mapping[str, Any], color: str) -> tuple[list[float | None], str]:
    """(T,) the value each token is coloured by, and the mode actually used (``entropy`` falls back
    to ``surprisal`` when the record has none; ``surprisal`` without log-probs gives no values)."""
    t = len(rec["response_ids"])
    if color == "entropy" and rec.get("entropy") is not None:
        return list(rec["entropy"]), "entropy"
    if color in ("entropy", "surprisal"):
        lps = rec.get("logprobs")
        return ([None] * t if lps is None else [-float(v) for v in lps]), "surprisal"
    if color == "advantage":
        return [float(rec["advantage"])] * t, "advantage"
    raise ValueError(f"unknown colouring {color!r}; expected one of {COLORS}")


def tokens_html(pieces: Sequence[str], mask: Sequence[int], values: Sequence[float | None], color: str,
                feedback: Sequence[Sequence[str]] = ()) -> str:
    """One ``<pre>`` of the response, one ``<span>`` per token (``data-kind``, value in ``title``).

    Args:
        pieces: (T,) token texts; mask: (T,) response mask; values: (T,) colouring values (None: none).
        color: a :data:`COLORS` mode other than ``spans`` (the scale; see :func:`value_color`).
        feedback: per feedback block, its calls' statuses (:func:`feedback_statuses`).
    Raises:
        ValueError: the three sequences differ in length.
    """
    if not (len(pieces) == len(mask) == len(values)):
        raise ValueError(f"tokens_html: {len(pieces)} pieces, {len(mask)} mask values, {len(values)} values")
    kinds = token_kinds(pieces, mask)
    model_vals = [v for v, m in zip(values, mask, strict=True) if m == 1 and v is not None and not math.isnan(v)]
    vmax = max(model_vals, default=1.0)
    out, block, t = [], 0, 0
    while t < len(mask):
        e = t
        while e < len(mask) and mask[e] == mask[t]:
            e += 1
        if mask[t] == 0:
            statuses = list(feedback[block]) if block < len(feedback) else []
            bad = [s for s in statuses if s != "ok"]
            attr = f' data-call-status="{"error" if bad else "ok"}"' if statuses else ""
            rule = ";border-left:3px solid #d62728;padding-left:2px" if bad else ""
            badge = (f'<span class="badge" data-kind="tool-error" style="background:#d62728">'
                     f'{html.escape("⚠ " + ", ".join(bad))}</span>') if bad else ""
            text = html.escape("".join(pieces[t:e]))
            out.append(f'{badge}<span data-kind="tool"{attr} style="{SPAN_STYLE["tool"]};opacity:{FEEDBACK_OPACITY}'
                       f'{rule}">{text}</span>')  # the badge outside: not dimmed
            block += 1
        else:
            for j in range(t, e):
                v, k = values[j], kinds[j]
                mark = {"call": ";box-shadow:inset 0 -2px #c9a400", "answer": ";font-weight:bold"}.get(k, "")
                style = value_color(v, color, vmax) + mark
                title = "" if v is None else f' title="{color} {v:.3f}"'
                out.append(f'<span data-kind="{k}"{title} style="{style}">{html.escape(pieces[j])}</span>')
        t = e
    return "<pre>" + "".join(out) + "</pre>"


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else f"{v:.{nd}f}"
    return str(v)


def _errors(rec: Mapping[str, Any]) -> str:
    errs = {k: v for k, v in (rec.get("tool_errors") or {}).items() if v}
    if rec.get("infra_errors"):
        errs["infra"] = rec["infra_errors"]
    return ", ".join(f"{k} {v}" for k, v in errs.items()) or "none"


def kept_mark(rec: Mapping[str, Any]) -> str:
    """``✓ kept`` or ``✗ dropped`` (RoC's decision) as a span with ``data-kept``."""
    return ('<span data-kept="1" style="color:#1a7f37">✓ kept</span>' if rec["kept"]
            else '<span data-kept="0" style="color:#b3261e">✗ dropped</span>')


def group_header_html(group: Sequence[Mapping[str, Any]]) -> str:
    """One line naming the group: stage/arm, step, prompt, n, reward spread (zero-spread flagged)."""
    r = group[0]
    zero = ('<span class="badge" data-zero-spread="1" style="background:#8a6d00">zero reward spread</span>'
            if r["group_zero_spread"] else "")
    return (f"<div class='kit-group-head'><b>{html.escape(r['stage'])}/{html.escape(r['arm'])}</b> · step "
            f"{r['step']} · prompt {r['prompt_index']} ({html.escape(str(r['prompt_id']))}) · group "
            f"{html.escape(r['group_id'])} · {len(group)} rollouts, {sum(x['kept'] for x in group)} kept · "
            f"reward std {_fmt(r['group_reward_std'], 3)} {zero}</div>")


def prompt_html(rec: Mapping[str, Any], tokenizer: Any = None) -> str:
    """The group's prompt (system and user turn), decoded, folded in a ``<details>`` block."""
    text = "".join(piece_texts(rec["prompt_ids"], None)) if tokenizer is None else tokenizer.decode(
        list(rec["prompt_ids"]), skip_special_tokens=False)
    return (f"<details class='kit-prompt'><summary>prompt ({len(rec['prompt_ids'])} tokens)</summary>"
            f"<pre style='{SPAN_STYLE['prompt']}'>{html.escape(text)}</pre></details>")


#: the finish column's note on a truncated trajectory (kit.reward.verdict.cut_off)
CUT_TITLE = ("the budget ran out (finish length or budget): a failure, reward 0 whatever it boxed "
             "before the cut (rStar2-Agent §4.3, no overlong filtering)")


def group_table_html(group: Sequence[Mapping[str, Any]], selected: int | None = None) -> str:
    """The group's n trajectories as a table: reward, p_err, p_format, p_total, kept, advantage,
    calls, tool errors, finish reason, tokens; one ``<tr data-traj=i data-kept=0|1>`` each. The finish
    cell of a trajectory the budget cut reads ``length ✂ cut`` (or ``budget ✂ cut``, its title the rule): it scored 0
    whatever it boxed (:func:`kit.reward.verdict.cut_off`), so its reward cell is 0 too."""
    head = ("<tr><th>#</th><th>reward</th><th>p_err</th><th>p_format</th><th>p_total</th><th>RoC</th>"
            "<th>advantage</th><th>calls</th><th>tool errors</th><th>finish</th><th>tokens (model)</th></tr>")
    rows = []
    for r in group:
        sel = " class='sel'" if r["traj_index"] == selected else ""
        fin = html.escape(r["finish_reason"]) + (f" <span title='{CUT_TITLE}'>✂ cut</span>" if r["truncated"] else "")
        rows.append(f"<tr data-traj='{r['traj_index']}' data-kept='{int(r['kept'])}'{sel}><td>{r['traj_index']}</td>"
                    f"<td>{_fmt(r['reward'], 1)}</td><td>{_fmt(r['p_err'])}</td><td>{_fmt(r['p_format'])}</td>"
                    f"<td>{_fmt(r['p_total'])}</td><td>{kept_mark(r)}</td><td>{_fmt(r['advantage'], 3)}</td>"
                    f"<td>{r['tool_calls']}</td><td>{html.escape(_errors(r))}</td><td>{fin}</td>"
                    f"<td>{len(r['response_ids']) if 'response_ids' in r else '–'} "
                    f"({sum(r['response_mask']) if 'response_mask' in r else '–'})</td></tr>")
    return f"<table class='kit-group-table'>{head}{''.join(rows)}</table>"


@dataclass
class RecordTrajectory:
    """A record seen as the ``kit.rollout.Trajectory`` fields :func:`kit.rollout.view.trajectory_html` reads."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    tool_errors: dict[str, int] = field(default_factory=dict)
    finish_reason: str = ""
    truncated: bool = False
    turns: int = 0
    tool_calls: int = 0
    infra_errors: int = 0
    answer_tags: int = 0

    @classmethod
    def of(cls, rec: Mapping[str, Any]) -> RecordTrajectory:
        return cls(**{k: rec[k] for k in cls.__dataclass_fields__})

    def spans(self) -> list[tuple[int, int, int]]:
        return mask_spans(self.response_mask)


def trajectory_view_html(rec: Mapping[str, Any], tokenizer: Any = None, color: str = "entropy") -> str:
    """One trajectory: a header (reward, RoC decision, advantage, penalties, calls) and its tokens.

    Args:
        rec: one full record (token columns included).
        tokenizer: decodes the ids (None: ids shown as ``⟨id⟩``).
        color: one of :data:`COLORS`; ``spans`` is :func:`kit.rollout.view.trajectory_html`.
    Raises:
        ValueError: an unknown ``color``.
    """
    if color not in COLORS:
        raise ValueError(f"unknown colouring {color!r}; expected one of {COLORS}")
    statuses = ", ".join(rec.get("call_status") or []) or ("–" if rec.get("call_status") is None else "none")
    head = (f"<div class='kit-traj-head' data-traj='{rec['traj_index']}'>#{rec['traj_index']} · reward "
            f"{_fmt(rec['reward'], 1)} ({'correct' if rec['correct'] else 'wrong'}) · {kept_mark(rec)} · advantage "
            f"{_fmt(rec['advantage'], 3)} · p_err {_fmt(rec['p_err'])} p_format {_fmt(rec['p_format'])} p_total "
            f"{_fmt(rec['p_total'])} · calls: {html.escape(statuses)} · errors: {html.escape(_errors(rec))}</div>")
    if color == "spans" and tokenizer is not None:
        return f"<div class='kit-x'>{head}{legend_html()}{trajectory_html(RecordTrajectory.of(rec), tokenizer)}</div>"
    values, used = token_values(rec, "entropy" if color == "spans" else color)
    note = (f"<div class='kit-note'>coloured by {used}"
            + (" (no entropy recorded: -log p of the sampled token instead)" if used != color and color == "entropy"
               else "") + "</div>")
    body = tokens_html(piece_texts(rec["response_ids"], tokenizer), rec["response_mask"], values, used,
                       feedback_statuses(rec))
    return f"<div class='kit-x'>{head}{legend_html()}{note}{body}</div>"


def page_css() -> str:
    """The ``<style>`` block the views' classes need (once per page or widget)."""
    return f"<style>{CSS}</style>"


def group_html(group: Sequence[Mapping[str, Any]], tokenizer: Any = None, selected: int | None = None) -> str:
    """The explorer's group view: header, prompt, table (``selected`` trajectory outlined), with its CSS."""
    return (page_css() + "<div class='kit-x'>" + group_header_html(group) + prompt_html(group[0], tokenizer)
            + group_table_html(group, selected) + "</div>")


class GroupView:
    """A group's view (:func:`group_html`) as a notebook cell's output: the explorer's HTML in
    JupyterLab, ``text`` (e.g. a DataFrame's rendering) where only plain text shows (the PDF report).

    Args:
        group: the group's records (:mod:`kit.records`), in ``traj_index`` order.
        tokenizer: decodes the prompt; None shows ids.
        selected: the ``traj_index`` outlined in the table.
        text: the plain-text form; default one line per trajectory.
    """

    def __init__(self, group: Sequence[Mapping[str, Any]], tokenizer: Any = None, selected: int | None = None,
                 text: str = ""):
        if not group:
            raise ValueError("GroupView: an empty group")
        self.group, self.tokenizer, self.selected, self.text = list(group), tokenizer, selected, text

    def _repr_html_(self) -> str:
        return group_html(self.group, self.tokenizer, self.selected)

    def __repr__(self) -> str:
        return self.text or "\n".join(
            f"#{r['traj_index']} reward {_fmt(r['reward'], 1)} p_total {_fmt(r['p_total'])} "
            f"{'kept' if r['kept'] else 'dropped'} advantage {_fmt(r['advantage'], 3)}" for r in self.group)
