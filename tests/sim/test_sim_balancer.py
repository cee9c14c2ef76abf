"""kit.sim drives the kit.sched balancer objects: the same object VERL runs, a dead engine."""

import dataclasses

import pytest

from kit.sched import KvCacheBalancer
from kit.sim import PAPER_WORKLOAD, EngineSpec, sample_workload, simulate

ENG = EngineSpec(kv_capacity=20_000, step_base_s=1e-3, step_per_seq_s=1e-5, step_per_kv_token_s=1e-8,
                 prefill_per_token_s=1e-5, max_running=512)
PRESET = dataclasses.replace(PAPER_WORKLOAD, n_trajectories=96, response_median_tokens=300,
                             max_response_tokens=1200, prompt_tokens_mean=40, tool_tokens_mean=20)


def test_the_simulator_routes_through_the_balancer_object_it_is_given():
    trajs = sample_workload(PRESET, seed=2)
    bal = KvCacheBalancer([str(e) for e in range(3)], ENG.kv_capacity, clock=lambda: 0.0)
    r = simulate(trajs, 3, ENG, "kv_balancer", max_response_tokens=1200, balancer=bal)
    turns = sum(len(t.gen_tokens) for t in trajs)
    assert bal.counters["routed"] == turns  # one routing decision per turn, none held back or repeated
    assert sum(bal.served.values()) == turns and min(bal.served.values()) > 0
    assert all(bal.inflight(e) == 0 for e in bal.engines)  # every request released
    assert bal.counters["moves"] == r.migrations
    assert bal.counters["sticky"] + bal.counters["moves"] == turns - len(trajs)


def test_over_committed_engines_report_valid_kv():
    # a KV pool far smaller than the step's requests: engines queue more than they hold, and their
    # reports (held + queued tokens) exceed the capacity; that is load, not garbage
    trajs = sample_workload(dataclasses.replace(PRESET, prompt_tokens_mean=400), seed=2)
    tight = EngineSpec(kv_capacity=4_000, step_base_s=1e-3, step_per_seq_s=1e-5, step_per_kv_token_s=1e-8,
                       prefill_per_token_s=1e-5, max_running=512)
    bal = KvCacheBalancer(["0", "1", "2"], tight.kv_capacity, clock=lambda: 0.0)
    simulate(trajs, 3, tight, "kv_balancer", max_response_tokens=1200, balancer=bal)
    assert bal.counters["reports"] > 0 and bal.counters["bad_reports"] == 0


def test_an_engine_that_dies_mid_step_loses_nothing_and_duplicates_nothing():
    trajs = sample_workload(PRESET, seed=3)
    base = simulate(trajs, 3, ENG, "kv_balancer", max_response_tokens=1200)
    bal = KvCacheBalancer(["0", "1", "2"], ENG.kv_capacity, clock=lambda: 0.0)
    r = simulate(trajs, 3, ENG, "kv_balancer", max_response_tokens=1200, balancer=bal,
                 fail=(1, base.makespan_s / 3))
    assert (r.finish_s > 0).all() and len(r.finish_s) == len(trajs)  # all finished (twice raises)
    assert bal.counters["engines_down"] == 1 and bal.counters["rerouted"] > 0
    assert not bal.engines["1"].alive and bal.inflight("1") == 0
    assert r.busy_s[1] <= base.makespan_s / 3 + 1e-9  # the dead engine ran nothing after it died
    assert r.decoded_tokens >= sum(sum(t.gen_tokens) for t in trajs)  # lost partial turns redone
    assert r.makespan_s > base.makespan_s


def test_fail_needs_a_balancer_that_can_route_around_it():
    trajs = sample_workload(PRESET, seed=3)
    with pytest.raises(ValueError, match="cannot route around"):
        simulate(trajs, 2, ENG, "verl_default", max_response_tokens=1200, fail=(0, 1.0))


@pytest.mark.parametrize(("n_engines", "engine"), [(1, 0), (2, 2), (2, -1)])
def test_fail_needs_another_engine_and_a_real_one(n_engines, engine):
    # a single dying engine used to strand every trajectory and end in "unfinished trajectories"
    # (benchmarks/scheduler_sim.py --scale 0.0625 crashed that way)
    trajs = sample_workload(PRESET, seed=3)
    with pytest.raises(ValueError, match="a dead engine needs another"):
        simulate(trajs, n_engines, ENG, "kv_balancer", max_response_tokens=1200, fail=(engine, 1.0))
