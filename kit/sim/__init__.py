"""Discrete-event simulator of rollout scheduling on a GPU cluster (rStar2-Agent report §3.2).

The report replaces static allocation of rollout requests with a load-balanced scheduler but
gives no speed-up figure, and the release does not contain it (its dispatch is verl's
least-assigned-count heap with sticky ``request -> server``; the only trace of the scheduler is
a commented ``budget = len(prompt_ids) + response_length`` charged per request). This package
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
``kv_balancer`` the kit's balancer, :class:`kit.sched.KvCacheBalancer`, the very object VERL
runs (``rollout.balancer = "kv_cache"``): every request (a new trajectory, or a turn whose tool
call returned) is routed the moment it is ready, to the engine with the most free KV (each
engine reports the KV its running and queued requests hold before each routing time; requests
routed since count at ``prompt + max_new``), staying on the engine holding its prefix unless
that engine is overloaded (the same :data:`BALANCE_REL` / :data:`BALANCE_ABS` rule); no global
queue, nothing held back; admission and eviction inside an engine are SGLang's (as ``static``).
``simulate(..., fail=(e, t))`` kills engine ``e`` at ``t``: the balancer hands its requests back
and they are routed again (the loop checks none is lost or finishes twice).
``verl_default`` a model of VERL 0.9.1's default balancer (:class:`kit.sched.StickyLeastInflight`:
a trajectory stays on the engine of its first request, a new one goes to the engine with the
fewest requests in flight, ties at random), routed the same way.
``static_barrier`` (information): static allocation where each engine's trajectories advance
turn by turn in lockstep (all tool calls of a turn must return before the next turn starts),
like the plain batch loop of :mod:`kit.rollout.engine`.

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

Known answers (tests/sim/test_sim.py): with one engine and room for every request, every
policy's makespan equals :func:`lower_bound`; with equal trajectories the policies tie.

Layout (``from kit.sim import X`` reaches every public name; the code lives in):
    ``engine_model``  :class:`EngineSpec` (cost of a step), the SGLang constants, the request
        rows of one engine, SGLang admission (``PrefillAdder``) and retraction
        (``retract_decode``: eviction and the recompute it costs), the macro-step arithmetic.
    ``workload``  :class:`SimTrajectory`, :class:`WorkloadPreset`, :func:`sample_workload` and the
        preset :data:`PAPER_ENGINE`, :data:`PAPER_WORKLOAD`.
    ``results``  :class:`SimResult` and :func:`lower_bound`.
    ``loop``  :func:`simulate` (event loop, dispatcher and the per-policy queues),
        :data:`POLICIES`, :data:`ROUTED`, :data:`BALANCE_REL`, :data:`BALANCE_ABS`, :data:`STATIC_RECHECK_STEPS`;
        the routed policies drive a :mod:`kit.sched` balancer (the only ``kit`` package it imports).
Imports run one way: ``engine_model`` <- ``workload`` <- ``results`` <- ``loop``. To monkeypatch a
name a function looks up, patch the submodule that uses it (e.g. ``kit.sim.loop.BALANCE_REL``
for :func:`simulate`), not ``kit.sim``.
"""

from kit.sim.engine_model import (
    SGLANG_CLIP_MAX_NEW,
    SGLANG_DECAY_STEPS,
    SGLANG_INIT_RATIO,
    SGLANG_MIN_RATIO,
    SGLANG_RETRACT_STEPS,
    EngineSpec,
    steps_by,
)
from kit.sim.loop import BALANCE_ABS, BALANCE_REL, POLICIES, ROUTED, STATIC_RECHECK_STEPS, simulate
from kit.sim.results import SimResult, lower_bound
from kit.sim.workload import PAPER_ENGINE, PAPER_WORKLOAD, SimTrajectory, WorkloadPreset, sample_workload

__all__ = [
    "steps_by",
    "BALANCE_ABS",
    "BALANCE_REL",
    "PAPER_ENGINE",
    "PAPER_WORKLOAD",
    "POLICIES",
    "ROUTED",
    "SGLANG_CLIP_MAX_NEW",
    "SGLANG_DECAY_STEPS",
    "SGLANG_INIT_RATIO",
    "SGLANG_MIN_RATIO",
    "SGLANG_RETRACT_STEPS",
    "STATIC_RECHECK_STEPS",
    "EngineSpec",
    "SimResult",
    "SimTrajectory",
    "WorkloadPreset",
    "lower_bound",
    "sample_workload",
    "simulate",
]
