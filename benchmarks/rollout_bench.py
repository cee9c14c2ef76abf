"""Continuous batching against the plain batch loop on the tiny tool-using policy (report §3.2).

Same model, problems, seed and sandbox in one run: the kit's agent loop rolls out P problems x n
samples (multi-turn, every tool call through ``kit.sandbox.SandboxPool``) twice per repeat,

* ``plain``      :class:`kit.rollout.engine.BatchLoopBackend` via ``rollout_plain``: cohorts of
  ``batch_size`` trajectories; each batch decodes until its slowest row is done and the next
  turn waits for every tool call of the batch;
* ``continuous`` :class:`kit.rollout.engine.ContinuousBatchingEngine` via ``rollout_batch``:
  ``batch_size`` slots; a row that ends a turn frees its slot for the next pending request, and
  the next turn reuses the finished row's KV (``cont_noprefix``: the same without that reuse,
  i.e. the scheduling effect alone).

It prints wall time, sampled tokens per second, decode steps and mean occupancy for each, and
how many trajectories came out token-identical (both engines seed rows the same way, so any
difference is float summation order in differently shaped batches).

The tool-using checkpoint: ``--policy DIR`` (a ``save_policy`` directory), else the kit's own
cold-start SFT (``kit.train.sft.run_sft``, ``--sft-steps`` steps) trained once into
``runs/rollout_bench/sft`` and reused.

Usage: ``.venv/bin/python benchmarks/rollout_bench.py [--problems 8] [--n 16] [--repeats 2] [--threads 1]``
Last line: ``speedup=<x>`` (plain wall time over continuous wall time, medians over repeats).

``--compare-decode``: instead, the continuous engine with the transformers decode forward
(``lean_decode=False``, before) and with :class:`kit.models.decode.Qwen3DecodeStep` (after),
alternating, at the stage-1 budget; per run the CPU seconds of this process (engine, agent loop,
tokenizer; the sandbox workers are other processes), the engine's forward seconds and decode
steps; then how many trajectories are token-identical and whether their log-probs are equal.
Last line: ``decode_cpu_ratio=<before/after>`` (medians over repeats, CPU seconds). Measured
(SFT step-500 policy, ``--problems 6 --n 16 --repeats 2 --threads 1``, load 1.7-1.9 on 2 cores):
1.90 -> 1.58 CPU s per collect, ``decode_cpu_ratio=1.21``, 96/96 trajectories token-identical.
Log-probs are bitwise equal only where the two runs batched rows alike (16/96 there): rows join
the running batch when their tool calls return, so the batch shapes, and with them the float
summation order, differ from run to run with either forward (tests/rollout/test_decode_step.py
shows the two forwards bitwise equal on the same batch).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def get_policy(args, cfg):
    from kit.models import load_policy

    if args.policy:
        return load_policy(args.policy)
    run_dir = ROOT / "runs" / "rollout_bench" / f"sft{args.sft_steps}"
    if not (run_dir / "policy").exists():
        from kit.config import load
        from kit.train.sft import run_sft

        t0 = time.perf_counter()
        sft_cfg = load("tiny", overrides={"sft.steps": args.sft_steps, "seed": args.seed,
                                          "model.torch_threads": args.threads or cfg.model.torch_threads}, write=False)
        run_sft(sft_cfg, run_dir, evaluate=False)
        print(f"trained the tool-using policy: {args.sft_steps} SFT steps in {time.perf_counter() - t0:.0f} s -> {run_dir}")
    return load_policy(run_dir / "policy")


async def run_once(kind, model, tok, problems, pool, args, cfg, lean_decode=True):
    from kit.rollout import rollout_batch
    from kit.rollout.engine import BatchLoopBackend, ContinuousBatchingEngine, rollout_plain

    kw = dict(max_response_tokens=cfg.stages["stage1"].max_response_tokens, max_turns=cfg.stages["stage1"].max_turns,
              temperature=1.0, top_p=1.0, timeout_s=cfg.sandbox.timeout_s)
    t0 = time.perf_counter()
    if kind == "plain":
        backend = BatchLoopBackend(model, tok, batch_size=args.batch_size, seed=args.seed)
        groups = await rollout_plain(backend, tok, problems, pool, args.n, cfg.rollout, **kw)
    else:
        backend = ContinuousBatchingEngine(model, tok, slots=args.batch_size, seed=args.seed,
                                           prefix_cache=kind == "continuous", lean_decode=lean_decode)
        groups = await rollout_batch(backend, tok, problems, pool, args.n, cfg.rollout, **kw)
    wall = time.perf_counter() - t0
    flat = [t for g in groups for t in g]
    return wall, backend.stats, flat


async def main_async(args) -> None:
    import torch

    from kit.config import load
    from kit.data.tasks import make_split
    from kit.sandbox import SandboxPool
    from kit.train import common

    cfg = load("tiny", overrides={"seed": args.seed}, write=False)
    common.set_threads(args.threads or cfg.model.torch_threads)  # negative: adaptive (kit.train.common)
    print(f"torch threads {torch.get_num_threads()}")
    model, tok = get_policy(args, cfg)
    split = make_split(cfg.data.task_train_size, cfg.data.task_heldout_size, args.seed, cfg.data.task_families)
    problems = [p.question for p in list(split.heldout)[: args.problems]]
    print(f"{len(problems)} problems x {args.n} samples, batch/slots {args.batch_size}, "
          f"response budget {cfg.stages['stage1'].max_response_tokens} tokens, {cfg.stages['stage1'].max_turns} turns, T=1")
    async with SandboxPool(cfg.sandbox) as pool:
        await run_once("continuous", model, tok, problems[:2], pool, args, cfg)  # warm-up (threads, workers)
        if args.compare_decode:
            await compare_decode(model, tok, problems, pool, args, cfg)
            return
        kinds = ("plain", "cont_noprefix", "continuous")
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        outs = {}
        for rep in range(args.repeats):
            for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                wall, st, flat = await run_once(kind, model, tok, problems, pool, args, cfg)
                walls[kind].append(wall)
                outs[kind] = flat
                model_tokens = sum(sum(t.response_mask) for t in flat)
                calls = sum(t.tool_calls for t in flat)
                turns = sum(t.turns for t in flat)
                occ = st["row_steps"] / max(st["steps"], 1)
                extra = f", prefix hits {st['prefix_hits']}, prefilled {st['prefill_tokens']} reused {st['reused_tokens']} tokens" \
                    if kind == "continuous" else ""
                print(f"[{rep}] {kind:13s} wall {wall:6.2f} s  {model_tokens / wall:7.0f} sampled tok/s  "
                      f"({model_tokens} tokens, {turns} turns, {calls} tool calls)  decode steps {st['steps']}, "
                      f"mean rows/step {occ:.1f}, mean cache length {st['kv_cols'] / max(st['steps'], 1):.0f}, forward time {st['busy_s']:.2f} s{extra}")
    for kind in kinds[1:]:
        same = sum(a.response_ids == b.response_ids for a, b in zip(outs["plain"], outs[kind], strict=True))
        print(f"token-identical trajectories (plain vs {kind}, last repeat): {same}/{len(outs['plain'])}")
    mp, mn, mc = (statistics.median(walls[k]) for k in kinds)
    print(f"median wall: plain {mp:.2f} s, continuous without prefix reuse {mn:.2f} s, continuous {mc:.2f} s")
    print(f"scheduling alone (no prefix reuse): speedup {mp / mn:.2f}")
    print(f"speedup={mp / mc:.2f}")


async def compare_decode(model, tok, problems, pool, args, cfg) -> None:
    """Before/after of the lean decode step on the same rollout (see the module docstring)."""
    cpu: dict[bool, list[float]] = {False: [], True: []}
    outs = {}
    for rep in range(args.repeats):
        for lean in (False, True) if rep % 2 == 0 else (True, False):
            c = time.process_time()
            wall, st, flat = await run_once("continuous", model, tok, problems, pool, args, cfg, lean_decode=lean)
            cpu[lean].append(time.process_time() - c)
            outs[lean] = flat
            print(f"[{rep}] {'lean decode step' if lean else 'transformers forward':21s} cpu {cpu[lean][-1]:6.2f} s, "
                  f"wall {wall:6.2f} s, engine forward time {st['busy_s']:.2f} s, decode steps {st['steps']}, "
                  f"rows x steps {st['row_steps']}, sampled tokens {st['tokens']}", flush=True)
    same = sum(a.response_ids == b.response_ids for a, b in zip(outs[False], outs[True], strict=True))
    lp = sum(a.logprobs == b.logprobs for a, b in zip(outs[False], outs[True], strict=True))
    print(f"token-identical trajectories (last repeat): {same}/{len(outs[False])}; equal log-probs: {lp}/{len(outs[False])}")
    before, after = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(f"median cpu: transformers forward {before:.2f} s, lean decode step {after:.2f} s")
    print(f"decode_cpu_ratio={before / after:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="", help="save_policy directory of a tool-using checkpoint")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--problems", type=int, default=8, help="P (the tiny profile's prompts per step)")
    ap.add_argument("--n", type=int, default=16, help="samples per problem (the tiny profile's 2G)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the tiny profile's)")
    ap.add_argument("--compare-decode", action="store_true",
                    help="time the continuous engine with the transformers decode forward and the lean decode step")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
