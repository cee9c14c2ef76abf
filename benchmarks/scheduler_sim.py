"""Static against dynamic rollout scheduling on the paper-like preset (rStar2-Agent report §3.2).

Simulates one stage-2 RL step (512 prompts x 32 rollouts, 12K response limit, ~0.3 s tool calls)
on 16 engines (64 MI300X as TP=4 groups serving Qwen3-14B) with :mod:`kit.sim`, once per
policy, and prints makespans, the lower bound, engine idle fractions and recomputed tokens
(evictions and migrated turns). ``dynamic`` is the report's scheduler as a global queue;
``kv_balancer`` is the kit's balancer object (:class:`kit.sched.KvCacheBalancer`, what VERL runs
under ``rollout.balancer = "kv_cache"``) and ``verl_default`` a model of VERL 0.9.1's default
(sticky sessions + fewest in-flight requests), both routing every request the moment it is ready;
``dynamic_reserve`` (the strict worst-case reservation) and ``dynamic_free`` (no migration) are
printed for information, and so is ``kv_balancer`` with one engine dying half-way.
The preset is fixed in ``kit/sim/workload.py`` (derived from hardware figures, not fitted).

Usage: ``.venv/bin/python benchmarks/scheduler_sim.py [--seed 0] [--engines 16] [--scale 1.0]``
Last lines: ``static_over_dynamic=<x> dynamic_over_bound=<y>``, then
``verl_default_over_kit=<z>`` (makespan of ``verl_default`` over ``kv_balancer``, same workload
and seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from kit.sim import PAPER_ENGINE, PAPER_WORKLOAD, POLICIES, lower_bound, sample_workload, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", type=int, default=16)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 16384 trajectories (and engines)")
    args = ap.parse_args()
    n = max(1, int(PAPER_WORKLOAD.n_trajectories * args.scale))
    E = max(1, round(args.engines * args.scale))
    preset = dataclasses.replace(PAPER_WORKLOAD, n_trajectories=n)
    trajs = sample_workload(preset, seed=args.seed)
    resp = np.array([t.response_tokens for t in trajs])
    turns = np.array([len(t.gen_tokens) for t in trajs])
    print(f"workload: {n} trajectories on {E} engines; response tokens mean {resp.mean():.0f}, "
          f"p50 {np.median(resp):.0f}, p99 {np.percentile(resp, 99):.0f}, max {resp.max()}, "
          f"truncated {np.mean(resp >= preset.max_response_tokens):.3f}; turns mean {turns.mean():.2f}")
    lb = lower_bound(trajs, E, PAPER_ENGINE)
    print(f"lower bound: {lb['bound_s']:.1f} s (work/capacity {lb['work_s']:.1f} s, longest trajectory alone {lb['critical_s']:.1f} s)")
    res = {}
    for policy in POLICIES:
        t0 = time.perf_counter()
        r = simulate(trajs, E, PAPER_ENGINE, policy, max_response_tokens=preset.max_response_tokens, seed=args.seed)
        res[policy] = r
        idle = r.idle_fraction
        print(f"{policy:15s} makespan {r.makespan_s:7.1f} s  idle mean {idle.mean():.3f} (min {idle.min():.3f}, "
              f"max {idle.max():.3f})  recomputed {r.recomputed_tokens:,} tokens ({r.retractions:,} evictions, "
              f"{r.migrations:,} migrations)  "
              f"prefill {r.prefill_tokens:,}  decoded {r.decoded_tokens:,}  peak KV {r.peak_kv.max() / PAPER_ENGINE.kv_capacity:.2f}"
              f"  p50 finish {np.median(r.finish_s):.1f} s  [sim {time.perf_counter() - t0:.1f} s]")
    for median in (3500, 7750):  # information: the ends of the report's 4K-8K average range
        alt = sample_workload(dataclasses.replace(preset, response_median_tokens=median), seed=args.seed)
        ms = {p: simulate(alt, E, PAPER_ENGINE, p, max_response_tokens=preset.max_response_tokens)
              for p in ("static", "dynamic", "dynamic_reserve")}
        b = lower_bound(alt, E, PAPER_ENGINE)["bound_s"]
        print(f"(information) response mean {np.mean([t.response_tokens for t in alt]):.0f}: static {ms['static'].makespan_s:.1f} s "
              f"({ms['static'].recomputed_tokens:,} recomputed), dynamic {ms['dynamic'].makespan_s:.1f} s, bound {b:.1f} s, "
              f"dynamic_reserve {ms['dynamic_reserve'].makespan_s:.1f} s, static_over_dynamic={ms['static'].makespan_s / ms['dynamic'].makespan_s:.3f}")
    half = dataclasses.replace(PAPER_ENGINE, kv_capacity=PAPER_ENGINE.kv_capacity // 2)  # information: tighter KV
    ms = {p: simulate(trajs, E, half, p, max_response_tokens=preset.max_response_tokens, seed=args.seed)
          for p in ("static", "dynamic", "dynamic_reserve", "kv_balancer", "verl_default")}
    print(f"(information) half the KV capacity: static {ms['static'].makespan_s:.1f} s ({ms['static'].recomputed_tokens:,} "
          f"recomputed in {ms['static'].retractions:,} evictions), dynamic {ms['dynamic'].makespan_s:.1f} s "
          f"({ms['dynamic'].recomputed_tokens:,} recomputed), dynamic_reserve {ms['dynamic_reserve'].makespan_s:.1f} s, bound "
          f"{lower_bound(trajs, E, half)['bound_s']:.1f} s, static_over_dynamic={ms['static'].makespan_s / ms['dynamic'].makespan_s:.3f}; "
          f"kv_balancer {ms['kv_balancer'].makespan_s:.1f} s ({ms['kv_balancer'].recomputed_tokens:,} recomputed), "
          f"verl_default {ms['verl_default'].makespan_s:.1f} s ({ms['verl_default'].recomputed_tokens:,} recomputed in "
          f"{ms['verl_default'].retractions:,} evictions), "
          f"verl_default_over_kit={ms['verl_default'].makespan_s / ms['kv_balancer'].makespan_s:.3f}")
    x = res["static"].makespan_s / res["dynamic"].makespan_s
    y = res["dynamic"].makespan_s / lb["bound_s"]
    print(f"(information) static_barrier_over_dynamic={res['static_barrier'].makespan_s / res['dynamic'].makespan_s:.3f} "
          f"static_over_dynamic_reserve={res['static'].makespan_s / res['dynamic_reserve'].makespan_s:.3f} "
          f"dynamic_reserve_over_bound={res['dynamic_reserve'].makespan_s / lb['bound_s']:.3f} "
          f"static_over_dynamic_free={res['static'].makespan_s / res['dynamic_free'].makespan_s:.3f} "
          f"dynamic_free_over_bound={res['dynamic_free'].makespan_s / lb['bound_s']:.3f}")
    kit, verl = res["kv_balancer"], res["verl_default"]
    if E >= 2:  # a dying engine needs another to take its trajectories
        failed = simulate(trajs, E, PAPER_ENGINE, "kv_balancer", max_response_tokens=preset.max_response_tokens,
                          fail=(0, kit.makespan_s / 2))
        print(f"(information) kv_balancer with engine 0 dying at {kit.makespan_s / 2:.1f} s: makespan "
              f"{failed.makespan_s:.1f} s, every trajectory finished once, {failed.migrations:,} turns moved")
    else:
        print("(information) one engine: the dying-engine run is skipped")
    print(f"(information) kv_balancer_over_bound={kit.makespan_s / lb['bound_s']:.3f} verl_default_over_bound="
          f"{verl.makespan_s / lb['bound_s']:.3f} static_over_kit={res['static'].makespan_s / kit.makespan_s:.3f}")
    print(f"static_over_dynamic={x:.3f} dynamic_over_bound={y:.3f}")
    print(f"verl_default_over_kit={verl.makespan_s / kit.makespan_s:.3f}")


if __name__ == "__main__":
    main()
