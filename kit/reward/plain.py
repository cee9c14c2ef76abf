"""A small, bounded evaluator of plain arithmetic (issue #44 part 4).

Reads the plain arithmetic a restatement uses (``\\frac12``, ``6^2``, ``6!``, ``\\sqrt{3}/2``, ``2x+1``) as a
float, so an answer block can be compared with the box in the caller's process
(:func:`kit.reward.rules.same_value`, :mod:`kit.reward.extract`): no sympy, linear in the text, bounded
values. Moved out of :mod:`kit.reward.rules`, which imports :func:`plain_value` from here.
"""

from __future__ import annotations

import re

_EVAL_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|[A-Za-z]|[-+*/^!(){}])")
_SAMPLE = {c: 0.37 + 0.113 * k for k, c in enumerate("abcdfghjklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")}
_MAX_EVAL_CHARS = 300


class _Unreadable(Exception):
    pass


def _tokens(s: str) -> list[str]:
    out, i = [], 0
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/").rstrip()
    while i < len(s):
        m = _EVAL_TOKEN.match(s, i)
        if not m:
            raise _Unreadable(s[i:])
        out.append(m.group(1))
        i = m.end()
    return out


class _Reader:
    """Recursive descent over ``expr := term (+|- term)*``, ``term := factor ((*|/)? factor)*`` (implicit
    product), ``factor := -factor | atom (^ atom | !)*``; atoms: numbers, ``\\frac``, ``\\sqrt``, ``\\pi``,
    ``e``, one-letter names (a sample value each), ``(...)``, ``{...}``."""

    def __init__(self, tokens: list[str], shift: float):
        self.t, self.i, self.shift = tokens, 0, shift

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise _Unreadable(want or "end")
        self.i += 1
        return tok

    def expr(self) -> float:
        v = self.term()
        while self.peek() in ("+", "-"):
            v = v + self.term() if self.take() == "+" else v - self.term()
        return v

    def term(self) -> float:
        v = self.factor()
        while self.peek() is not None and self.peek() not in ("+", "-", ")", "}", "^", "!"):
            if self.peek() in ("*", "/"):
                op = self.take()
                w = self.factor()
                v = v * w if op == "*" else v / w
            else:
                v = v * self.factor()
        return v

    def factor(self) -> float:
        if self.peek() in ("-", "+"):
            return -self.factor() if self.take() == "-" else self.factor()
        v = self.atom()
        while self.peek() in ("^", "!"):
            if self.take() == "!":
                if v != int(v) or not 0 <= v <= 170:
                    raise _Unreadable("!")
                v = float(__import__("math").factorial(int(v)))
            else:
                ex = self.factor()
                if abs(ex) > 1000:
                    raise _Unreadable("^")
                v = v**ex
        if isinstance(v, complex) or v != v or abs(v) > 1e300:
            raise _Unreadable("value")
        return v

    def group(self) -> float:
        tok = self.take()
        if tok == "{":
            v = self.expr()
            self.take("}")
            return v
        self.i -= 1
        return self.atom()

    def atom(self) -> float:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            if len(tok) > 1 and tok[0].isdigit() and not tok.replace(".", "").isdigit():
                raise _Unreadable(tok)
            # "\frac12": TeX reads one digit per argument
            return float(tok)
        if tok in ("(", "{"):
            v = self.expr()
            self.take(")" if tok == "(" else "}")
            return v
        if tok == "\\frac":
            self._split_digits()
            num = self.group()
            self._split_digits()
            return num / self.group()
        if tok == "\\sqrt":
            self._split_digits()
            return self.group() ** 0.5
        if tok == "\\pi":
            return 3.141592653589793
        if tok == "e":
            return 2.718281828459045
        if len(tok) == 1 and tok in _SAMPLE:
            return _SAMPLE[tok] + self.shift
        raise _Unreadable(tok)

    def _split_digits(self) -> None:
        tok = self.peek()
        if tok and len(tok) > 1 and tok.isdigit():  # \frac12 -> \frac{1}{2}
            self.t[self.i : self.i + 1] = list(tok)


def plain_value(s: str, shift: float = 0.0) -> float | None:
    """The value of a plain arithmetic expression in LaTeX or text (``\\frac12``, ``6^2``, ``6!``,
    ``\\sqrt{3}/2``, ``10^3``, ``2x+1``), one-letter names set to fixed sample values moved by ``shift``;
    None when ``s`` uses anything else (functions, sets, ``\\pm``, relations, subscripts) or a value is out of
    range. Bounded: at most 300 characters, exponents up to 1000, factorials up to 170!.
    """
    if len(s) > _MAX_EVAL_CHARS or not s.strip():
        return None
    try:
        reader = _Reader(_tokens(s), shift)
        v = reader.expr()
        if reader.peek() is not None:
            return None
        return float(v)
    except (_Unreadable, ZeroDivisionError, OverflowError, ValueError, RecursionError, TypeError):
        return None
