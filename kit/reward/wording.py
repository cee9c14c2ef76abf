"""What an answer says in words and marks: units, prose, relations and invisible text (issue #44).

The exact rules (:mod:`kit.reward.rules`) read an answer as the reader of the rendered box would:

* one trailing unit may be dropped, and only when every word of it names a unit
  (:data:`UNIT_WORDS`): ``5\\text{ cm}`` is ``5``; ``30\\text{ or less}`` is not ``30``;
* a word set in a text group that is not a unit, a function name, ``or``/``and`` between values
  or a word of the gold (:func:`stray_words`) makes the answer wrong: qualifiers (``at least``),
  alternatives, negations, counted nouns;
* an answer that starts with a relation (``< 9``) states no value, and an order or
  approximation (``x \\approx 9``) is not the value it bounds (:func:`leading_relation`,
  :func:`hedged_relation`);
* what renders blank is not there (``\\hphantom{9}``), what is shown is (``\\vphantom{8}9`` is ``9``):
  :func:`drop_decorations`.

Pure string functions, linear in the length of the answer. Does not read colour
(``\\color{white}{9}`` is left to math_verify, which cannot parse it) or judge bare letters,
which are variables (``5 less`` is ``5 l e s s`` to math_verify, whose own unit reading the kit
turns off in :mod:`kit.reward.mathcheck`).
"""

from __future__ import annotations

import re

WRAP = r"\\(?:text|textbf|textrm|mathrm|mbox|mathbf|textup|operatorname)"
# every wrapper whose argument is set as words (math_verify's reader drops several of them)
_TEXT_GROUP = re.compile(r"\\(?:text|textbf|textit|textrm|textsf|texttt|textnormal|textup|emph|mbox|hbox|mathrm|mathit|"
                         r"mathbf|mathsf|mathtt|operatorname)\s*\{([^{}]*)\}")
_TRAILING_UNIT = re.compile(r"^(?P<head>.*?\S)\s*" + WRAP + r"\s*\{(?P<unit>[^{}\d]*)\}\s*(?:\^\s*\{?[23]\}?)?$")
# bare unit words after a number or a group ("5 cm", "12 square feet", "60 km/h"): words of two letters or more
_TRAILING_BARE_UNIT = re.compile(r"^(?P<head>.*?[\d}])\s*(?P<unit>[A-Za-z]{2,}(?:\s*[ /]\s*[A-Za-z]{2,}){0,3})"
                                 r"\s*(?:\^\s*\{?[23]\}?)?$")
#: Words that name a unit (lower case; a trailing unit group may hold only these, "per" and "/"
#: between them). Qualifiers ("or less", "at least", "approx"), negations and counted nouns
#: ("apples", "ways") are not units (issue #44 part 1).
UNIT_WORDS = frozenset("""
mm cm dm m km nm um meter meters metre metres millimeter millimeters millimetre millimetres centimeter centimeters
centimetre centimetres kilometer kilometers kilometre kilometres in inch inches ft foot feet yd yard yards mi mile miles
square sq cubic cu unit units
l ml cl liter liters litre litres milliliter milliliters millilitre millilitres gal gallon gallons qt quart quarts
pt pint pints cup cups cc
g mg kg gram grams milligram milligrams kilogram kilograms lb lbs pound pounds oz ounce ounces ton tons tonne tonnes t
s ms sec secs second seconds min mins minute minutes h hr hrs hour hours day days week weeks month months
yr yrs year years decade decades century centuries
mph kph kmh kmph fps rpm
dollar dollars cent cents euro euros yen rupee rupees rs usd
degree degrees deg rad radian radians c f k
j kj joule joules cal cals calorie calories kcal w kw watt watts kwh v volt volts ohm ohms n newton newtons
pa kpa hz khz mhz ghz byte bytes kb mb gb bit bits
""".split())
_UNIT_JOINERS = frozenset({"per"})
_UNIT_MODIFIERS = frozenset({"square", "sq", "cubic", "cu"})
# words and spaces that separate several answers ("x=3 \\text{ or } x=4", "x=3 \\quad x=4")
SEPARATORS = re.compile(
    r"\\q?quad(?![A-Za-z])|\\(?:text|mathrm|textrm|mbox)\s*\{\s*(?:or|and)\s*\}|\\(?:lor|vee)(?![A-Za-z])"
    r"|\s(?:or|and)\s"
)


# decorations (issue #44 part 2): what the box shows decides. A phantom renders blank (its argument
# is removed with it); \smash and the lap commands show their argument; spacing commands show space.
_INVISIBLE = re.compile(r"\\(?:phantom|hphantom|vphantom)(?![A-Za-z])")
_SHOWN = re.compile(r"\\(?:smash|rlap|llap|mathrlap|mathllap|mathclap|clap)(?![A-Za-z])\s*(?:\[[a-z]*\])?")
_SPACING = re.compile(r"\\(?:hspace|vspace)\*?\s*\{[^{}]*\}|\\m?kern\s*-?[\d.]+\s*[a-z]{2}|\\hskip\s*-?[\d.]+\s*[a-z]{2}")
_ONE_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\S")
# \mathrm{e} and \mathrm{i} are Euler's number and the imaginary unit, as e and i (issue #44 part 9), braced or
# not: "\mathrm e", "{\rm e}", "\rm e" (TeX takes one token as the argument; \rm switches the font for the group)
_UPRIGHT_CONSTANT = re.compile(r"\\(?:mathrm|rm|mathit|textrm|text|operatorname|mathup)\s*\{\s*([ei])\s*\}"
                               r"|\{\s*\\(?:rm|mathrm|it)\s+([ei])\s*\}"
                               r"|\\(?:mathrm|rm|mathit|mathup)\s+([ei])(?![A-Za-z])")
# a relation first: "< 9", "\\ge 9", "\\approx 9" state no value (issue #44 part 2)
_RELATION_CMDS = (r"le|leq|leqq|leqslant|lt|ge|geq|geqq|geqslant|gt|ne|neq|approx|approxeq|sim|simeq|equiv|cong|ll|gg|"
                  r"lll|ggg|in|notin|ni|to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies|iff|"
                  r"Leftrightarrow|leftrightarrow|mapsto|propto|subset|subseteq|supset|supseteq|subsetneq|supsetneq|"
                  r"prec|succ|preceq|succeq|asymp|doteq|lessapprox|gtrapprox|lesssim|gtrsim|nless|ngtr|nleq|ngeq|"
                  r"leftarrow|Leftarrow|gets|coloneqq|eqqcolon|triangleq|vdash|models")
# a relation, possibly negated by \not; "=" is the only relation that states a value
_REL_CHARS = "<>=≤≥≠≈∼≃≅≡∈∉→⇒⇔≪≫∝⊂⊆⊃⊇≲≳⩽⩾"
_LEADING_RELATION = re.compile(r"^(?:\\not\s*)?(?:[" + _REL_CHARS + r":]|\\(?:" + _RELATION_CMDS + r")(?![A-Za-z]))")
_ANY_RELATION = re.compile(r"[" + _REL_CHARS + r"]|\\(?:not|" + _RELATION_CMDS + r")(?![A-Za-z])")
# every relation but "=": an order, approximation, limit, membership or map bounds or names a value, it does not state it
_HEDGE_RELATION = re.compile(r"[" + _REL_CHARS.replace("=", "") + r"]|\\(?:not|" + _RELATION_CMDS + r")(?![A-Za-z])")
# what may start a value: not a binary operator ("\\cdot 9", "\\times 9" read as 9 by math_verify)
_LEADING_OPERATOR = re.compile(r"^(?:[*/^_!×·÷∪∩]|\\(?:cdot|times|div|choose|cup|cap|setminus|mid|lor|vee)(?![A-Za-z]))")
_PLAIN_OPEN = re.compile(r"^(?:\{\s*)+")

# ---------------------------------------------------------------- the control words the kit reads (issue #44 part 2)
# math_verify drops control words it does not know ("\\lessgtr 9", "\\foo 9" read as 9) and several it does
# ("\\frac 9", "\\det 9", "\\gcd 9"): an allowlist, not a blocklist, decides what an answer may use.
#: Layout: they show what follows or only space it (wrappers' words are judged by :func:`stray_words`).
LAYOUT_COMMANDS = frozenset("""
left right big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr Biggl Biggr bigm Bigm displaystyle textstyle scriptstyle
limits nolimits quad qquad enspace thinspace medspace thickspace negthinspace text textbf textit textrm textsf texttt
textnormal textup emph mbox hbox mathrm mathit mathbf mathsf mathtt mathcal mathbb mathup operatorname boldsymbol bm
rm boxed fbox begin end
""".split())
#: Values, operators and delimiters math_verify reads as math (``\\frac``, ``\\sqrt``, ``\\binom`` also need their arguments).
VALUE_COMMANDS = frozenset("""
frac cfrac sqrt binom dbinom tbinom choose cdot times div pm mp pi infty ell
alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho varrho sigma varsigma
tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega
sin cos tan cot sec csc arcsin arccos arctan arccot arcsec arccsc sinh cosh tanh coth sech csch log ln exp
langle rangle lfloor rfloor lceil rceil vert lvert rvert Vert lVert rVert mid lbrace rbrace lbrack rbrack
cup cap setminus overline lor vee
""".split())
#: Operators whose value the answer should state, not apply: sympy evaluates ``Max(30)`` to 30, so ``\\max 30``
#: earned 1 against 30 (issue #44 part 1). An answer applying one is wrong unless the gold applies it too.
UNEVALUATED = frozenset("max min sup inf lim limsup liminf sum prod int gcd lcm det".split())
#: An unfinished list or pattern is not a value ("9\\ldots", "9, \\ldots").
ELLIPSIS_COMMANDS = frozenset("ldots dots cdots dotsc dotsb dotsm dotso dotsi hdots vdots ddots".split())
RELATION_COMMANDS = frozenset(_RELATION_CMDS.split("|")) | {"not"}
KNOWN_COMMANDS = LAYOUT_COMMANDS | VALUE_COMMANDS | UNEVALUATED | RELATION_COMMANDS
#: Characters outside ASCII an answer may use (others, e.g. "≦", are not read: math_verify drops them).
KNOWN_UNICODE = frozenset("°π∞√×·⋅÷−–±∓∪∩∅≤≥≠≈∈∉→⇒⇔…")
_TOKEN = re.compile(r"\\(?:([A-Za-z]+)|.)|[^\x00-\x7f]")
_TWO_ARGS = frozenset({"frac", "cfrac", "binom", "dbinom", "tbinom"})
_ARG = re.compile(r"\s*(?:\{|\\[A-Za-z]+|\\.|[^\s{}\\])")
_UNEVALUATED_WORD = re.compile(r"(?<![A-Za-z\\])(?:max|min|sup|inf|lim|limsup|liminf|gcd|lcm|det)\s*[({]", re.IGNORECASE)
_ELLIPSIS = re.compile(r"\.\.\.|…|\\(?:" + "|".join(sorted(ELLIPSIS_COMMANDS)) + r")(?![A-Za-z])")
#: names of functions and operators that math reads as such, not as words
FUNCTION_WORDS = frozenset("""
sin cos tan cot sec csc arcsin arccos arctan arccot sinh cosh tanh coth log ln lg exp lim max min gcd lcm mod bmod
pmod det deg dim ker inf sup arg re im sgn sign sqrt pi frac cis
""".split())
_WORD = re.compile(r"[^\W\d_]{2,}")
_COMMAND = re.compile(r"\\(?:[A-Za-z]+|.)")
_ORDINALS = frozenset({"st", "nd", "rd", "th"})


def brace_matches(text: str) -> dict[int, int]:
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


def drop_decorations(s: str) -> str:
    """Remove what renders blank (``\\phantom``, ``\\hphantom``, ``\\vphantom`` with their argument, a
    brace group or one token) and spacing commands; unwrap ``\\smash`` and the lap commands, which show
    their argument. Linear: the braces are matched once."""
    s = _SPACING.sub(" ", _SHOWN.sub("", s))
    if "phantom" not in s:
        return s
    match = brace_matches(s)
    out, pos = [], 0
    for m in _INVISIBLE.finditer(s):
        if m.start() < pos:  # inside a phantom already removed
            continue
        out.append(s[pos : m.start()])
        j = m.end()
        while j < len(s) and s[j].isspace():
            j += 1
        if j < len(s) and s[j] == "{":
            end = match.get(j)
            if end is None:  # unclosed: left as written (math_verify cannot read it either)
                out.append(s[m.start() : j])
                pos = j
                continue
            pos = end
        else:
            tok = _ONE_TOKEN.match(s, j)
            pos = tok.end() if tok else j
        out.append(" ")
    out.append(s[pos:])
    return "".join(out)


def _unit_words(text: str) -> bool:
    """True when ``text`` (a unit group's contents, or bare trailing words) names units and nothing
    else: ``cm``, `` square units``, ``km/h``, ``sq. ft.``, ``miles per hour``."""
    words = [w for w in re.split(r"[\s/.]+", text.lower().replace("\\ ", " ").replace("~", " ")) if w]
    if not words or any(w not in UNIT_WORDS and w not in _UNIT_JOINERS for w in words):
        return False
    return any(w in UNIT_WORDS and w not in _UNIT_MODIFIERS for w in words)


def drop_unit(s: str) -> str:
    """``s`` without one trailing unit: a wrapped group (``5\\text{ cm}``, ``5\\mathrm{m}^2``) or bare words
    of two letters or more after a number or a group (``5 cm``), when every word is a unit."""
    for pattern in (_TRAILING_UNIT, _TRAILING_BARE_UNIT):
        m = pattern.match(s)
        if m and _unit_words(m.group("unit")):
            return m.group("head").strip()
    return s


def text_words(s: str) -> set[str]:
    """Lower-cased words (two letters or more) set in text wrappers (``\\text{}``, ``\\mathrm{}``, ...)."""
    return {w.lower() for g in _TEXT_GROUP.findall(s) for w in _WORD.findall(g)}


def stray_words(gold: str, answer: str) -> list[str]:
    """Words the answer sets in text wrappers that are neither units, function names, the words
    ``or``/``and`` between values, nor words the gold has: qualifiers (``or less``, ``at least``,
    ``approx``), negations and other prose (issue #44 part 1). Bare letters are variables, not
    words, and are left to math_verify (its unit reading is off, :mod:`kit.reward.mathcheck`)."""
    allowed = text_words(gold) | {w.lower() for w in _WORD.findall(gold)}
    out = []
    for group in _TEXT_GROUP.findall(SEPARATORS.sub(";", answer)):
        for w in _WORD.findall(group):
            lw = w.lower()
            if not (lw in allowed or lw in UNIT_WORDS or lw in FUNCTION_WORDS or lw in _UNIT_JOINERS or lw in _ORDINALS):
                out.append(w)
        if re.search(r"[^\w\s.,;/'^-]", group) and group.strip() not in gold:  # "(approx)", "(?)", "~"
            out.append(group.strip())
    return out


def _top_level_relation(s: str, pattern: re.Pattern[str]) -> bool:
    """True when ``pattern`` matches outside brackets, parentheses, ``\\{ \\}`` and argument braces. A plain
    brace group (not an argument of a command, ``_`` or ``^``) only groups: ``x {\\le} 9`` is ``x \\le 9``."""
    depth, i, opened = 0, 0, []
    while i < len(s):
        if depth == 0 and pattern.match(s, i):
            return True
        c = s[i]
        if c == "\\":
            cmd = _COMMAND.match(s, i)
            name = cmd.group(0) if cmd else "\\"
            depth += name in ("\\{", "\\lbrace", "\\langle")
            depth -= name in ("\\}", "\\rbrace", "\\rangle")
            i += len(name)
            continue
        if c == "{":
            before = s[:i].rstrip()
            argument = bool(before) and (before[-1] in "_^}]" or bool(re.search(r"\\[A-Za-z]+$", before[-40:])))
            opened.append(argument)
            depth += argument
        elif c == "}":
            depth -= opened.pop() if opened else 1
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        i += 1
    return False


def upright_constants(s: str) -> str:
    """``\\mathrm{e}``, ``\\mathrm{i}`` (and ``\\text{}``/``\\operatorname{}`` forms) as ``e``, ``i``: Euler's
    number and the imaginary unit, which math_verify otherwise reads as a word (issue #44 part 9)."""
    return _UPRIGHT_CONSTANT.sub(lambda m: m.group(1) or m.group(2) or m.group(3), s)


def leading_relation(s: str) -> bool:
    """True when ``s`` starts with a relation (``< 9``, ``\\ge 9``, ``\\approx 9``, ``:= 9``, ``\\to 9``), braces
    around it removed (``{\\le} 9``)."""
    return bool(_LEADING_RELATION.match(_PLAIN_OPEN.sub("", s)))


def leading_operator(s: str) -> bool:
    """True when ``s`` starts with a binary operator (``\\cdot 9``, ``\\times 9``, ``/9``): no value before it."""
    return bool(_LEADING_OPERATOR.match(_PLAIN_OPEN.sub("", s)))


def hedged_relation(gold: str, answer: str) -> bool:
    """True when ``answer`` has a relation other than ``=`` at its top level (``x \\approx 9``, ``n \\ge 3``,
    ``x \\to 9``, ``x \\propto 9``, ``x \\in [2, 3]``) and ``gold`` has none: only ``=`` states a value."""
    return _top_level_relation(answer, _HEDGE_RELATION) and not _top_level_relation(gold, _HEDGE_RELATION)


def _commands(s: str) -> list[str]:
    """The control words (``\\frac`` as ``frac``) and non-ASCII characters of ``s``, in order (``\\\\`` is skipped)."""
    return [m.group(1) or m.group(0) for m in _TOKEN.finditer(s) if m.group(1) or not m.group(0).startswith("\\")]


def unread_command(gold: str, answer: str) -> str | None:
    """The first control word or non-ASCII character of ``answer`` that the kit does not read as math
    (not in :data:`KNOWN_COMMANDS`, :data:`KNOWN_UNICODE` or ``gold``): ``\\lessgtr``, ``\\foo``,
    ``\\textless``, ``\\uparrow``, ``≦``, ``\\stackrel``. None when every one is read."""
    known = set(_commands(gold))
    for c in _commands(answer):
        if c not in KNOWN_COMMANDS and c not in KNOWN_UNICODE and c not in known and c not in ELLIPSIS_COMMANDS:
            return c if len(c) == 1 and not c.isascii() else "\\" + c
    return None


def missing_argument(s: str) -> str | None:
    """The first ``\\frac``/``\\binom`` without two arguments or ``\\sqrt`` without one (``\\frac 9``: math_verify
    reads 9), as ``\\frac``; None when every one has its arguments (a brace group or one token each)."""
    for m in re.finditer(r"\\(frac|cfrac|binom|dbinom|tbinom|sqrt)(?![A-Za-z])", s):
        i = m.end()
        if m.group(1) == "sqrt":
            opt = re.match(r"\s*\[[^\[\]]*\]", s[i:])
            i += opt.end() if opt else 0
        for _ in range(2 if m.group(1) in _TWO_ARGS else 1):
            arg = _ARG.match(s, i)
            if not arg:
                return "\\" + m.group(1)
            i = arg.end()
            if arg.group(0).endswith("{"):
                depth = 1
                while i < len(s) and depth:
                    depth += {"{": 1, "}": -1}.get(s[i], 0)
                    i += 2 if s[i] == "\\" else 1
                if depth:
                    return "\\" + m.group(1)
    return None


def unevaluated(gold: str, answer: str) -> str | None:
    """The first operator of :data:`UNEVALUATED` the answer applies and the gold does not (``\\max 30``,
    ``\\max(30)``, ``\\operatorname{max} 30``, ``\\lim 30``, ``max(30)``), as its name; None when there is none."""
    def used(s: str) -> set[str]:
        words = {c for c in _commands(s) if c in UNEVALUATED}
        words |= {w for w in text_words(s) if w in UNEVALUATED}
        return words | {m.group(0).rstrip("({ ").lower() for m in _UNEVALUATED_WORD.finditer(s)}
    extra = sorted(used(answer) - used(gold))
    return extra[0] if extra else None


def ellipsis(gold: str, answer: str) -> bool:
    """True when ``answer`` trails off (``\\ldots``, ``\\dots``, ``\\cdots``, ``...``, ``…``) and ``gold`` does not."""
    return bool(_ELLIPSIS.search(answer)) and not _ELLIPSIS.search(gold)
