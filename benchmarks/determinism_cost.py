"""What bitwise repeatability costs (issue #41): the deterministic schedule and fixed threads against
the arrival-time schedule and the load-adaptive threads, measured in one process, interleaved.

Usage::

    .venv/bin/python benchmarks/determinism_cost.py [--policy <run>/sft/policy] [--repeats 5]

Two figures, each a ratio deterministic / adaptive of medians over ``--repeats`` interleaved pairs:

* **rollout step**: :func:`kit.train.rollouts.collect` on the tiny profile's stage-1 shape (6 problems
  x 16 samples, 256-token budget, real sandbox with the step cache, real verifier), once as the kit
  runs it (the trajectories a cohort of the continuous-batching engine: admission by the logical
  clock, a turn due ``rollout.tool_delay_steps`` decode steps after its tool call,
  :mod:`kit.rollout.cohort`) and once with the trajectories sent as unmanaged requests (admitted
  when they arrive, the engine's behaviour before issue #41). Wall seconds and this process's CPU
  seconds per step; the sandbox and the verifier are other processes and do the same work in both.
* **SFT step**: :func:`kit.train.sft.sft_step` on 48 rows of 60-384 tokens at ``torch_threads = 2``
  (fixed) against ``-2`` (the adaptive speed mode, re-measured before each step as the trainer does).
  On a quiet machine both run two threads: the ratio shows the policy's own overhead.

The process runs with the runner's bounded OpenMP spin (``GOMP_SPINCOUNT``, as the notebooks' kernels do).
Without ``--policy`` the policy is the tiny model fitted to call the tool (``tests/doubles.fit_tool_use``),
so most trajectories make calls. Run it on a quiet machine; the target is at most 1.05 on each ratio.
Last line: ``determinism_cost rollout_wall_ratio=<x> rollout_cpu_ratio=<y> sft_wall_ratio=<z> sft_cpu_ratio=<w>``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    # the notebooks' kernels run with the runner's bounded OpenMP spin (kit.pipeline.series.KERNEL_ENV); it is
    # read when OpenMP starts, so this process starts again with it
    from kit import OPENMP_SPINCOUNT  # noqa: E402
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "GOMP_SPINCOUNT": OPENMP_SPINCOUNT})

import torch  # noqa: E402
from doubles import sft_rows  # noqa: E402

from kit.config import load  # noqa: E402
from kit.data.tasks import TaskProblem  # noqa: E402
from kit.rollout import loop  # noqa: E402
from kit.sandbox import SandboxPool  # noqa: E402
from kit.train import common, rollouts  # noqa: E402
from kit.train.sft import sft_step  # noqa: E402


async def _unmanaged(backend, factories, max_concurrency=None):
    """The arrival-time schedule: every trajectory's requests reach the engine as they come."""
    return list(await asyncio.gather(*(f() for f in factories)))


def _problems(k: int) -> list[TaskProblem]:
    rng = random.Random(k)
    out = []
    for _ in range(6):
        a = rng.randint(10, 99)
        out.append(TaskProblem(f"b{a}", "product", 1, f"What is {a} * {a + 7}?", str(a * (a + 7)), f"print({a}*{a + 7})"))
    return out


def rollout_pair(cfg, model, tok, pool, k: int) -> dict[str, tuple[float, float]]:
    out = {}
    for mode in ("deterministic", "arrival"):
        real = loop.gather_trajectories
        if mode == "arrival":
            loop.gather_trajectories = _unmanaged
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            asyncio.run(_collect(cfg, model, tok, pool, k))
            out[mode] = (time.perf_counter() - t0, time.process_time() - c0)
        finally:
            loop.gather_trajectories = real
    return out


async def _collect(cfg, model, tok, sandbox_cfg, k):
    async with SandboxPool(sandbox_cfg) as pool:
        return await rollouts.collect(cfg, model, tok, _problems(k), 16, pool, seed=k, max_response_tokens=256,
                                      max_turns=4, temperature=1.0)


def sft_pair(model_dir_or_model, tok, rows) -> dict[str, tuple[float, float]]:
    out = {}
    for mode, n in (("deterministic", 2), ("adaptive", -2)):
        model = model_dir_or_model()
        model.train()
        opt = common.make_optimizer(model, 2e-3)
        policy = common.set_threads(n)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(3):
            if policy is not None:
                policy.update()
            sft_step(model, opt, rows, tok.pad_token_id)
        out[mode] = (time.perf_counter() - t0, time.process_time() - c0)
    torch.set_num_threads(2)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", help="a saved policy folder (default: the fitted tool-use double)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    cfg = load("tiny", write=False)
    if args.policy:
        from kit.models import load_policy
        fresh = lambda: load_policy(args.policy)[0]  # noqa: E731
        tok = load_policy(args.policy)[1]
    else:
        from doubles import fit_tool_use

        from kit.models import build_tiny_model, train_tokenizer
        from kit.prompts import render_prompt
        text = [render_prompt(f"What is {a} * {a + 7}?") + f" ok </reason> <answer> {a * (a + 7)} </answer>"
                for a in range(100, 260)]
        tok = train_tokenizer(text, 500)
        state = {k: v.clone() for k, v in fit_tool_use(tok).state_dict().items()}

        def fresh():
            m = build_tiny_model(cfg.model, tok, seed=0)
            m.load_state_dict(state)
            return m
    model = fresh().eval()
    sandbox_cfg = dataclasses.replace(cfg.sandbox)
    asyncio.run(_collect(cfg, model, tok, sandbox_cfg, 0))  # warm the sandbox, verifier, caches
    rows = sft_rows(len(tok))
    ro = {"deterministic": [], "arrival": []}
    sf = {"deterministic": [], "adaptive": []}
    for k in range(1, args.repeats + 1):
        for mode, v in rollout_pair(cfg, model.eval(), tok, sandbox_cfg, k).items():
            ro[mode].append(v)
        for mode, v in sft_pair(fresh, tok, rows).items():
            sf[mode].append(v)
        print(f"pair {k}: rollout wall {ro['deterministic'][-1][0]:.2f} vs {ro['arrival'][-1][0]:.2f} s, "
              f"SFT x3 wall {sf['deterministic'][-1][0]:.2f} vs {sf['adaptive'][-1][0]:.2f} s", flush=True)
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    r = {"rollout_wall_ratio": med(ro["deterministic"], 0) / med(ro["arrival"], 0),
         "rollout_cpu_ratio": med(ro["deterministic"], 1) / med(ro["arrival"], 1),
         "sft_wall_ratio": med(sf["deterministic"], 0) / med(sf["adaptive"], 0),
         "sft_cpu_ratio": med(sf["deterministic"], 1) / med(sf["adaptive"], 1)}
    print("determinism_cost " + " ".join(f"{k}={v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
