"""Where the tiny SFT step and a tiny RL stage step spend their time, by kind of work (issue #35), and what
bf16 autocast and the foreach / fused AdamW change, measured back to back in one process.

Usage::

    .venv/bin/python benchmarks/step_profile.py [--steps 4] [--policy <run>/sft/policy] [--rl-steps 2]

SFT: ``--steps`` steps of :func:`kit.train.sft.sft_step` on rows shaped like the tiny cold start's
(``benchmarks/machine_limit.py``'s) under ``torch.profiler``; each op's self CPU time is put in a kind:
``matmul`` (mm, addmm, bmm), ``attention`` (SDPA's kernels, forward and backward), ``optimizer`` (AdamW's
step, all its ops), ``other ops`` (norms, RoPE, SiLU, softmax, copies, fills: elementwise work) and
``framework`` (the step's wall time outside any op: Python, the dispatcher, the autograd engine). Then the
same steps, fresh model and optimizer each, alternating in rounds: default AdamW (torch's for-loop
implementation on CPU), ``foreach=True``, ``fused=True`` and the default under ``torch.autocast("cpu",
torch.bfloat16)``, printing each variant's median step over the default's and how far its weights end
from the default's after the steps (0.0: bitwise the same run).

RL (with ``--policy``, a policy that calls the tool, e.g. a tiny run's ``sft/policy``): ``--rl-steps``
stage-1 steps of :func:`kit.train.step.rl_step` (rollout through the real sandbox and verifier, RoC, the
update) under the profiler, split the same way, plus the step's phases from its metrics row (generate,
tool, verify, update wall seconds) and the sandbox calls the per-step cache answered.

Last line: ``sft_matmul_share=<x> sft_framework_share=<y> foreach_over_default=<a> fused_over_default=<b>
bf16_over_default=<c>`` (and ``rl_matmul_share=<z> rl_framework_share=<w>`` with ``--policy``).
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine_limit  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

KINDS = ("matmul", "attention", "optimizer", "other ops", "framework")


def kind_of(name: str) -> str:
    """The kind of a profiler event name (``aten::mm`` -> ``matmul``); ``""`` for events that are not ops."""
    if name.startswith("Optimizer.step") or name.startswith("Optimizer.zero_grad"):
        return "optimizer"
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if name.startswith("aten::"):
        return "other ops"
    return ""


def split(prof, wall_s: float) -> dict[str, float]:
    """Seconds of each :data:`KINDS` in a profile of ``wall_s`` wall seconds: op self times by kind, the
    optimizer's whole step (its ops included), and the rest of the wall time as ``framework``."""
    out = dict.fromkeys(KINDS, 0.0)
    opt_total = 0.0
    for ev in prof.key_averages():
        k = kind_of(ev.key)
        if k == "optimizer":
            opt_total += ev.cpu_time_total / 1e6
        elif k:
            out[k] += ev.self_cpu_time_total / 1e6
    # the optimizer's own aten ops were counted under "other ops": move its whole step there
    out["other ops"] = max(0.0, out["other ops"] - opt_total)
    out["optimizer"] = opt_total
    out["framework"] = max(0.0, wall_s - sum(out[k] for k in KINDS if k != "framework"))
    return out


def show(title: str, parts: dict[str, float], wall_s: float, steps: int) -> None:
    print(f"{title}: {wall_s / steps:.3f} s a step (under the profiler); "
          + ", ".join(f"{k} {v / steps:.3f} s ({v / wall_s:.0%})" for k, v in parts.items()), flush=True)


def sft_profile(steps: int) -> dict[str, float]:
    from kit.train import common
    from kit.train.sft import sft_step

    cfg, model = machine_limit.tiny_model()
    opt = common.make_optimizer(model, cfg.sft.lr)
    rng = random.Random(0)
    batches = [machine_limit.sft_rows(rng, cfg.model.tokenizer_vocab_size) for _ in range(steps + 1)]
    model.train()
    sft_step(model, opt, batches[0], 0)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for rows in batches[1:]:
            sft_step(model, opt, rows, 0)
        wall = time.perf_counter() - t0
    parts = split(prof, wall)
    show("SFT step", parts, wall, steps)
    return {k: v / wall for k, v in parts.items()}


def variants(steps: int, rounds: int = 2) -> dict[str, float]:
    """Median SFT step of each variant over the default's (alternating rounds) and its weights' distance."""
    from kit.train.sft import sft_step

    cfg, base = machine_limit.tiny_model()
    rng = random.Random(1)
    batches = [machine_limit.sft_rows(rng, cfg.model.tokenizer_vocab_size) for _ in range(steps + 1)]
    kw = {"lr": cfg.sft.lr, "betas": (0.9, 0.98), "weight_decay": 0.0}
    make = {"default": lambda p: torch.optim.AdamW(p, **kw), "foreach": lambda p: torch.optim.AdamW(p, foreach=True, **kw),
            "fused": lambda p: torch.optim.AdamW(p, fused=True, **kw), "bf16": lambda p: torch.optim.AdamW(p, **kw)}
    times: dict[str, list[float]] = {k: [] for k in make}
    final: dict[str, torch.nn.Module] = {}
    for _ in range(rounds):
        for name, mk in make.items():
            model = copy.deepcopy(base).train()
            opt = mk(list(model.parameters()))
            ts = []
            for rows in batches:
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
                    sft_step(model, opt, rows, 0)
                ts.append(time.perf_counter() - t0)
            times[name].append(statistics.median(ts[1:]))
            final[name] = model
    ref = statistics.median(times["default"])
    out = {}
    for name in make:
        d = max(float((a - b).detach().abs().max()) for a, b in zip(final[name].parameters(), final["default"].parameters(), strict=True))
        out[name] = statistics.median(times[name]) / ref
        print(f"SFT step, {name}: median {statistics.median(times[name]):.3f} s ({out[name]:.2f} of default), "
              f"max |weight - default's| after {len(batches)} steps {d:.2e}", flush=True)
    return out


def rl_profile(policy: Path, steps: int) -> dict[str, float]:
    from kit.config import load
    from kit.models import load_policy
    from kit.rollout import run_coroutine
    from kit.sandbox import SandboxPool
    from kit.train import common, rl
    from kit.train.step import rl_step

    cfg = load("tiny", write=False)
    model, tok = load_policy(policy)
    opt = common.make_optimizer(model, cfg.algorithm.lr)
    stage = rl.stage_config(cfg, "stage1")
    pool = rl.stage_pool(cfg, stage)
    rows = []

    async def go(prof_steps):
        async with SandboxPool(cfg.sandbox) as ex:
            await rl_step(cfg, stage, model, tok, opt, pool, 0, ex)  # warm-up (workers, caches)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                for s in range(1, prof_steps + 1):
                    res = await rl_step(cfg, stage, model, tok, opt, pool, s, ex)
                    rows.append((res.row, res.batch.tool_cache))
                wall = time.perf_counter() - t0
        return prof, wall

    prof, wall = run_coroutine(go(steps))
    parts = split(prof, wall)
    show("RL stage-1 step", parts, wall, steps)
    for r, cache in rows:
        print(f"  phases: generate {r['time_generate_s']:.2f} s (cpu {r['time_cpu_generate_s']:.2f}), tool calls "
              f"{r['tool_calls_total']:.0f} (sandbox wall summed {r['time_tool_s']:.2f} s; cache {cache}), verify "
              f"{r['time_verify_s']:.2f} s, update {r['time_update_s']:.2f} s (cpu {r['time_cpu_update_s']:.2f}); "
              f"decoded {r['perf_decoded_tokens']:.0f} tokens in {r['perf_decode_steps']:.0f} forwards", flush=True)
    return {k: v / wall for k, v in parts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4, help="profiled SFT steps (and steps per variant)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy", default="", help="a policy that calls the tool: also profile RL stage-1 steps")
    ap.add_argument("--rl-steps", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    sft = sft_profile(a.steps)
    var = variants(a.steps)
    line = (f"sft_matmul_share={sft['matmul']:.2f} sft_framework_share={sft['framework']:.2f} "
            f"foreach_over_default={var['foreach']:.2f} fused_over_default={var['fused']:.2f} bf16_over_default={var['bf16']:.2f}")
    if a.policy:
        rl_ = rl_profile(Path(a.policy), a.rl_steps)
        line += f" rl_matmul_share={rl_['matmul']:.2f} rl_framework_share={rl_['framework']:.2f}"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
