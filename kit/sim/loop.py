"""The event loop :func:`simulate` and the policies it compares (report §3.2).

One function holds the whole run: its closures share the cluster's state (engines, queues,
trajectory progress, the event heap). They are the dispatcher of the ``dynamic`` policies
(``dispatch``: KV-budget placement, cache-aware routing with the :data:`BALANCE_REL` /
:data:`BALANCE_ABS` threshold), the static and lockstep queues, the macro-steps of each engine
(``start_step``, ``finish_macro``, ``cut``) and the handling of step-end and tool-return events.
Admission and retraction inside an engine are in :mod:`kit.sim.engine_model`; the policies
and every modelling assumption are described in :mod:`kit.sim`.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from kit.sched import KvCacheBalancer, StickyLeastInflight
from kit.sched.balancer import BALANCE_ABS as SCHED_BALANCE_ABS
from kit.sched.balancer import BALANCE_REL as SCHED_BALANCE_REL
from kit.sim.engine_model import (
    BUDGET,
    CTX,
    EXT,
    OUT,
    REM,
    SGLANG_DECAY_STEPS,
    SGLANG_INIT_RATIO,
    SGLANG_MIN_RATIO,
    TRAJ,
    EngineSpec,
    EngineState,
    admit_sglang,
    retract,
    steps_by,
)
from kit.sim.results import SimResult
from kit.sim.workload import SimTrajectory

#: Under SGLang admission while requests wait, a macro-step lasts at most this many steps (the
#: engine re-runs admission at its end); 1 and 32 give the same makespan on a quarter of the preset.
STATIC_RECHECK_STEPS = 32
#: ``dynamic``: a continuing turn leaves a home engine loaded more than (1 + rel) x the least
#: loaded + abs x capacity (the values of :mod:`kit.sched.balancer`, which ``kv_balancer`` uses).
#: Not fitted: rel 0.1-1.0 and abs 0.02-0.2 all give makespans within 1% of each other on the preset.
BALANCE_REL, BALANCE_ABS = SCHED_BALANCE_REL, SCHED_BALANCE_ABS
POLICIES = ("static", "dynamic", "dynamic_reserve", "dynamic_free", "static_barrier", "kv_balancer", "verl_default")
#: policies that route each request the moment it is ready through a :mod:`kit.sched` balancer
ROUTED = ("kv_balancer", "verl_default")
_VER = 1 << 32  # step-event payload: engine * _VER + macro-step generation


def simulate(trajs: list[SimTrajectory], n_engines: int, engine: EngineSpec, policy: str = "dynamic",
             max_response_tokens: int | None = None, *, balancer=None, seed: int = 0,
             fail: tuple[int, float] | None = None) -> SimResult:
    """Run one rollout step of ``trajs`` on ``n_engines`` identical engines.

    Args:
        trajs: the step's N trajectories (:func:`sample_workload`).
        n_engines: E, inference engines.
        engine: hardware and cost model of one engine.
        policy: one of :data:`POLICIES` (see :mod:`kit.sim`).
        max_response_tokens: response budget of the stage (each turn's ``max_new`` and the
            dispatcher's per-request budget); default the largest response in ``trajs``.
        balancer: routed policies (:data:`ROUTED`): the policy object to drive (engines named
            ``"0"`` .. ``"E-1"``); default a :class:`kit.sched.KvCacheBalancer` of the engine's
            capacity (``kv_balancer``) or :class:`kit.sched.StickyLeastInflight` seeded with
            ``seed`` (``verl_default``).
        seed: tie-break seed of the default ``verl_default`` balancer.
        fail: ``(engine, seconds)``: that engine dies at that time (routed policies whose balancer
            has ``mark_down``): its running and queued requests are lost and handed back by the
            balancer, which the loop checks, and routed again (their context prefilled again).
    Returns:
        :class:`SimResult`; ``makespan_s`` is when the last trajectory finishes.
    Raises:
        ValueError: unknown policy, a trajectory whose reservation exceeds the KV capacity, or
            ``fail`` with a policy that cannot route around a dead engine, fewer than 2 engines or an engine out of range.
        RuntimeError: a trajectory finished twice or never, or the balancer handed back other
            requests than the dead engine held.
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
    routed = policy in ROUTED  # each request routed when ready by a kit.sched balancer (no global queue)
    names = [str(e) for e in range(n_engines)]
    clock = [0.0, -1.0]  # simulated now, time of the last KV reports
    if routed and balancer is None:
        balancer = (KvCacheBalancer(names, engine.kv_capacity, clock=lambda: clock[0]) if policy == "kv_balancer"
                    else StickyLeastInflight(names, seed=seed))
    if fail is not None and not (routed and hasattr(balancer, "mark_down")):
        raise ValueError(f"fail: policy {policy!r} cannot route around a dead engine")
    if fail is not None and not (0 <= int(fail[0]) < n_engines and n_engines >= 2):
        raise ValueError(f"fail: engine {fail[0]} of {n_engines}; a dead engine needs another of at least 2 to "
                         "route around it (with one, every trajectory on it would be stranded)")
    dead: set[int] = set()
    prompt = np.array([t.prompt_tokens for t in trajs], dtype=np.int64)
    engines = [EngineState() for _ in range(E)]
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
        return int(en.rows.col(CTX).sum()) + sum(r[BUDGET] for r in en.waiting)

    def send(i: int, e: int, cached: bool, t: float) -> None:
        """Queue trajectory ``i``'s next turn on engine ``e``; a busy engine admits it at its next step."""
        en = engines[e]
        idle_queue = not en.waiting
        req, kept = make_req(i, cached), make_req(i, True)
        en.waiting.append(req)
        if req[EXT] > kept[EXT]:  # a continuing turn moved: its prefix is prefilled again
            stats["recomputed"] += req[EXT] - kept[EXT]
            stats["migrations"] += 1
        home[i] = e
        if reserve:
            en.reserved += req[BUDGET]
        if en.busy and idle_queue:
            cut(e, t)

    def route(i: int, t: float) -> None:
        """Routed policies: send trajectory ``i``'s next turn where the balancer says, now."""
        clock[0] = t
        if clock[1] != t and hasattr(balancer, "report"):  # engines report KV held or queued (tokens)
            clock[1] = t
            for e in set(range(E)) - dead:
                en = engines[e]
                balancer.report(names[e], int(en.rows.col(CTX).sum()) + sum(r[CTX] for r in en.waiting))
        e = int(balancer.acquire(str(i), int(prompt[i]) + done_resp[i],
                                 max_resp - done_resp[i]))
        send(i, e, turn[i] > 0 and e == home[i], t)

    def kill(e: int, t: float) -> list[int]:
        """Engine ``e`` dies at ``t``: its requests are lost; returns the trajectories to route again."""
        en = engines[e]
        held = sorted({int(x) for x in en.rows.col(TRAJ)} | {int(r[TRAJ]) for r in en.waiting})
        if en.busy:  # the macro-step in flight ends now
            t0, step0, pf_s, b, kv, peak = en.shape
            k = en.steps
            en.busy_s -= t0 + pf_s + k * step0 + engine.step_per_kv_token_s * b * k * (k - 1) / 2 - t
        dead.add(e)
        en.rows.a, en.busy = en.rows.a[:0], False
        en.waiting.clear()
        en.ver += 1
        clock[0] = t
        back = sorted(int(x) for x in balancer.mark_down(names[e], "simulated failure"))
        if back != held:
            raise RuntimeError(f"balancer handed back {back[:8]}... but engine {e} held {held[:8]}...")
        return back

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

    def start_step(e: int, t: float) -> None:
        en = engines[e]
        if en.busy or e in dead:
            return
        if reserve:
            n = min(len(en.waiting), engine.max_running - len(en.rows))
            en.rows.add([en.waiting.popleft() for _ in range(n)])
        else:
            admit_sglang(en, cap, engine.max_running)
        b = len(en.rows)
        if b == 0:
            return
        kv = int(en.rows.col(CTX).sum())
        if not reserve and kv + b > cap:
            retract(en, cap, prompt, stats)
            b, kv = len(en.rows), int(en.rows.col(CTX).sum())
        prefill = int(en.rows.col(EXT).sum())
        en.rows.a[:, EXT] = 0
        stats["prefill"] += prefill
        k = int(en.rows.col(REM).min())
        if not reserve:
            k = max(1, min(k, (cap - kv) // b))
            if en.waiting:
                k = min(k, STATIC_RECHECK_STEPS)
        step0, growth, pf_s = engine.step_time(b, kv), engine.step_per_kv_token_s * b, engine.prefill_per_token_s * prefill
        if en.tool_times:  # end the macro-step at the first boundary after the next tool return here
            k = min(k, steps_by(step0, growth, pf_s, en.tool_times[0] - t))
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
        j = steps_by(step0, engine.step_per_kv_token_s * b, pf_s, t - t0)
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
        if routed:
            balancer.release(str(i), names[e])
        if k == len(tr.gen_tokens) - 1:
            if not np.isnan(finish[i]):
                raise RuntimeError(f"trajectory {i} finished twice")
            finish[i] = t
            if routed:
                balancer.forget(str(i))
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
    elif routed:
        for i in range(N):
            route(i, 0.0)
        if fail is not None:
            push(float(fail[1]), "fail", int(fail[0]))
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
            a[:, CTX] += k
            a[:, REM] -= k
            a[:, OUT] += k
            stats["decoded"] += k * len(a)
            if not reserve:
                en.ratio = max(SGLANG_MIN_RATIO, en.ratio - k * decay)
            done = a[:, REM] == 0
            if done.any():
                en.rows.a = a[~done]
                for r in a[done]:
                    if reserve:
                        en.reserved -= int(r[BUDGET])
                    turn_done(int(r[TRAJ]), t, e)
            return e
        if kind == "fail":
            for i in kill(payload, t):
                route(i, t)
            return None
        i = payload  # a tool call returned
        e = home[i]
        heapq.heappop(engines[e].tool_times)
        if routed:
            route(i, t)
            return home[i]
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
        if global_q or routed:  # a routed request may have gone to any engine
            touched = range(E)
        for e in touched - {None} if isinstance(touched, set) else touched:
            start_step(e, t)
    if np.isnan(finish).any():
        raise RuntimeError("simulation ended with unfinished trajectories")
    return SimResult(policy, float(finish.max()), np.array([en.busy_s for en in engines]), stats["decoded"],
                     stats["prefill"], stats["recomputed"], stats["retractions"], finish,
                     np.array([en.peak_kv for en in engines]), stats["migrations"])
