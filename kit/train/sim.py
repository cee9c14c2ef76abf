"""Discrete-event simulator of rollout scheduling on a GPU cluster (rStar2-Agent report §3.2).

The report replaces static allocation of rollout requests with a load-balanced scheduler but
gives no speed-up figure, and the release does not contain it (its dispatch is verl's
least-assigned-count heap with sticky ``request -> server``; the only trace of the scheduler is
a commented ``budget = len(prompt_ids) + response_length`` charged per request). This module
measures the difference on a model of the cluster, so the figure is ours, not the report's.

Policies (``simulate(..., policy=...)``):
    ``static``  each engine gets the same number of trajectories up front (round robin, which
        is what the release's least-count heap does); a trajectory stays on its engine. The
        engine behaves as SGLang's scheduler: optimistic admission (``PrefillAdder``: a waiting
        request is admitted when its new input plus ``min(max_new, 4096)`` fits in the free KV
        minus ``new_token_ratio`` times the clipped remaining budgets of the running requests;
        the ratio starts at 0.7 and decays linearly to 0.098 over 600 decode steps), and when a
        decode step does not fit, retraction (``retract_decode``: requests with the fewest
        output tokens are evicted until ``20 x batch`` tokens are free; their KV is dropped and
        recomputed by a later prefill; the ratio is reset to decoded/max-new of the rest).
    ``dynamic`` the report's scheduler: one global queue of requests (one request = one turn);
        the dispatcher estimates each engine's safe concurrency from its free KV (capacity minus
        the KV its running requests hold) and each request's maximum length (``prompt +
        max_response_tokens``, the release's ``budget``, charged for every request queued to
        the engine but not yet running): a request is sent where that load plus its budget fits.
        Inside the engine, admission and the rare overflow are SGLang's (as in ``static``:
        estimated growth, retraction and recompute, counted). A turn that ends frees its KV at
        once, its tool call runs asynchronously, and queued requests are sent as capacity frees.
        Routing is cache-aware with a balance threshold (as ``sglang-router``): a continuing
        turn goes to the engine holding its prefix, unless that engine's load exceeds the
        least-loaded engine's by more than :data:`BALANCE_REL` x it + :data:`BALANCE_ABS` x
        capacity, in which case it moves there and its whole context is prefilled again
        (counted as recomputed tokens and in ``migrations``). New trajectories go, after the
        continuing turns, to the least-loaded engine.
``dynamic_reserve`` (information): the strict reading of the report's estimate: the engine holds
only requests whose maximum length (``prompt + max_response_tokens``; that is also context so
far + the turn's ``max_new``, since the agent loop has no per-turn cap) is *reserved* against
its capacity, so overflow and eviction cannot happen, but at most ``capacity / budget`` (~275 on
the preset) rows run although trajectories average half the budget. A continuing turn waits for
its home engine (sticky, as the release routes).
``dynamic_free`` (information): ``dynamic`` without migration (continuing turns are sticky).
``static_barrier`` (information): static allocation where each engine's trajectories advance
turn by turn in lockstep (all tool calls of a turn must return before the next turn starts),
like the plain batch loop of :mod:`kit.train.engine`.

Modelling assumptions (all of them):
    * Decode step time on one engine: ``t0 + c_seq * b + c_kv * sum(ctx)`` seconds for ``b``
      running rows holding ``sum(ctx)`` KV tokens (weights + launch overhead, per-row compute,
      attention reads), plus ``c_prefill`` per prefilled token of rows admitted at that step.
      Each step adds one token to every running row. No chunked prefill, no speculative decode.
    * A turn's KV is freed when the turn ends (the tool wait holds none). Prefix cache: the next
      turn on the same engine prefills only its new tokens (tool output); on another engine it
      prefills the whole context. Evictable cache never blocks admission. Prompt sharing among a
      group's rollouts is ignored (prompts are short next to responses).
    * Evicted (retracted) requests lose their whole KV; recomputed tokens = their context at
      eviction. Generated tokens are kept (SGLang keeps ``output_ids``).
    * Tool calls never queue (the sandbox has enough workers: report §3.1 runs ~1000 per node)
      and their latency does not depend on load.
    * Engines are identical; no network time between the agent loop and engines.
    * Each turn is a new request (the agent loop's per-turn ``generate``) with ``max_new`` =
      the response budget left. Queues are first-come first-served; ``static`` puts retracted
      requests at the back of its engine's queue (SGLang's ``fcfs``); SGLang's per-batch
      prefill-token cap and ``max_running_requests`` beyond :attr:`EngineSpec.max_running` are
      not modelled. A request admitted at a step boundary decodes its first token in that step.
    * Admission happens only at step boundaries. Engines are simulated in macro-steps during
      which the batch is constant: a macro-step ends when a row ends its turn, at the first
      boundary after the next tool return of a trajectory homed on that engine or after a
      request is sent to it with its queue empty, and, under SGLang admission while requests
      wait, every 32 steps (checked: 1 and 32 give the same makespan on a quarter of the
      preset). Engines never idle while they hold a request.
    * The dispatcher sees every engine's KV in use and queue at once (no reporting delay) and
      decides after every event (a step end or a tool return).
    * Workload (:func:`sample_workload`): total response length log-normal and clipped at the
      stage limit; tool calls Poisson and independent of length; model tokens split over turns
      by a flat Dirichlet; feedback sizes geometric; tool latency log-normal. The report gives
      only the averages; the shapes are ours.
The preset (:data:`PAPER_ENGINE`, :data:`PAPER_WORKLOAD`) is derived from public hardware and
model figures in its comments, not fitted to any result.

Known answers (tests/train/test_sim.py): with one engine and room for every request, every
policy's makespan equals :func:`lower_bound`; with equal trajectories the policies tie.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

SGLANG_CLIP_MAX_NEW = 4096  # CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_INIT_RATIO, SGLANG_MIN_RATIO, SGLANG_DECAY_STEPS = 0.7, 0.7 * 0.14, 600
SGLANG_RETRACT_STEPS = 20  # retract_decode_steps
STATIC_RECHECK_STEPS = 32
#: ``dynamic``: a continuing turn leaves a home engine loaded more than (1 + rel) x the least
#: loaded + abs x capacity. Not fitted: rel 0.1-1.0 and abs 0.02-0.2 all give makespans within
#: 1% of each other on the preset.
BALANCE_REL, BALANCE_ABS = 0.25, 0.05
POLICIES = ("static", "dynamic", "dynamic_reserve", "dynamic_free", "static_barrier")
_VER = 1 << 32  # step-event payload: engine * _VER + macro-step generation


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


def simulate(trajs: list[Trajectory], n_engines: int, engine: EngineSpec, policy: str = "dynamic",
             max_response_tokens: int | None = None) -> SimResult:
    """Run one rollout step of ``trajs`` on ``n_engines`` identical engines.

    Args:
        trajs: the step's N trajectories (:func:`sample_workload`).
        n_engines: E, inference engines.
        engine: hardware and cost model of one engine.
        policy: one of :data:`POLICIES` (see the module docstring).
        max_response_tokens: response budget of the stage (each turn's ``max_new`` and the
            dispatcher's per-request budget); default the largest response in ``trajs``.
    Returns:
        :class:`SimResult`; ``makespan_s`` is when the last trajectory finishes.
    Raises:
        ValueError: unknown policy, or a trajectory whose reservation exceeds the KV capacity.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    max_resp = max_response_tokens or max(t.response_tokens for t in trajs)
    cap = engine.kv_capacity
    if max(t.prompt_tokens for t in trajs) + max_resp > cap:
        raise ValueError(f"a trajectory may need more than the KV capacity {cap} tokens")
    E, N = n_engines, len(trajs)
    global_q = policy.startswith("dynamic")  # one queue, dispatch by KV (report §3.2)
    reserve = policy == "dynamic_reserve"  # engines hold only reserved requests; else SGLang's own admission
    migrate = policy == "dynamic"  # a continuing turn may leave an overloaded home engine
    prompt = np.array([t.prompt_tokens for t in trajs], dtype=np.int64)
    engines = [_Engine() for _ in range(E)]
    home = [i % E for i in range(N)]  # engine holding the trajectory's prefix (static: its engine)
    turn = [0] * N
    done_resp = [0] * N  # response tokens so far (model + tool)
    finish = np.full(N, np.nan)
    stats = dict(decoded=0, prefill=0, recomputed=0, retractions=0, migrations=0)
    events: list = []  # heap of (time, seq, kind, payload)
    counter = [0]
    ready_new: deque = deque(range(N)) if global_q else deque()
    ready_cont = [deque() for _ in range(E)]  # dynamic: continuing turns, per home engine
    barrier_left = [0] * E  # static_barrier: trajectories of the engine not back from this turn
    barrier_queue: list[list[int]] = [[] for _ in range(E)]
    decay = (SGLANG_INIT_RATIO - SGLANG_MIN_RATIO) / SGLANG_DECAY_STEPS

    def push(t: float, kind: str, payload: int) -> None:
        heapq.heappush(events, (t, counter[0], kind, payload))
        counter[0] += 1

    def make_req(i: int, cached: bool) -> list[int]:
        tr, k = trajs[i], turn[i]
        ctx = tr.prompt_tokens + done_resp[i]
        new = tr.prompt_tokens if k == 0 else tr.tool_tokens[k - 1]
        return [i, ctx, tr.gen_tokens[k], 0, max_resp - done_resp[i], new if cached else ctx, tr.prompt_tokens + max_resp]

    def load(e: int) -> int:
        """KV tokens counted against engine ``e`` by the dispatcher."""
        en = engines[e]
        if reserve:
            return en.reserved
        return int(en.rows.col(_CTX).sum()) + sum(r[_BUDGET] for r in en.waiting)

    def send(i: int, e: int, cached: bool, t: float) -> None:
        """Queue trajectory ``i``'s next turn on engine ``e``; a busy engine admits it at its next step."""
        en = engines[e]
        idle_queue = not en.waiting
        req, kept = make_req(i, cached), make_req(i, True)
        en.waiting.append(req)
        if req[_EXT] > kept[_EXT]:  # a continuing turn moved: its prefix is prefilled again
            stats["recomputed"] += req[_EXT] - kept[_EXT]
            stats["migrations"] += 1
        home[i] = e
        if reserve:
            en.reserved += req[_BUDGET]
        if en.busy and idle_queue:
            cut(e, t)

    def dispatch(t: float) -> None:
        """Dynamic policies: send ready requests where their budget fits (report §3.2).

        A continuing turn goes to its home engine (which holds its prefix) when it fits there;
        under ``dynamic`` it goes instead to the least-loaded engine when its home is loaded more
        than :data:`BALANCE_REL` and :data:`BALANCE_ABS` allow and the request fits there.
        New trajectories go to the least-loaded engine, after the continuing turns were placed.
        """
        if not ready_new and not any(ready_cont):
            return
        loads = [load(e) for e in range(E)]  # only sends change them during one dispatch

        def fits(e: int, budget: int) -> bool:
            return loads[e] + budget <= cap and len(engines[e].rows) + len(engines[e].waiting) < engine.max_running

        def place(i: int, e: int, cached: bool) -> None:
            loads[e] += int(prompt[i]) + max_resp
            send(i, e, cached, t)

        for e in range(E):
            q = ready_cont[e]
            while q:
                i = q[0]
                budget = int(prompt[i]) + max_resp
                tgt = e if fits(e, budget) else None
                if migrate:
                    m = min(range(E), key=loads.__getitem__)
                    if m != e and loads[e] > (1 + BALANCE_REL) * loads[m] + BALANCE_ABS * cap and fits(m, budget):
                        tgt = m
                if tgt is None:
                    break
                q.popleft()
                place(i, tgt, tgt == e)
        while ready_new:
            i = ready_new[0]
            e = min((j for j in range(E) if not ready_cont[j]), key=loads.__getitem__, default=None)
            if e is None or not fits(e, int(prompt[i]) + max_resp):
                return
            ready_new.popleft()
            place(i, e, False)

    def admit_sglang(en: _Engine) -> None:
        """SGLang PrefillAdder: optimistic admission against estimated future growth."""
        rows = en.rows
        used = int(rows.col(_CTX).sum())
        offset = float((np.minimum(rows.col(_MAXNEW) - rows.col(_OUT), SGLANG_CLIP_MAX_NEW) * en.ratio).sum())
        new = []
        while en.waiting and len(rows) + len(new) < engine.max_running:
            r = en.waiting[0]
            grow = min(max(r[_MAXNEW] - r[_OUT], 0), SGLANG_CLIP_MAX_NEW)
            if r[_EXT] + grow >= cap - used - offset and (len(rows) or new):
                break
            new.append(en.waiting.popleft())
            used += r[_CTX]
            offset += grow * en.ratio
        rows.add(new)

    def retract(en: _Engine) -> None:
        """SGLang retract_decode: evict the rows with the fewest output tokens first."""
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

    def start_step(e: int, t: float) -> None:
        en = engines[e]
        if en.busy:
            return
        if reserve:
            n = min(len(en.waiting), engine.max_running - len(en.rows))
            en.rows.add([en.waiting.popleft() for _ in range(n)])
        else:
            admit_sglang(en)
        b = len(en.rows)
        if b == 0:
            return
        kv = int(en.rows.col(_CTX).sum())
        if not reserve and kv + b > cap:
            retract(en)
            b, kv = len(en.rows), int(en.rows.col(_CTX).sum())
        prefill = int(en.rows.col(_EXT).sum())
        en.rows.a[:, _EXT] = 0
        stats["prefill"] += prefill
        k = int(en.rows.col(_REM).min())
        if not reserve:
            k = max(1, min(k, (cap - kv) // b))
            if en.waiting:
                k = min(k, STATIC_RECHECK_STEPS)
        step0, growth, pf_s = engine.step_time(b, kv), engine.step_per_kv_token_s * b, engine.prefill_per_token_s * prefill
        if en.tool_times:  # end the macro-step at the first boundary after the next tool return here
            k = min(k, _steps_by(step0, growth, pf_s, en.tool_times[0] - t))
        en.shape = (t, step0, pf_s, b, kv, en.peak_kv)
        en.busy, en.steps = True, k
        finish_macro(e)

    def finish_macro(e: int) -> None:
        """Book the macro-step in flight on ``e`` (``en.steps`` steps of ``en.shape``) and its end event."""
        en = engines[e]
        t, step0, pf_s, b, kv, peak = en.shape
        k = en.steps
        dur = pf_s + k * step0 + engine.step_per_kv_token_s * b * k * (k - 1) / 2
        en.peak_kv = max(peak, kv + b * k)
        en.busy_s += dur
        en.ver += 1
        push(t + dur, "step", e * _VER + en.ver)

    def cut(e: int, t: float) -> None:
        """End engine ``e``'s macro-step at its first step boundary at or after ``t`` (new work arrived)."""
        en = engines[e]
        t0, step0, pf_s, b, kv, peak = en.shape
        j = _steps_by(step0, engine.step_per_kv_token_s * b, pf_s, t - t0)
        if j < en.steps:
            k = en.steps
            en.busy_s -= pf_s + k * step0 + engine.step_per_kv_token_s * b * k * (k - 1) / 2
            en.steps = j
            finish_macro(e)

    def barrier_arrive(e: int, i: int | None) -> None:
        if i is not None:
            barrier_queue[e].append(i)
        barrier_left[e] -= 1
        if barrier_left[e] == 0 and barrier_queue[e]:
            engines[e].waiting.extend(make_req(j, cached=True) for j in barrier_queue[e])
            barrier_left[e] = len(barrier_queue[e])
            barrier_queue[e] = []

    def turn_done(i: int, t: float, e: int) -> None:
        tr, k = trajs[i], turn[i]
        done_resp[i] += tr.gen_tokens[k]
        if k == len(tr.gen_tokens) - 1:
            finish[i] = t
            if policy == "static_barrier":
                barrier_arrive(e, None)
            return
        done_resp[i] += tr.tool_tokens[k]
        turn[i] += 1
        ret = t + tr.tool_latency_s[k]
        heapq.heappush(engines[home[i]].tool_times, ret)
        push(ret, "tool", i)

    if global_q:
        dispatch(0.0)
    else:
        for i in range(N):
            engines[home[i]].waiting.append(make_req(i, cached=False))
            barrier_left[home[i]] += 1
    for e in range(E):
        start_step(e, 0.0)
    def handle(t: float, kind: str, payload: int) -> int | None:
        """Apply one event at time ``t``; return the engine it concerns (None: a stale event)."""
        if kind == "step":
            e, ver = divmod(payload, _VER)
            en = engines[e]
            if ver != en.ver:  # the macro-step was cut; its end was booked again
                return None
            k, a = en.steps, en.rows.a
            en.busy = False
            a[:, _CTX] += k
            a[:, _REM] -= k
            a[:, _OUT] += k
            stats["decoded"] += k * len(a)
            if not reserve:
                en.ratio = max(SGLANG_MIN_RATIO, en.ratio - k * decay)
            done = a[:, _REM] == 0
            if done.any():
                en.rows.a = a[~done]
                for r in a[done]:
                    if reserve:
                        en.reserved -= int(r[_BUDGET])
                    turn_done(int(r[_TRAJ]), t, e)
            return e
        i = payload  # a tool call returned
        e = home[i]
        heapq.heappop(engines[e].tool_times)
        if global_q:
            ready_cont[e].append(i)
        elif policy == "static":
            engines[e].waiting.append(make_req(i, cached=True))
        else:
            barrier_arrive(e, i)
        return e

    while events:
        t = events[0][0]
        touched = set()
        while events and events[0][0] == t:  # all simultaneous events first, then new steps
            touched.add(handle(t, *heapq.heappop(events)[2:]))
        if global_q:
            dispatch(t)
            touched = range(E)
        for e in touched - {None} if isinstance(touched, set) else touched:
            start_step(e, t)
    if np.isnan(finish).any():
        raise RuntimeError("simulation ended with unfinished trajectories")
    return SimResult(policy, float(finish.max()), np.array([en.busy_s for en in engines]), stats["decoded"],
                     stats["prefill"], stats["recomputed"], stats["retractions"], finish,
                     np.array([en.peak_kv for en in engines]), stats["migrations"])


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
