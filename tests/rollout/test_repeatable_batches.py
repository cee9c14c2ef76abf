"""A rollout batch is a function of (model, seed, requests), not of tool latency (issue #41).

The tiny model fitted to call the tool (``doubles.fit_tool_use``) is rolled out at T = 1 through
:func:`kit.train.rollouts.collect` (the real sandbox, the step cache, the real verifier) three times
per scheduler: with the sandbox as it is, and twice with every tool call delayed by a random
0-40 ms drawn from a different stream each time, so the calls return in other orders and at other
decode steps. Token ids, log-probs and entropies must be bitwise equal: the schedulers decide
admission, batching and compaction from their logical clock (:mod:`kit.rollout.cohort`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import struct

import pytest
from doubles import fit_tool_use

from kit.config import load
from kit.data.tasks import TaskProblem
from kit.rollout.cohort import Cohort
from kit.sandbox import SandboxPool
from kit.train import rollouts

pytestmark = pytest.mark.slow

PROBLEMS = [TaskProblem(f"t{a}", "product", 1, f"What is {a} * {a + 7}?", str(a * (a + 7)), f"print({a}*{a + 7})")
            for a in (12, 13, 31, 45, 14)]


class Jitter:
    """The sandbox with each batch of calls held back a random 0-``max_s`` seconds (its own stream)."""

    def __init__(self, inner, seed: int | None, max_s: float = 0.04):
        self.inner, self.rng, self.max_s = inner, random.Random(seed), max_s

    async def run_batch(self, calls):
        if self.rng is not None:
            await asyncio.sleep(self.rng.uniform(0.0, self.max_s))
        return await self.inner.run_batch(calls)


def _fingerprint(batch) -> str:
    """Everything a trajectory records that floats or scheduling could move, as exact text
    (floats by their bit patterns)."""
    bits = lambda xs: [struct.pack("<d", x).hex() for x in xs or []]  # noqa: E731
    rows = [[t.response_ids, t.response_mask, bits(t.logprobs), bits(t.entropy), t.finish_reason,
             [(c.status, c.feedback) for c in t.calls]] for t in batch.flat()]
    return json.dumps([rows, batch.rewards.tolist()])


@pytest.fixture(scope="module")
def fitted(tok, one_torch_thread):
    return fit_tool_use(tok)


def _collect(scheduler: str, model, tok, jitter_seed: int | None):
    base = load("tiny", write=False)
    cfg = dataclasses.replace(base, sandbox=dataclasses.replace(base.sandbox, num_workers=2),
                              rollout=dataclasses.replace(base.rollout, scheduler=scheduler, batch_size=8))

    async def go():
        async with SandboxPool(cfg.sandbox) as pool:
            ex = Jitter(pool, jitter_seed) if jitter_seed is not None else pool
            return await rollouts.collect(cfg, model, tok, PROBLEMS, 4, ex, seed=7, max_response_tokens=120,
                                          max_turns=3, temperature=1.0)
    return asyncio.run(go())


@pytest.mark.parametrize("scheduler", ["dynamic", "static"])
def test_tool_latency_does_not_change_a_single_bit_of_the_batch(scheduler, fitted, tok):
    plain = _collect(scheduler, fitted, tok, None)
    calls = sum(t.tool_calls for t in plain.flat())
    assert calls >= 10, "the fitted model should call the tool in most trajectories"
    assert len({len(t.response_ids) for t in plain.flat()}) > 3  # rows end at different steps: batches change
    ref = _fingerprint(plain)
    counters = lambda b: {k: v for k, v in b.engine.items() if not k.endswith(("_s", "seconds"))}  # noqa: E731
    for seed in (1, 2):
        jittered = _collect(scheduler, fitted, tok, seed)
        assert _fingerprint(jittered) == ref, f"jitter stream {seed} changed the batch"
        # the schedule itself (decode steps, rows x steps, prefills, KV columns), not only its outputs
        assert counters(jittered) == counters(plain), f"jitter stream {seed} changed the engine's schedule"


def test_the_cohort_waits_for_a_due_trajectory_and_admits_in_due_order():
    co = Cohort()
    base = co.reserve(3)
    for j in range(base, base + 3):
        co.join(j)
    assert co.blocked()  # all due now, none submitted
    assert [co.submitted(j) for j in (base + 2, base, base + 1)] == [0, 0, 0]
    assert not co.blocked() and not co.waiting()
    co.clock = 5
    co.finished(base, delay=8)  # its row ended at step 5: due again at 13
    assert co.next_due() == 13 and not co.blocked()
    co.clock = 13
    assert co.blocked()
    assert co.leave(base) == 13 and not co.blocked()
    with pytest.raises(ValueError, match="not waiting"):
        co.submitted(base + 1)  # a second request while one is outstanding


def test_a_trajectory_that_ends_ahead_of_its_due_step_is_seen_ending_at_that_step():
    """A trajectory ends after a tool call once the call returns (wall time); the schedule must see the end at its
    due step whether it came early or at the step (review of issue #41)."""
    early, late = Cohort(), Cohort()
    for co in (early, late):
        j = co.reserve(2)
        co.join(j)
        co.join(j + 1)
        co.submitted(j)
        co.submitted(j + 1)
        co.clock = 3
        co.finished(j, delay=8)  # due at 11
        co.finished(j + 1, delay=20)  # due at 23
    early.leave(0)  # it left at step 3, before its due step 11
    for co in (early, late):
        assert co.next_due() == 11 and co.due_within(11) == 1 and co.due_within(23) == 2
    early.clock = late.clock = 11
    assert late.blocked() and not early.blocked()  # the late one is waited for; the early one has ended
    late.leave(0)
    for co in (early, late):
        assert co.next_due() == 23 and co.due_within(30) == 1 and not co.ended


def test_a_failed_forward_fails_the_rows_in_flight_and_the_cohort_goes_on(product_tok, product_model):
    """A forward error fails the requests still decoding; a trajectory whose row had already finished and
    sent its next turn is untouched (marking it due again made the engine wait for it forever)."""
    from kit import prompts
    from kit.rollout.cohort import gather_trajectories
    from kit.rollout.engine import ContinuousBatchingEngine

    tok, model = product_tok, product_model
    p = tok(prompts.render_prompt("What is 101 * 108?"))["input_ids"]
    eng = ContinuousBatchingEngine(model, tok, slots=8, tool_delay_steps=3, max_steps_per_call=2)
    real, base, raised = eng._advance, eng.cohort._next_id, []

    def advance(rows, admit, steps, soon=0):
        if not raised and any(r.traj == base and not r.future.done() for r in eng._pending) \
                and any(r.traj == base and r.done for r in rows.reqs):
            raised.append(1)  # A's second turn waits while A's first row is a dead slot: fail the forward
            raise RuntimeError("injected forward failure")
        return real(rows, admit, steps, soon)

    eng._advance = advance

    async def a():
        g1 = await eng.generate(p, 2, 1.0, 1.0, [])
        await eng.generate(p + g1.token_ids, 4, 1.0, 1.0, [])
        return "ok"

    async def b():
        try:
            await eng.generate(p, 40, 1.0, 1.0, [])
            return "ok"
        except RuntimeError as exc:
            return str(exc)

    async def run():
        return await asyncio.wait_for(gather_trajectories(eng, [a, b, b, b, b, b]), 60)  # 1 dead row of 6: not compacted

    out = asyncio.run(run())
    assert raised and out == ["ok"] + ["injected forward failure"] * 5
    assert not eng.cohort.due  # every trajectory left


def test_the_synchronous_sampler_is_collect_with_a_pool_of_its_own(fitted, tok):
    """:func:`kit.train.rollouts.collect_sync` (the held-out evaluations', probes' and study loops' sampler)
    gives bitwise the batch :func:`collect` gives inside a pool the caller started."""
    base = load("tiny", write=False)
    cfg = dataclasses.replace(base, sandbox=dataclasses.replace(base.sandbox, num_workers=2),
                              rollout=dataclasses.replace(base.rollout, batch_size=8))
    sync = rollouts.collect_sync(cfg, fitted, tok, PROBLEMS, 4, seed=7, max_response_tokens=120, max_turns=3,
                                 temperature=1.0)
    assert sum(t.tool_calls for t in sync.flat()) >= 10
    assert _fingerprint(sync) == _fingerprint(_collect(cfg.rollout.scheduler, fitted, tok, None))
