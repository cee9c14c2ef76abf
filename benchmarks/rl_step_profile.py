"""Where one tiny RL step spends its time: per phase, in wall seconds, CPU seconds and counts.

Usage::

    .venv/bin/python benchmarks/rl_step_profile.py --policy reports/tiny/main/sft/policy [--steps 4]
        [--algorithm roc] [--set rollout.batch_size=128 ...] [--heldout 0]

Runs ``--steps`` steps of stage 1 (the profile's budget, turns, prompts per step) from the policy,
each as the trainer does it (:func:`kit.train.rl.run_stage`'s phases: rollout with tool calls,
verification, RoC selection, one policy update), and prints per step and in total:

* wall seconds of rollout (generation and tool calls overlap), verification and update;
* CPU seconds of this process in rollout and update (all its threads; the sandbox workers are
  other processes), which hardly move when other work shares the cores;
* counts: trajectories, decoded tokens, decode forwards (``steps``), rows x forwards
  (``row_steps``: padding and finished rows included), prefills, tool calls and their summed
  sandbox wall seconds, kept rows and update tokens.

With ``--update-ab`` each step's update also runs once more, first, on a copy of the model and
optimizer with every row (``skip_zero_advantage=False``: rows whose advantage is 0 run too), so
the update CPU seconds before and after skipping them are measured back to back on the same batch;
the last line is then ``update_cpu_full_over_skip=<x>`` with the share of rows skipped.

With ``--heldout N`` it also times the stage-end held-out evaluation on N problems (greedy and
sampled). Wall times on a shared machine are upper bounds; compare settings by the CPU seconds
and counts, or by ratios measured back to back in one invocation.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kit.algo import group_advantage  # noqa: E402
from kit.config import load  # noqa: E402
from kit.data.tasks import task_split  # noqa: E402
from kit.models import load_policy  # noqa: E402
from kit.rollout import run_coroutine  # noqa: E402
from kit.sandbox import SandboxPool  # noqa: E402
from kit.train import common, rl  # noqa: E402
from kit.train.rollouts import collect, evaluate_policy  # noqa: E402


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def profile_steps(cfg, policy_dir: Path, steps: int, algorithm: str, update_ab: bool = False) -> list[dict]:
    """``steps`` stage-1 steps from ``policy_dir``; one dict of timings and counts per step (with
    ``update_ab``, also ``cpu_update_full_s``: the same update with every row run, on a copy)."""
    common.set_threads(cfg.model.torch_threads)
    model, tok = load_policy(policy_dir)
    opt = common.make_optimizer(model, cfg.algorithm.lr)
    stage = rl.stage_config(cfg, "stage1")
    pool = rl.stage_pool(cfg, stage)
    n = cfg.algorithm.oversample if algorithm == "roc" else cfg.algorithm.group_size
    out = []

    async def go():
        async with SandboxPool(cfg.sandbox) as ex:
            for step in range(steps):
                common.seed_everything(step)
                problems = rl.step_problems(pool, step, cfg.algorithm.prompts_per_step, 0)
                model.eval()
                batch = await collect(cfg, model, tok, problems, n, ex, seed=step, max_response_tokens=stage.max_response_tokens,
                                      max_turns=stage.max_turns, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
                kept, _ = rl.select(cfg, batch, algorithm, step)
                flat = batch.flat()
                adv = group_advantage(torch.tensor(batch.rewards.reshape(-1)[kept]),
                                      np.repeat(np.arange(len(problems)), n)[kept].tolist(),
                                      cfg.algorithm.adv_eps) if kept.size else None
                full_s = 0.0
                if update_ab and kept.size:  # the same update with every row run, on copies
                    m2 = copy.deepcopy(model)
                    o2 = common.make_optimizer(m2, cfg.algorithm.lr)
                    o2.load_state_dict(copy.deepcopy(opt.state_dict()))
                    m2.train()
                    c = time.process_time()
                    rl.policy_update(cfg, m2, o2, [flat[i] for i in kept], adv, tok.pad_token_id, cfg.algorithm.lr,
                                     skip_zero_advantage=False)
                    full_s = time.process_time() - c
                t, c = time.perf_counter(), time.process_time()
                upd = {"update_tokens": 0.0, "update_rows_skipped": 0.0}
                if kept.size:  # as the trainer: no update when every group was uniform
                    model.train()
                    upd = rl.policy_update(cfg, model, opt, [flat[i] for i in kept], adv, tok.pad_token_id,
                                           cfg.algorithm.lr)
                calls = [cl for tr in flat for cl in tr.calls]
                out.append({"wall_rollout_s": batch.time_generate_s, "wall_verify_s": batch.time_verify_s,
                            "wall_update_s": time.perf_counter() - t, "cpu_rollout_s": batch.cpu_generate_s,
                            "cpu_update_s": time.process_time() - c, "trajectories": len(flat),
                            "decoded_tokens": batch.engine.get("tokens", 0), "decode_steps": batch.engine.get("steps", 0),
                            "row_steps": batch.engine.get("row_steps", 0), "prefills": batch.engine.get("prefills", 0),
                            "engine_busy_s": batch.engine.get("busy_s", 0.0), "tool_calls": len(calls),
                            "tool_wall_s_sum": sum(cl.wall_s for cl in calls),
                            "max_response_len": max(len(tr.response_ids) for tr in flat),
                            "p90_response_len": float(np.percentile([len(tr.response_ids) for tr in flat], 90)),
                            "truncated": float(np.mean([tr.truncated for tr in flat])),
                            "mean_response_len": float(np.mean([len(tr.response_ids) for tr in flat])),
                            "accuracy": float(batch.rewards.mean()), "kept": int(kept.size),
                            "update_tokens": upd["update_tokens"], "update_rows_skipped": upd["update_rows_skipped"],
                            **({"cpu_update_full_s": full_s} if update_ab else {})})
                print(f"step {step + 1}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                                       for k, v in out[-1].items()), flush=True)

    run_coroutine(go())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="a save_policy folder (e.g. <run>/sft/policy)")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--algorithm", default="roc", choices=rl.SELECTIONS)  # algorithm.selection
    ap.add_argument("--set", action="append", default=[], help="config override key=value (JSON values)")
    ap.add_argument("--update-ab", action="store_true",
                    help="also time each update with every row run (before skipping advantage-0 rows)")
    ap.add_argument("--heldout", type=int, default=0, help="also time the held-out evaluation on this many problems")
    args = ap.parse_args(argv)
    over = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = load(args.profile, overrides=over, write=False)
    t0 = time.perf_counter()
    rows = profile_steps(cfg, Path(args.policy), args.steps, args.algorithm, args.update_ab)
    total = {k: float(sum(r[k] for r in rows)) for k in rows[0] if k not in ("accuracy", "max_response_len", "mean_response_len", "p90_response_len", "truncated")}
    print("total: " + ", ".join(f"{k} {v:.4g}" for k, v in total.items()))
    print(f"per step: wall {sum(r['wall_rollout_s'] + r['wall_verify_s'] + r['wall_update_s'] for r in rows) / len(rows):.2f} s, "
          f"cpu {sum(r['cpu_rollout_s'] + r['cpu_update_s'] for r in rows) / len(rows):.2f} s; "
          f"rollout share of wall {total['wall_rollout_s'] / (total['wall_rollout_s'] + total['wall_verify_s'] + total['wall_update_s']):.2f}; "
          f"whole {time.perf_counter() - t0:.1f} s")
    if args.heldout:
        model, tok = load_policy(Path(args.policy))
        model.eval()
        c = time.process_time()
        ev = evaluate_policy(cfg, model, tok, list(task_split(cfg).heldout)[:args.heldout], seed=0)
        print(f"held-out evaluation on {args.heldout} problems: wall {ev['heldout_seconds']:.1f} s, "
              f"cpu {time.process_time() - c:.1f} s, sampled reward {ev['heldout_sampled_reward']:.3f}, "
              f"greedy {ev['heldout_accuracy']:.3f}")
    if args.update_ab:
        skip, full = total["cpu_update_s"], total["cpu_update_full_s"]
        print(f"update cpu: every row {full:.2f} s, advantage-0 rows skipped {skip:.2f} s "
              f"({total['update_rows_skipped']:.0f} of {sum(r['kept'] for r in rows)} kept rows skipped)")
        print(f"update_cpu_full_over_skip={full / skip:.2f}" if skip > 0 else "update_cpu_full_over_skip=nan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
