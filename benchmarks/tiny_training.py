"""The whole tiny training of the recipe, timed: SFT, the three RL stages, the RoC ablation.

Usage::

    .venv/bin/python benchmarks/tiny_training.py [--profile tiny] [--run-dir runs/tiny_training]
        [--sft-dir DIR] [--skip-ablation] [--ablation-steps N] [--seeds 0,1,2]

Prints per phase: wall seconds, and the figures the issue asks for: SFT held-out tool-assisted
accuracy (greedy), sampled reward before and after each RL stage, and the ablation's tool-error
ratio among correct trajectories for GRPO and GRPO-RoC (first/last steps, mean and spread over
seeds). ``--sft-dir`` reuses a finished SFT run (its wall time is then read from its summary).
Last line: ``tiny_training_minutes=<x>`` (SFT + stages + ablation wall time).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.config import load  # noqa: E402
from kit.train import ablation, rl, sft  # noqa: E402


def cpu_s() -> float:
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--run-dir", default="runs/tiny_training")
    ap.add_argument("--sft-dir", default="")
    ap.add_argument("--skip-ablation", action="store_true")
    ap.add_argument("--ablation-steps", type=int, default=0)
    ap.add_argument("--seeds", default="")
    ap.add_argument("--threads", type=int, default=0, help="override model.torch_threads")
    args = ap.parse_args(argv)
    root = Path(args.run_dir)
    over = {}
    if args.threads:
        over["model.torch_threads"] = args.threads
    if args.ablation_steps:
        over["ablation.steps"] = args.ablation_steps
    cfg = load(args.profile, overrides=over, write=False)
    times: dict[str, float] = {}

    def line(msg: str) -> None:
        print(msg, flush=True)

    t = time.perf_counter()
    c0 = cpu_s()
    if args.sft_dir:
        sft_dir = Path(args.sft_dir)
        s = json.loads((sft_dir / "summary.json").read_text())
        times["sft"] = float(s.get("seconds", 0.0))
    else:
        sft_dir = root / "sft"
        s = sft.run_sft(cfg, sft_dir)
        times["sft"] = time.perf_counter() - t
    line(f"sft: {times['sft']:.0f} s, steps {s['steps']}, final loss {s['final_loss']:.3f}, held-out greedy "
         f"accuracy {s.get('heldout_accuracy', float('nan')):.3f} (tool rate {s.get('heldout_tool_rate', float('nan')):.2f}), "
         f"sampled reward {s.get('heldout_sampled_reward', float('nan')):.3f}")
    init = sft_dir / "policy"
    for stage in rl.STAGES:
        t = time.perf_counter()
        st = rl.run_stage(cfg, stage, init, root / stage)
        times[stage] = time.perf_counter() - t
        hard = f", hard subset {st['hard_subset']['kept']}/{st['hard_subset']['candidates']}" if "hard_subset" in st else ""
        line(f"{stage}: {times[stage]:.0f} s, {st['steps']} steps, train reward {st['reward_first']:.3f} -> "
             f"{st['reward_last']:.3f}, held-out sampled reward {st['heldout_sampled_reward']:.3f}, greedy "
             f"{st['heldout_accuracy']:.3f}, tool-error ratio (correct) {st['tool_error_ratio_correct_first']:.3f} -> "
             f"{st['tool_error_ratio_correct_last']:.3f}{hard}")
        init = root / stage / "policy"
    if not args.skip_ablation:
        seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
        t = time.perf_counter()
        # the stage-1 run is the grpo_roc arm of the main seed when the steps agree (as in the pipeline)
        ab = ablation.run_ablation(cfg, sft_dir / "policy", root / "ablation", seeds=seeds, reuse=[root / "stage1"])
        times["ablation"] = time.perf_counter() - t
        for alg in rl.ALGORITHMS:
            f, l_ = ab[alg]["tool_error_ratio_correct_first"], ab[alg]["tool_error_ratio_correct_last"]
            r = ab[alg]["reward_last"]
            line(f"ablation {alg}: tool-error ratio among correct {f['mean']:.3f}+-{f['std']:.3f} -> "
                 f"{l_['mean']:.3f}+-{l_['std']:.3f} (min {l_['min']:.3f}, max {l_['max']:.3f}; "
                 f"{l_['n']} seeds, {ab['steps']} steps); reward last {r['mean']:.3f}+-{r['std']:.3f}")
        line(f"ablation: {times['ablation']:.0f} s")
    total = sum(times.values())
    line(f"phases (s): {json.dumps({k: round(v, 1) for k, v in times.items()})}; cpu seconds of this process "
         f"and its children: {cpu_s() - c0:.0f}")
    line(f"tiny_training_minutes={total / 60:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
