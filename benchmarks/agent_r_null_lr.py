"""Agent-R's fine-tune learning rate, chosen on the null arm (issue #46), never on Agent-R's outcome.

Usage::

    .venv/bin/python benchmarks/agent_r_null_lr.py reports/tiny/survey-s201 reports/tiny/survey-s202

Rule (written 2026-12-06 before the first sweep): each run folder holds a finished cold start (notebook 02;
the cold-start survey's untuned seeds 201-220, never the pooled seeds 101-110). Its null arm (``agent_r.iterations``
fine-tunes of the cold start on its own cold-start data alone, ``agent_r.sft_steps`` steps each, the most any arm
takes, with the profile's warm-up and decay, :func:`kit.studies.agent_r.iterate.train_iteration`) is trained at
each peak learning rate of the grid and sampled on the held-out tasks after its last iteration exactly as notebook
11 samples its policies (``agent_r.eval_problems`` x ``agent_r.eval_samples`` at T = 1, the same streams). The
chosen learning rate is the largest of the grid whose null-arm change in held-out sampled accuracy against the
cold start, averaged over the runs, is at least ``-margin`` (0.02; the precondition ``agent_r_null_arm_holds``
allows -0.05 in any one run). A run whose cold start fails a registered precondition is listed and left out.

Last line: ``agent_r_null_lr runs=<n> chosen=<lr or none>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.claims import RunDirs, evaluate_preconditions  # noqa: E402
from kit.config import load  # noqa: E402
from kit.data import tasks  # noqa: E402
from kit.models import load_policy  # noqa: E402
from kit.studies.agent_r import chain, iterate  # noqa: E402
from kit.train import common  # noqa: E402

GRID = (1e-4, 3e-4, 1e-3, 2e-3)
MARGIN = 0.02


def accuracy(rows: list[dict]) -> float:
    return sum(r["correct"] for r in rows) / len(rows)


def sweep_run(run: Path, profile: str, grid: tuple[float, ...]) -> list[dict]:
    """The cold start of ``run`` and its null arm at each learning rate of ``grid``: one row per learning rate,
    ``{run, seed, lr, steps, cold, null, change, cpu_s}`` (accuracies: held-out sampled, T = 1)."""
    seed = json.loads((run / "sft" / "config.json").read_text())["seed"]
    cfg = load(profile, seed=seed, write=False)
    common.set_threads(cfg.model.torch_threads)
    policy = run / "sft" / "policy"
    cold, tok = load_policy(policy)
    heldout = list(tasks.task_split(cfg).heldout)[: cfg.agent_r.eval_problems or None]
    eval_seed = common.step_seed(cfg.seed, "ar-eval")
    cold_acc = accuracy(chain.evaluate(cfg, cold.eval(), tok, heldout, policy="cold_start", iteration=0, seed=eval_seed))
    general = chain.cold_start_rows(cfg, tok, run / "sft", run / "sft")
    out = []
    for lr in grid:
        c0 = time.process_time()
        arm_cfg = load(profile, {"agent_r.lr": lr}, seed=seed, write=False)
        model, _ = load_policy(policy)
        steps = 0
        for k in range(1, arm_cfg.agent_r.iterations + 1):
            steps += len(iterate.train_iteration(arm_cfg, model, tok, [], general, iteration=k, arm="null",
                                                 steps=arm_cfg.agent_r.sft_steps))
        null_acc = accuracy(chain.evaluate(arm_cfg, model.eval(), tok, heldout, policy="null",
                                           iteration=arm_cfg.agent_r.iterations, seed=eval_seed))
        out.append({"run": run.name, "seed": seed, "lr": lr, "steps": steps, "cold": cold_acc, "null": null_acc,
                    "change": null_acc - cold_acc, "cpu_s": time.process_time() - c0})
        print(f"{run.name:>16}  lr {lr:.0e}  {steps} steps  cold {cold_acc:.3f}  null {null_acc:.3f}  "
              f"change {null_acc - cold_acc:+.3f}  ({out[-1]['cpu_s']:.0f} CPU s)", flush=True)
    return out


def choose(rows: list[dict], grid: tuple[float, ...], margin: float) -> float | None:
    """The largest learning rate of ``grid`` whose mean change over the runs is >= ``-margin``; None if none is."""
    ok = [lr for lr in grid if (ch := [r["change"] for r in rows if r["lr"] == lr]) and sum(ch) / len(ch) >= -margin]
    return max(ok) if ok else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders with a finished cold start (reports/tiny/<run>)")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--grid", default=",".join(f"{x:g}" for x in GRID), help="peak learning rates, comma-separated")
    ap.add_argument("--margin", type=float, default=MARGIN)
    ap.add_argument("--out", default="", help="also write the rows here (JSON lines)")
    args = ap.parse_args(argv)
    grid = tuple(sorted(float(x) for x in args.grid.split(",")))
    rows = []
    for name in args.runs:
        run = Path(name)
        failed = [q for q, p in evaluate_preconditions(RunDirs.under(run)).items()
                  if q == "cold_start_learns" and not p["passed"]]
        if failed or not (run / "sft" / "policy" / "config.json").exists():
            print(f"{run.name:>16}  left out: {'cold_start_learns failed' if failed else 'no finished cold start'}")
            continue
        rows += sweep_run(run, args.profile, grid)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    for lr in grid:
        ch = [r["change"] for r in rows if r["lr"] == lr]
        if ch:
            print(f"lr {lr:.0e}: mean change {sum(ch) / len(ch):+.3f} over {len(ch)} run(s), min {min(ch):+.3f}")
    chosen = choose(rows, grid, args.margin)
    print(f"agent_r_null_lr runs={len({r['run'] for r in rows})} chosen={'none' if chosen is None else f'{chosen:g}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
