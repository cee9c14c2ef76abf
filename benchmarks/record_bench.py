"""Cost of recording every trajectory of an RL step (issue #32): overhead on a real local step, bytes per trajectory.

Two parts, in one run:

1. **A real step** (``--real-steps``, default 3): :func:`kit.train.step.rl_step` of stage 1 as the
   trainer runs it (the tiny profile: P = 6 prompts x 2G = 16 rollouts through the real sandbox,
   grading, RoC, one policy update), from ``--policy`` (default: a randomly initialised tiny policy,
   which writes to its budget), each step twice from the same start (same seeds: the same
   trajectories): once without a recorder, once with one
   (:func:`kit.train.recording.open_recorder`, every prompt). Printed: step seconds both ways, the
   seconds spent inside the recorder, and that time as a percentage of the step without it (wall
   differences between two runs of a step are noise on a shared machine; the recorder's own time
   is measured directly).
2. **Synthetic steps** of the same shape (``--steps``; prompts ~80 tokens, responses ~``--tokens``
   with a tool call and a feedback block, Zipf ids from a 1,024-token vocabulary, log-probs, and
   once more with per-token entropies): milliseconds per ``record_step`` and bytes per trajectory
   on disk (zstd parquet), and reading one step back (what the explorer does per step).

Usage: ``.venv/bin/python benchmarks/record_bench.py [--real-steps 3] [--policy DIR] [--steps 20] [--prompts 6]
[--rollouts 16] [--tokens 200]``
Last line: ``name=record_bench real_step_s=<s> real_record_ms=<t> real_overhead_pct=<p> real_bytes_per_traj=<b>
record_ms_per_step=<t> bytes_per_traj=<b> bytes_per_traj_entropy=<e>``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from kit.algo import RocParams, counters, roc_step  # noqa: E402
from kit.records import RolloutRecorder, read_step, scan  # noqa: E402
from kit.rollout import Trajectory  # noqa: E402
from kit.rollout.loop import CallRecord  # noqa: E402


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def random_policy(root: Path, cfg) -> Path:
    """A randomly initialised tiny policy (tokenizer trained on the task split's text) under ``root``."""
    from kit.data import tasks
    from kit.models import build_tiny_model, save_policy, train_tokenizer

    split = tasks.make_split(200, 4, 0)
    tok = train_tokenizer([p.question + " " + p.code for p in split.train] * 3, 1024)
    return save_policy(build_tiny_model(cfg.model, tok, seed=0), tok, root / "policy")


def real_steps(steps: int, policy: Path | None, overrides: dict, tmp: Path) -> dict[str, float]:
    """Run stage 1's first ``steps`` steps twice from the same start, without and with the recorder.

    Returns:
        ``step_s`` (median wall seconds of a step without the recorder), ``with_s`` (with it),
        ``record_ms`` (median milliseconds inside the recorder), ``overhead_pct``
        (``record_ms`` over ``step_s``), ``bytes_per_traj``.
    """
    from kit.config import load
    from kit.models import load_policy
    from kit.rollout import run_coroutine
    from kit.sandbox import SandboxPool
    from kit.train import common, recording, rl
    from kit.train.step import rl_step

    cfg = load("tiny", overrides=overrides, write=False)
    stage = cfg.stages["stage1"]
    policy = policy or random_policy(tmp / "init", cfg)
    common.set_threads(cfg.model.torch_threads)
    base, tok = load_policy(policy)
    pool = rl.stage_pool(cfg, stage)
    rec = recording.open_recorder(cfg, tmp / "real", tokenizer_dir=policy)  # tiny: every step, every prompt
    spent: list[float] = []
    record_step = recording.record_step

    def timed(recorder, cfg_, res):  # the recorder's whole cost inside rl_step: build, check, write
        t0 = time.perf_counter()
        out = record_step(recorder, cfg_, res)
        if recorder is not None:
            spent.append(time.perf_counter() - t0)
        return out

    async def run(recorder, ex):
        model = copy.deepcopy(base)
        opt = common.make_optimizer(model, cfg.algorithm.lr, cfg.algorithm.weight_decay)
        times = []
        for step in range(steps):
            t0 = time.perf_counter()
            await rl_step(cfg, stage, model, tok, opt, pool, step, ex, recorder=recorder)
            times.append(time.perf_counter() - t0)
        return times

    async def both():
        async with SandboxPool(cfg.sandbox) as ex:  # one pool for both runs
            return await run(None, ex), await run(rec, ex)

    recording.record_step = timed
    try:
        without, with_rec = run_coroutine(both())
    finally:
        recording.record_step = record_step
    step_s, record_ms = float(np.median(without)), 1e3 * float(np.median(spent))
    return {"step_s": step_s, "with_s": float(np.median(with_rec)), "record_ms": record_ms,
            "overhead_pct": 100 * record_ms / 1e3 / step_s, "bytes_per_traj": rec.bytes_written / rec.rows_written,
            "rows": rec.rows_written / steps}


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
    ap.add_argument("--real-steps", type=int, default=3, help="real rl_step steps, each run without and with the recorder")
    ap.add_argument("--policy", type=Path, default=None, help="a policy folder (default: a random tiny policy)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config overrides of the real steps (tiny profile), e.g. algorithm.prompts_per_step=2")
    a = ap.parse_args()
    over = {k: _value(v) for k, v in (kv.split("=", 1) for kv in a.set)}
    with tempfile.TemporaryDirectory() as tmp:
        real = real_steps(a.real_steps, a.policy, over, Path(tmp))
    print(f"real step (tiny, {real['rows']:.0f} trajectories): {real['step_s']:.2f} s without the recorder, "
          f"{real['with_s']:.2f} s with it; {real['record_ms']:.1f} ms inside the recorder = "
          f"{real['overhead_pct']:.2f}% of the step; {real['bytes_per_traj']:.0f} bytes/trajectory "
          f"(medians of {a.real_steps})")
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
            print(f"synthetic, {label}: record {ms:.1f} ms/step (median of {a.steps}; {100 * ms / 1e3 / real['step_s']:.2f}% "
                  f"of the real step), {per_traj:.0f} bytes/trajectory ({per_traj / tok:.1f} bytes per response "
                  f"token, {a.prompts}x{a.rollouts} rows, {rec.bytes_written / a.steps / 1024:.0f} KiB/step); "
                  f"reading one step back {read_ms:.1f} ms")
            out[with_entropy] = (ms, per_traj)
    ms, b = out[False]
    print(f"name=record_bench real_step_s={real['step_s']:.3f} real_record_ms={real['record_ms']:.1f} "
          f"real_overhead_pct={real['overhead_pct']:.2f} real_bytes_per_traj={real['bytes_per_traj']:.0f} "
          f"record_ms_per_step={ms:.1f} bytes_per_traj={b:.0f} bytes_per_traj_entropy={out[True][1]:.0f}")


if __name__ == "__main__":
    main()
