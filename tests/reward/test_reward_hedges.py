"""Issue #44 parts 1, 2 and 9: hedges in words, relations, invisible text and ``\\mathrm{e}`` (in-process
grading; the policy table of kit.reward's docstring states the rules)."""

import pytest

from kit.reward import grade_answer
from kit.reward.rules import normalize
from kit.reward.wording import stray_words


def reason(gold, answer):
    return grade_answer(gold, answer)[0]


# ---------------------------------------------------------------- part 1: only unit words are dropped, one group


@pytest.mark.parametrize("gold,answer", [
    ("30", r"30 \text{ or less}"),                       # the example
    ("12", r"12\text{ at most}"), ("12", r"12 \textbf{ or fewer}"), ("12", r"12\mbox{ at least}"),
    ("12", r"12\text{ (approx.)}"), ("12", r"12 \text{ (?)}"), ("12", r"12\text{ not}"),
    ("12", r"\text{about } 12"), ("12", r"\text{roughly}\ 12"), ("12", r"12\textit{ or more}"),
    ("12", r"12\textnormal{ or so}"), ("12", r"12 \mathrm{or\ less}"), ("12", r"12\text{ cm or less}"),
    ("12", r"12\text{ cm}\text{ or less}"), ("12", r"12\text{ or less}\text{ cm}"),
    ("12", r"12\text{ apples}"),                         # a counted noun is not a unit
])
def test_a_qualifier_in_words_is_not_a_unit(gold, answer):
    assert reason(gold, answer) == "wrong", (gold, answer)


@pytest.mark.parametrize("gold,answer", [
    ("12", "12 less"), ("12", "12 more"), ("12", "12t"), ("12", "12 m"), ("12", "12ab"), ("12", "12 increase"),
])
def test_bare_words_math_verify_used_to_drop_are_variables(gold, answer):
    # math_verify's unit reading dropped ~150 trailing words, qualifiers and single letters among them
    assert reason(gold, answer) == "wrong", (gold, answer)


@pytest.mark.parametrize("gold,answer", [
    ("12", r"12\text{ inches}"), ("12", r"12 \text{ sq. ft.}"), ("12", r"12\text{ km/h}"), ("12", "12 km"),
    ("12", r"12 \mathrm{kg}"), ("12", r"12\text{ square units}"), ("12", r"12\text{ miles per hour}"),
    ("12", r"12\text{ Dollars}"), ("12", "12 cm^2"), (r"12\text{ m}^2", "12"), ("12", r"12^\circ\text{ F}"),
    ("3.5", r"3.5 \text{ hours}"), (r"15\mbox{ cm}^2", r"15\text{ cm}^{2}"),
])
def test_units_are_still_dropped(gold, answer):
    assert reason(gold, answer) == "correct", (gold, answer)


def test_only_one_unit_group_is_dropped():
    assert normalize(r"12\text{ cm}") == "12"
    assert normalize(r"12\text{ cm}\text{ cm}") == r"12\text{ cm}"
    assert reason("12", r"12\text{ cm}\text{ cm}") == "wrong"


def test_words_of_the_gold_and_separators_are_not_stray():
    assert stray_words(r"\text{even}", r"\text{even}") == []
    assert stray_words("3, 4", r"x=3 \text{ or } x=4") == []
    assert stray_words("5", r"\operatorname{lcm}(1,5)") == []
    assert stray_words("30", r"30\text{ or less}") == ["less"]
    assert reason("3,4", r"x=3 \text{ or } x=4") == "correct"
    assert reason(r"\text{Evelyn}", r"\text{Evelyn}") == "correct"


# ---------------------------------------------------------------- part 2: relations and what the box shows


@pytest.mark.parametrize("answer", [
    "< 9", r"\le 9", r"\geq 9", r"\approx 9", r"\sim 9", r"\ne 9", "≤ 9", r"\in 9", r"\to 9", r"\Rightarrow 9",
    r"\rightarrow 9", r"\not< 9", r"\lesssim 9",
])
def test_a_relation_without_left_side_is_not_a_value(answer):
    assert grade_answer("9", answer) == ("wrong", "relation_without_left_side"), answer


@pytest.mark.parametrize("gold,answer,expected", [
    ("9", r"x \approx 9", "wrong"), ("9", r"n \ge 9", "wrong"), ("9", "x < 10", "wrong"),
    (r"\frac{1}{3}", r"x \approx 0.3333", "wrong"),
    ("x < 9", "x<9", "correct"), ("9", "x = 9", "correct"),                  # a gold relation, and '=' as before
    (r"\{1, 2\}", r"\{x \mid x < 3\}", "parse_error"),  # inside braces: not a top-level hedge; unread set-builder
])
def test_an_order_or_approximation_against_a_value(gold, answer, expected):
    assert reason(gold, answer) == expected, (gold, answer)


@pytest.mark.parametrize("gold,answer,expected", [
    ("9", r"\hphantom{9}", "wrong"), ("9", r"\hphantom 9", "wrong"), ("9", r"\phantom{9}", "wrong"),
    ("9", r"{\vphantom{9}}", "wrong"), (r"\frac{2}{3}", r"\hphantom{\frac{2}{3}}", "wrong"),
    ("9", r"\hphantom{\vphantom{1}9}", "wrong"),                 # nested: all of it is blank
    ("9", r"\vphantom{8}9", "correct"), ("9", r"\vphantom{\int}9", "correct"), ("9", r"9\hphantom{00}", "correct"),
    ("9", r"\hphantom{8}9", "correct"), ("9", r"\smash{9}", "correct"), ("9", r"\smash[b]{9}", "correct"),
    ("9", r"\mathrlap{9}", "correct"), ("9", r"\hspace{1em}9", "correct"),
    ("9", r"\hphantom{9}8", "wrong"),                            # shows 8
])
def test_graded_as_the_box_shows_it(gold, answer, expected):
    assert reason(gold, answer) == expected, (gold, answer)


def test_an_unclosed_phantom_is_left_as_written():
    assert normalize(r"\hphantom{9") == r"\hphantom{9"
    assert reason("9", r"\hphantom{9") != "correct"


def test_left_and_right_are_dropped_but_arrows_kept():
    assert normalize(r"\left(1,2\right)") == "(1,2)"
    assert normalize(r"x \rightarrow 2") == r"x \rightarrow 2"


# ---------------------------------------------------------------- part 9: \mathrm{e} and \mathrm{i}


@pytest.mark.parametrize("gold,answer,expected", [
    (r"\mathrm{e}^2", "e^2", "correct"), (r"\mathrm{e}^{2}", r"\exp(2)", "correct"),
    (r"2\mathrm{e}", "2e", "correct"), ("e^{3}", r"\mathrm{e}^3", "correct"), (r"\mathrm {e}+1", "1+e", "correct"),
    (r"\mathrm{e}^2", "e^3", "wrong"), (r"3+2\mathrm{i}", "3+2i", "correct"), (r"3+2\mathrm{i}", "3-2i", "wrong"),
])
def test_upright_e_and_i_are_the_constants(gold, answer, expected):
    assert reason(gold, answer) == expected, (gold, answer)
