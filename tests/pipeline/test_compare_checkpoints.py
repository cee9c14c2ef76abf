"""``kit compare`` on ``torch.save`` files: the same state pickled in other bytes is the same run; a changed bit
in a tensor, a changed step or RNG state is a difference (kit.pipeline.compare)."""

from __future__ import annotations

import torch

from kit.pipeline.compare import compare_runs


def _state(t: torch.Tensor, shared: bool, step: int = 400) -> dict:
    # one tensor referenced twice pickles with a memo entry; two equal copies pickle without: other bytes
    return {"step": step, "optimizer": {"exp_avg": t, "exp_avg_sq": t if shared else t.clone()},
            "py_rng": (3, tuple(range(5)), None)}


def test_a_checkpoint_pickled_in_other_bytes_is_the_same_run_and_a_changed_bit_is_not(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for r in (a, b):
        (r / "sft").mkdir(parents=True)
    t = torch.linspace(0, 1, 7)
    torch.save(_state(t, shared=True), a / "sft" / "trainer_state.pt")
    torch.save(_state(t.clone(), shared=False), b / "sft" / "trainer_state.pt")
    assert (a / "sft" / "trainer_state.pt").read_bytes() != (b / "sft" / "trainer_state.pt").read_bytes()
    assert compare_runs(a, b) == []
    flipped = t.clone()
    flipped.view(torch.int32)[3] ^= 1  # one ulp
    torch.save(_state(flipped, shared=False), b / "sft" / "trainer_state.pt")
    assert [(d.path, d.what) for d in compare_runs(a, b)] == [
        ("sft/trainer_state.pt", "values differ at /optimizer/exp_avg")]
    torch.save(_state(t, shared=True, step=401), b / "sft" / "trainer_state.pt")
    assert compare_runs(a, b)[0].what == "values differ at /step"
    neg = torch.zeros(1)
    torch.save({"x": neg}, a / "z.pt")
    torch.save({"x": -neg}, b / "z.pt")  # -0.0 == 0.0 by value, not by bits
    assert {d.path: d.what for d in compare_runs(a, b)}["z.pt"] == "values differ at /x"
