"""Issue #44 parts 3 and 4: prose about ``\\boxed`` is not a box, and a final answer block can take the
boxed answer back (extraction, then the public verify path)."""

import pytest

from kit.prompts import ANSWER_CLOSE, ANSWER_OPEN
from kit.reward import boxed_contents, extract_final_answer, verify
from kit.reward.extract import takes_back

A, Z = ANSWER_OPEN, ANSWER_CLOSE


# ---------------------------------------------------------------- part 3: "\boxed <word>" is prose


@pytest.mark.parametrize("text", [
    r"so \boxed{6}. I wrote \boxed around it",                   # the kind
    r"the answer is \boxed{6}; note that \boxed marks the final answer",
    r"\boxed{6}, and I used \boxed x to show it",                 # a single letter is prose too
    r"\boxed{6} (a \boxed or an \fbox is fine)",
    r"\boxed{6} \boxed (empty) was my first try",
])
def test_a_bare_boxed_followed_by_prose_is_not_a_box(text):
    assert extract_final_answer(text) == "6"
    assert extract_final_answer(text, fallback=True) == "6"


@pytest.mark.parametrize("text,expected", [
    (r"so \boxed 7", "7"), (r"so \boxed 7.", "7"), (r"\boxed -12, done", "-12"), (r"$\boxed 2.5$", "2.5"),
    (r"\boxed \pi", r"\pi"), (r"\fbox 3!", "3"), (r"\boxed{1} then \boxed 4", "4"),
])
def test_the_tex_space_form_still_boxes_a_number_or_a_control_word(text, expected):
    assert extract_final_answer(text) == expected


def test_prose_boxed_is_not_listed_among_boxes():
    assert boxed_contents(r"\boxed{a\{b\}c} \fbox{2} \boxed 7 and \boxed around") == [r"a\{b\}c", "2", "7"]


def test_prose_boxed_at_the_very_end_is_still_a_cut_off_box():
    # the text ending right after the command is a box cut off (issue #30), not prose
    assert extract_final_answer(r"\boxed{6} so the answer is \boxed") is None


def test_prose_boxed_no_longer_costs_the_reward():
    v = verify("6", r"<reason>... so \boxed{6}. I wrote \boxed around it to mark it.")
    assert (v.correct, v.extracted) == (True, "6")


# ---------------------------------------------------------------- part 4: the final answer block


@pytest.mark.parametrize("text", [
    rf"... \boxed{{6}}. {A}7{Z}",                                 # the example
    rf"so \boxed{{42}}. {A}The answer is 41.{Z}",
    rf"\boxed{{2500}} {A}2,600{Z}",
    rf"\boxed{{x=3}} {A}x = 3 or x = 4{Z}",                       # an added alternative
    rf"{A}\boxed{{6}}{Z} on second thought {A}8{Z}",              # a later block without a box
    rf"\boxed{{6}} {A}{Z}",                                        # empty
    rf"\boxed{{6}} {A}   {Z}",                                     # blank
    rf"\boxed{{6}} {A}",                                           # opened and cut off
])
def test_a_final_answer_block_that_takes_the_box_back_is_no_answer(text):
    assert extract_final_answer(text) is None
    assert extract_final_answer(text, fallback=True) is None


@pytest.mark.parametrize("text,expected", [
    (rf"\boxed{{6}} {A}6{Z}", "6"), (rf"\boxed{{6}} {A}The answer is $6$.{Z}", "6"),
    (rf"\boxed{{2500}} {A}2,500{Z}", "2500"), (rf"\boxed{{6}} {A} six {Z}", "6"),
    (rf"\boxed{{\frac{{1}}{{2}}}} {A}1/2{Z}", r"\frac{1}{2}"), (rf"\boxed{{x=3}} {A}x = 3{Z}", "x=3"),
    (rf"\boxed{{\frac{{1}}{{2}}}} {A}0.5{Z}", r"\frac{1}{2}"),     # the same value in another form (graded, not matched)
    (rf"{A}7{Z} then \boxed{{6}}", "6"),                           # the box comes after the block: the box is last
    (rf"{A}so \boxed{{6}}{Z} and {A}\boxed{{6}}{Z}", "6"),
    (rf"{A}\boxed{{6}}{Z} (check: 7)", "6"),                       # prose after a boxed block is not a block
])
def test_a_final_answer_block_that_restates_the_box_leaves_it(text, expected):
    assert extract_final_answer(text) == expected


def test_takes_back_compares_the_numbers_written():
    assert takes_back("", "6") and takes_back(" \n", "6")
    assert takes_back("7", "6") and takes_back("6 or 7", "6")
    assert not takes_back("06", "6") and not takes_back("x = 6", "x=6") and not takes_back("see above", "6")


@pytest.mark.parametrize("response", [rf"... \boxed{{6}}. {A}7{Z}", rf"\boxed{{6}} {A}{Z}"])
def test_a_taken_back_answer_earns_nothing(response):
    v = verify("6", response)
    assert (v.correct, v.reason, v.extracted) == (False, "no_answer", None)
    assert verify("7", response).reason == "no_answer"   # nor the unboxed block's value
