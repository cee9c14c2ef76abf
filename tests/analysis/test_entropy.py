"""Per-token entropy: known distributions, the model path, top-20% marking, the HTML view."""

import numpy as np
import pytest

from kit.analysis.entropy import entropy_from_logits, entropy_html, high_entropy_mask, trajectory_entropy


def test_entropy_of_known_distributions():
    assert entropy_from_logits(np.zeros(8)) == pytest.approx(np.log(8))
    p = np.array([0.5, 0.25, 0.125, 0.125])
    assert entropy_from_logits(np.log(p)) == pytest.approx(1.75 * np.log(2))  # 1.75 bits
    assert entropy_from_logits(np.array([0.0, -1e9, -1e9])) == pytest.approx(0.0, abs=1e-9)
    batch = entropy_from_logits(np.stack([np.zeros(4), np.log(p)]))
    assert batch.shape == (2,) and batch[0] == pytest.approx(np.log(4))
    # shift invariance and huge logits stay finite
    assert entropy_from_logits(np.log(p) + 1e4) == pytest.approx(1.75 * np.log(2))


def test_trajectory_entropy_uses_the_shifted_logits():
    import torch

    class Uniform:
        """logits that make position i's distribution uniform over the first i+2 tokens"""

        def __call__(self, input_ids):
            L = input_ids.shape[1]
            logits = torch.full((1, L, 16), -1e9)
            for i in range(L):
                logits[0, i, : i + 2] = 0.0
            return type("Out", (), {"logits": logits})()

    e = trajectory_entropy(Uniform(), [1, 2, 3], [4, 5])
    # response token 0 is predicted at position 2 (uniform over 4), token 1 at position 3 (over 5)
    assert e == pytest.approx([np.log(4), np.log(5)])
    with pytest.raises(ValueError):
        trajectory_entropy(Uniform(), [], [1])


def test_top_fraction_ignores_tool_tokens():
    ent = np.array([5.0, 0.1, 0.2, 9.0, 9.5, 0.3, 0.4, 0.5, 0.6, 4.0, 0.7, 0.8])
    mask = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1])  # the two highest are tool tokens
    hi = high_entropy_mask(ent, mask, 0.2)
    assert hi.tolist() == [True, False, False, False, False, False, False, False, False, True, False, False]
    assert high_entropy_mask(ent, mask, 0.0).sum() == 0
    with pytest.raises(ValueError):
        high_entropy_mask(ent, mask[:-1])


def test_html_marks_high_tokens_and_greys_tool_output():
    pieces = ["We", " need", "<tool_response>", "42", " so", " <b>"]
    ent = [0.1, 3.0, 9.0, 9.0, 0.2, 0.3]
    mask = [1, 1, 0, 0, 1, 1]
    out = entropy_html(pieces, ent, mask, top_frac=0.25)
    assert out.count("rgba(255,120,0") == 1 and "H=3.000" in out
    assert "tool response (not scored)" in out
    assert " &lt;b&gt;" in out and " <b>" not in out  # model text is escaped, never rendered as HTML
