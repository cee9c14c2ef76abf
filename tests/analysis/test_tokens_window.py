"""kit.analysis.tokens.post_feedback_tokens: the denominator of reflection conditioned on a tool response (#45)."""

from kit.analysis.tokens import classify_tokens, post_feedback_tokens


def test_window_tokens_count_the_model_tokens_right_after_each_feedback_block():
    # 3 model tokens, feedback (2), 30 model tokens, feedback (1), 5 model tokens
    mask = [1] * 3 + [0] * 2 + [1] * 30 + [0] + [1] * 5
    assert post_feedback_tokens(mask, reflection_window=24) == 24 + 5
    assert post_feedback_tokens([1] * 10) == 0  # no tool response: no window
    # the same tokens classify_tokens calls reflection when high
    labels = classify_tokens(["a"] * len(mask), mask, [True] * len(mask))
    assert sum(lab == "reflection" for lab in labels) == post_feedback_tokens(mask)
