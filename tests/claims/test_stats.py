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
