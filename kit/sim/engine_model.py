"""One inference engine of the simulated cluster: cost model, KV rows and SGLang's scheduler.

:class:`EngineSpec` prices a decode step (``t0 + c_seq * b + c_kv * sum(ctx)`` plus prefill).
The rest is the per-engine state :func:`kit.sim.simulate` drives: a request is one turn of a
trajectory, stored as a row of ``_FIELDS`` (the engine's running rows in :class:`_Rows`, its queue
in :attr:`_Engine.waiting`); :func:`_admit_sglang` is SGLang's optimistic admission
(``PrefillAdder``, ``new_token_ratio``), :func:`_retract` its ``retract_decode`` (evicted rows lose
their KV, which a later prefill recomputes and which is counted), and :func:`_steps_by` the
macro-step arithmetic (when a run of constant-batch steps crosses a given time). The SGLang
constants follow its scheduler's names. Nothing here knows about policies or the event loop.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

SGLANG_CLIP_MAX_NEW = 4096  # CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_INIT_RATIO, SGLANG_MIN_RATIO, SGLANG_DECAY_STEPS = 0.7, 0.7 * 0.14, 600
SGLANG_RETRACT_STEPS = 20  # retract_decode_steps


@dataclass(frozen=True)
class EngineSpec:
    """One inference engine (a tensor-parallel group). Times in seconds, sizes in tokens."""

    kv_capacity: int
    step_base_s: float
    step_per_seq_s: float
    step_per_kv_token_s: float
    prefill_per_token_s: float
    max_running: int

    def step_time(self, batch: int, kv_tokens: float, prefill_tokens: int = 0) -> float:
        """Seconds of one decode step with ``batch`` rows reading ``kv_tokens`` cached tokens."""
        return (self.step_base_s + self.step_per_seq_s * batch + self.step_per_kv_token_s * kv_tokens
                + self.prefill_per_token_s * prefill_tokens)


_FIELDS = ("traj", "ctx", "remaining", "out", "max_new", "extend", "budget")
_TRAJ, _CTX, _REM, _OUT, _MAXNEW, _EXT, _BUDGET = range(7)


class _Rows:
    """The running requests of one engine as parallel int64 arrays (one entry per row)."""

    def __init__(self):
        self.a = np.zeros((0, len(_FIELDS)), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.a)

    def add(self, reqs: list[list[int]]) -> None:
        if reqs:
            self.a = np.concatenate([self.a, np.asarray(reqs, dtype=np.int64)])

    def col(self, j: int) -> np.ndarray:
        return self.a[:, j]


@dataclass
class _Engine:
    rows: _Rows = field(default_factory=_Rows)
    waiting: deque = field(default_factory=deque)  # requests: [traj, ctx, remaining, out, max_new, extend, budget]
    busy: bool = False
    busy_s: float = 0.0
    steps: int = 0  # decode steps of the macro-step in flight
    ratio: float = SGLANG_INIT_RATIO  # SGLang new_token_ratio (static policies)
    reserved: int = 0  # dynamic: KV reserved by queued and running requests
    peak_kv: int = 0
    tool_times: list = field(default_factory=list)  # heap: returns of tool calls homed here
    ver: int = 0  # macro-step generation; a cut macro-step's old end event is stale
    shape: tuple = (0.0, 0.0, 0.0, 0, 0, 0)  # in flight: start, first step s, prefill s, rows, KV, peak before


def _steps_by(step0: float, growth: float, prefill_s: float, dt: float) -> int:
    """Fewest steps ``j >= 1`` of a macro-step that end at or after ``dt`` seconds from its start.

    Step ``j`` (1-based) ends at ``prefill_s + j * step0 + growth * j * (j - 1) / 2``.
    """
    def end(j: int) -> float:
        return prefill_s + j * step0 + growth * j * (j - 1) / 2
    if growth > 0:  # root of growth/2 j^2 + (step0 - growth/2) j + prefill_s - dt = 0
        a, b = growth / 2, step0 - growth / 2
        j = max(1, math.ceil((-b + math.sqrt(b * b + 4 * a * max(dt - prefill_s, 0.0))) / (2 * a)))
    else:
        j = max(1, math.ceil(max(dt - prefill_s, 0.0) / step0)) if step0 > 0 else 1
    while j > 1 and end(j - 1) >= dt:
        j -= 1
    while end(j) < dt:
        j += 1
    return j


def _admit_sglang(en: _Engine, cap: int, max_running: int) -> None:
    """SGLang PrefillAdder: optimistic admission against estimated future growth.

    Moves requests from the head of ``en.waiting`` to ``en.rows`` while the new input plus the
    clipped growth of the request fits in ``cap`` tokens minus the KV in use and ``en.ratio`` x
    the clipped remaining budgets of the running rows, and fewer than ``max_running`` rows run.
    The first request is admitted into an empty engine whatever its size.
    """
    rows = en.rows
    used = int(rows.col(_CTX).sum())
    offset = float((np.minimum(rows.col(_MAXNEW) - rows.col(_OUT), SGLANG_CLIP_MAX_NEW) * en.ratio).sum())
    new = []
    while en.waiting and len(rows) + len(new) < max_running:
        r = en.waiting[0]
        grow = min(max(r[_MAXNEW] - r[_OUT], 0), SGLANG_CLIP_MAX_NEW)
        if r[_EXT] + grow >= cap - used - offset and (len(rows) or new):
            break
        new.append(en.waiting.popleft())
        used += r[_CTX]
        offset += grow * en.ratio
    rows.add(new)


def _retract(en: _Engine, cap: int, prompt: np.ndarray, stats: dict[str, int]) -> None:
    """SGLang retract_decode: evict the rows with the fewest output tokens first.

    Evicts (at least one, never all) until the rest have ``SGLANG_RETRACT_STEPS`` decode steps of
    room in ``cap`` tokens; ties go to the longer prompt (``prompt``: (N,) prompt tokens per
    trajectory). Evicted rows go to the back of ``en.waiting`` with their whole context to
    prefill again; ``stats["recomputed"]`` and ``stats["retractions"]`` count them, and
    ``en.ratio`` is reset to the decoded share of the remaining rows' budgets.
    """
    a = en.rows.a
    b = len(a)
    order = np.lexsort((-prompt[a[:, _TRAJ]], a[:, _OUT]))  # pop order: fewest outputs first
    free_after = cap - a[:, _CTX].sum() + np.cumsum(a[order, _CTX])
    ok = np.nonzero(free_after >= (b - 1 - np.arange(b)) * SGLANG_RETRACT_STEPS)[0]
    n = min(max(1, int(ok[0]) + 1 if len(ok) else b - 1), b - 1)
    gone = a[order[:n]].copy()
    stats["recomputed"] += int((gone[:, _CTX] - gone[:, _EXT]).sum())
    stats["retractions"] += n
    gone[:, _EXT] = gone[:, _CTX]
    en.waiting.extend(gone.tolist())
    en.rows.a = a[np.sort(order[n:])]
    rest = en.rows.a
    en.ratio = min(1.0, (rest[:, _OUT].sum() + SGLANG_RETRACT_STEPS * len(rest)) / max(int(rest[:, _MAXNEW].sum()), 1))
