"""kit.sim: known answers, conservation of work, eviction and recompute accounting."""

import dataclasses

import numpy as np
import pytest

from kit.sim import (
    PAPER_WORKLOAD,
    EngineSpec,
    SimTrajectory,
    lower_bound,
    sample_workload,
    simulate,
    steps_by,
)

ENG = EngineSpec(kv_capacity=100_000, step_base_s=1e-3, step_per_seq_s=1e-5, step_per_kv_token_s=1e-8,
                 prefill_per_token_s=1e-5, max_running=512)
POLICIES = ("static", "dynamic", "dynamic_reserve", "dynamic_free", "static_barrier", "kv_balancer", "verl_default")


def _single_turn(n, seed):
    rng = np.random.default_rng(seed)
    return [SimTrajectory(int(rng.integers(10, 60)), (int(rng.integers(5, 300)),)) for _ in range(n)]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_engine_reaches_the_lower_bound(policy):
    trajs = _single_turn(40, 0)
    r = simulate(trajs, 1, ENG, policy, max_response_tokens=300)
    lb = lower_bound(trajs, 1, ENG)
    assert r.makespan_s == pytest.approx(lb["bound_s"], rel=1e-9)
    assert r.idle_fraction[0] == pytest.approx(0.0, abs=1e-9)


def test_equal_lengths_tie_across_policies():
    trajs = [SimTrajectory(20, (50, 60, 70), (10, 12), (0.3, 0.3)) for _ in range(32)]
    spans = {p: simulate(trajs, 4, ENG, p).makespan_s for p in POLICIES}
    assert spans["static"] == pytest.approx(spans["dynamic"], rel=1e-12)
    assert spans["static_barrier"] == pytest.approx(spans["dynamic"], rel=1e-12)
    assert spans["dynamic_free"] == pytest.approx(spans["dynamic"], rel=1e-12)
    assert spans["kv_balancer"] == pytest.approx(spans["dynamic"], rel=1e-12)
    assert spans["verl_default"] == pytest.approx(spans["dynamic"], rel=1e-12)
    assert spans["dynamic"] >= lower_bound(trajs, 4, ENG)["bound_s"]


@pytest.mark.parametrize("policy", POLICIES)
def test_work_is_conserved_and_the_bound_holds(policy):
    preset = dataclasses.replace(PAPER_WORKLOAD, n_trajectories=96, response_median_tokens=300,
                                 max_response_tokens=1200, prompt_tokens_mean=40, tool_tokens_mean=20)
    trajs = sample_workload(preset, seed=1)
    eng = dataclasses.replace(ENG, kv_capacity=20_000)
    r = simulate(trajs, 3, eng, policy, max_response_tokens=1200)
    assert r.decoded_tokens == sum(sum(t.gen_tokens) for t in trajs)
    first = sum(t.prompt_tokens + sum(t.tool_tokens) for t in trajs)
    assert r.prefill_tokens == first + r.recomputed_tokens  # prefix reuse on the same engine
    assert (r.peak_kv <= eng.kv_capacity).all()
    assert r.makespan_s >= lower_bound(trajs, 3, eng)["bound_s"] * (1 - 1e-12)
    assert (r.busy_s <= r.makespan_s + 1e-9).all()
    if policy == "dynamic_reserve":  # reservations never over-commit
        assert r.recomputed_tokens == 0 and r.retractions == 0


def test_static_overflow_evicts_and_recomputes_dynamic_never_does():
    # 8 requests that grow to 450 tokens each on a 2000-token pool: SGLang-style optimistic
    # admission over-commits and must retract; the dynamic reservation admits 4 at a time.
    trajs = [SimTrajectory(50, (400,)) for _ in range(8)]
    eng = dataclasses.replace(ENG, kv_capacity=2000)
    st = simulate(trajs, 1, eng, "static", max_response_tokens=400)
    dy = simulate(trajs, 1, eng, "dynamic_reserve", max_response_tokens=400)
    assert st.retractions > 0 and st.recomputed_tokens > 0
    assert st.prefill_tokens == 8 * 50 + st.recomputed_tokens
    assert st.decoded_tokens == dy.decoded_tokens == 8 * 400
    assert dy.recomputed_tokens == 0 and dy.prefill_tokens == 8 * 50
    assert dy.peak_kv[0] <= 4 * 450 and st.peak_kv[0] <= 2000
    assert st.makespan_s > dy.makespan_s  # recompute and re-queueing cost time here


def test_dynamic_never_exceeds_capacity_and_counts_its_recomputes():
    # The same over-committing pool: the report's scheduler admits by estimated growth, so it may
    # retract like SGLang, but KV never exceeds the capacity and every recomputed token is counted.
    trajs = [SimTrajectory(50, (400,)) for _ in range(8)]
    eng = dataclasses.replace(ENG, kv_capacity=2000)
    dy = simulate(trajs, 1, eng, "dynamic", max_response_tokens=400)
    assert dy.peak_kv[0] <= 2000
    assert dy.decoded_tokens == 8 * 400
    assert dy.prefill_tokens == 8 * 50 + dy.recomputed_tokens
    assert dy.migrations == 0  # one engine: nowhere to move


def test_a_turn_leaves_an_overloaded_home_and_its_prefix_is_recomputed():
    # Engine 0 gets trajectories 0 and 2, engine 1 the two one-token ones. When trajectory 0's
    # tool call returns, its home still runs trajectory 2 (~2K tokens of KV) while engine 1 is
    # empty: `dynamic` moves the turn there and prefills its 2050-token prefix again.
    long = SimTrajectory(50, (2000, 500), (20,), (0.01,))
    trajs = [long, SimTrajectory(50, (1,)), SimTrajectory(50, (3000, 500), (20,), (0.01,)), SimTrajectory(50, (1,))]
    eng = dataclasses.replace(ENG, kv_capacity=20_000)
    mv = simulate(trajs, 2, eng, "dynamic")
    st = simulate(trajs, 2, eng, "dynamic_free")
    assert mv.migrations == 1 and st.migrations == 0  # trajectory 2 returns to a now light home
    assert mv.recomputed_tokens == 2050 and st.recomputed_tokens == 0
    assert mv.prefill_tokens == st.prefill_tokens + mv.recomputed_tokens
    assert mv.makespan_s < st.makespan_s


def test_macro_step_boundaries():
    assert steps_by(1.0, 0.0, 0.0, 2.5) == 3  # boundaries at 1, 2, 3
    assert steps_by(1.0, 0.1, 0.5, 2.5) == 2  # 1.5, 2.6
    assert steps_by(1.0, 0.1, 3.0, 2.5) == 1  # the prefill alone outlasts dt
    assert steps_by(1.0, 0.0, 0.0, 3.0) == 3  # a boundary exactly at dt


def test_bad_inputs_raise():
    trajs = _single_turn(3, 2)
    with pytest.raises(ValueError, match="policy"):
        simulate(trajs, 1, ENG, "round_robin")
    with pytest.raises(ValueError, match="capacity"):
        simulate(trajs, 1, dataclasses.replace(ENG, kv_capacity=100), "dynamic", max_response_tokens=300)
    with pytest.raises(ValueError, match="trajectory"):
        SimTrajectory(10, (5, 6), (3,), ())


def test_sampled_workload_follows_the_preset():
    preset = dataclasses.replace(PAPER_WORKLOAD, n_trajectories=2000)
    trajs = sample_workload(preset, seed=0)
    resp = np.array([t.response_tokens for t in trajs])
    assert resp.max() <= preset.max_response_tokens and 0.02 < np.mean(resp == preset.max_response_tokens) < 0.2
    assert 5000 < resp.mean() < 7000  # the middle of the report's 4K-8K averages
    assert max(len(t.gen_tokens) for t in trajs) <= preset.max_turns
    lat = np.concatenate([t.tool_latency_s for t in trajs])
    assert lat.mean() == pytest.approx(preset.tool_latency_mean_s, rel=0.1)
    assert sample_workload(dataclasses.replace(preset, n_trajectories=5), seed=3) == \
        sample_workload(dataclasses.replace(preset, n_trajectories=5), seed=3)
