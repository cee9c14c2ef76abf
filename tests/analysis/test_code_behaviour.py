"""kit.analysis.code_behaviour: ReTool §3.3's behaviour metrics on hand-built trajectories."""

import math

import pytest

from kit.analysis import code_behaviour as cb
from kit.rollout.loop import CallRecord, Trajectory

OPEN = 7  # the id of <tool_call> in these hand-built responses


def _traj(calls, ids, mask):
    tr = Trajectory(problem="q", prompt_ids=[1], response_ids=ids, response_mask=mask)
    tr.calls = [CallRecord(turn, i, status, kind, "", code=code) for turn, i, status, kind, code in calls]
    tr.tool_calls = len(calls)
    return tr


# a failed call (2 lines), its fix (3 lines, one blank), then the answer: 20 tokens, the call after 4
FIXED = _traj([(0, 0, "error", "exception", "import math\npritn(1)"), (1, 0, "ok", None, "import math\n\nx = 1\nprint(x)")],
              [5, 5, 5, 5, OPEN, 5, 5, 5, 9, 9, 9, OPEN, 5, 5, 9, 9, 5, 5, 5, 5],
              [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1])
# one clean call after 2 tokens of 10; a malformed call (no code) after the sandbox failed one (not counted)
CLEAN = _traj([(0, 0, "ok", None, "print(2)")], [5, 5, OPEN, 5, 9, 9, 5, 5, 5, 5], [1, 1, 1, 1, 0, 0, 1, 1, 1, 1])
INFRA = _traj([(0, 0, "infra_error", "infra", "print(3)"), (1, 0, "malformed", "malformed", None),
               (1, 1, "skipped", None, "print(4)")], [5] * 10, [1, 1, 1, 1, 0, 0, 1, 1, 1, 1])
DIRECT = _traj([], [5] * 8, [1] * 8)  # no call


def test_one_trajectory_counts_calls_lines_fixes_and_the_first_call():
    u = cb.code_use(FIXED, OPEN)
    assert (u.calls, u.ok_calls, u.lines, u.line_calls, u.self_corrections) == (2, 1, 5, 2, 1)
    assert u.first_call_token == 4 and u.response_tokens == 20
    # infra and skipped calls are not the model's code; the malformed one counts, failed, without lines
    u = cb.code_use(INFRA, OPEN)
    assert (u.calls, u.ok_calls, u.lines, u.line_calls, u.self_corrections) == (1, 0, 0, 0, 0)
    assert u.first_call_token == 6  # no <tool_call> id in it: the start of the first counted call's turn (1)
    assert cb.code_use(DIRECT, OPEN) == cb.CodeUse(response_tokens=8)
    # a run of failures then a success is one correction; a success then a failure is none
    calls = [("error", "exception", "a"), ("timeout", "timeout", "b"), ("ok", None, "c"), ("error", "exception", "d")]
    assert cb.summarise_calls(calls, 0, 10).self_corrections == 1


def test_step_metrics_over_correct_and_wrong_trajectories():
    m = cb.trajectory_metrics([FIXED, CLEAN, INFRA, DIRECT], [True, True, False, False])
    assert m["code_ratio"] == 0.75  # DIRECT made no call
    assert m["code_lines_per_call"] == pytest.approx(6 / 3)  # 2 + 3 + 1 lines over the 3 calls with code
    assert m["code_pass_rate"] == pytest.approx(2 / 4)
    assert m["code_pass_rate_correct"] == pytest.approx(2 / 3)
    assert m["self_corrections"] == 1.0 and m["self_correction_rate_correct"] == 0.5
    # without the tokenizer: the start of the first call's turn (0, 0 and 6 tokens)
    assert m["first_call_position"] == pytest.approx((0 + 0 + 6 / 10) / 3)
    with_ids = cb.step_metrics([cb.code_use(t, OPEN) for t in (FIXED, CLEAN, INFRA, DIRECT)], [True, True, False, False])
    assert with_ids["first_call_position"] == pytest.approx((4 / 20 + 2 / 10 + 6 / 10) / 3)
    assert set(m) == set(cb.KEYS)


def test_undefined_ratios_are_nan_and_bad_input_is_named():
    m = cb.trajectory_metrics([DIRECT], [False])
    assert m["code_ratio"] == 0.0 and m["self_corrections"] == 0.0
    assert all(math.isnan(m[k]) for k in ("code_lines_per_call", "code_pass_rate", "code_pass_rate_correct",
                                          "self_correction_rate_correct", "first_call_position"))
    with pytest.raises(ValueError, match="2 trajectories but 1 correctness flags"):
        cb.step_metrics([cb.CodeUse(), cb.CodeUse()], [True])
    # VERL's extra_fields round trip, and a row written by another agent loop
    u = cb.code_use(FIXED, OPEN)
    assert cb.CodeUse.from_fields(u.fields(), 20) == u
    assert cb.CodeUse.from_fields(cb.CodeUse().fields(), 8).first_call_token is None
    with pytest.raises(KeyError, match="trajectory 3 has no .*code_calls.*rstar2_kit"):
        cb.CodeUse.from_fields({"tool_calls": 1}, 8, "trajectory 3")
