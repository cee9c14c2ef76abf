"""B-STaR balance score on hand examples."""

import pytest

from kit.analysis.bstar import balance_score, balance_score_step


def test_hand_example():
    # 8 samples, 6 correct, 3 distinct correct texts (whitespace differences do not count)
    correct = [1, 1, 1, 1, 1, 1, 0, 0]
    responses = ["a b", "ab", "c", "c", "d", "d", "x", "y"]
    assert balance_score(correct, responses, n_star=4) == pytest.approx(min(3 / 4, 1) * 6 / 8)
    assert balance_score(correct, responses, n_star=2) == pytest.approx(6 / 8)  # exploration saturated


def test_extremes():
    assert balance_score([0, 0, 0], ["a", "b", "c"]) == 0.0
    assert balance_score([1, 1, 1, 1], ["same"] * 4, n_star=4) == pytest.approx(0.25)  # no diversity
    assert balance_score([1, 1, 1, 1], list("abcd"), n_star=4) == 1.0
    assert balance_score([], []) == 0.0
    with pytest.raises(ValueError):
        balance_score([1], ["a", "b"])


def test_step_mean():
    assert balance_score_step([[1, 0], [1, 1]], [["a", "b"], ["a", "b"]], n_star=2) == pytest.approx(
        (0.5 * 0.5 + 1.0 * 1.0) / 2)


def test_balance_by_step_from_records():
    from kit.analysis.bstar import balance_by_step

    recs = [{"step": 1, "problem_id": "a", "reward": 1.0, "response_text": "x"},
            {"step": 1, "problem_id": "a", "reward": 1.0, "response_text": "y"},
            {"step": 1, "problem_id": "a", "reward": 0.0, "response_text": "z"},
            {"step": 1, "problem_id": "a", "reward": 0.0, "response_text": "w"},
            {"step": 2, "problem_id": "a", "reward": 1.0, "response_text": "x"},
            {"step": 2, "problem_id": "b", "reward": 0.0, "response_text": "x"}]
    df = balance_by_step(recs, n_star=2)
    assert df.loc[1, "balance"] == pytest.approx(1.0 * 0.5) and df.loc[1, "queries"] == 1
    assert df.loc[2, "balance"] == pytest.approx((0.5 * 1.0 + 0.0) / 2) and df.loc[2, "queries"] == 2
    with pytest.raises(KeyError, match="record 0"):
        balance_by_step([{"step": 1}])
