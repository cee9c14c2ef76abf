"""What a simulated rollout step yields (:class:`SimResult`) and the makespan no schedule can beat
(:func:`lower_bound`), under the cost model of :class:`~kit.sim.engine_model.EngineSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kit.sim.engine_model import EngineSpec
from kit.sim.workload import Trajectory


@dataclass
class SimResult:
    """Outcome of :func:`simulate`. Times in seconds, counts in tokens."""

    policy: str
    makespan_s: float
    busy_s: np.ndarray  # (E,) seconds each engine spent in steps
    decoded_tokens: int
    prefill_tokens: int
    recomputed_tokens: int
    retractions: int
    finish_s: np.ndarray  # (N,) completion time of each trajectory
    peak_kv: np.ndarray  # (E,) largest KV tokens held
    migrations: int = 0  # continuing turns sent away from the engine holding their prefix

    @property
    def idle_fraction(self) -> np.ndarray:
        """(E,) share of the makespan each engine spent without a step to run."""
        return 1.0 - self.busy_s / self.makespan_s if self.makespan_s > 0 else np.zeros_like(self.busy_s)


def lower_bound(trajs: list[Trajectory], n_engines: int, engine: EngineSpec) -> dict[str, float]:
    """Makespan no schedule can beat under the cost model of :func:`simulate`.

    ``work_s`` = (marginal decode cost of every token + minimal prefill + ``t0`` x the fewest
    steps) / E, where the step count is at least the longest trajectory's model tokens, total
    tokens / ``max_running``, and total KV reads / capacity (every step reads at most the whole
    pool). ``critical_s`` = the slowest trajectory run alone, tool latency included (extra rows
    only make steps slower). Returns both and ``bound_s`` = their maximum, all in seconds.
    """
    marginal = prefill = 0.0
    n_tok = kv_reads = 0
    critical = 0.0
    for tr in trajs:
        ctx = tr.prompt_tokens
        alone = 0.0
        for k, g in enumerate(tr.gen_tokens):
            new = tr.prompt_tokens if k == 0 else tr.tool_tokens[k - 1]
            if k:
                ctx += new
                alone += tr.tool_latency_s[k - 1]
            reads = g * ctx + g * (g - 1) // 2
            kv_reads += reads
            n_tok += g
            marginal += engine.step_per_seq_s * g + engine.step_per_kv_token_s * reads
            prefill += engine.prefill_per_token_s * new
            alone += engine.prefill_per_token_s * new + g * (engine.step_base_s + engine.step_per_seq_s) \
                + engine.step_per_kv_token_s * reads
            ctx += g
        critical = max(critical, alone)
    longest = max(sum(tr.gen_tokens) for tr in trajs)
    steps = max(longest, n_tok / engine.max_running, kv_reads / engine.kv_capacity)
    work = (marginal + prefill + engine.step_base_s * steps) / n_engines
    return {"work_s": work, "critical_s": critical, "bound_s": max(work, critical)}
