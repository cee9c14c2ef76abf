"""The simulated workload: one RL step's trajectories and the paper-like presets.

A :class:`Trajectory` is one multi-turn rollout (model tokens per turn, tool feedback and tool
latency between turns); :func:`sample_workload` draws them from a :class:`WorkloadPreset`.
:data:`PAPER_ENGINE` and :data:`PAPER_WORKLOAD` are the preset of the benchmark (the report's
64 MI300X serving Qwen3-14B, stage 2 of training), derived from public hardware and model figures
in their comments, not fitted to any result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.sim.engine_model import EngineSpec


@dataclass(frozen=True)
class Trajectory:
    """One multi-turn rollout: ``turns = len(gen_tokens)``; tool calls follow all turns but the last.

    ``tool_tokens[k]`` tokens of feedback and ``tool_latency_s[k]`` seconds follow turn ``k``.
    """

    prompt_tokens: int
    gen_tokens: tuple[int, ...]
    tool_tokens: tuple[int, ...] = ()
    tool_latency_s: tuple[float, ...] = ()

    def __post_init__(self):
        n = len(self.gen_tokens)
        if n < 1 or min(self.gen_tokens) < 1 or len(self.tool_tokens) != n - 1 or len(self.tool_latency_s) != n - 1:
            raise ValueError(f"bad trajectory: {n} turns, {len(self.tool_tokens)} tool outputs, "
                             f"{len(self.tool_latency_s)} latencies, gen {self.gen_tokens}")

    @property
    def response_tokens(self) -> int:
        """Model tokens plus tool-feedback tokens (what the response budget counts)."""
        return sum(self.gen_tokens) + sum(self.tool_tokens)


@dataclass(frozen=True)
class WorkloadPreset:
    """Distributions of one RL step's rollouts. Lengths in tokens, latency in seconds."""

    n_trajectories: int
    prompt_tokens_mean: float
    response_median_tokens: float
    response_sigma: float  # log-normal shape of the total response length
    max_response_tokens: int  # stage limit; longer responses are truncated there
    tool_calls_mean: float  # Poisson mean of tool calls per trajectory
    max_turns: int
    tool_tokens_mean: float  # geometric mean of feedback tokens per call
    tool_latency_mean_s: float
    tool_latency_sigma: float = 0.5


#: Qwen3-14B (40 layers, 8 KV heads x 128 dims, bf16: 160 KiB of KV per token) on a TP=4 group
#: of AMD MI300X (192 GB HBM, ~5.3 TB/s; SGLang ``mem_fraction`` 0.8 as in the release) -> the
#: report's 64 GPUs are 16 engines. KV pool ~= 4 x (0.8 x 192 - 7 weights - 5 activations) GB
#: / 160 KiB ~= 3.5M tokens. Per step: ~4 ms fixed (7 GB of weights per GPU at 5.3 TB/s plus
#: 80 all-reduces); ~12 us per row (28 GFLOP per token over 4 GPUs at ~600 TFLOP/s achieved);
#: ~12 ns per KV token read (40 KiB per GPU at ~3.3 TB/s achieved); prefill ~12 us per token
#: (compute bound). ``max_running`` 2048 (an SGLang server argument; KV binds first here).
PAPER_ENGINE = EngineSpec(kv_capacity=3_500_000, step_base_s=4e-3, step_per_seq_s=12e-6,
                          step_per_kv_token_s=12e-9, prefill_per_token_s=12e-6, max_running=2048)
#: One step of the report's stage 2 (§4.3): 512 prompts x 32 rollouts, 12K response limit,
#: 10 turns; responses average ~6K, the middle of the report's 4K-8K, with a long tail to
#: the limit (8% truncated),
#: ~0.3 s per tool call (report §3.1). Tool calls per trajectory and feedback sizes are our
#: assumptions (the report does not tabulate them).
PAPER_WORKLOAD = WorkloadPreset(n_trajectories=512 * 32, prompt_tokens_mean=400, response_median_tokens=5300,
                                response_sigma=0.6, max_response_tokens=12288, tool_calls_mean=3.0,
                                max_turns=10, tool_tokens_mean=150, tool_latency_mean_s=0.3)


def sample_workload(preset: WorkloadPreset, seed: int = 0) -> list[Trajectory]:
    """Draw ``preset.n_trajectories`` trajectories (deterministic for a seed).

    Total response ~ LogNormal(ln median, sigma) clipped to the limit; tool calls ~ Poisson
    capped at ``max_turns - 1``; feedback tokens ~ geometric; model tokens split over turns by a
    flat Dirichlet; tool latency ~ LogNormal with the given mean.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(preset.n_trajectories):
        prompt = max(16, int(rng.poisson(preset.prompt_tokens_mean)))
        total = int(min(preset.max_response_tokens, rng.lognormal(math.log(preset.response_median_tokens), preset.response_sigma)))
        calls = int(min(preset.max_turns - 1, rng.poisson(preset.tool_calls_mean)))
        tools = [int(rng.geometric(1.0 / preset.tool_tokens_mean)) for _ in range(calls)]
        while calls and sum(tools) > total // 2:  # keep model tokens the larger part
            calls -= 1
            tools.pop()
        gen_total = max(calls + 1, total - sum(tools))
        split = rng.dirichlet(np.ones(calls + 1)) * (gen_total - calls - 1)
        gen = np.floor(split).astype(int) + 1
        gen[-1] += gen_total - int(gen.sum())
        mu = math.log(preset.tool_latency_mean_s) - preset.tool_latency_sigma ** 2 / 2
        lat = tuple(float(x) for x in rng.lognormal(mu, preset.tool_latency_sigma, calls))
        out.append(Trajectory(prompt, tuple(int(g) for g in gen), tuple(tools), lat))
    return out
