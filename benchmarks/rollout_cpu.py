"""CPU seconds of the local runtime's rollout step: tiny stage-1 rollouts from a trained policy (issue #35).

Usage::

    .venv/bin/python benchmarks/rollout_cpu.py --policy <run>/sft/policy [--steps 4] [--threads 1]
        [--profile 30]

Runs ``--steps`` rollout phases of stage 1 as :func:`kit.train.step.rl_step` runs them (the
profile's P problems x 2G samples, the stage's budget and turns, the step's rollout seed;
:func:`kit.train.rollouts.collect`: continuous-batching engine, agent loop, the real sandbox with
the per-step call cache, the verifier), without the update, so the policy stays the same and every
step is repeatable. Before them, one untimed step warms the sandbox, the verifier and the caches.

Prints per step: CPU seconds of this process in the rollout (all its threads; the sandbox and the
verifier are other processes), wall seconds, decoded tokens and decode forwards; then CPU seconds
per step and per 1,000 decoded tokens, and a fingerprint of the trajectories (a hash of every
response's ids, mask and tool calls and of the rewards) so that two versions of the engine can be
checked to sample the same rollouts; ``--dump`` writes them, log-probs included, and ``--compare``
says how another run's dump differs (two runs of one version: ids equal, log-probs ~1e-5 apart, as
the rows sharing a forward, and so the attention's rounding, follow tool latency). With ``--profile K`` the steps
run under :mod:`cProfile` and the K functions with the most own time are printed (a profiled run's
seconds are not the figures to compare).

Two versions of the code cannot run in one process: compare runs of each, interleaved, under the
same load. Last line: ``rollout_cpu_s_per_step=<x> cpu_s_per_1k_tokens=<y> tokens_per_cpu_s=<z>
fingerprint=<hash>``.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from kit.config import load  # noqa: E402
from kit.models import load_policy  # noqa: E402
from kit.rollout import run_coroutine  # noqa: E402
from kit.rollout.engine import ContinuousBatchingEngine  # noqa: E402
from kit.sandbox import SandboxPool  # noqa: E402
from kit.train import common, rl  # noqa: E402
from kit.train.rollouts import collect  # noqa: E402
from kit.train.step import step_problems  # noqa: E402


def fingerprint(batches) -> str:
    """A hash of the batches' trajectories (ids, mask, finish reason, tool calls) and rewards; not of the
    log-probs, which two runs of one version give only to float rounding (``--compare`` measures the gap)."""
    h = hashlib.sha256()
    for b in batches:
        for t in b.flat():
            calls = [(c.turn, c.index, c.status, c.code, c.input, c.feedback) for c in t.calls]
            h.update(json.dumps([t.response_ids, t.response_mask, calls, t.finish_reason]).encode())
        h.update(json.dumps(b.rewards.tolist()).encode())
    return h.hexdigest()[:16]


def records(batches) -> list[dict]:
    """Every trajectory of the batches as plain data (``--dump``; ``--compare`` reads two of these)."""
    return [{"ids": t.response_ids, "mask": t.response_mask, "logprobs": t.logprobs, "finish": t.finish_reason,
             "calls": [[c.turn, c.index, c.status, c.code, c.input, c.feedback] for c in t.calls], "reward": float(r)}
            for b in batches for t, r in zip(b.flat(), b.rewards.reshape(-1), strict=True)]


def compare(a: list[dict], b: list[dict]) -> str:
    """How two dumps differ: trajectories with other ids / calls / rewards, and the largest log-prob gap."""
    if len(a) != len(b):
        return f"different sizes: {len(a)} and {len(b)} trajectories"
    keys = ("ids", "mask", "finish", "calls", "reward")
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if any(x[k] != y[k] for k in keys)]
    gap = max((abs(u - v) for i, (x, y) in enumerate(zip(a, b, strict=True)) if i not in diff
               for u, v in zip(x["logprobs"], y["logprobs"], strict=True)), default=0.0)
    return f"{len(diff)} of {len(a)} trajectories differ in ids, calls or reward; largest log-prob gap elsewhere {gap:.2e}"


def run(policy: Path, steps: int, profile_top: int) -> dict:
    cfg = load("tiny", write=False)
    stage = rl.stage_config(cfg, "stage1")
    pool = rl.stage_pool(cfg, stage)
    model, tok = load_policy(policy)
    model.eval()
    n = cfg.algorithm.oversample

    async def one(ex, step):
        problems = step_problems(pool, step, cfg.algorithm.prompts_per_step, common.step_seed(cfg.seed, stage.name, "problems"))
        return await collect(cfg, model, tok, problems, n, ex, seed=common.step_seed(cfg.seed, stage.name, "rollout", step),
                             max_response_tokens=stage.max_response_tokens, max_turns=stage.max_turns,
                             temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)

    prof = cProfile.Profile() if profile_top else None
    engine_prof = cProfile.Profile() if profile_top else None
    engine_cpu = [0.0]
    advance = ContinuousBatchingEngine._advance

    def timed_advance(self, rows, admit):  # the engine's worker thread: its own CPU clock and profile
        c0 = time.thread_time()
        if engine_prof:
            engine_prof.enable()
        try:
            return advance(self, rows, admit)
        finally:
            if engine_prof:
                engine_prof.disable()
            engine_cpu[0] += time.thread_time() - c0

    ContinuousBatchingEngine._advance = timed_advance
    batches, cpu, wall, eng = [], [], [], []

    async def go():
        async with SandboxPool(cfg.sandbox) as ex:
            await one(ex, steps)  # warm-up: workers, verifier, allocator (a step not timed below)
            for step in range(steps):
                c0, t0, e0 = time.process_time(), time.perf_counter(), engine_cpu[0]
                if prof:
                    prof.enable()
                b = await one(ex, step)
                if prof:
                    prof.disable()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - t0)
                eng.append(engine_cpu[0] - e0)
                batches.append(b)
                print(f"step {step}: rollout cpu {cpu[-1]:.3f} s (engine thread {eng[-1]:.3f}), wall "
                      f"{wall[-1]:.2f} s, {b.engine.get('tokens', 0):.0f} tokens in {b.engine.get('steps', 0):.0f} "
                      f"forwards ({b.engine.get('row_steps', 0):.0f} row-steps, {b.engine.get('kv_cols', 0) / max(b.engine.get('steps', 1), 1):.0f} KV columns a forward), {sum(t.tool_calls for t in b.flat())} tool calls, reward {b.rewards.mean():.3f}",
                      flush=True)

    run_coroutine(go())
    ContinuousBatchingEngine._advance = advance
    if prof:
        for name, p in (("event-loop thread", prof), ("engine thread", engine_prof)):
            print(f"--- {name}")
            pstats.Stats(p).sort_stats("tottime").print_stats(profile_top)
            pstats.Stats(p).sort_stats("cumtime").print_stats(profile_top)
    tokens = sum(b.engine.get("tokens", 0) for b in batches)
    return {"cpu": sum(cpu), "engine": sum(eng), "wall": sum(wall), "tokens": tokens, "steps": steps,
            "fp": fingerprint(batches), "records": records(batches)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="a policy that calls the tool, e.g. a tiny run's sft/policy")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (an ablation arm's worker runs 1)")
    ap.add_argument("--profile", type=int, default=0, metavar="K", help="cProfile the steps; print the top K functions")
    ap.add_argument("--dump", default="", help="write the trajectories to this JSON file")
    ap.add_argument("--compare", default="", help="a --dump of another run: say how its trajectories differ")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    r = run(Path(a.policy), a.steps, a.profile)
    if a.dump:
        Path(a.dump).write_text(json.dumps(r["records"]))
    if a.compare:
        print("against", a.compare + ":", compare(json.loads(Path(a.compare).read_text()), r["records"]))
    per_step, per_1k = r["cpu"] / r["steps"], 1000 * r["cpu"] / max(r["tokens"], 1)
    print(f"{r['steps']} steps: {per_step:.3f} CPU s ({r['engine'] / r['steps']:.3f} in the engine's thread) and {r['wall'] / r['steps']:.2f} s wall a step, "
          f"{r['tokens'] / r['steps']:.0f} tokens a step, {per_1k:.3f} CPU s per 1k tokens")
    print(f"rollout_cpu_s_per_step={per_step:.3f} cpu_s_per_1k_tokens={per_1k:.3f} "
          f"tokens_per_cpu_s={r['tokens'] / max(r['cpu'], 1e-9):.0f} fingerprint={r['fp']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
