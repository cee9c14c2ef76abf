"""The intervals behind the claims' verdicts, against published values and simple cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kit.claims.stats import bootstrap_ratio, decide, newcombe, t_interval, welch, wilson, window_size


def test_newcombe_matches_the_published_example():
    # Newcombe (1998), Stat Med 17:873, example (a): 56/70 vs 48/80, method 10 -> 0.0524 to 0.3339
    d, lo, hi = newcombe(48 / 80, 80, 56 / 70, 70)
    assert d == pytest.approx(0.2)
    assert (lo, hi) == (pytest.approx(0.0524, abs=1e-4), pytest.approx(0.3339, abs=1e-4))


def test_wilson_matches_the_published_example():
    # Newcombe (1998), Stat Med 17:857, 81/263, Wilson score interval 0.2553 to 0.3662
    assert wilson(81 / 263, 263) == (pytest.approx(0.2553, abs=1e-4), pytest.approx(0.3662, abs=1e-4))


def test_t_interval_three_seeds():
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert m == 2.0
    assert hi - m == pytest.approx(4.302653 * 1.0 / math.sqrt(3), rel=1e-6)  # t(0.975, 2) sd / sqrt(3)
    assert math.isnan(t_interval([1.0])[1])


def test_welch_difference_direction_and_width():
    d, lo, hi = welch([1, 2, 3, 4], [11, 12, 13, 14])
    # equal variances 5/3 over 4 steps each: se sqrt(2 * 5/12), Welch df 6, t(0.975, 6) = 2.446912
    assert d == 10 and hi - 10 == pytest.approx(2.446912 * math.sqrt(2 * 5 / 12), rel=1e-5) and 10 - lo == pytest.approx(hi - 10)


def test_bootstrap_ratio_is_seeded_and_covers_the_ratio():
    num, den = [1, 2, 0, 3, 1] * 5, [4] * 25
    a, b = bootstrap_ratio(num, den), bootstrap_ratio(num, den)
    assert a == b and a[1] < a[0] < a[2]
    assert math.isnan(bootstrap_ratio([0], [0])[0])


@pytest.mark.parametrize("lo,hi,cmp,thr,expected", [
    (0.1, 0.2, ">", 0.0, "reproduced"), (-0.2, -0.1, ">", 0.0, "not reproduced"), (-0.2, 0.0, ">", 0.0, "not reproduced"),
    (-0.1, 0.1, ">", 0.0, "inconclusive"), (0.0, 0.1, ">", 0.0, "inconclusive"),
    (0.01, 0.1, "<", 0.15, "reproduced"), (0.2, 0.3, "<", 0.15, "not reproduced"), (0.1, 0.2, "<", 0.15, "inconclusive"),
    (np.nan, 0.1, ">", 0.0, "inconclusive"),
])
def test_decide(lo, hi, cmp, thr, expected):
    assert decide(lo, hi, cmp, thr)[0] == expected


def test_window_size():
    assert [window_size(s) for s in (3, 10, 24, 40, 60)] == [3, 5, 5, 8, 12]


def test_a_paired_bootstrap_keeps_what_the_two_arms_share():
    from kit.claims.stats import bootstrap_ratio_diff, bootstrap_ratio_diff_paired
    # problems of very different difficulty, the second policy 0.1 better on every one of them
    rng = np.random.default_rng(1)
    base = rng.uniform(0.05, 0.95, size=40)
    den = [100.0] * 40
    a, b = list((base + 0.1) * 100), list(base * 100)
    d, lo, hi = bootstrap_ratio_diff_paired(a, den, b, den)
    assert d == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)  # every resample: 0.1
    d2, lo2, hi2 = bootstrap_ratio_diff(a, den, b, den)
    assert d2 == pytest.approx(0.1) and lo2 < 0.0 < hi2  # unpaired, the difficulty spread swamps it
    with pytest.raises(ValueError, match="differ in number"):
        bootstrap_ratio_diff_paired([1, 2], [1, 1], [1], [1])


def test_batch_means_welch_by_hand():
    from kit.claims.stats import batch_means_welch
    # 10 steps each in 5 blocks of 2: block means of a 1..5 (steps 0.5, 1.5, ...), of b 11..15
    a = [m + s for m in (1, 2, 3, 4, 5) for s in (-0.5, 0.5)]
    b = [m + 10 + s for m in (1, 2, 3, 4, 5) for s in (-0.5, 0.5)]
    d, lo, hi = batch_means_welch(a, b)
    # Welch over two sets of 5 block means, variance 2.5 each: se sqrt(2 * 2.5 / 5) = 1, df 8, t = 2.306004
    assert d == 10 and hi - 10 == pytest.approx(2.306004, rel=1e-5) and 10 - lo == pytest.approx(2.306004, rel=1e-5)
    # over single steps the interval would be narrower: the steps within a block are not independent units
    assert hi - lo > welch(a, b)[2] - welch(a, b)[1]
    assert math.isnan(batch_means_welch([1, 2, 3], b)[1])
