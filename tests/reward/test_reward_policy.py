"""The lenient-case policy table of kit.reward's docstring, one test per row (in-process)."""

import pytest

from kit.reward import grade_answer
from kit.reward.rules import normalize, to_decimal


def ok(gold, answer):
    reason, _ = grade_answer(gold, answer)
    return reason == "correct"


@pytest.mark.parametrize("gold,answer,expected", [
    ("25", r"25\%", True), (r"25\%", "25", True), (r"25\%", "0.25", False), ("25", "25%", True),
])
def test_percent(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    (r"30^\circ", "30", True), ("30", r"30^{\circ}", True), ("30", "30°", True),
    (r"30^\circ", r"\frac{\pi}{6}", False), (r"30^\circ", "31", False),
])
def test_degrees(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("5", r"5\text{ cm}", True), ("5", r"5\mathrm{cm}^2", True), (r"5.4 \text{ cents}", "5.4", True),
    (r"\frac{270}7\text{ degrees}", r"\frac{270}{7}", True), ("5", "5 cm", True), ("5", "5x", False),
    (r"\text{Evelyn}", r"\text{Evelyn}", True), (r"\text{Evelyn}", r"\text{Navin}", False),
])
def test_units_in_text(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("3", "x=3", True), ("3", r"\theta = 3", True), ("3", "a_1 = 3", True), ("7", "f(2)=7", True),
    ("x=5", "5", True), ("0", "2x-y+5=0", False), ("3", "x+y=3", False), ("3", "x=4", False),
    ("y = 2x + 3", "y=2x+3", True), ("y=2x+5", "2x-y+5=0", True), ("2x-y+5=0", "x+3y+7=0", False),
    ("2x-y+5=0", "4x-2y+10=0", True),
])
def test_assignments_and_equations(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    (r"\frac{\sqrt{2}}{2}", r"\dfrac{\sqrt{2}}{2}", True), (r"\dfrac{3}{4}", r"\tfrac34", True),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", True), (r"\frac{\sqrt{2}}{2}", r"\dfrac{\sqrt{3}}{2}", False),
])
def test_dfrac(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("4200", "4.2e3", True), ("4200", "4.2E+3", True), ("4200", r"4.2\times 10^{3}", True),
    ("4200", r"4.2 \cdot 10^3", True), ("4200", "4.2e2", False), ("3.1", "3.1e99999999", False),
    ("0.00042", "4.2e-4", True), ("3", r"3.1\times10^{99999999}+1", False),
])
def test_scientific_notation(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("C", "C", True), ("C", "(C)", True), ("C", r"\text{C}", True), ("C", r"\textbf{(C)}", True),
    ("C", "c", True), ("C", "D", False), (r"\text{(C)}", "C", True), ("B", "42", False),
])
def test_choice_letters(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("2,500", "2500", True), ("2500", "2,500", True), (r"10,\!080", "10080", True),
    ("1000", "1{,}000", True), ("10000", r"10\,000", True), ("0,1", "1", False), ("0,1", "0.1", False),
    ("05", "5", True), ("+5", "5", True), ("0.50", "0.5", True), ("3.14159265", "3.1415927", False),
    (r"\$32,\!348", "32348", True), ("-3", "-3", True), ("-3", "3", False),
])
def test_plain_numbers_and_thousands(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("2516_8", "2516_{8}", True), ("2516_8", "2516", True), ("2516_8", "2516_2", False),
    ("4210_{5}", "4210_6", False), ("40_9", "36", False), ("1A_{16}", "1a_{16}", True),
])
def test_base_subscripts(gold, answer, expected):
    # found by benchmarks/verify_bench.py: math_verify alone calls 2516_8 equal to 2516_2
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    (r"\frac{1}{2^{60}}", r"\frac{1}{2^{59}}", False),
    (r"\left( \frac{1}{2^{60}}, 1 \right)", r"(\frac{1}{2^{59}}, 1)", False),
    (r"\{1, 2^{-60}\}", r"\{2^{-59}, 1\}", False),
    (r"\frac{1}{2^{60}}", r"2^{-60}", True),
    ("0.5", r"\frac{1}{2}", True), (r"\frac{1}{3}", "0.3333333", True),
])
def test_relative_tolerance(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    (r"\pm 7", "7", False), (r"\pm 7", "7,-7", True), (r"\pm 7", r"\pm 7", True), ("7", r"\pm 7", False),
    (r"\{1\pm\sqrt{5},-2\}", r"-2, 1+\sqrt5, 1-\sqrt5", True),
])
def test_plus_minus(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("answer", [r"7^{7^{7^{7^7}}}", r"2^{10^{100}}", r"10^{9000}!",
                                    r"\binom{10^{8}}{5\cdot 10^{7}}", r"\frac{2^{10000000}}{2^{9999999}}"])
def test_huge_numbers_are_wrong_without_evaluation(answer):
    assert grade_answer("3", answer) == ("wrong", "too_large")


@pytest.mark.parametrize("answer", [r"5\sqrt(3)", r"5\frac{1}", "5+", r"5\sqrt"])
def test_malformed_latex_never_drops_a_factor(answer):
    reason, _ = grade_answer("5", answer)
    assert reason in {"parse_error", "wrong"}


def test_normalize_and_decimal_helpers():
    assert normalize(r"\$1{,}000\text{ dollars}") == "1000"
    assert normalize(r"\left(1,2\right)") == "(1,2)"
    assert to_decimal(r"4.2\times 10^{3}") == 4200
    assert to_decimal("x") is None and to_decimal("1e" + "9" * 30) is None


def test_outer_brace_stripping_is_linear_and_keeps_unbalanced_text():
    # review #4: re-scanning once per layer made 8,000 layers take ~13 s in the caller
    import time

    t = time.perf_counter()
    assert normalize("{" * 8000 + "5" + "}" * 8000) == "5"
    assert time.perf_counter() - t < 1.0
    assert normalize("{ {7} }") == "7" and normalize("{a}{b}") == "{a}{b}"
    assert normalize("{a {}") == "{a {}"  # unbalanced: not a group around the whole answer
    assert grade_answer("5", "{" * 8000 + "5" + "}" * 8000) == ("correct", "same_text")


@pytest.mark.parametrize("gold,answer,expected", [
    # review #4: only the last right-hand side was kept, so a hedge scored as the last value
    ("4", r"x=3 \text{ or } x=4", False), ("4", "x=3, x=4", False), ("4", r"x=3 \quad x=4", False),
    ("4", "x=3; x=4", False), ("4", "x=3=4", False), ("3", "x=3=4", False), ("3", "a=2, b=3", False),
    ("3,4", "x=3, x=4", True), ("3,4", r"x=3 \text{ or } x=4", True),
    ("1,2", r"x=1 \quad \text{and} \quad x=2", True),
    ("4", "x = 2+2 = 4", True), ("1000", "x = 1,000", True), ("10000", r"n = 10\,000", True),
    ("-5", "x=-5", True), ("0", "x=", False),
])
def test_several_assignments_are_several_values(gold, answer, expected):
    assert ok(gold, answer) is expected


# ---------------------------------------------------------------- issue #17: several values, 0,250, percent words


@pytest.mark.parametrize("gold,answer,expected", [
    # gold with several assignments: the fast path used to keep only the last right-hand side
    ("b=3, b=-7", "-7", False), ("b=3, b=-7", "3, -7", True), ("b=3, b=-7", "-7,3", True),
    ("b=3, b=-7", "b=-7 \\text{ or } b=3", True), ("p=4, q=9", "9", False), ("p=4, q=9", "4, 9", True),
    # both sides name distinct values: matched by name
    ("p=4, q=9", "q=9, p=4", True), ("p=4, q=9", "p=9, q=4", False),
    (r"u=\sqrt{3}, v=2", r"v=2, u=\sqrt{3}", True), (r"u=\sqrt{3}, v=2", r"u=2, v=\sqrt{3}", False),
    # a single value against a two-value gold stays wrong whatever the names
    (r"t=1 \text{ or } t=8", "t=8", False), (r"t=1 \text{ or } t=8", "8, 1", True),
])
def test_gold_and_answer_with_several_values_compare_as_sets(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("0,375", "375", False), ("375", "0,375", False), ("0,375", "375, 0", True), ("0,375", "0.375", False),
    ("7,125", "7125", True),  # a real thousands separator still is one
])
def test_leading_zero_comma_group_is_not_a_thousands_separator(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    ("40", "40 percent", True), ("40", r"40\text{ Percent}", True), ("40", "40 pct", True),
    ("40", r"40 \mbox{percentage}", True), (r"40\%", "40 percent", True), ("0.4", "40 percent", False),
    ("40", "41 pct", False),
])
def test_percent_words_grade_like_the_percent_sign(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    # review r17: names were dropped for expressions too, so a line under another name graded
    # correct (MATH-500 gold "y = 2x + 3" vs "x = 2x + 3"); only plain numbers drop their names
    ("y = 2x + 3", "x = 2x + 3", False), ("y = -2x", "z = -2x", False), ("f(x) = x^2", "g(x) = x^2", False),
    (r"a=\sqrt{2}, a=-\sqrt{2}", r"b=\sqrt{2}, b=-\sqrt{2}", False),
    ("y = 2x + 3", "y = 3 + 2x", True), ("y = 2x + 3", "2x + 3", True),
    (r"a=\sqrt{2}, a=-\sqrt{2}", r"-\sqrt{2}, \sqrt{2}", True),
    ("k=5", "n=5", True),  # plain numbers: names still dropped (policy table)
])
def test_expressions_under_other_names_are_not_dropped_to_their_values(gold, answer, expected):
    assert ok(gold, answer) is expected


@pytest.mark.parametrize("gold,answer,expected", [
    # issue #30: the row spacing's "\[" was read as a display-math delimiter and removed: parse_error
    (r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", r"\begin{pmatrix}1&0\\[3pt]0&1\end{pmatrix}", True),
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\begin{bmatrix}1&2\\[-0.5em]3&4\end{bmatrix}", True),
    (r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", r"\begin{pmatrix}1&0\\ [2mm] 0&2\end{pmatrix}", False),
])
def test_matrix_row_spacing_is_layout(gold, answer, expected):
    assert ok(gold, answer) is expected
