"""VERL's own trainer on this CPU machine, timed phase by phase, against the kit's local trainer.

Usage::

    .venv/bin/python benchmarks/verl_cpu_step.py [--root runs/verl_cpu_bench] [--sft-dir DIR]

Trains (or reuses, ``--sft-dir``) the tiny SFT policy of ``kit.bridge.verl_cpu.tiny_run``, then
runs two GRPO-RoC steps (P = 2 prompts x 2G = 8 rollouts -> G = 4, 256 response tokens)
through VERL 0.9.1 on the kit's CPU runtime (``kit.bridge.verl_cpu``) and merges the checkpoint
with VERL's model merger; then the same two steps with the kit's local trainer
(``kit.train.rl.run_stage``). Prints wall seconds of: Ray start, VERL init (the launch minus its
steps), each VERL step and its phases (VERL's ``timing_s/gen``, ``old_log_prob``,
``update_actor``, ``update_weights``), Ray stop, the merge, the local steps. Last line::

    verl_step2_s=<x> local_step_s=<y> ratio=<x/y>

(step 2 of each: step 1 of VERL includes warm-up). Aim (issue #15): ratio under 3. Run it on an
otherwise idle machine; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.bridge.checkpoints import merge_to_policy  # noqa: E402
from kit.bridge.verl_cpu import runner, tiny_run  # noqa: E402
from kit.config import load  # noqa: E402

PHASES = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor", "timing_s/save_checkpoint",
          "timing_s/update_weights", "timing_s/step")


def local_steps(sft_cfg, policy: Path, run_dir: Path) -> list[float]:
    """Wall seconds of each of two local GRPO-RoC steps of the same size (kit.train.rl), on the
    SFT problems' most common difficulty level, in a fresh ``run_dir`` (a previous run there is removed)."""
    from kit.data.tasks import task_split
    from kit.train import rl

    if run_dir.exists():  # a finished run in the same folder would return its summary without stepping
        shutil.rmtree(run_dir)
    levels = [p.level for p in task_split(sft_cfg).train]
    cfg = load("smoke", run_dir=str(run_dir), overrides={
        **tiny_run.SFT, **tiny_run.TWO_STEP, **tiny_run.sandbox_overrides(),
        "stages.stage1.difficulty": max(set(levels), key=levels.count)})
    stamps = [time.perf_counter()]
    rl.run_stage(cfg, "stage1", policy, run_dir, progress=lambda row: stamps.append(time.perf_counter())
                 if "step" in row else None, evaluate=False)  # TWO_STEP: stages.stage1.steps = 2
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)][:2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="runs/verl_cpu_bench")
    ap.add_argument("--sft-dir", default="")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    t = time.perf_counter()
    sft_dir = Path(args.sft_dir).resolve() if args.sft_dir else root / "sft"
    sft_cfg = load("smoke", run_dir=str(sft_dir), overrides={**tiny_run.SFT, **tiny_run.sandbox_overrides()})
    policy = tiny_run.tiny_sft_policy(sft_cfg, sft_dir)
    print(f"sft_s={time.perf_counter() - t:.1f} (0 when reused)", flush=True)
    data = tiny_run.tiny_rl_data(sft_cfg, root / "data")
    cfg = load("smoke", run_dir=str(root / "rl"), overrides={**tiny_run.TWO_STEP, **tiny_run.sandbox_overrides()})
    paths, ln = runner.build_cpu_launch(
        cfg, "stage1", model_path=str(policy), train_files=str(data["train"]), val_files=str(data["val"]),
        metrics_file=str(root / "rl" / "verl_metrics.jsonl"), extra_overrides=["trainer.save_freq=2"])
    for p in (root / "rl" / "checkpoints", root / "rl" / "verl_metrics.jsonl",
              root / "rl" / "verl_stage1_weight_updates.jsonl"):
        if p.exists():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    res = runner.run_session([ln], root / "session", timeout_s=1800)
    if not res.ok:
        print(f"VERL run failed: {res.error} (log {paths.run_dir}/verl_stage1.log)", file=sys.stderr)
        return 1
    m = tiny_run.read_verl_metrics(root / "rl" / "verl_metrics.jsonl")
    steps_s = sum(m[s]["timing_s/step"] for s in m)
    print(f"ray_start_s={res.timings['ray_start_s']:.1f}")
    print(f"verl_launch_s={res.timings['stage1_s']:.1f} verl_init_s={res.timings['stage1_s'] - steps_s:.1f} "
          "(launch minus steps: imports, workers, model, TransferQueue, checkpoint, shutdown)")
    for s in sorted(m):
        print(f"verl_step{s}: " + " ".join(f"{k.split('/')[1]}={m[s][k]:.2f}" for k in PHASES if k in m[s])
              + f" pearson={m[s].get('training/rollout_actor_probs_pearson_corr', float('nan')):.4f}")
    prev: dict = {}
    for line in (root / "rl" / "verl_stage1_weight_updates.jsonl").read_text().splitlines():
        u = json.loads(line)  # the rollout server's running totals at each weight update (the gen before it)
        if "engine_busy_s" in u:
            d = {k: u[k] - prev.get(k, 0) for k in ("requests", "tokens", "generate_s", "engine_busy_s", "engine_steps")}
            print(f"rollout_server before update at global_steps={u['global_steps']}: requests={d['requests']} "
                  f"tokens={d['tokens']} engine_busy_s={d['engine_busy_s']:.2f} decode_steps={d['engine_steps']} "
                  f"load_weights_s={u['seconds']:.3f}")
            prev = u
    print(f"ray_stop_s={res.timings.get('ray_stop_s', float('nan')):.1f} session_s={res.timings['session_s']:.1f} "
          f"peak_rss_gib={res.peak_rss_bytes / 2**30:.2f} peak_pss_gib={res.peak_pss_bytes / 2**30:.2f} "
          f"sandbox_workers_steady={res.sandbox_workers_steady} sandbox_workers_max={res.sandbox_workers_max}")
    t = time.perf_counter()
    merge_to_policy(paths.checkpoints, root / "rl" / "policy")
    print(f"merge_s={time.perf_counter() - t:.1f}", flush=True)
    local = local_steps(sft_cfg, policy, root / "local")
    print("local_steps_s=" + ",".join(f"{x:.2f}" for x in local))
    verl2, local2 = m[2]["timing_s/step"], local[-1]
    print(f"verl_step2_s={verl2:.2f} local_step_s={local2:.2f} ratio={verl2 / local2:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
