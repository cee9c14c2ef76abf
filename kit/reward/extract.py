"""Which part of a response is the model's final answer (rStar2-Agent §2.2.1 answer format).

The released code graded the *whole* response text, tool output included, with the last
``\\boxed{}`` anywhere in it (research note ``rstar2_agent_release.md`` §5). Tool output is not
the model's answer: a program that prints ``\\boxed{12}`` must not earn a reward for a response
whose own final box says 13. So the kit first removes every ``<tool_response>`` block (and the
``<tool_call>`` blocks, whose code is not an answer either), then reads the final ``<answer>``
block, then the model's own text.

Pure string functions, linear in the length of the response; no regular expression here can
backtrack catastrophically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

from kit.prompts import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    json_call_end,
)

# Fallback phrases (opt-in only), in the order tried; each takes the text after the phrase up
# to the end of the line or sentence.
_PHRASE = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(?P<ans>[^\n]{1,200})",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*([^*\n]{1,200})\*\*")
# what TeX's brace-less "\boxed 5" may box here: a number or one control word, then an end of token
_TEX_ARG = re.compile(r"(?:[+-]?(?:\d+(?:\.\d+)?|\.\d+)|\\[A-Za-z]+)(?=[\s$.,;:!?)]|$)")
# numbers an answer block writes (thousands commas joined first: "2,500" is 2500)
_NUMERAL = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))|(?<=\d)\{,\}(?=\d{3}(?!\d))")


def strip_blocks(text: str, open_tag: str, close_tag: str, end_at: Callable[[str, int], int | None] | None = None) -> str:
    """Remove every ``open_tag ... close_tag`` span; an unclosed block runs to the end.

    Args:
        text: any string.
        open_tag, close_tag: e.g. ``<tool_response>`` and ``</tool_response>``.
        end_at: optional ``(text, body_start) -> index or None``: where a block's body ends
            when it knows better than the first closing tag (tool calls:
            :func:`kit.prompts.json_call_end`); the closing tag after that index is removed too.
    Returns:
        ``text`` without those spans (a single space stands in for each, so words on either
        side do not merge).
    """
    out, pos = [], 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            out.append(text[pos:])
            break
        out.append(text[pos:start])
        body_end = end_at(text, start + len(open_tag)) if end_at is not None else None
        end = text.find(close_tag, start + len(open_tag) if body_end is None else body_end)
        if end < 0:
            break
        out.append(" ")
        pos = end + len(close_tag)
    return "".join(out)


def model_text(response: str) -> str:
    """The model's own text: ``response`` without tool responses and tool-call bodies (a call
    ends where the tool-call parser ends it, :func:`kit.prompts.json_call_end`)."""
    text = strip_blocks(response, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)
    return strip_blocks(text, TOOL_CALL_OPEN, TOOL_CALL_CLOSE, json_call_end)


def _brace_matches(text: str) -> dict[int, int]:
    """For every ``{`` in ``text`` that is closed, the index just past its matching ``}``.

    One linear pass with a stack (a per-box forward scan was quadratic: a response repeating
    an unclosed ``\\boxed{`` thousands of times took tens of seconds in the caller's process).
    ``\\{`` and ``\\}`` are escaped braces and do not count.
    """
    out: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            out[stack.pop()] = i + 1
        i += 1
    return out


def box_entries(text: str) -> list[str | None]:
    """Every ``\\boxed`` (or ``\\fbox``) the text starts, in order: its contents, or None
    when that box is abandoned.

    Nested braces are matched (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``); spaces may stand
    between the command and its brace (``\\boxed {5}``); the TeX form without braces,
    ``\\boxed 5``, gives its single token when that token is a number (``\\boxed -3``, ``\\boxed 2.5``)
    or one control word (``\\boxed \\pi``), followed by a space, the end, ``$`` or punctuation. A box
    is *abandoned* (None) when its brace is never closed (a response cut off inside it, or a box
    left open and written again), when it is empty (``\\boxed{}``, ``\\boxed{ }``), or when the text
    ends right after the command. Not a box at all: ``\\boxed5`` (no brace, no space), and a bare
    ``\\boxed`` followed by a word or anything else that is not such a token ("I wrote \\boxed around
    it": prose about the command, issue #44 part 3).
    """
    found: list[str | None] = []
    matches: dict[int, int] | None = None
    for m in re.finditer(r"\\(?:boxed|fbox)(?![A-Za-z])", text):
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            if matches is None:
                matches = _brace_matches(text)
            end = matches.get(i, -1)
            found.append((text[i + 1 : end - 1].strip() or None) if end >= 0 else None)
            continue
        tok = _TEX_ARG.match(text, i)  # \boxed 5 : one TeX token, a number or a control word
        if tok and m.end() < i:
            found.append(tok.group(0))
        elif not text[i:].strip():  # cut off right after the command
            found.append(None)
        # "\boxed5" (no brace, no space) and "\boxed around" (a word): not a box
    return found


def boxed_contents(text: str) -> list[str]:
    """Contents of every complete, non-empty box in ``text``, in order (:func:`box_entries`
    without the abandoned ones). Not the answer rule: an abandoned *final* box means no answer
    (:func:`extract_final_answer`), which this list cannot show."""
    return [b for b in box_entries(text) if b is not None]


def _last_answer_block(text: str) -> str | None:
    """Body of the final ``<answer>`` block (an unclosed final block runs to the end)."""
    start = text.rfind(ANSWER_OPEN)
    if start < 0:
        return None
    body = text[start + len(ANSWER_OPEN) :]
    end = body.find(ANSWER_CLOSE)
    return body if end < 0 else body[:end]


def _numbers(text: str) -> set[Decimal]:
    """The numbers ``text`` writes, as values (``2,500`` is 2500, ``06`` is 6)."""
    return {Decimal(n) for n in _NUMERAL.findall(_THOUSANDS_COMMA.sub("", text))}


def takes_back(block: str, box: str) -> bool:
    """True when an unboxed final ``<answer>`` block takes back the box before it: the block is blank,
    or it writes a number the box does not (``\\boxed{6}. <answer>7</answer>``; issue #44 part 4).

    A block in words only (``<answer>six</answer>``, ``see above``) restates without contradicting;
    a number in another form than the box's (``0.5`` after ``\\boxed{\\frac{1}{2}}``) counts as
    another number: the final statement must restate the boxed answer's numbers.
    """
    if not block.strip():
        return True
    return not _numbers(block) <= _numbers(box)


def _clean_fallback(ans: str) -> str | None:
    ans = ans.strip().strip("$").strip()
    ans = re.sub(r"[.\s]+$", "", ans)  # a sentence's full stop is not part of the answer
    ans = ans.strip("*").strip()
    return ans or None


def extract_final_answer(response: str, fallback: bool = False) -> str | None:
    """The final answer the model gave in ``response``, as the LaTeX inside its box.

    Rules, in order (rStar2-Agent prompt: "put your answer inside <answer> </answer> tags ...
    your final answer will be extracted automatically by the \\boxed{} tag"):

    1. ``<tool_response>`` and ``<tool_call>`` blocks are removed first: tool output and code
       are never the model's answer.
    2. If the final ``<answer>`` block starts a box, its *last* box is the answer (a complete box
       written after the block does not replace it; an abandoned one does, by rule 4).
    3. Else the last box anywhere in the model's own text is the answer, unless the final
       ``<answer>`` block comes after it and takes it back (:func:`takes_back`: the block is blank,
       or writes a number the box does not): then there is no answer (``None``), in both modes.
       The block is the model's last statement of its answer, like a box written after it.
    4. The last box decides alone: when it is abandoned (unclosed, empty, or cut off, see
       :func:`box_entries`) there is no answer (``None``), in both modes, wherever it stands (after
       the final ``<answer>`` block too: the model took its answer back); an earlier, complete
       box never stands in for it (that would reward a response that took its answer back,
       or one cut off while writing a new one).
    5. Strict mode (default): no box means no answer (``None``).
    6. ``fallback=True`` (for grading models that were not trained on this format), only when
       the model's text starts no box at all: the body of the final ``<answer>`` block, else
       the last "final answer is X" / "answer: X" phrase, else the last ``**X**`` bold span.

    Args:
        response: decoded response text (all turns), with the tags of :mod:`kit.prompts`
            still in it (decode without dropping them, or tool output cannot be told apart).
        fallback: enable rule 6.
    Returns:
        The answer text (stripped), or None when there is none.
    Raises:
        TypeError: if ``response`` is not a string.
    """
    if not isinstance(response, str):
        raise TypeError(f"response must be str, got {type(response).__name__}")
    text = model_text(response)
    boxes = box_entries(text)
    if boxes and boxes[-1] is None:  # rule 4 over the whole text: a box abandoned after the answer block too
        return None
    block = _last_answer_block(text)
    if block is not None:
        in_block = box_entries(block)
        if in_block:
            return in_block[-1]
    if boxes:
        after_last_box = block is not None and not box_entries(text[text.rfind(ANSWER_OPEN):])
        if after_last_box and takes_back(block, boxes[-1]):  # rule 3: "\boxed{6}. <answer>7</answer>"
            return None
        return boxes[-1]
    if not fallback:
        return None
    if block is not None and block.strip():
        ans = _clean_fallback(block)
        if ans is not None:
            return ans
    phrases = list(_PHRASE.finditer(text))
    if phrases:
        ans = _clean_fallback(phrases[-1].group("ans"))
        if ans is not None:
            return ans
    bolds = _BOLD.findall(text)
    if bolds:
        return _clean_fallback(bolds[-1])
    return None
