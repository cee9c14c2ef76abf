"""B-STaR balance score on hand examples."""

import math

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


# --------------------------------------------------------------------------- the authors' variant (issue #47)


def test_the_authors_balance_score_on_a_hand_computed_fixture():
    from kit.analysis.bstar import balance_score_authors, balance_score_selected

    # query 1: scores 0.9, 0.8, 0.3, 0.7, 0.95; threshold 0.5 selects 0.95 (e, wrong), 0.9 (a), 0.8 (a again:
    # an exact duplicate, dropped), 0.7 (b); s = 3 distinct selected, c = 2 correct: min(2/8, 1) * 2/3 = 1/6
    q1 = ([1, 1, 1, 1, 0], ["a", "a", "x", "b", "e"], [0.9, 0.8, 0.3, 0.7, 0.95])
    assert balance_score_selected(*q1, threshold=0.5) == pytest.approx(1 / 6)
    # a cap of 2 keeps the two best scores (e, a): c = 1, s = 2: 1/8 * 1/2
    assert balance_score_selected(*q1, threshold=0.5, cap=2) == pytest.approx(1 / 16)
    # "a " differs from "a" for the authors (exact text), not for the kit's monitor (whitespace-blind)
    assert balance_score_selected([1, 1], ["a", "a "], [1.0, 1.0], threshold=0.0) == pytest.approx(2 / 8)
    # query 2: nothing above the threshold: it drops out of the mean instead of counting 0
    q2 = ([1, 0], ["p", "q"], [0.1, 0.2])
    assert balance_score_selected(*q2, threshold=0.5) is None
    # query 3: ten distinct correct of ten selected: saturated, 1.0
    q3 = ([1] * 10, [f"s{i}" for i in range(10)], [0.9] * 10)
    mean = balance_score_authors(*zip(q1, q2, q3, strict=True), threshold=0.5)
    assert mean == pytest.approx((1 / 6 + 1.0) / 2)
    # the reference solution joins each pool as correct with score 1.0 and lifts the score
    with_ref = balance_score_selected(*q1, threshold=0.5, reference="r")
    assert with_ref == pytest.approx(3 / 8 * 3 / 4)
    assert math.isnan(balance_score_authors([[0]], [["z"]], [[0.0]], threshold=0.5))  # no query selects anything
    assert balance_score_authors([[0]], [["z"]], [[0.0]], threshold=0.5, references=["r"]) == pytest.approx(1 / 8)
    with pytest.raises(ValueError, match="scores"):
        balance_score_selected([1], ["a"], [0.1, 0.2], threshold=0.0)
