"""ReTool's code-interpreter behaviour metrics (Feng et al. 2025, ReTool §3.3 "CI-related behaviour
evolution"), one definition for both runtimes.

A trajectory's use of the interpreter is summarised once, by :func:`code_use` (from a
:class:`kit.rollout.Trajectory` on the local runtime; the VERL agent loop writes the same summary
into ``extra_fields`` with :meth:`CodeUse.fields` and the replay buffer reads it back with
:meth:`CodeUse.from_fields`); a step's metrics are :func:`step_metrics` over the step's sampled
trajectories (before RoC selects), on both runtimes:

=============================  =====================================================================
``code_ratio``                 share of responses with at least one interpreter call
``code_lines_per_call``        mean non-blank code lines per call that carried code
``code_pass_rate``             calls without error / calls, over every response
``code_pass_rate_correct``     the same over the correct responses
``self_corrections``           failed calls followed by a successful one, summed over the responses
``self_correction_rate_correct``  share of correct responses with at least one self-correction
``first_call_position``        tokens before the first call / response tokens, mean over responses
                               with a call (ReTool's "code invocation timing"; 0 = the very start)
=============================  =====================================================================

Which calls count: every call the model wrote that the interpreter answered or refused for the
model's own fault (malformed, timeout, exception, ...); calls the sandbox service failed
(``infra``) and calls over the per-turn limit (``skipped``: never run) do not, as in
``tool_calls_per_traj``. A self-correction is a failed call whose next counted call in the same
trajectory succeeds (a run of failures then a success counts once). Undefined ratios (no call, no
correct response) are NaN, written ``null``.

Does not: look at what the code computes, or whether a successful call was the one that answered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kit import prompts

#: call statuses that are not a call of the model's code (kit.rollout.loop.CallRecord.status)
NOT_COUNTED = ("infra_error", "skipped")
#: the step metrics, in :func:`step_metrics`' order (declared in ``kit.metrics.RL_KEYS``)
KEYS = ("code_ratio", "code_lines_per_call", "code_pass_rate", "code_pass_rate_correct", "self_corrections",
        "self_correction_rate_correct", "first_call_position")
#: the keys that are NaN at a step without a call (or without a correct response); VERL rows leave them out there
MAY_BE_UNDEFINED = tuple(k for k in KEYS if k not in ("code_ratio", "self_corrections"))
#: ``extra_fields`` keys of one trajectory's summary (:meth:`CodeUse.fields`)
FIELDS = ("code_calls", "code_ok_calls", "code_lines", "code_line_calls", "code_self_corrections",
          "code_first_call_token")


@dataclass(frozen=True)
class CodeUse:
    """One trajectory's interpreter use.

    Attributes:
        calls: counted calls (see the module docstring).
        ok_calls: counted calls without error.
        lines: non-blank code lines summed over the counted calls that carried code.
        line_calls: counted calls that carried code (a malformed call has none).
        self_corrections: failed calls whose next counted call succeeded.
        first_call_token: response tokens before the first call (None: no call).
        response_tokens: the response's tokens, tool feedback included (T).
    """

    calls: int = 0
    ok_calls: int = 0
    lines: int = 0
    line_calls: int = 0
    self_corrections: int = 0
    first_call_token: int | None = None
    response_tokens: int = 0

    def fields(self) -> dict[str, int]:
        """The summary as flat ``extra_fields`` entries (:data:`FIELDS`; no call: first token -1)."""
        return {"code_calls": self.calls, "code_ok_calls": self.ok_calls, "code_lines": self.lines,
                "code_line_calls": self.line_calls, "code_self_corrections": self.self_corrections,
                "code_first_call_token": -1 if self.first_call_token is None else self.first_call_token}

    @classmethod
    def from_fields(cls, extra: Mapping[str, Any], response_tokens: int, where: str = "") -> CodeUse:
        """The summary back from ``extra_fields`` (:meth:`fields`).

        Raises:
            KeyError: a key of :data:`FIELDS` is missing (names ``where`` and the key).
        """
        missing = [k for k in FIELDS if k not in extra]
        if missing:
            raise KeyError(f"{where or 'trajectory'} has no {missing} in extra_fields (have {sorted(extra)}); "
                           "the kit's agent loop (rstar2_kit) writes them")
        first = int(extra["code_first_call_token"])
        return cls(int(extra["code_calls"]), int(extra["code_ok_calls"]), int(extra["code_lines"]),
                   int(extra["code_line_calls"]), int(extra["code_self_corrections"]),
                   None if first < 0 else first, int(response_tokens))


def code_lines(code: str | None) -> int:
    """Non-blank lines of ``code`` (0 for None)."""
    return sum(1 for line in (code or "").splitlines() if line.strip())


def summarise_calls(calls: Sequence[tuple[str, str | None, str | None]], first_call_token: int | None,
                    response_tokens: int) -> CodeUse:
    """A :class:`CodeUse` from one trajectory's calls in order.

    Args:
        calls: ``(status, error_kind, code)`` per call (``kit.rollout.loop.CallRecord``'s fields).
        first_call_token: tokens before the first call's ``<tool_call>`` (None: no call).
        response_tokens: T.
    Example:
        >>> summarise_calls([("error", "exception", "pritn(1)"), ("ok", None, "print(1)")], 7, 60).self_corrections
        1
    """
    counted = [(kind, code) for status, kind, code in calls if status not in NOT_COUNTED]
    ok = [kind is None for kind, _ in counted]
    fixes = sum(1 for a, b in zip(ok, ok[1:], strict=False) if not a and b)
    with_code = [code for _, code in counted if code is not None]
    return CodeUse(len(counted), sum(ok), sum(code_lines(c) for c in with_code), len(with_code), fixes,
                   first_call_token if counted else None, int(response_tokens))


def first_call_token(response_ids: Sequence[int], response_mask: Sequence[int], call_open_id: int | None,
                     first_turn: int = 0) -> int | None:
    """Response tokens before the first ``<tool_call>`` the model sampled.

    Args:
        response_ids, response_mask: (T,) the response and its mask (1 = model-sampled).
        call_open_id: the tokenizer's id of ``<tool_call>`` when it is one token (the kit's tiny
            tokenizer and Qwen's), else None.
        first_turn: the model turn (0-based) of the first call: used when ``call_open_id`` is None
            or not found, giving the start of that turn (its ``k``-th run of mask 1).
    Returns:
        The index of the first such token, or None when neither way finds one.
    """
    if call_open_id is not None:
        for i, (t, m) in enumerate(zip(response_ids, response_mask, strict=False)):
            if m and t == call_open_id:
                return i
    turn, prev = -1, 0
    for i, m in enumerate(response_mask):
        if m and not prev:
            turn += 1
            if turn == first_turn:
                return i
        prev = m
    return None


def code_use(tr: Any, call_open_id: int | None = None) -> CodeUse:
    """The :class:`CodeUse` of a ``kit.rollout.Trajectory`` (its ``calls``, ids and mask).

    ``call_open_id``: the id of ``<tool_call>`` (:func:`call_open_id`), for the first call's position.
    """
    calls = [(c.status, c.error_kind, c.code) for c in tr.calls]
    counted = [c for c in tr.calls if c.status not in NOT_COUNTED]
    first = (first_call_token(tr.response_ids, tr.response_mask, call_open_id, counted[0].turn)
             if counted else None)
    return summarise_calls(calls, first, len(tr.response_ids))


def call_open_id(tokenizer: Any) -> int | None:
    """The tokenizer's single id of ``<tool_call>``, or None when it splits the tag (or has no tokenizer)."""
    if tokenizer is None:
        return None
    ids = tokenizer.encode(prompts.TOOL_CALL_OPEN, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def step_metrics(uses: Sequence[CodeUse], correct: Sequence[bool]) -> dict[str, float]:
    """A step's behaviour metrics (:data:`KEYS`, see the module docstring) over its N sampled trajectories.

    Args:
        uses: (N,) each trajectory's :class:`CodeUse`.
        correct: (N,) whether each one's answer was correct (reward > 0).
    Returns:
        The seven floats (NaN where undefined; ``code_ratio`` and ``self_corrections`` 0.0 for N = 0).
    Raises:
        ValueError: the two lengths differ.
    Example:
        >>> step_metrics([CodeUse(2, 1, 2, 2, 1, 5, 50), CodeUse()], [True, False])["code_ratio"]
        0.5
    """
    if len(uses) != len(correct):
        raise ValueError(f"step_metrics: {len(uses)} trajectories but {len(correct)} correctness flags")
    ok = [bool(c) for c in correct]
    good = [u for u, c in zip(uses, ok, strict=True) if c]
    positions = [u.first_call_token / u.response_tokens for u in uses
                 if u.first_call_token is not None and u.response_tokens > 0]
    return {
        "code_ratio": _ratio(sum(u.calls > 0 for u in uses), len(uses)) if uses else 0.0,
        "code_lines_per_call": _ratio(sum(u.lines for u in uses), sum(u.line_calls for u in uses)),
        "code_pass_rate": _ratio(sum(u.ok_calls for u in uses), sum(u.calls for u in uses)),
        "code_pass_rate_correct": _ratio(sum(u.ok_calls for u in good), sum(u.calls for u in good)),
        "self_corrections": float(sum(u.self_corrections for u in uses)),
        "self_correction_rate_correct": _ratio(sum(u.self_corrections > 0 for u in good), len(good)),
        "first_call_position": sum(positions) / len(positions) if positions else math.nan,
    }


def trajectory_metrics(trajectories: Sequence[Any], correct: Sequence[bool], tokenizer: Any = None) -> dict[str, float]:
    """:func:`step_metrics` of N ``kit.rollout.Trajectory`` objects (the local step's sampled rollouts).

    Args:
        trajectories: (N,) trajectories.
        correct: (N,) reward > 0.
        tokenizer: the policy's tokenizer (for the id of ``<tool_call>``; None: turn starts).
    """
    open_id = call_open_id(tokenizer)
    return step_metrics([code_use(t, open_id) for t in trajectories], correct)
