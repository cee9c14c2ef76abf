"""What bitwise repeatability costs (issue #41): the deterministic schedule and fixed threads against
the arrival-time schedule and the load-adaptive threads, measured in one process, interleaved.

Usage::

    .venv/bin/python benchmarks/determinism_cost.py [--policy <run>/sft/policy] [--repeats 5]

Two figures, each a ratio deterministic / adaptive of medians over ``--repeats`` interleaved pairs, the
order alternating from pair to pair (ABBA): whichever runs first in a pair runs slower (a probe of
2026-12-06 at equal work, 164-171 decode steps each, found the first of a pair 10-25% slower):

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
* **MKL_CBWR** (``--cbwr-pairs``, default 4): what oneMKL's conditional numerical reproducibility
  (``MKL_CBWR=AUTO,STRICT``, the same bits at 1 and at 2 threads) would add: CPU seconds of three
  SFT steps and three policy updates of the tiny model at 2 threads, in fresh processes, set against unset.

Last line: ``determinism_cost rollout_wall_ratio=<x> rollout_cpu_ratio=<y> sft_wall_ratio=<z> sft_cpu_ratio=<w>
sft_cbwr_cpu_ratio=<u> update_cbwr_cpu_ratio=<v>``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
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
    for mode in ("deterministic", "arrival")[::1 if k % 2 else -1]:  # ABBA: the first of a pair runs slower
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


def sft_pair(model_dir_or_model, tok, rows, k: int) -> dict[str, tuple[float, float]]:
    out = {}
    for mode, n in (("deterministic", 2), ("adaptive", -2))[::1 if k % 2 else -1]:
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


def _cbwr_child(policy: str) -> None:
    """In a fresh process (``MKL_CBWR`` is read when oneMKL starts): wall and CPU seconds of three SFT
    steps and three policy updates at 2 threads, after one warm-up of each; one JSON line."""
    sys.path.insert(0, str(ROOT / "tests" / "train"))
    import test_thread_invariance as t
    out = {}
    for name, fn in sorted(t.STEPS.items()):
        fn(policy, 2)
        w0, c0 = time.perf_counter(), time.process_time()
        fn(policy, 2)
        out[name] = [time.perf_counter() - w0, time.process_time() - c0]
    print(json.dumps(out))


def cbwr_ratios(pairs: int) -> dict[str, float]:
    """CPU seconds of the tiny model's SFT step and policy update, ``MKL_CBWR=AUTO,STRICT`` / unset,
    ratios of medians over ``pairs`` ABBA pairs of fresh processes."""
    from kit.data import tasks
    from kit.models import build_tiny_model, save_policy, train_tokenizer
    cpu: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        split = tasks.make_split(60, 4, 0)
        tok = train_tokenizer([p.question + " " + p.code for p in split.train] * 3, 500)
        save_policy(build_tiny_model(load("tiny", write=False).model, tok, seed=0), tok, Path(d) / "policy")
        base = {**os.environ, "MKL_CBWR": ""}  # empty: oneMKL's default (importing kit sets an unset variable)
        for k in range(1, pairs + 1):
            for arm in ("unset", "strict")[::1 if k % 2 else -1]:
                env = {**base, "MKL_CBWR": "AUTO,STRICT"} if arm == "strict" else base
                res = subprocess.run([sys.executable, __file__, "--cbwr-child", str(Path(d) / "policy")], env=env,
                                     capture_output=True, text=True, check=True)
                for step, (_, c) in json.loads(res.stdout.strip().splitlines()[-1]).items():
                    cpu.setdefault((step, arm), []).append(c)
            print(f"MKL_CBWR pair {k}: " + ", ".join(f"{s} {cpu[(s, 'strict')][-1]:.2f} vs {cpu[(s, 'unset')][-1]:.2f} CPU s"
                                                     for s in ("sft_step", "policy_update")), flush=True)
    return {f"{'sft' if s == 'sft_step' else 'update'}_cbwr_cpu_ratio":
            statistics.median(cpu[(s, "strict")]) / statistics.median(cpu[(s, "unset")]) for s in ("sft_step", "policy_update")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", help="a saved policy folder (default: the fitted tool-use double)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cbwr-pairs", type=int, default=4, help="fresh-process pairs for the MKL_CBWR figure (0: skip)")
    ap.add_argument("--cbwr-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cbwr_child:
        return _cbwr_child(args.cbwr_child)
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
        for mode, v in sft_pair(fresh, tok, rows, k).items():
            sf[mode].append(v)
        print(f"pair {k}: rollout wall {ro['deterministic'][-1][0]:.2f} vs {ro['arrival'][-1][0]:.2f} s, "
              f"SFT x3 wall {sf['deterministic'][-1][0]:.2f} vs {sf['adaptive'][-1][0]:.2f} s", flush=True)
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    r = {"rollout_wall_ratio": med(ro["deterministic"], 0) / med(ro["arrival"], 0),
         "rollout_cpu_ratio": med(ro["deterministic"], 1) / med(ro["arrival"], 1),
         "sft_wall_ratio": med(sf["deterministic"], 0) / med(sf["adaptive"], 0),
         "sft_cpu_ratio": med(sf["deterministic"], 1) / med(sf["adaptive"], 1)}
    if args.cbwr_pairs > 0:
        r.update(cbwr_ratios(args.cbwr_pairs))
    print("determinism_cost " + " ".join(f"{k}={v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
