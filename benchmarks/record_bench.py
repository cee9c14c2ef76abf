"""Cost of recording every trajectory of an RL step (issue #32): time per step and bytes per trajectory.

Synthetic trajectories of the tiny profile's shape: P = 6 prompts x 2G = 16 rollouts, a prompt of
~80 tokens, a response of ~200 tokens (one tool call: ~150 model tokens, a ~50-token feedback
block), ids drawn Zipf-like from a 1,024-token vocabulary, rollout log-probs on the model tokens.
For each step: :func:`kit.algo.roc_step` (the trainer runs it anyway; not counted), then
``RolloutRecorder.record_step`` (records built, checked, written as one zstd parquet file),
timed; and once more with per-token entropies (a backend that records them; none does yet).
The recording time is compared with a tiny RL step's ~4 s on 2 cores (``kit/profiles/tiny.toml``);
reading one step back (what the explorer does per step) is timed too.

Usage: ``.venv/bin/python benchmarks/record_bench.py [--steps 20] [--prompts 6] [--rollouts 16] [--tokens 200]``
Last line: ``name=record_bench record_ms_per_step=<t> overhead_pct=<p> bytes_per_traj=<b> bytes_per_traj_entropy=<e>``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from kit.algo import RocParams, counters, roc_step
from kit.records import RolloutRecorder, read_step, scan
from kit.rollout import Trajectory
from kit.rollout.loop import CallRecord

STEP_S = 4.0  # a tiny RoC step on 2 cores (kit/profiles/tiny.toml)


def synthetic_step(P: int, n: int, tokens: int, rng: np.random.Generator) -> tuple[list, np.ndarray, list]:
    """P x n trajectories of about ``tokens`` response tokens; rewards (P*n,); group ids."""
    vocab = 1024
    weights = 1.0 / np.arange(1, vocab + 1)
    weights /= weights.sum()
    trs, gids = [], []
    for p in range(P):
        prompt = rng.choice(vocab, size=80, p=weights).tolist()
        for _ in range(n):
            t = int(rng.integers(tokens * 3 // 4, tokens * 5 // 4))
            fb = t // 4
            mask = [1] * (t - fb - 30) + [0] * fb + [1] * 30
            lps = [float(-rng.exponential(0.6)) if m else 0.0 for m in mask]
            status = "error" if rng.random() < 0.3 else "ok"
            tr = Trajectory(problem="", prompt_ids=prompt, response_ids=rng.choice(vocab, size=t, p=weights).tolist(),
                            response_mask=mask, logprobs=lps, turns=2, tool_calls=1,
                            answer_tags=int(rng.integers(0, 3)), finish_reason="answer")
            tr.calls = [CallRecord(turn=0, index=0, status=status, error_kind="exception" if status == "error" else None,
                                   feedback="")]
            tr.tool_errors["exception"] = int(status == "error")
            trs.append(tr)
            gids.append(p)
    rewards = (rng.random(P * n) < 0.4).astype(float)
    return trs, rewards, gids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    params = RocParams(group_size=a.rollouts // 2, min_positive=1, min_negative=1)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, with_entropy in (("log-probs", False), ("log-probs + entropy", True)):
            run = Path(tmp) / label.replace(" ", "")
            rec = RolloutRecorder(run)
            times = []
            for step in range(1, a.steps + 1):
                trs, rewards, gids = synthetic_step(a.prompts, a.rollouts, a.tokens, rng)
                sel, _ = roc_step(rewards, gids, counters(trs), params, seed=step)
                ent = [rng.exponential(1.0, len(t.response_ids)).tolist() for t in trs] if with_entropy else None
                t0 = time.perf_counter()
                rec.record_step(trs, rewards, gids, stage="stage1", step=step, algorithm="grpo_roc", kept=sel,
                                roc=params, entropies=ent)
                times.append(time.perf_counter() - t0)
            files = scan(run).files
            t0 = time.perf_counter()
            read_step(files[-1])
            read_ms = 1e3 * (time.perf_counter() - t0)
            ms = 1e3 * float(np.median(times))
            per_traj = rec.bytes_written / rec.rows_written
            tok = sum(len(t.response_ids) for t in trs) / len(trs)
            print(f"{label}: record {ms:.1f} ms/step (median of {a.steps}; {100 * ms / 1e3 / STEP_S:.2f}% of a "
                  f"{STEP_S:.0f} s step), {per_traj:.0f} bytes/trajectory ({per_traj / tok:.1f} bytes per response "
                  f"token, {a.prompts}x{a.rollouts} rows, {rec.bytes_written / a.steps / 1024:.0f} KiB/step); "
                  f"reading one step back {read_ms:.1f} ms")
            out[with_entropy] = (ms, per_traj)
    ms, b = out[False]
    print(f"name=record_bench record_ms_per_step={ms:.1f} overhead_pct={100 * ms / 1e3 / STEP_S:.2f} "
          f"bytes_per_traj={b:.0f} bytes_per_traj_entropy={out[True][1]:.0f}")


if __name__ == "__main__":
    main()
