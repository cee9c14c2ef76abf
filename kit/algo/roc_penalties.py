"""RoC's per-trajectory penalties: p_err, p_format, p_total and the counters they read (rStar2-Agent §2.2.3).

* ``p_err = failed tool calls / tool calls`` (:data:`NO_CALL_P_ERR` = 0.5 without any call);
  "failed" is the sandbox's structured status (:data:`FAILURE_KINDS`), and failures of the
  execution service itself (:data:`INFRA_KINDS`) count in neither the numerator nor the
  denominator.
* ``p_format = 1`` without an ``<answer>`` tag or without an extractable final answer (a final
  box that is unclosed, empty or cut off, :func:`kit.reward.extract_final_answer`), else
  ``min(1, (answer_tags - 1) / turns)``.
* ``p_total = p_err + p_format``, either term switchable; RoC keeps positives with a low
  ``p_total`` (:mod:`kit.algo.roc_selection`).

:func:`release_p_err` / :func:`release_p_format` read the same penalties from decoded text the
way the public release (microsoft/rStar ``rstar2_agent/down_sample/roc.py``) does, for
comparison; :mod:`kit.algo.roc` tabulates the differences. :func:`counters` collects the
per-trajectory counts from ``Trajectory`` objects or VERL ``extra_fields``. Pure functions on
(N,) arrays, ``N = P * 2G`` rows before selection. :mod:`kit.algo` exports the trainers' names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kit.config import AlgorithmConfig

#: Tool-error kinds that are the model's fault (keys of ``kit.rollout`` ``Trajectory.tool_errors``):
#: a raised exception, a wall/CPU timeout, the memory limit, the output limit, a malformed call.
FAILURE_KINDS = ("exception", "timeout", "memory", "output", "malformed")
#: Kinds that are the execution service's fault; never counted against the model.
INFRA_KINDS = ("infra", "infra_error")
#: p_err of a trajectory without any (attributable) tool call, as in the report and release.
NO_CALL_P_ERR = 0.5


def _as_int_array(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.equal(np.mod(a, 1), 0)):
            raise ValueError(f"{name}: expected integer counts, got {a[:5]}")
        a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError(f"{name}: negative count at row {int(np.argmin(a))}")
    return a.astype(np.int64)


def p_err(
    n_tool_calls: Sequence[int] | np.ndarray,
    n_tool_failures: Sequence[int] | np.ndarray,
    n_infra_errors: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Tool-error ratio of each trajectory (rStar2-Agent §2.2.3, "p_err").

    ``p_err = failures / (calls - infra)``, or 0.5 when ``calls - infra == 0``.

    Args:
        n_tool_calls: (N,) tool calls the trajectory made, every attempt counted (malformed
            calls and calls the service failed to run included).
        n_tool_failures: (N,) calls that failed by the model's fault: exception, timeout,
            memory limit, output limit, malformed call (:data:`FAILURE_KINDS`).
        n_infra_errors: (N,) calls lost to the execution service (``infra_error``); removed
            from the denominator. None means zero.
    Returns:
        (N,) float64 array in [0, 1].
    Raises:
        ValueError: different lengths, negative counts, or more failures than attributable
            calls (the message names the first bad row).
    """
    calls = _as_int_array(n_tool_calls, "n_tool_calls")
    fails = _as_int_array(n_tool_failures, "n_tool_failures")
    infra = np.zeros_like(calls) if n_infra_errors is None else _as_int_array(n_infra_errors, "n_infra_errors")
    if not (calls.shape == fails.shape == infra.shape):
        raise ValueError(f"p_err: lengths differ: calls {calls.shape}, failures {fails.shape}, infra {infra.shape}")
    attributable = calls - infra
    bad = np.flatnonzero((attributable < 0) | (fails > np.maximum(attributable, 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"p_err: row {i} has {fails[i]} failures, {infra[i]} infra errors but only {calls[i]} calls"
        )
    out = np.full(calls.shape, NO_CALL_P_ERR, dtype=np.float64)
    has = attributable > 0
    out[has] = fails[has] / attributable[has]
    return out


def p_format(answer_tags: Sequence[int] | np.ndarray, turns: Sequence[int] | np.ndarray,
             answered: Sequence[bool] | np.ndarray | None = None) -> np.ndarray:
    """Answer-format penalty of each trajectory (rStar2-Agent §2.2.3, "p_format").

    1 when the model wrote no ``<answer>`` tag or gave no extractable final answer, else
    ``min(1, (answer_tags - 1) / turns)``: one answer costs nothing, repeated answers cost in
    proportion to the turns they are spread over.

    Args:
        answer_tags: (N,) ``<answer>`` tags in the model's own text (tool feedback excluded).
        turns: (N,) assistant turns, the first one counted (>= 1 whenever there is an answer).
        answered: (N,) optional bools, False where the response has no extractable final
            answer (strict ``kit.reward.extract_final_answer``: e.g. its final box is unclosed,
            empty or cut off; issue #30); those rows get 1 whatever their tags. None: all True.
    Returns:
        (N,) float64 array in [0, 1].
    Raises:
        ValueError: different lengths, negative counts, or an answer with ``turns < 1``.
    """
    tags = _as_int_array(answer_tags, "answer_tags")
    t = _as_int_array(turns, "turns")
    if tags.shape != t.shape:
        raise ValueError(f"p_format: lengths differ: answer_tags {tags.shape}, turns {t.shape}")
    bad = np.flatnonzero((tags > 0) & (t < 1))
    if bad.size:
        raise ValueError(f"p_format: row {int(bad[0])} has {tags[bad[0]]} answer tags but 0 turns")
    out = np.ones(tags.shape, dtype=np.float64)
    has = tags > 0
    if answered is not None:
        ans = np.asarray(answered, dtype=bool)
        if ans.shape != tags.shape:
            raise ValueError(f"p_format: lengths differ: answer_tags {tags.shape}, answered {ans.shape}")
        has &= ans
    out[has] = np.minimum(1.0, (tags[has] - 1) / t[has])
    return out


def p_total(
    p_err_values: np.ndarray, p_format_values: np.ndarray, use_error_ratio: bool = AlgorithmConfig.roc_use_error_ratio,
    use_answer_format: bool = AlgorithmConfig.roc_use_answer_format,
) -> np.ndarray:
    """``p_total = p_err + p_format`` with either term switchable (release ``roc_error_ratio`` /
    ``roc_answer_format``). Shapes (N,) -> (N,), values in [0, 2]."""
    pe, pf = np.asarray(p_err_values, dtype=np.float64), np.asarray(p_format_values, dtype=np.float64)
    if pe.shape != pf.shape:
        raise ValueError(f"p_total: p_err {pe.shape} vs p_format {pf.shape}")
    return pe * float(use_error_ratio) + pf * float(use_answer_format)


# ------------------------------------------------------------------ the release's text reading

_TOOL_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
_ANSWER_SPAN = re.compile(r"<answer>.*?</answer>", re.DOTALL)
_ASSISTANT_TURN = re.compile(r"<\|im_start\|>assistant.*?<\|im_end\|>", re.DOTALL)


def release_p_err(texts: Iterable[str]) -> np.ndarray:
    """p_err read from decoded response text the way the public release does, for comparison.

    Ratio of ``<tool_response>...</tool_response>`` blocks whose text contains "error" (any
    case); 0.5 without a block. Known flaws, kept on purpose: timeouts and malformed calls are
    not errors, a correct program printing "error" is one. Shapes: N strings -> (N,).
    """
    out = []
    for text in texts:
        blocks = _TOOL_RESPONSE.findall(text)
        out.append(NO_CALL_P_ERR if not blocks else sum("error" in b.lower() for b in blocks) / len(blocks))
    return np.asarray(out, dtype=np.float64)


def release_p_format(texts: Iterable[str]) -> np.ndarray:
    """p_format read from decoded response text the way the public release does, for comparison.

    1.0 if ``<answer>`` or ``</answer>`` is missing or unbalanced; else
    ``min(1, (closed answer spans - 1) / turns)`` where turns are the
    ``<|im_start|>assistant ... <|im_end|>`` spans IN THE RESPONSE. The first assistant turn's
    header belongs to the prompt, so it is never counted and a single-turn answer scores 1.0.
    Shapes: N strings -> (N,).
    """
    out = []
    for text in texts:
        if "<answer>" not in text or "</answer>" not in text:
            out.append(1.0)
            continue
        closed = len(_ANSWER_SPAN.findall(text))
        if text.count("<answer>") != closed or text.count("</answer>") != closed:
            out.append(1.0)
            continue
        turns = len(_ASSISTANT_TURN.findall(text))
        out.append(1.0 if turns == 0 else min((closed - 1) / turns, 1.0))
    return np.asarray(out, dtype=np.float64)


# ------------------------------------------------------------------ counters from trajectories


def tool_failure_count(tool_errors: Mapping[str, int] | int | None) -> int:
    """Number of model-caused tool failures in a ``Trajectory.tool_errors`` value.

    Args:
        tool_errors: dict kind -> count (every kind counts except :data:`INFRA_KINDS`; the
            usual kinds are :data:`FAILURE_KINDS`), or an already summed int, or None (0).
    Raises:
        ValueError: a negative count.
    """
    if tool_errors is None:
        return 0
    if isinstance(tool_errors, Mapping):
        total = 0
        for kind, value in tool_errors.items():
            if kind in INFRA_KINDS:
                continue
            v = int(value or 0)
            if v < 0:
                raise ValueError(f"tool_errors[{kind!r}] is negative: {v}")
            total += v
        return total
    v = int(tool_errors)
    if v < 0:
        raise ValueError(f"tool_errors is negative: {v}")
    return v


def counters(items: Iterable[Any]) -> dict[str, np.ndarray]:
    """Per-trajectory RoC counters from ``Trajectory`` objects or mappings (VERL extra_fields).

    Reads ``tool_calls``, ``tool_errors`` (dict kind -> count, or int), ``infra_errors``,
    ``answer_tags``, ``answered`` and ``turns`` from attributes or keys; a missing
    ``infra_errors`` or ``tool_errors`` is 0, a missing or None ``answered`` is True (not
    known: the tags decide), the others are required.

    Returns:
        dict of (N,) int64 arrays: ``tool_calls``, ``tool_failures``, ``infra_errors``,
        ``answer_tags``, ``turns``, and (N,) bool ``answered``.
    Raises:
        KeyError: a required counter is missing; the message names the row and the key.
    """
    cols: dict[str, list[int]] = {k: [] for k in ("tool_calls", "tool_failures", "infra_errors", "answer_tags", "turns")}
    answered: list[bool] = []
    for row, item in enumerate(items):
        def get(key: str, required: bool, _item: Any = item, _row: int = row) -> Any:
            if isinstance(_item, Mapping):
                if key in _item:
                    return _item[key]
            elif hasattr(_item, key):
                return getattr(_item, key)
            if required:
                raise KeyError(f"RoC counters: trajectory {_row} has no {key!r} (have: {_keys(_item)})")
            return None

        cols["tool_calls"].append(int(get("tool_calls", True)))
        cols["tool_failures"].append(tool_failure_count(get("tool_errors", False)))
        cols["infra_errors"].append(int(get("infra_errors", False) or 0))
        cols["answer_tags"].append(int(get("answer_tags", True)))
        cols["turns"].append(int(get("turns", True)))
        a = get("answered", False)
        answered.append(True if a is None else bool(a))
    out = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
    out["answered"] = np.asarray(answered, dtype=bool)
    return out


def _keys(item: Any) -> list[str]:
    if isinstance(item, Mapping):
        return sorted(map(str, item))
    return sorted(k for k in vars(item) if not k.startswith("_")) if hasattr(item, "__dict__") else []
