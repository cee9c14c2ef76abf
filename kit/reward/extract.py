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

from kit.prompts import (
    ANSWER_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    json_call_end,
)
from kit.reward.plain import plain_value
from kit.reward.rules import is_lone_symbol, normalize, same_value
from kit.reward.wording import brace_matches as _brace_matches

# Fallback phrases (opt-in only), in the order tried; each takes the text after the phrase up
# to the end of the line or sentence.
_PHRASE = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(?P<ans>[^\n]{1,200})",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*([^*\n]{1,200})\*\*")
# what TeX's brace-less "\boxed 5" may box here: a number or one control word, then an end of token
_TEX_ARG = re.compile(r"(?:[+-]?(?:\d+(?:\.\d+)?|\.\d+)|\\[A-Za-z]+)(?=[\s$.,;:!?)]|$)")
# the answer tags, in any case and with spaces or attributes ("<ANSWER>", "<answer >"; issue #44 part 4)
_ANSWER_OPEN_TAG = re.compile(re.escape(ANSWER_OPEN[:-1]) + r"\b[^<>]*>|<\s+answer\b[^<>]*>", re.IGNORECASE)
_ANSWER_CLOSE_TAG = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
# words that take a stated answer back or hedge it ("not 6", "at least 6", "6 or more", "I don't know")
_RETRACTION_WORDS = frozenset("""
not no none nothing never neither nor cannot can't cant don't dont doesn't isn't aren't won't unknown know unsure
unclear undefined undetermined indeterminate impossible maybe perhaps possibly probably likely guess think believe
suspect approximately approx about around roughly nearly almost circa estimate estimated least most more less fewer
greater smaller larger bigger exceeds between or either instead wrong incorrect mistake unless except infinitely
infinite infinity many several any some
""".split())
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_NUMBER_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_NUMBER_WORDS.update({w: 10 * n for n, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)})
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_FRACTION_WORDS = frozenset("half halves third thirds quarter quarters fourth fourths fifth fifths".split())
# a remark in parentheses is prose when it holds a word ("(from step 2)"); "(C)" and "(2, 3)" are not remarks
_REMARK = re.compile(r"\((?=[^()]*(?<![\\A-Za-z])[A-Za-z]{2})[^()]*\)")  # "\\frac", "\\infty" are no words
_LEADING_PROSE = re.compile(r"^(?:[A-Za-z']{2,}[\s,:]*)+")
_CHOICE = re.compile(r"(?<![A-Za-z\\])\(?([A-J])\)?(?![A-Za-z])")
_CHAIN = re.compile(r"\\approx(?![A-Za-z])|≈|=")



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
        while i < len(text) and text[i].isspace():  # TeX skips any space, a newline too ("\boxed\n7")
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


def _last_answer_block(text: str) -> tuple[int, str] | None:
    """``(start, body)`` of the final ``<answer>`` block (tags in any case, ``<answer >`` too); an unclosed
    final block runs to the end."""
    opens = list(_ANSWER_OPEN_TAG.finditer(text))
    if not opens:
        return None
    start = opens[-1]
    end = _ANSWER_CLOSE_TAG.search(text, start.end())
    return start.start(), text[start.end() : end.start() if end else len(text)]


def _number_words(words: list[str]) -> list[int] | None:
    """The integers written in words (``seven``, ``twenty five``, ``two hundred``); None when a fraction word
    (``half``, ``third``) is among them."""
    if any(w in _FRACTION_WORDS for w in words):
        return None
    values, cur, seen = [], 0, False
    for w in [*words, ""]:
        if w in _NUMBER_WORDS:
            cur, seen = cur + _NUMBER_WORDS[w], True
        elif w in _SCALES and seen:
            cur *= _SCALES[w]
        elif w == "and" and seen:
            continue
        elif seen:
            values.append(cur)
            cur, seen = 0, False
    return values


def _states_box(statement: str, box: str) -> bool:
    """True when ``statement`` (an answer block without prose) states the box's value: read as a chain
    ``[name =] v1 (= v2 | \\approx d)*``, every ``=`` value must equal the box (the kit's rules, then
    :func:`kit.reward.plain.plain_value`; unknown counts as different) and a value after ``\\approx`` must be
    the box rounded or cut to the decimals it writes (``1/3 \\approx 0.333``). An equation the box is
    (``5x - 7y + 4 = 0``) is compared whole first."""
    if same_value(box, statement):
        return True
    pieces, ops, pos = [], ["="], 0
    for m in _CHAIN.finditer(statement):
        pieces.append(statement[pos : m.start()].strip())
        ops.append("=" if m.group(0) == "=" else "~")
        pos = m.end()
    pieces.append(statement[pos:].strip())
    if len(pieces) > 1 and ops[1] == "=" and is_lone_symbol(pieces[0]):
        pieces, ops = pieces[1:], ops[1:]
    if not pieces[0] or ops[0] != "=" or not all(pieces):
        return False
    for op, piece in zip(ops, pieces, strict=True):
        if op == "=":
            if not same_value(box, piece):
                return False
            continue
        decimals = re.fullmatch(r"[+-]?\d*\.(\d+)", normalize(piece))
        exact, approx = plain_value(normalize(box)), plain_value(normalize(piece))
        if not decimals or exact is None or approx is None:
            return False
        if abs(exact - approx) > 10.0 ** -len(decimals.group(1)) * 1.000001:
            return False
    return True


def takes_back(block: str, box: str) -> bool:
    """True when an unboxed final ``<answer>`` block takes back the box before it (issue #44 part 4).

    The block is the model's last statement, read as an answer and graded against the box:

    * blank: takes it back;
    * a retraction or hedge word (``not``, ``no solution``, ``none``, ``at least``, ``or``, ``about``,
      ``I don't know``: :data:`_RETRACTION_WORDS`), anywhere in the block: takes it back;
    * number words (``seven``) must write the box's value (``six`` after ``\\boxed{6}`` leaves it);
    * a choice-letter box (``C``): the block must name that letter and no other (``(C) 3/4`` leaves it);
    * otherwise remarks in parentheses (``(from step 2)``) and leading prose (``The area is``) are dropped
      and what is left, when anything, must state the box's value (:func:`_states_box`: ``x = 6``,
      ``6 square units``, ``\\frac12`` for ``\\frac{1}{2}``, ``6^2 = 36`` for ``36``, ``1/3 \\approx 0.333``);
      a block with no value left (``see above``) leaves the box.
    """
    if not block.strip():
        return True
    words = _WORD.findall(re.sub(r"\\[A-Za-z]+", " ", block).lower().replace("’", "'"))
    if any(w in _RETRACTION_WORDS for w in words) or "?" in block:
        return True
    box_norm = normalize(box)
    choice = re.fullmatch(r"\(?([A-J])\)?", box_norm)
    if choice:
        return set(_CHOICE.findall(block)) != {choice.group(1)}
    said = _number_words(words)
    if said is None or any(not same_value(box, str(n)) for n in said):
        return True
    whole = re.sub(r"[\s.;:,]+$", "", _REMARK.sub(" ", block).replace("$", " ").strip())  # not "!": "6!" is 6 factorial
    statement = _LEADING_PROSE.sub("", whole).strip()
    if not statement:
        return False
    if same_value(box, whole):  # "ab + 1": the whole block first (leading prose would take "ab")
        return False
    return not _states_box(statement, box)


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
       ``<answer>`` block comes after it and takes it back (:func:`takes_back`: the block, read as an
       answer and graded against the box, is blank, retracts or hedges, or states another value):
       then there is no answer (``None``), in both modes.
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
    found = _last_answer_block(text)
    block = found[1] if found is not None else None
    if block is not None:
        in_block = box_entries(block)
        if in_block:
            return in_block[-1]
    if boxes:
        after_last_box = found is not None and not box_entries(text[found[0]:])
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
