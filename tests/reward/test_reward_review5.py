"""Issue #44 review escapes: unread control words, unevaluated operators, answer blocks graded against the box,
``\\boxed`` across a newline, unbraced ``\\mathrm e`` (in-process; the policy table of kit.reward states the rules)."""

import pytest

from kit.prompts import ANSWER_CLOSE, ANSWER_OPEN
from kit.reward import extract_final_answer, grade_answer
from kit.reward.rules import plain_value
from kit.reward.wording import KNOWN_COMMANDS, LAYOUT_COMMANDS, unread_command

A, Z = ANSWER_OPEN, ANSWER_CLOSE


def reason(gold, answer):
    return grade_answer(gold, answer)[0]


# ---------------------------------------------------------------- defect 2: what the kit does not read scores nothing

@pytest.mark.parametrize("answer", [
    r"\lessgtr 9", r"\gtrless 9", r"\nsim 9", r"\ncong 9", r"\thicksim 9", r"\eqsim 9", r"\bumpeq 9",
    r"\preccurlyeq 9", r"\sqsubseteq 9", r"\lessdot 9", r"\ngeqslant 9", r"\uparrow 9", r"\nearrow 9",
    r"\textless 9", "≦ 9", "≧ 9", r"\foo 9", r"\atleast 9", r"x \stackrel{?}{=} 9",
    r"\succcurlyeq 9", r"\Downarrow 9", r"\bowtie 9", "⪯ 9", r"x \curlyeqprec 9",           # own inputs
])
def test_a_control_word_the_kit_does_not_read_is_a_parse_error(answer):
    r, detail = grade_answer("9", answer)
    assert r == "parse_error" and detail.startswith("unread_command"), (answer, r, detail)


@pytest.mark.parametrize("answer", [
    r"{\le} 9", r"{ \geq } 9", r"{{<}} 9", r"x \to 9", r"x \rightarrow 9", r"x \propto 9", r"x \mapsto 9",
    r"x \doteq 9", r"x {\le} 9", r"x \in 9", r"x \equiv 9", r"x \not= 8", r"n \gg 9",
])
def test_every_relation_but_equals_is_a_hedge(answer):
    assert reason("9", answer) == "wrong", answer


@pytest.mark.parametrize("answer", [r"9\ldots", r"9,\ldots", r"9, \dots", r"9 \cdots", "9...", "9, ...", "9…"])
def test_an_unfinished_list_is_not_a_value(answer):
    assert grade_answer("9", answer) == ("wrong", "ellipsis"), answer


@pytest.mark.parametrize("answer", [
    r"x \big 9", r"\langle 9", r"x \cup 9", r"a \choose 9", r"x \mid 9", r"\lfloor 9", r"\frac 9", r"\sqrt",
    r"\cdot 9", r"\times 9", r"{\sin} 9",
])
def test_math_verify_may_not_read_a_part_of_the_answer(answer):
    assert reason("9", answer) in ("wrong", "parse_error"), answer


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_every_allowlisted_command_keeps_the_value_it_is_next_to():
    # what math_verify drops silently is on no list the kit trusts: a known command next to 9 is not 9,
    # unless it is layout that only shows or spaces what follows
    for c in sorted(KNOWN_COMMANDS - LAYOUT_COMMANDS - {"quad", "qquad", "thinspace", "medspace", "thickspace"}):
        for form in (f"\\{c} 9", f"x \\{c} 9", f"{{\\{c}}} 9"):
            assert reason("9", form) != "correct", form


def test_a_command_of_the_gold_is_read():
    assert unread_command(r"\angle ABC", r"\angle ABC") is None
    assert unread_command("9", r"\angle 9") == r"\angle"


@pytest.mark.parametrize("gold,answer", [
    ("6", "x = 6"), ("9", "f(2)=9"), ("9", r"\vphantom{A}9"), ("x<9", "x<9"), ("x < 9", r"x \lt 9"),
    (r"\frac{1}{2}", r"\dfrac12"), ("12", r"12\text{ cm}"), (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
    (r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"\lfloor 9.5 \rfloor", "9"), ("5", r"\boxed{5}"), (r"\infty", r"\infty"), ("\\alpha + 1", "1+\\alpha"),
])
def test_honest_answers_still_pass(gold, answer):
    assert reason(gold, answer) == "correct", (gold, answer)


# ---------------------------------------------------------------- defect 1: operators applied, not evaluated

@pytest.mark.parametrize("answer", [
    r"\max 30", r"\min 30", r"\sup 30", r"\inf 30", r"\lim 30", r"\limsup 30", r"\max(30)",
    r"\operatorname{max} 30", r"\mathrm{min}(30)", "max(30)", "Min(30)", r"\max\{30\}", r"\liminf_{n} 30",
    r"\gcd(30)", r"\operatorname{lcm}(30)", r"\max(10, 30)", r"\sum_{k=1}^{1} 30",
])
def test_an_operator_applied_to_the_value_is_not_the_value(answer):
    r, detail = grade_answer("30", answer)
    assert r == "wrong" and detail.startswith("unevaluated"), (answer, r, detail)


def test_an_operator_of_the_gold_is_left_to_math_verify():
    assert reason(r"\max(a, b)", r"\max(a,b)") == "correct"


@pytest.mark.parametrize("answer", [r"12\text{ ways}", r"12 \text{ apples}"])
def test_counted_nouns_are_not_units(answer):
    assert reason("12", answer) == "wrong"


# ---------------------------------------------------------------- defect 4: the answer block graded against the box

@pytest.mark.parametrize("block", [
    "-6", "seven", "not 6", "6 or more", "at least 6", r"\approx 6", r"\sqrt{6}", "6!", "6^6", r"6 \times 6",
    "none", "no solution", "I don't know", "I don’t know", "6?", "x = 6.5", "x = 6 = 7", r"$6$ or $7$", "sixty",
    "six or seven", "one half", r"6 \pm 1", "approximately 6", "6 (maybe)", "4!", r"\frac{12}{2}x",
])
def test_a_block_that_retracts_or_states_another_value_takes_the_box_back(block):
    assert extract_final_answer(rf"so \boxed{{6}}. {A}{block}{Z}") is None, block


@pytest.mark.parametrize("text", [r"\boxed{6} <ANSWER>7</ANSWER>", r"\boxed{6} <answer >7</answer>",
                                  r"\boxed{6} <Answer>7</Answer>", r"\boxed{6} < answer>7</answer>"])
def test_answer_tags_in_any_case_or_spacing_are_read(text):
    assert extract_final_answer(text) is None


def test_a_box_inside_an_upper_case_block_is_the_answer():
    assert extract_final_answer(r"\boxed{6} <ANSWER>\boxed{7}</ANSWER>") == "7"


@pytest.mark.parametrize("box,block", [
    ("6", "x = 6 (from step 2)"), ("6", "The area is 6 square units (computed in step 3)."), ("6", "$6$ cm$^2$"),
    (r"\frac{1}{2}", r"\frac12"), (r"10\,000", "10,000"), ("2500", "2 500"), ("36", "6^2 = 36"), ("10^3", "1000"),
    ("C", "(C) 3/4"), (r"\frac{1}{3}", "1/3 ≈ 0.333"), ("6", "six"), ("6", "see above"), ("6", "6."),
    (r"\frac{\sqrt{3}}{2}", r"\sqrt{3}/2"), ("2x+1", "1 + 2x"), ("25", "twenty five"), ("6", r"The answer is \(6\)."),
    (r"\pi", r"\pi \approx 3.14"), ("C", "C"), ("x=3", "x = 3"),
])
def test_a_block_that_restates_the_value_leaves_the_box(box, block):
    assert extract_final_answer(rf"so \boxed{{{box}}}. {A}{block}{Z}") == box, (box, block)


def test_the_plain_evaluator_is_bounded():
    assert plain_value("7^{7^{7^7}}") is None and plain_value("200!") is None and plain_value("9" * 400) is None
    assert plain_value(r"\frac12") == 0.5 and plain_value("6!") == 720.0 and plain_value(r"\sin x") is None


# ---------------------------------------------------------------- defect 3: TeX skips a newline after \boxed

@pytest.mark.parametrize("text,expected", [
    ("so \\boxed\n7", "7"), ("so \\boxed\r\n  7.", "7"), ("\\boxed{1}, \\boxed\n\n\\pi", r"\pi"), ("\\boxed\t\n-3", "-3"),
])
def test_any_space_after_a_bare_boxed_is_skipped(text, expected):
    assert extract_final_answer(text) == expected


def test_a_word_after_a_newline_is_still_prose():
    assert extract_final_answer("\\boxed{6} and \\boxed\naround it") == "6"


# ---------------------------------------------------------------- defect 9: unbraced upright e

@pytest.mark.parametrize("gold,answer,expected", [
    (r"\mathrm e^2", "e^2", "correct"), (r"{\rm e}^2", "e^2", "correct"), (r"\rm e^2", "e^{2}", "correct"),
    (r"2{\rm e}", "2e", "correct"), (r"\mathrm e^2", "e^3", "wrong"), (r"3+2{\rm i}", "3+2i", "correct"),
])
def test_unbraced_upright_e_is_euler(gold, answer, expected):
    assert reason(gold, answer) == expected, (gold, answer)
