"""A colored HTML view of one trajectory, for notebooks.

Colors: prompt grey; the model's own tokens (mask 1) black on white; tool-response and template
tokens (mask 0) blue on a light blue background; ``<tool_call>`` blocks of the model on light
yellow; ``<answer> ... </answer>`` on light green. With ``token_boundaries=True`` each token is
its own box (alternating shades), so splits and drift are visible. Each coloured span carries
``data-kind`` (``prompt``, ``model``, ``call``, ``tool``, ``answer``); :func:`legend_html` names the colours.
"""

from __future__ import annotations

import html
import re
from typing import Any

from IPython.display import HTML

from kit import prompts

_STYLE = {
    "prompt": "color:#888",
    "model": "color:#000",
    "tool": "color:#1f4e9c;background:#e3ecfa",
    "call": "background:#fff3bf",
    "answer": "background:#c8f0c8;font-weight:bold",
}
#: the style of each ``data-kind`` (public: ``kit.explore`` colours single tokens in the same scheme)
SPAN_STYLE = _STYLE
_HILITE = re.compile(
    f"({re.escape(prompts.TOOL_CALL_OPEN)}.*?(?:{re.escape(prompts.TOOL_CALL_CLOSE)}|$)"
    f"|{re.escape(prompts.ANSWER_OPEN)}.*?(?:{re.escape(prompts.ANSWER_CLOSE)}|$))",
    re.S,
)
#: the ``<tool_call>`` and ``<answer>`` blocks of model text the view marks (public, as SPAN_STYLE)
MARKS = _HILITE


#: what each colour of the view means, in the order a trajectory shows them (``data-kind`` of the spans)
LEGEND = (
    ("model", "model tokens (mask 1: sampled by the policy, trained on)"),
    ("call", "tool call (the model's <tool_call> block)"),
    ("tool", "tool response (mask 0: the sandbox's output, no loss)"),
    ("answer", "answer (<answer> ... </answer>)"),
)


#: the legend's entry for the prompt, shown only when the view includes it (``show_prompt=True``)
PROMPT_LEGEND = ("prompt", "prompt (system and user turn, not generated)")


def legend_html(show_prompt: bool = False) -> str:
    """One line of colour swatches naming what each colour of :func:`trajectory_html` means
    (the prompt's grey first when ``show_prompt``, as the view then starts with it)."""
    entries = ((PROMPT_LEGEND,) if show_prompt else ()) + LEGEND
    items = "".join(f'<span data-kind="{k}" style="{_STYLE[k]};padding:0 4px;margin-right:8px;'
                    f'border:1px solid #ccc">{html.escape(text)}</span>' for k, text in entries)
    return f"<div class='kit-traj-legend' style='font-family:sans-serif;font-size:11px;margin:2px 0'>{items}</div>"


def _model_html(text: str) -> str:
    out, pos = [], 0
    for m in _HILITE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        kind = "call" if m.group(0).startswith(prompts.TOOL_CALL_OPEN) else "answer"
        out.append(f'<span data-kind="{kind}" style="{_STYLE[kind]}">{html.escape(m.group(0))}</span>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def trajectory_html(tr: Any, tokenizer: Any, *, show_prompt: bool = False, token_boundaries: bool = False) -> str:
    """HTML for one :class:`kit.rollout.loop.Trajectory`.

    Args:
        tr: the trajectory.
        tokenizer: its tokenizer (to decode spans).
        show_prompt: include the prompt (system + user turn) in grey.
        token_boundaries: one box per token instead of one per span.
    Returns:
        A ``<div>`` string with a header line of counters.
    """
    dec = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    errs = ", ".join(f"{k} {v}" for k, v in tr.tool_errors.items() if v) or "none"
    head = (f"<div style='font-family:sans-serif;font-size:12px;margin-bottom:4px'>"
            f"<b>{tr.finish_reason}</b>{' (truncated)' if tr.truncated else ''} · {tr.turns} turns · "
            f"{tr.tool_calls} tool calls · errors: {errs} · infra {tr.infra_errors} · "
            f"&lt;answer&gt; tags {tr.answer_tags} · {len(tr.response_ids)} response tokens "
            f"({sum(tr.response_mask)} model)</div>")
    body = []
    if show_prompt:
        body.append(f'<span data-kind="prompt" style="{_STYLE["prompt"]}">{html.escape(dec(tr.prompt_ids))}</span>')
    for m, s, e in tr.spans():
        ids = tr.response_ids[s:e]
        if token_boundaries:
            for j, t in enumerate(ids):
                shade = "outline:1px solid #ccc;" + ("background:#f4f4f4;" if j % 2 else "")
                style = (_STYLE["tool"] if m == 0 else _STYLE["model"]) + ";" + shade
                body.append(f'<span style="{style}">{html.escape(dec([t]))}</span>')
        elif m == 1:
            body.append(f'<span data-kind="model" style="{_STYLE["model"]}">{_model_html(dec(ids))}</span>')
        else:
            body.append(f'<span data-kind="tool" style="{_STYLE["tool"]}">{html.escape(dec(ids))}</span>')
    return (f"<div>{head}<pre style='white-space:pre-wrap;font-size:12px;line-height:1.4'>"
            f"{''.join(body)}</pre></div>")


def show_trajectory(tr: Any, tokenizer: Any, **kwargs: Any) -> Any:
    """``IPython.display.HTML`` of :func:`legend_html` and :func:`trajectory_html`."""
    return HTML(legend_html(bool(kwargs.get("show_prompt"))) + trajectory_html(tr, tokenizer, **kwargs))
