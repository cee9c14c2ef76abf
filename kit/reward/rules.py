"""Cheap, exact grading rules that run before (and instead of) math_verify.

Everything here is a pure string or :class:`decimal.Decimal` function: no sympy, nothing that
can hang, so it runs in the caller's process. :func:`quick_grade` decides the integer answers
of the RL data (and plain decimals, scientific notation, multiple-choice letters, equations
offered for a value) exactly; anything it cannot decide goes to math_verify in a killable
worker (:mod:`kit.reward.mathcheck`). The lenient-case policy table is in
:mod:`kit.reward`'s docstring; each rule below implements one row.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from kit.reward.plain import plain_value
from kit.reward.wording import (
    SEPARATORS,
    WRAP,
    drop_decorations,
    drop_unit,
    ellipsis,
    hedged_relation,
    leading_operator,
    leading_relation,
    missing_argument,
    stray_words,
    unevaluated,
    unread_command,
    upright_constants,
)

#: Answers longer than this many characters are not given to math_verify (graded wrong).
MAX_ANSWER_CHARS = 2000

_WHOLEWRAP = re.compile(r"^" + WRAP + r"\s*\{([^{}]*)\}$")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
#: a row break's spacing argument, a TeX dimension: \\[3pt], \\[1ex], \\[-2mm], \\[0.5em]
_ROW_SPACING = re.compile(r"\\\\\s*\[\s*[+-]?(?:\d+\.?\d*|\.\d+)\s*(?:pt|em|ex|mm|cm|in|bp|pc|mu|sp|dd|cc)\s*\]")
_THIN_SPACE = re.compile(r"(?<!\\)\\[!,;: ]|~|[\u00a0\u2000-\u200b\u202f\u205f\u3000]")
_SCI_E = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
_NUMBER = re.compile(
    r"^(?P<m>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:\s*(?:\\times|\\cdot|\*)\s*10\s*\^\s*(?:\{\s*(?P<e1>[+-]?\d+)\s*\}|(?P<e2>\d)))?$"
)
# thousands separators: the first group has no leading zero ("0,250" is two values, 0 and 250)
_THOUSANDS = re.compile(r"^[+-]?[1-9]\d{0,2}(?:(?:,\d{3})+|(?: \d{3})+)(?:\.\d+)?$")
# a percent word after a number, bare or in \text{} ("25 percent", "25\text{ pct}"): graded like "%"
_PERCENT_WORD = re.compile(r"(?<=[\d.}])\s*(?:" + WRAP + r"\s*\{\s*(?:percent|percentage|pct)\.?\s*\}"
                           r"|(?:percent|percentage|pct)\.?)$", re.IGNORECASE)
_LETTER_GOLD = re.compile(r"^\(?([A-J])\)?$")
_LETTER_ANSWER = re.compile(r"^(?:option\s*|choice\s*)?\(?([A-Ja-j])\)?[.:]?$", re.IGNORECASE)
_LONE_SYMBOL = re.compile(
    r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?(?:'|\^\{?\*\}?)?(?:\([^()=]*\))?$"
)
_BASE_NUMBER = re.compile(r"^([0-9A-Za-z]+)_\{?\s*(\d+)\s*\}?$")
_MAX_EXPONENT_DIGITS = 18
def _top_level_split(s: str, sep: str) -> list[str]:
    """Split ``s`` on ``sep`` outside braces, brackets and parentheses."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def _strip_outer_braces(s: str) -> str:
    """``{{x}}`` -> ``x``: brace groups around the whole answer only group.

    Linear: the matching brace of every ``{`` is found in one stack pass (re-scanning the
    string once per layer was quadratic: 8,000 layers took 13 s in the caller's process).
    """
    match: dict[int, int] = {}
    stack: list[int] = []
    for i, c in enumerate(s):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            match[stack.pop()] = i
    lo, hi = 0, len(s) - 1
    while lo < hi and s[lo] == "{" and s[hi] == "}" and match.get(lo) == hi:
        lo, hi = lo + 1, hi - 1
        while lo <= hi and s[lo].isspace():
            lo += 1
        while hi >= lo and s[hi].isspace():
            hi -= 1
    return s[lo : hi + 1]


def normalize(s: str) -> str:
    """Canonical text of one answer (gold or extracted), following the policy table.

    Drops math-mode delimiters, row-spacing arguments (``\\\\[3pt]``), ``\\left``/``\\right``, thin spaces, dollar signs, a trailing
    percent sign, degree marks and *one* trailing unit (a ``\\text{}``-like group, or bare words of two
    letters or more, whose words are all :data:`UNIT_WORDS`: ``5\\text{ cm}``, ``12 sq ft``; never
    ``30\\text{ or less}``); removes what renders blank (``\\phantom``, ``\\hphantom``, ``\\vphantom`` with
    their argument; ``\\hspace{}``) and unwraps ``\\smash{}`` and the lap commands, so the text is what
    the box shows; reads ``\\mathrm{e}``/``\\mathrm{i}`` as ``e``/``i``; unwraps an answer that is
    wholly ``\\text{...}`` or one brace group ``{...}``; maps ``\\dfrac``/``\\tfrac`` to ``\\frac``; removes thousands
    separators from a plain number (``1,000``, ``10,\\!080``); rewrites ``4.2e3`` as
    ``4.2\\times 10^{3}`` (math_verify alone reads the ``e`` as Euler's number).

    Args:
        s: answer text.
    Returns:
        The normalized text (may be empty).
    """
    s = s.strip()
    # a row break's spacing argument (``\\\\[3pt]`` in a matrix) is layout, not value; dropped before the
    # display-math delimiters below, which read its ``\\[`` as one (issue #30: parse_error)
    s = _ROW_SPACING.sub(r"\\\\", s)
    for a, b in (("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("\\displaystyle", ""),
                 ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"),
                 ("{,}", ","), ("\\$", ""), ("$", "")):
        s = s.replace(a, b)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)  # not \\rightarrow, \\leftarrow
    s = re.sub(r",\s*\\!\s*", ",", s)  # 10,\!080 -> 10,080
    s = upright_constants(drop_decorations(s))
    s = _THIN_SPACE.sub(" ", s).strip()
    s = re.sub(r"\.\.\.|…", r"\\ldots ", s).strip()  # "9..." trails off: not the full stop of "9."
    s = s.rstrip(".").strip()
    s = _strip_outer_braces(s)
    m = _WHOLEWRAP.match(s)
    if m:
        s = m.group(1).strip()
    unit_dropped = False
    for _ in range(2):  # "5\text{ cm}^2", "30^\circ\text{ C}": degrees and percent, and one unit (issue #44 part 1)
        s = _DEGREES.sub("", s).strip()
        s = _PERCENT_WORD.sub("", s).strip()
        if s.endswith("\\%"):
            s = s[:-2].strip()
        elif s.endswith("%"):
            s = s[:-1].strip()
        if unit_dropped:
            break
        head = drop_unit(s)
        if head == s:
            break
        s, unit_dropped = head, True
    if _THOUSANDS.match(s):
        s = s.replace(",", "").replace(" ", "")
    s = _SCI_E.sub(lambda m: f"{m.group(1)}\\times 10^{{{m.group(2)}}}", s)
    return re.sub(r"\s+", " ", s).strip()


def to_decimal(s: str) -> Decimal | None:
    """The exact value of a plain number literal, or None when ``s`` is not one.

    Accepts ``-12``, ``+5``, ``05``, ``3.``, ``.5``, ``4.2\\times 10^{3}``, ``2\\cdot 10^5``
    (after :func:`normalize`). The value is built from the digits, never evaluated, so
    ``3.1\\times 10^{99999999}`` costs nothing.
    """
    m = _NUMBER.match(s)
    if not m:
        return None
    exp = m.group("e1") or m.group("e2") or "0"
    if len(exp.lstrip("+-")) > _MAX_EXPONENT_DIGITS:
        return None
    try:
        return Decimal(f"{m.group('m')}E{exp}")
    except InvalidOperation:
        return None


def split_assignment(s: str) -> tuple[str, str] | None:
    """``(lhs, last rhs)`` when ``s`` has a top-level ``=``, else None."""
    if "=" not in s:
        return None
    parts = _top_level_split(s, "=")
    if len(parts) < 2:
        return None
    return parts[0].strip(), parts[-1].strip()


def answer_items(s: str) -> list[tuple[str | None, str]] | None:
    """The values an answer lists, each with the name it was given: ``[(name or None, value)]``.

    Items are separated by top-level commas, ``or``/``and`` (bare or in ``\\text{}``), ``\\quad``
    and ``\\lor``; each item is ``value`` or ``name = value``. ``x=3`` gives ``[("x", "3")]``;
    ``a=2, a=5`` and ``x=3 \\text{ or } x=4`` give two items (never the last one alone);
    ``2, 5`` gives ``[(None, "2"), (None, "5")]``; ``x = 2+2 = 4`` gives ``[("x", "4")]`` and
    ``x = 1,000`` one value (a thousands comma). Gold and answer are split by this same function.

    Returns:
        The items; ``[]`` for a chain whose plain numbers disagree (``x=3=4``); None when an
        item's left side is not a single name (``2x-y+5=0``: an equation, not a value) or an
        item is empty.
    """
    parts = _top_level_split(s, "=")
    if len(parts) == 2 and is_lone_symbol(parts[0].strip()):
        rhs = normalize(parts[1])
        if to_decimal(rhs) is not None:  # "x = 1,000": a thousands comma, not two values
            return [(parts[0].strip(), rhs)]
    pieces = [p.strip() for q in _top_level_split(SEPARATORS.sub(";", s), ",")
              for p in _top_level_split(q, ";")]
    pieces = [p for p in pieces if p] or [""]  # "x=1 \\quad \\text{and} \\quad x=2": empty gaps
    items: list[tuple[str | None, str]] = []
    for piece in pieces:
        parts = [p.strip() for p in _top_level_split(piece, "=")]
        if len(parts) > 1 and not is_lone_symbol(parts[0]):
            return None
        last = to_decimal(parts[-1])
        for middle in parts[1:-1]:
            value = to_decimal(middle)
            if value is not None and last is not None and value != last:
                return []
        if not parts[-1]:
            return None
        items.append((parts[0].replace(" ", "") if len(parts) > 1 else None, parts[-1]))
    return items


def compare_items(gold: list[tuple[str | None, str]], answer: list[tuple[str | None, str]]) -> tuple[str | None, str, str]:
    """Compare two lists of :func:`answer_items` as sets of values.

    When both sides name every value with distinct names and the same set of names (``m=1, n=6``
    vs ``n=6, m=1``), values are matched by name; otherwise names are dropped and the values
    compared as sets (``a=2, a=5`` vs ``5, 2``). Plain numbers are decided here exactly; other
    values go to math_verify as ``"v1, v2"`` lists (which it reads as sets) or, matched by
    name, as tuples ``(v1, v2)`` in the gold's name order.

    Returns:
        ``(reason or None, gold_text, answer_text)``: the texts to hand to math_verify when
        undecided.
    """
    g_names, a_names = [n for n, _ in gold], [n for n, _ in answer]
    by_name = (None not in g_names and None not in a_names and len(set(g_names)) == len(g_names)
               and len(set(a_names)) == len(a_names) and set(g_names) == set(a_names))
    if by_name:
        a_map = dict(answer)
        pairs = [(v, a_map[n]) for n, v in gold]
        nums = [(to_decimal(g), to_decimal(a)) for g, a in pairs]
        if all(g is not None and a is not None for g, a in nums):
            return ("correct" if all(g == a for g, a in nums) else "wrong"), "", ""
        if len(pairs) == 1:
            return None, pairs[0][0], pairs[0][1]
        return None, "(" + ", ".join(g for g, _ in pairs) + ")", "(" + ", ".join(a for _, a in pairs) + ")"
    g_vals, a_vals = [v for _, v in gold], [v for _, v in answer]
    g_nums, a_nums = [to_decimal(v) for v in g_vals], [to_decimal(v) for v in a_vals]
    if None not in g_nums and None not in a_nums:
        return ("correct" if set(g_nums) == set(a_nums) else "wrong"), "", ""
    return None, ", ".join(g_vals), ", ".join(a_vals)


def _renamed_expressions(gold: list[tuple[str | None, str]], answer: list[tuple[str | None, str]]) -> bool:
    """True when both sides name every value, the names differ and a value is not a plain number:
    ``y = 2x + 3`` vs ``x = 2x + 3`` is another equation, not the value ``2x + 3`` renamed, so
    the whole texts go to math_verify (only numbers drop their names: ``k=5`` vs ``n=5``)."""
    names = [n for n, _ in gold + answer]
    if None in names or {n for n, _ in gold} == {n for n, _ in answer}:
        return False
    return any(to_decimal(v) is None for _, v in gold + answer)


def is_lone_symbol(s: str) -> bool:
    """True for a single name that can take a value: ``x``, ``a_1``, ``\\theta``, ``f(2)``."""
    return bool(_LONE_SYMBOL.match(s.replace(" ", "")))


def quick_grade(gold: str, answer: str) -> tuple[str | None, str, str, str]:
    """Decide the cases that need no computer algebra.

    Args:
        gold: reference answer text (LaTeX or plain).
        answer: extracted answer text.
    Returns:
        ``(reason, detail, gold_norm, answer_norm)``: ``reason`` is ``"correct"``,
        ``"wrong"``, ``"parse_error"`` (a control word or character the kit does not read, a
        ``\\frac`` without its arguments) or None (undecided: give the normalized pair to math_verify); ``detail``
        names the rule that decided.
    """
    g, a = normalize(gold), normalize(answer)
    if not a:
        return "wrong", "empty_answer", g, a
    if g == a:
        return "correct", "same_text", g, a
    letter = _LETTER_GOLD.match(g)
    if letter:  # multiple choice: the letter alone decides
        m = _LETTER_ANSWER.match(a)
        if m is None:
            return "wrong", "choice_not_a_letter", g, a
        ok = m.group(1).upper() == letter.group(1)
        return ("correct" if ok else "wrong"), "choice_letter", g, a
    unread = unread_command(g, a)  # "\\lessgtr 9", "\\foo 9", "≦ 9": math_verify drops what it does not know
    if unread:
        return "parse_error", f"unread_command {unread}", g, a
    unread = missing_argument(a)  # "\\frac 9": math_verify reads 9
    if unread:
        return "parse_error", f"missing_argument {unread}", g, a
    if ellipsis(g, a):  # "9\\ldots", "9, \\dots": an unfinished list is not a value
        return "wrong", "ellipsis", g, a
    op = unevaluated(g, a)  # "\\max 30", "\\lim 30": sympy evaluates Max(30) to 30 (issue #44 part 1)
    if op:
        return "wrong", f"unevaluated {op}", g, a
    if leading_operator(a) and not leading_operator(g):  # "\\cdot 9": no value before the operator
        return "wrong", "operator_without_left_side", g, a
    if leading_relation(a) and not leading_relation(g):  # "< 9", "\\approx 9": no value stated
        return "wrong", "relation_without_left_side", g, a
    if hedged_relation(g, a):
        return "wrong", "relation_for_value", g, a  # "x \\approx 9", "n \\ge 3" against a value
    if stray_words(g, a):  # "30 \\text{ or less}", "\\text{at least } 5", "5 \\text{ (approx.)}"
        return "wrong", "words_not_units", g, a
    based = _BASE_NUMBER.match(g)
    if based:  # "2516_8": digits in a base; math_verify drops the subscript
        m = _BASE_NUMBER.match(a)
        digits, base = (m.group(1), m.group(2)) if m else (a, based.group(2))
        ok = digits.upper() == based.group(1).upper() and int(base) == int(based.group(2))
        return ("correct" if ok else "wrong"), "base_subscript", g, a
    g_eq, a_eq = split_assignment(g) is not None, split_assignment(a) is not None
    g_items = answer_items(g) if g_eq else None
    a_items = answer_items(a) if a_eq else None
    if a_eq and not g_eq and a_items is None:
        return "wrong", "equation_for_value", g, a
    if a_items == [] or (g_items == [] and not a_eq):
        return "wrong", "inconsistent_chain", g, a
    if (g_eq or a_eq) and (g_items or not g_eq) and (a_items or not a_eq):
        # gold and answer split the same way: "a=2, a=5" is two values, never the last one alone
        g_list = g_items if g_eq else answer_items(g)
        a_list = a_items if a_eq else answer_items(a)
        if g_list and a_list and not _renamed_expressions(g_list, a_list):
            reason, g_text, a_text = compare_items(g_list, a_list)
            if reason is not None:
                return reason, "value_set", g, a
            g, a = g_text, a_text
            if g == a:
                return "correct", "assignment", g, a
    elif not g_eq and not a_eq and ("," in g or "," in a):
        g_list, a_list = answer_items(g), answer_items(a)  # plain lists of numbers: "0,250" vs "250, 0"
        if g_list and a_list and max(len(g_list), len(a_list)) > 1:
            nums = [to_decimal(v) for _, v in g_list + a_list]
            if None not in nums:
                same = {to_decimal(v) for _, v in g_list} == {to_decimal(v) for _, v in a_list}
                return ("correct" if same else "wrong"), "value_set", g, a
    gd = to_decimal(g)
    if gd is not None:
        ad = to_decimal(a)
        if ad is not None:
            return ("correct" if gd == ad else "wrong"), "exact_number", g, a
    if len(a) > MAX_ANSWER_CHARS:
        return "wrong", "answer_too_long", g, a
    return None, "", g, a


def same_value(gold: str, answer: str) -> bool | None:
    """Whether ``answer`` states ``gold``'s value by the kit's exact rules or, for plain arithmetic, by
    :func:`plain_value` at two sample points (relative 1e-9); None when neither can tell."""
    reason, _, g, a = quick_grade(gold, answer)
    if reason is not None:
        return reason == "correct"
    values = [(plain_value(g, k), plain_value(a, k)) for k in (0.0, 0.291)]
    if any(x is None or y is None for x, y in values):
        return None
    return all(abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-300) for x, y in values)
