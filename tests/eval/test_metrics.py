"""Evaluation statistics against brute-force enumeration and hand examples."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.eval.metrics import (
    avg_at_n,
    bootstrap_ci,
    maj_at_k,
    majority_answer,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_one,
)


def brute_pass_at_k(row, k):
    """Fraction of the C(n, k) subsets that hold at least one correct sample."""
    subsets = list(itertools.combinations(range(len(row)), k))
    return sum(any(row[j] for j in s) for s in subsets) / len(subsets)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=5), st.integers(1, 6))
def test_pass_at_k_equals_subset_enumeration(rows, k):
    expected = np.mean([brute_pass_at_k(r, k) for r in rows])
    assert pass_at_k(rows, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_closed_form_cases():
    assert pass_at_k_one(16, 0, 16) == 0.0
    assert pass_at_k_one(16, 1, 16) == 1.0
    assert pass_at_k_one(16, 4, 1) == pytest.approx(4 / 16)
    assert pass_at_k_one(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    with pytest.raises(ValueError):
        pass_at_k_one(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k_one(4, 1, 0)


def test_avg_is_pass1_and_curve_is_monotone():
    rng = np.random.default_rng(0)
    correct = (rng.random((30, 16)) < rng.random((30, 1))).astype(int)
    assert avg_at_n(correct) == pytest.approx(pass_at_k(correct, 1))
    curve = list(pass_at_k_curve(correct).values())
    assert len(curve) == 16 and all(a <= b + 1e-12 for a, b in zip(curve, curve[1:], strict=False))
    assert curve[-1] == pytest.approx(np.mean(correct.any(axis=1)))


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        avg_at_n([1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        avg_at_n([[0.5, 1]])


def test_majority_vote_and_ties():
    assert majority_answer(["3", None, "5", "5", "3"]) == "3"  # tie -> first seen
    assert majority_answer([None, None]) is None
    answers = [["7", "7", "2"], ["1", "4", "4"]]
    correct = [[True, True, False], [True, False, False]]
    assert maj_at_k(answers, correct, k=3) == pytest.approx(0.5)
    # k=1: majority of one sample = that sample -> maj@1 equals pass@1
    assert maj_at_k(answers, correct, k=1) == pytest.approx(np.mean(correct))
    # k=2 by hand: problem 0 subsets {77,72,72}: 77->7 ok, 72->7 (first) ok, 72 -> 7 ok => 1
    #              problem 1 subsets {14 ->1 ok, 14 ->1 ok, 44 -> 4 wrong} => 2/3
    assert maj_at_k(answers, correct, k=2) == pytest.approx((1 + 2 / 3) / 2)


def test_maj_at_k_sampled_close_to_exact():
    rng = np.random.default_rng(1)
    answers = rng.integers(0, 3, size=(20, 16)).tolist()
    correct = [[a == 0 for a in row] for row in answers]
    exact = maj_at_k(answers, correct, k=5, exact=True)
    approx = maj_at_k(answers, correct, k=5, exact=False, resamples=2000, seed=3)
    assert approx == pytest.approx(exact, abs=0.03)


def test_bootstrap_interval_covers_mean_and_shrinks():
    rng = np.random.default_rng(2)
    small = rng.random(30)
    big = rng.random(3000)
    lo, hi = bootstrap_ci(small, samples=2000)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_ci(big, samples=500)
    assert (hi2 - lo2) < (hi - lo) / 4
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)
    with pytest.raises(ValueError):
        bootstrap_ci(small, alpha=1.5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["1", "2", "3", None]), min_size=5, max_size=5), min_size=1, max_size=4),
       st.integers(1, 5), st.sampled_from(["1", "2"]))
def test_maj_at_k_equals_python_vote_over_all_subsets(answers, k, gold):
    correct = [[a == gold for a in row] for row in answers]
    expected = np.mean([np.mean([majority_answer([row[j] for j in s]) == gold
                                 for s in itertools.combinations(range(5), k)]) for row in answers])
    assert maj_at_k(answers, correct, k, exact=True) == pytest.approx(expected)


def test_maj_at_k_sampled_breaks_ties_like_exact():
    # review #8: sampled subsets broke ties by a random order, exact ones by the first index,
    # so maj@8 of n=16 (sampled by default) disagreed with the exact value (0.50 vs 0.56)
    row = list("aabbbcaaab" * 2)[:16]
    correct = [[a == "a" for a in row]]
    exact = maj_at_k([row], correct, k=8, exact=True)
    approx = maj_at_k([row], correct, k=8, exact=False, resamples=20000, seed=0)
    assert approx == pytest.approx(exact, abs=0.01)


# ---------------------------------------------------------------- issue #17: vote on equivalence classes


def test_equivalent_answers_vote_together_and_comparisons_are_cached():
    from kit.eval.metrics import group_equivalent, maj_at_k_stats

    calls: list[tuple[str, str]] = []

    def same(a, b):  # a stand-in verifier: numbers equal as fractions
        calls.append((a, b))
        from fractions import Fraction
        return Fraction(a) == Fraction(b)

    # 2/5 written three ways splits its votes; "9" (wrong) wins the raw vote 2 to 1
    row = ["0.4", "2/5", "9", "0.40", "9", None]
    ok = [True, True, False, True, False, False]
    assert maj_at_k([row], [ok], k=6) == 0.0
    cache: dict = {}
    acc, tie = maj_at_k_stats([row], [ok], k=6, equivalent=same, cache=cache)
    assert (acc, tie) == (1.0, 0.0)
    n_calls = len(calls)  # "2/5"~"0.4", "9"~"0.4", "0.40"~"0.4", the second "9" is not compared again
    maj_at_k_stats([row], [ok], k=3, equivalent=same, cache=cache)  # another k: no new comparisons
    assert len(calls) == n_calls == 3
    assert group_equivalent(row, same) == ["0.4", "0.4", "9", "0.4", "9", None]


def test_tie_rate_counts_shared_top_votes():
    from kit.eval.metrics import maj_at_k_stats

    # k=2 subsets of ("5", "6", "5"): {0,1} tie, {0,2} "5" twice, {1,2} tie -> 2/3 of subsets tied
    acc, tie = maj_at_k_stats([["5", "6", "5"]], [[True, False, True]], k=2, exact=True)
    assert tie == pytest.approx(2 / 3) and acc == pytest.approx(2 / 3)  # the tie {1, 2} goes to "6", seen first
    assert maj_at_k_stats([["5", "6", "5"]], [[True, False, True]], k=1)[1] == 0.0
    # sampled subsets estimate the same tie rate
    rng = np.random.default_rng(4)
    row = [str(x) for x in rng.integers(0, 3, 12)]
    exact = maj_at_k_stats([row], [[a == "0" for a in row]], k=4, exact=True)
    approx = maj_at_k_stats([row], [[a == "0" for a in row]], k=4, exact=False, resamples=20000, seed=1)
    assert approx == pytest.approx(exact, abs=0.02)
