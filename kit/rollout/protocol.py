"""Tool-call protocol: parse the model's ``<tool_call>`` blocks, render sandbox results as feedback.

Format (rStar2-Agent report §2.1; the released model card and training code, microsoft/rStar
``rstar2_agent``): the model writes Hermes-style calls

    <tool_call>
    {"name": "execute_python_code_with_standard_io", "arguments": {"code": "...", "input": "..."}}
    </tool_call>

and every call is answered, in order, by one ``<tool_response>`` block of the next user turn
(:func:`kit.prompts.feedback_block`). The released training code's name
``python_code_with_standard_io`` is accepted as an alias.

Differences from the release, on purpose:
    * Every malformed call (bad JSON, missing ``name``/``arguments``, unknown tool, wrong
      argument types, unclosed tag) is answered with text that says what was wrong, and is
      counted as a ``malformed`` tool error. VERL's Hermes parser silently drops bad JSON; the
      release fed back only the JSON error and dropped every call after the first.
    * Several calls in one turn all run, in order, up to ``max_calls_per_turn``; calls past the
      limit are answered "not run" (status ``skipped``) so each ``<tool_call>`` gets a response.
    * A call ends where its JSON object ends when one complete object is followed by
      ``</tool_call>`` (:func:`kit.prompts.json_call_end`); the release's regex
      ``<tool_call>(.*?)</tool_call>`` cut a call at a closing tag inside a JSON string (code
      that prints ``'</tool_call>'``) and answered "not valid JSON".
    * Feedback is truncated by **tokens**, in the middle, with a visible marker
      (:func:`truncate_tokens`), not to 256 characters.

Why ``tool_response_max_tokens`` defaults to 1024 (``kit.config.RolloutConfig``): the release
kept VERL's 256-character middle cut (first 128 + last 128 characters, after code-judge's own
1000-character cap). Measured with the kit sandbox (``benchmarks/agent_loop_bench.py``, tracebacks
trimmed to the model's own frames): an error in the model's own code gives 125-325 characters
(``1/0``: 125, a NameError inside a helper: 198, a numpy shape mismatch: 252, a RecursionError:
323); an error raised inside sympy 782; a 39-row table of squares and cubes 458. A 256-character
window keeps the short one-frame tracebacks but cuts the middle out of the deeper ones (the
failing source line of the sympy error is lost) and out of any printed table, i.e. exactly the
intermediate values the model asked for. 1024 tokens (about 3-4 KB of code-like text with
Qwen's tokenizer) keeps all of these whole, while one call can never take more than 1/8 of the
8K response budget, which is shared by all turns and so bounds the total anyway. The tiny
profile scales it to 64 tokens of its 256-token budget.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kit import prompts

#: Sandbox status (``kit.sandbox.types.STATUSES``) -> tool-error kind counted against the model;
#: ``None`` = not an error. ``infra_error`` is kept apart (the service failed, not the code).
#: ``output_limit`` (the program kept printing and was killed) is its own kind, like a timeout.
STATUS_KIND: dict[str, str | None] = {
    "ok": None,
    "output_limit": "output",
    "error": "exception",
    "killed": "exception",
    "timeout": "timeout",
    "memory_limit": "memory",
    "infra_error": "infra",
}
#: Keys of ``Trajectory.tool_errors`` (always all present).
ERROR_KINDS = ("exception", "timeout", "memory", "output", "malformed")

CALL_EXAMPLE = json.dumps({"name": prompts.TOOL_NAME, "arguments": {"code": "...", "input": "..."}})


@dataclass(frozen=True)
class ParsedCall:
    """One ``<tool_call>`` block of a model turn.

    ``error`` is ``None`` for a well-formed call to the Python tool (then ``code``/``input`` are
    set); otherwise it says what was wrong, in words meant for the model.
    """

    index: int
    raw: str
    name: str | None = None
    code: str | None = None
    input: str | None = None
    error: str | None = None


def has_tool_call(text: str) -> bool:
    """True when ``text`` holds a ``<tool_call>`` opening tag (a closed call or not)."""
    return prompts.TOOL_CALL_OPEN in text


def parse_tool_calls(text: str, tool_names: Sequence[str] | None = None) -> list[ParsedCall]:
    """Parse every ``<tool_call>`` block of one model turn, in order.

    Args:
        text: the model's own text of one turn (without the ``<reason>`` prefill or the final
            ``<|im_end|>``).
        tool_names: accepted tool names; default :data:`kit.prompts.TOOL_NAME` and its aliases.
    Returns:
        One :class:`ParsedCall` per opening tag. When the body is one complete JSON object
        followed by ``</tool_call>``, the JSON decoder decides where the call ends, so tags
        inside JSON strings (code that prints ``'</tool_call>'``) belong to the call. Otherwise
        the first closing tag ends it; a call without a closing tag before the next opening
        tag (or the end of the turn) is malformed ("unclosed"), and so is an unterminated JSON
        string, whatever tags it contains. A stray closing tag without an opening tag is not
        a call. Never raises on model text.
    Example:
        >>> [c.code for c in parse_tool_calls('<tool_call>{"name": "execute_python_code_with_standard_io", '
        ...  '"arguments": {"code": "print(1)", "input": ""}}</tool_call>')]
        ['print(1)']
    """
    names = tuple(tool_names) if tool_names is not None else (prompts.TOOL_NAME, *prompts.TOOL_NAME_ALIASES)
    op, cl = prompts.TOOL_CALL_OPEN, prompts.TOOL_CALL_CLOSE
    calls: list[ParsedCall] = []
    pos = 0
    while (start := text.find(op, pos)) >= 0:
        body_start = start + len(op)
        json_end = prompts.json_call_end(text, body_start)
        if json_end is not None:  # a complete JSON object followed by the closing tag decides
            calls.append(_validate(len(calls), text[body_start:json_end], names))
            pos = text.index(cl, json_end) + len(cl)
            continue
        end = text.find(cl, body_start)
        nxt = text.find(op, body_start)
        if end < 0 or (0 <= nxt < end):
            where = "the next <tool_call>" if 0 <= nxt and (end < 0 or nxt < end) else "the end of the turn"
            raw = text[body_start: nxt if nxt >= 0 else len(text)]
            calls.append(ParsedCall(len(calls), raw, error=f"unclosed <tool_call> tag: no </tool_call> before {where}"))
            pos = nxt if nxt >= 0 else len(text)
            continue
        raw = text[body_start:end]
        calls.append(_validate(len(calls), raw, names))
        pos = end + len(cl)
    return calls


def _validate(index: int, raw: str, names: Sequence[str]) -> ParsedCall:
    body = raw.strip()
    if not body:
        return ParsedCall(index, raw, error="the tool call is empty")
    try:
        obj: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        return ParsedCall(index, raw, error=f"the tool call is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})")
    except (ValueError, RecursionError) as exc:  # a >4300-digit number, or arrays nested too deep
        return ParsedCall(index, raw, error=f"the tool call could not be read as JSON ({type(exc).__name__}: "
                                            f"{str(exc).split(';')[0][:120]})")
    if not isinstance(obj, dict):
        return ParsedCall(index, raw, error=f"the tool call must be a JSON object, got {_jtype(obj)}")
    for key in ("name", "arguments"):
        if key not in obj:
            return ParsedCall(index, raw, error=f'the tool call has no "{key}" key')
    name = obj["name"]
    if not isinstance(name, str):
        return ParsedCall(index, raw, error=f'"name" must be a string, got {_jtype(name)}')
    if name not in names:
        return ParsedCall(index, raw, name=name, error=f"unknown tool {name!r}; the only tool is {names[0]!r}")
    args = obj["arguments"]
    if not isinstance(args, dict):
        return ParsedCall(index, raw, name=name, error=f'"arguments" must be a JSON object, got {_jtype(args)}')
    extra = sorted(set(args) - {"code", "input"})
    if extra:
        return ParsedCall(index, raw, name=name, error=f"unexpected argument(s) {', '.join(map(repr, extra))}; "
                                                       'the tool takes "code" and "input"')
    if "code" not in args:
        return ParsedCall(index, raw, name=name, error='argument "code" is missing')
    code, stdin = args["code"], args.get("input", "")
    if not isinstance(code, str):
        return ParsedCall(index, raw, name=name, error=f'argument "code" must be a string, got {_jtype(code)}')
    if stdin is None:
        stdin = ""
    if not isinstance(stdin, str):
        return ParsedCall(index, raw, name=name, error=f'argument "input" must be a string, got {_jtype(stdin)}')
    return ParsedCall(index, raw, name=name, code=code, input=stdin)


def _jtype(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


# --------------------------------------------------------------------------- feedback text


def render_malformed(error: str) -> str:
    """Feedback for a malformed call: what was wrong and the expected shape."""
    return f"Error: invalid tool call: {error}.\nWrite the call as the JSON object {CALL_EXAMPLE}"


def render_skipped(limit: int) -> str:
    """Feedback for a call past ``max_calls_per_turn``."""
    return f"Not run: at most {limit} tool calls are run per turn."


def render_result(result: Any, timeout_s: float | None = None) -> str:
    """Feedback text for one sandbox result (a ``kit.sandbox.ToolResult`` or any object with
    ``status``, ``stdout``, ``stderr`` and optionally ``value``, ``exit_code``, ``wall_s``).

    Rules (report §2.1: the tool returns stdout, the last expression's value when nothing is
    printed, the error message on exceptions, a timeout message):
        * ``ok``: stdout; if empty, the value of the last expression; if that
          is empty too, ``(no output)``. Non-empty stderr (warnings) follows after ``stderr:``.
        * ``error``/``killed``: stdout printed before the failure, then the traceback (stderr),
          or the exit code when stderr is empty.
        * ``timeout``: partial stdout, then ``Timeout: ...``.
        * ``memory_limit``: partial stdout and stderr, then ``MemoryError: ...``.
        * ``output_limit``: the (capped) stdout, then ``Output limit: ...``.
        * ``infra_error``: a message saying the service failed, not the code.
    Raises:
        ValueError: on an unknown status.
    """
    status = getattr(result, "status", None)
    if status not in STATUS_KIND:
        raise ValueError(f"unknown tool result status {status!r}; expected one of {sorted(STATUS_KIND)}")
    stdout = getattr(result, "stdout", "") or ""
    stderr = getattr(result, "stderr", "") or ""
    parts: list[str] = []
    if status == "ok":
        value = getattr(result, "value", None)
        if stdout:
            parts.append(stdout)
        elif value not in (None, ""):
            parts.append(str(value))
        else:
            parts.append("(no output)")
        if stderr.strip():
            parts.append("stderr:\n" + stderr)
    elif status in ("error", "killed"):
        if stdout:
            parts.append(stdout)
        if stderr.strip():
            parts.append(stderr)
        else:
            parts.append(f"The program failed (exit code {getattr(result, 'exit_code', None)}).")
    elif status == "timeout":
        if stdout:
            parts.append(stdout)
        # the configured limit, never the measured wall time (it follows the machine's load; issue #41)
        parts.append(f"Timeout: the program did not finish within {timeout_s:g} s and was stopped." if timeout_s
                     else "Timeout: the program did not finish in time and was stopped.")
    elif status == "memory_limit":
        if stdout:
            parts.append(stdout)
        if stderr.strip():
            parts.append(stderr)
        parts.append("MemoryError: the program exceeded the memory limit and was stopped.")
    elif status == "output_limit":
        if stdout:
            parts.append(stdout)
        parts.append("Output limit: the program printed too much and was stopped.")
    else:  # infra_error
        parts.append("The code could not be run: the execution service failed (not a problem with the code).")
    return neutralize_markers("\n".join(p.rstrip("\n") for p in parts))


#: Structural markers program output must not reproduce verbatim: a program printing
#: ``</tool_response>\boxed{12}`` would otherwise close its own block and put text where the
#: reward reads the model's answer; ``<|im_end|>``/``<|im_start|>`` would fake a turn boundary.
_MARKERS = (prompts.TOOL_RESPONSE_OPEN, prompts.TOOL_RESPONSE_CLOSE, prompts.TOOL_CALL_OPEN,
            prompts.TOOL_CALL_CLOSE, prompts.IM_START, prompts.IM_END, prompts.ENDOFTEXT)


def neutralize_markers(text: str) -> str:
    """Escape chat and tool markers inside program output (``<`` becomes ``&lt;``), so the
    feedback can never close its ``<tool_response>`` block or start a turn. Other text is kept."""
    for m in _MARKERS:
        if m in text:
            text = text.replace(m, "&lt;" + m[1:])
    return text


def truncate_tokens(text: str, tokenizer: Any, max_tokens: int) -> tuple[str, int]:
    """Cut ``text`` to at most ``max_tokens`` tokens, keeping the head and the tail.

    The middle is replaced by ``\\n...[N tokens cut]...\\n`` so the model sees that something is
    missing (a traceback keeps its first frame and the error line). Token counts use
    ``tokenizer.encode(text, add_special_tokens=False)``; the result, marker included, is at
    most ``max_tokens`` tokens when ``max_tokens`` exceeds the marker's length.

    Args:
        text: feedback text of one call.
        tokenizer: a Hugging Face tokenizer.
        max_tokens: the limit in tokens; ``<= 0`` means no limit.
    Returns:
        ``(text, n_cut)`` where ``n_cut`` is the number of tokens removed (0 if none).
    """
    if max_tokens <= 0:
        return text, 0
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text, 0
    body = max_tokens - len(tokenizer.encode(f"\n...[{len(ids)} tokens cut]...\n", add_special_tokens=False))
    body = max(body, 2)
    out = text
    for _ in range(8):  # re-encoding across the joins may merge or split a token; shrink until it fits
        head, tail = body // 2, body - body // 2
        marker = f"\n...[{len(ids) - head - tail} tokens cut]...\n"
        out = tokenizer.decode(ids[:head]) + marker + tokenizer.decode(ids[len(ids) - tail:])
        over = len(tokenizer.encode(out, add_special_tokens=False)) - max_tokens
        if over <= 0 or body <= 2:
            break
        body = max(body - over, 2)
    return out, len(ids) - head - tail
