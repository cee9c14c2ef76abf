"""math_verify with the kit's guards; meant to run inside a killable worker process.

How the release called math_verify (research note ``rstar2_agent_release.md`` §5): the gold
wrapped in ``\\boxed{}`` (a bare gold misparses: ``0,1`` becomes 0.1) and parsed with
``LatexExtractionConfig``, the prediction parsed with LaTeX and plain-expression extraction,
``verify(gold, pred)`` with the gold first (the check is asymmetric). The kit does the same on
the already-extracted and normalized answer, and adds three guards for known wrong verdicts:

* whole-answer reading: the plain-expression reader is asked only when the LaTeX reader fails, and
  its reading counts only when it covers the whole answer (it finds ``9`` in ``x \\big 9``);

* magnitude guard: a numeric answer whose value (or reciprocal) has more than
  :data:`MAX_DIGITS` digits, e.g. ``7^{7^{7^{7^7}}}``, is graded wrong without evaluating it,
  unless the gold is that large too; sympy would otherwise run for minutes or exhaust memory.
* relative check: math_verify compares numbers after ``evalf(chop=True)`` or rounding to 6
  decimals, an *absolute* tolerance that calls ``1/2^{60}`` equal to ``1/2^{59}``. Every
  "equal" verdict between numbers is re-checked with a *relative* tolerance (1e-12 for exact
  values, 1e-6 when either side was written as a decimal), elementwise for tuples and sets.

math_verify's own SIGALRM timeouts are switched off here (they work only on a main thread and
cancel any outer alarm); the worker applies its own soft alarm and the pool a hard kill.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import (
    Basic,
    Expr,
    FiniteSet,
    Float,
    Integer,
    Interval,
    MatrixBase,
    Number,
    NumberSymbol,
    Pow,
    Rational,
    Symbol,
    Tuple,
    binomial,
    factorial,
    gamma,
)

logging.getLogger("math_verify").setLevel(logging.ERROR)

#: Numbers with more digits than this (value or reciprocal) are never evaluated.
MAX_DIGITS = 10_000
_LOG10_2 = math.log10(2)
# math_verify's own unit reading is off: it drops any of ~150 trailing words, single letters and
# qualifiers among them ("5t", "5 less", "5 more", "5\\text{ or less}" all read as 5). The kit drops
# one trailing group of unit words itself (:func:`kit.reward.rules.normalize`; issue #44 part 1).
_NORMALIZATION = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True,
                                     boxed="all", equations=False)
_GOLD_CONFIG = [LatexExtractionConfig(normalization_config=_NORMALIZATION)]
_PRED_CONFIG = [LatexExtractionConfig(normalization_config=_NORMALIZATION), ExprExtractionConfig()]
_PRED_LATEX, _PRED_EXPR = _PRED_CONFIG[:1], _PRED_CONFIG[1:]


def log10_bound(expr: Any, _depth: int = 0) -> float:
    """An upper bound on ``|log10 |x||`` over the numbers inside a sympy expression.

    Computed from the tree without evaluating powers, so it is instant for power towers.
    Symbols count as 1 (so ``(x+1)^{10^6}``, which sympy may expand, also counts as huge).

    Args:
        expr: a sympy object (or anything; non-sympy objects count 0).
    Returns:
        The bound in decimal digits (``inf`` when it overflows a float).
    """
    if _depth > 200:
        return math.inf
    if isinstance(expr, MatrixBase):
        return max((log10_bound(x, _depth + 1) for x in expr), default=0.0)
    if not isinstance(expr, Basic):
        return 0.0
    if isinstance(expr, Integer):
        return abs(int(expr)).bit_length() * _LOG10_2
    if isinstance(expr, Rational):
        return max(abs(expr.p).bit_length(), expr.q.bit_length()) * _LOG10_2
    if isinstance(expr, Float):
        _, man, exp, bc = expr._mpf_
        return abs(int(exp) + int(bc)) * _LOG10_2 + 1 if man else 0.0
    if isinstance(expr, (NumberSymbol, Symbol)):
        return 1.0
    if isinstance(expr, Pow):
        base = log10_bound(expr.base, _depth + 1)
        ex = log10_bound(expr.exp, _depth + 1)
        if ex > 300:
            return math.inf
        return 10.0**ex * max(base, _LOG10_2)
    if expr.func is binomial:  # C(n, k) <= 2^n
        n = log10_bound(expr.args[0], _depth + 1)
        return math.inf if n > 300 else 10.0**n * _LOG10_2
    if expr.func in (factorial, gamma):
        n = log10_bound(expr.args[0], _depth + 1)
        if n > 300:
            return math.inf
        return 10.0**n * max(n, 1.0)
    args = [log10_bound(a, _depth + 1) for a in expr.args]
    if not args:
        return 0.0
    if expr.is_Mul:
        return sum(args)
    return max(args) + 1.0


def _numeric(e: Any) -> Any | None:
    """A 50-digit real value of a constant expression, or None (symbols, complex, sets...)."""
    if not isinstance(e, Expr) or isinstance(e, Tuple) or e.free_symbols:
        return None
    v = e.evalf(50)
    if not isinstance(v, Number) or not v.is_finite:
        return None
    return v


def _has_float(e: Any) -> bool:
    return isinstance(e, Basic) and (isinstance(e, Float) or bool(e.atoms(Float)))


def numbers_agree(gold: Any, pred: Any) -> bool:
    """False when two numeric values (or same-shaped containers of them) differ relatively.

    Relative tolerance 1e-12, or 1e-6 when either side contains a decimal (``Float``).
    Containers compared elementwise: tuples, intervals (endpoints), matrices, and finite sets
    (sorted by value). Pairs that are not both numeric return True (no opinion: math_verify's
    verdict stands); expressions with symbols are not re-checked.
    """
    if isinstance(gold, FiniteSet) and isinstance(pred, FiniteSet):
        gs, ps = [_numeric(x) for x in gold.args], [_numeric(x) for x in pred.args]
        if len(gs) != len(ps) or any(v is None for v in gs + ps):
            return True
        return all(numbers_agree(g, p) for g, p in zip(sorted(gs), sorted(ps), strict=True))
    if isinstance(gold, MatrixBase) and isinstance(pred, MatrixBase):
        if gold.shape != pred.shape:
            return True
        return all(numbers_agree(g, p) for g, p in zip(gold, pred, strict=True))
    containers = (Tuple, Interval, tuple, list)
    if isinstance(gold, containers) and isinstance(pred, containers):
        g_args = gold.args if isinstance(gold, Basic) else gold
        p_args = pred.args if isinstance(pred, Basic) else pred
        if type(gold) is not type(pred) or len(g_args) != len(p_args):
            return True
        return all(numbers_agree(g, p) for g, p in zip(g_args, p_args, strict=True))
    gv, pv = _numeric(gold), _numeric(pred)
    if gv is None or pv is None:
        return True
    scale = max(abs(gv), abs(pv))
    if scale == 0:
        return True
    tol = 1e-6 if (_has_float(gold) or _has_float(pred)) else 1e-12
    return bool(abs(gv - pv) <= tol * scale)


def grade_math(gold: str, answer: str) -> tuple[str, str]:
    """Grade a normalized answer against a normalized gold with math_verify and the guards.

    Unbounded in time (no alarm here): call it under the worker's soft alarm and the pool's
    hard kill (:mod:`kit.reward.pool`).

    Args:
        gold: normalized reference answer (:func:`kit.reward.rules.normalize`).
        answer: normalized extracted answer.
    Returns:
        ``(reason, detail)``: reason in {correct, wrong, parse_error}; detail names the rule.
    """
    golds = parse("\\boxed{" + gold + "}", _GOLD_CONFIG, parsing_timeout=None)
    if not golds:
        return "parse_error", "gold_unparsed"
    preds = parse("\\boxed{" + answer + "}", _PRED_LATEX, parsing_timeout=None)
    if not any(isinstance(p, (Basic, MatrixBase)) for p in preds):
        # plain-expression reading, only of the whole answer: when the LaTeX reader fails it finds a
        # number *in* the text ("x \\big 9", "\\lessgtr 9", "\\langle 9" read as 9; issue #44 part 2)
        read = parse("\\boxed{" + answer + "}", _PRED_EXPR, parsing_timeout=None)
        if any(isinstance(p, (Basic, MatrixBase)) for p in read):
            text = next((p for p in read if isinstance(p, str)), "")
            if "".join(text.split()) != "".join(answer.split()):
                return "parse_error", "answer_partly_read"
            preds = read
    pred_math = [p for p in preds if isinstance(p, (Basic, MatrixBase))]
    gold_math = [g for g in golds if isinstance(g, (Basic, MatrixBase))]
    if not pred_math:
        same = any(isinstance(p, str) and p.strip() == g.strip() for p in preds for g in golds
                   if isinstance(g, str))
        return ("correct", "same_string") if same else ("parse_error", "answer_unparsed")
    gold_big = max((log10_bound(g) for g in gold_math), default=0.0)
    if gold_big <= MAX_DIGITS and max(log10_bound(p) for p in pred_math) > MAX_DIGITS:
        return "wrong", "too_large"
    for g in golds:
        for p in preds:
            if type(g) is str or type(p) is str:
                if type(g) is str and type(p) is str and g.strip() and g.strip() == p.strip():
                    return "correct", "same_string"
                continue
            if verify(g, p, timeout_seconds=None):
                if numbers_agree(g, p):
                    return "correct", "math_verify"
                return "wrong", "relative_tolerance"
    return "wrong", "math_verify"
