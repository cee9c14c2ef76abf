"""Distance to the machine's limit (issue #35): this CPU's sustained matmul FLOP/s at the training threads
against the model FLOPs of the tiny profile's SFT step, RL update and rollout decode.

Usage::

    .venv/bin/python benchmarks/machine_limit.py [--threads 2] [--steps 6] [--seconds 1.0]

Measured in one process, one after the other (so the same load sits under each):

* the bound: fp32 and bf16 ``torch.mm`` of square matrices (512, 1024, 2048; the best sustained rate over
  ``--seconds`` each) and the model's own widest matmul (2048 tokens x H -> I), at ``--threads`` threads;
* the SFT step: :func:`kit.train.sft.sft_step` on 48 rows shaped like the tiny cold start's (a tenth cut at
  384 tokens, the rest 110-260), the tiny profile's model (vocabulary ``model.tokenizer_vocab_size``) and
  optimizer; model FLOPs from :mod:`kit.models.flops` over the real tokens;
* the RL update: :func:`kit.train.update.policy_update` on 48 kept rows (prompt 60 tokens, responses 80-256
  with a 24-token feedback span), advantages +-1 (no row skipped);
* decode: the rollout engine (:class:`kit.rollout.engine.ContinuousBatchingEngine`, lean decode forward) on
  64 rows of a 60-token prompt, 200 new tokens each: tokens/s, and its model FLOP/s (prefill and decode).

Last line: ``sft_mfu=<x> rl_update_mfu=<y> decode_tok_s=<z> decode_mfu=<w> fp32_gflops=<a> bf16_gflops=<b>``
(MFU against the fp32 bound: the model trains in fp32). :func:`measure` returns the same figures for
``benchmarks/tiny_series.py``. Wall times on a shared machine are upper bounds; the MFU figures are
each step's model FLOPs over its wall seconds, so load lowers them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from kit.config import load  # noqa: E402
from kit.models.flops import Shapes, decode_flops, forward_flops, train_flops  # noqa: E402

SQUARE_SIZES = (512, 1024, 2048)


def matmul_rate(dtype: torch.dtype, n: int | tuple[int, int, int], seconds: float = 1.0) -> float:
    """Sustained FLOP/s of ``(m, k) @ (k, n)`` matmuls in ``dtype`` at torch's current threads
    (``n`` an int: square), repeated for ``seconds`` after three warm-up calls."""
    m, k, nn = (n, n, n) if isinstance(n, int) else n
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, nn, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.mm(a, b)
        reps += 1
    return 2.0 * m * k * nn * reps / (time.perf_counter() - t0)


def matmul_bound(hidden: int, intermediate: int, seconds: float = 1.0) -> dict[str, Any]:
    """``{"fp32": FLOP/s, "bf16": FLOP/s, "rates": {label: FLOP/s}}``: the best of the square sizes and the
    model's widest matmul (2048 x H @ H x I) per dtype."""
    rates = {}
    for dt, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for n in SQUARE_SIZES:
            rates[f"{name} {n}^3"] = matmul_rate(dt, n, seconds)
        rates[f"{name} 2048x{hidden}x{intermediate}"] = matmul_rate(dt, (2048, hidden, intermediate), seconds)
    best = {name: max(v for k, v in rates.items() if k.startswith(name)) for name in ("fp32", "bf16")}
    return {**best, "rates": rates}


def tiny_model(profile: str = "tiny"):
    """The profile's tiny Qwen3, randomly initialised, vocabulary ``model.tokenizer_vocab_size`` (no tokenizer)."""
    from transformers import Qwen3ForCausalLM

    from kit.models.tiny import tiny_qwen3_config

    cfg = load(profile, write=False)
    torch.manual_seed(0)
    return cfg, Qwen3ForCausalLM(tiny_qwen3_config(cfg.model, cfg.model.tokenizer_vocab_size, 0, 1))


def sft_rows(rng: random.Random, vocab: int, batch: int = 48, cut: int = 384) -> list:
    """``batch`` (ids, mask) rows shaped like the tiny cold start's: every tenth at ``cut`` tokens (the
    function-calling chats), the rest 110-260 tokens (task demos); the first 24 tokens carry no loss."""
    rows = []
    for i in range(batch):
        n = cut if i % 10 == 0 else rng.randint(110, 260)
        rows.append(([rng.randrange(5, vocab) for _ in range(n)], [0] * 24 + [1] * (n - 24)))
    return rows


def rl_trajectories(rng: random.Random, vocab: int, rows: int = 48) -> list:
    """``rows`` trajectories like a tiny RL batch: a 60-token prompt, 80-256 response tokens of which a
    24-token span in the middle is tool feedback (mask 0), sampling log-probs -1 per model token."""
    from kit.rollout.loop import Trajectory

    out = []
    for _ in range(rows):
        n = rng.randint(80, 256)
        mask = [1] * n
        mid = n // 2
        mask[mid:mid + 24] = [0] * 24
        out.append(Trajectory("p", [rng.randrange(5, vocab) for _ in range(60)],
                              [rng.randrange(5, vocab) for _ in range(n)], mask, [-1.0 * m for m in mask]))
    return out


def sft_probe(cfg, model, steps: int, optimizer=None, seed: int = 0) -> dict[str, Any]:
    """``steps`` timed SFT steps (after one warm-up): median wall and CPU seconds and model FLOPs per step."""
    from kit.train import common
    from kit.train.sft import sft_step

    opt = optimizer or common.make_optimizer(model, cfg.sft.lr)
    shapes, rng = Shapes.of(model), random.Random(seed)
    model.train()
    walls, cpus, flops = [], [], []
    for k in range(steps + 1):
        rows = sft_rows(rng, shapes.vocab, cfg.sft.batch_size, cfg.sft.max_seq_tokens)
        t0, c0 = time.perf_counter(), time.process_time()
        sft_step(model, opt, rows, 0)
        if k:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            flops.append(train_flops(shapes, [len(ids) for ids, _ in rows], sum(sum(m[1:]) for _, m in rows)))
    wall = statistics.median(walls)
    return {"step_s": wall, "cpu_s": statistics.median(cpus), "flops": statistics.median(flops),
            "flop_s": statistics.median(f / w for f, w in zip(flops, walls, strict=True))}


def rl_update_probe(cfg, model, steps: int, optimizer=None, seed: int = 0) -> dict[str, Any]:
    """``steps`` timed :func:`kit.train.update.policy_update` calls (after one warm-up) on 48 kept rows."""
    from kit.train import common
    from kit.train.update import policy_update

    opt = optimizer or common.make_optimizer(model, cfg.algorithm.lr)
    shapes, rng = Shapes.of(model), random.Random(seed)
    model.train()
    walls, cpus, flops = [], [], []
    for k in range(steps + 1):
        trajs = rl_trajectories(rng, shapes.vocab)
        adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(len(trajs))])
        t0, c0 = time.perf_counter(), time.process_time()
        policy_update(cfg, model, opt, trajs, adv, 0, cfg.algorithm.lr)
        if k:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            # the LM head runs on response-mask positions only (kit.train.update.token_logprobs)
            flops.append(train_flops(shapes, [len(t.prompt_ids) + len(t.response_ids) for t in trajs],
                                     sum(sum(t.response_mask) for t in trajs)))
    return {"step_s": statistics.median(walls), "cpu_s": statistics.median(cpus), "flops": statistics.median(flops),
            "flop_s": statistics.median(f / w for f, w in zip(flops, walls, strict=True))}


def decode_probe(model, rows: int = 64, prompt: int = 60, new: int = 200) -> dict[str, Any]:
    """The rollout engine on ``rows`` requests of a ``prompt``-token prompt, ``new`` sampled tokens each
    (temperature 1, no stop token): tokens/s (wall and CPU) and model FLOP/s of its prefills and decodes."""
    from kit.rollout.engine import ContinuousBatchingEngine

    model.eval()
    shapes, rng = Shapes.of(model), random.Random(0)
    prompts = [[rng.randrange(5, shapes.vocab) for _ in range(prompt)] for _ in range(rows)]
    engine = ContinuousBatchingEngine(model, SimpleNamespace(pad_token_id=0), slots=rows, seed=0)

    async def go():
        return await asyncio.gather(*(engine.generate(p, new, 1.0, 1.0, []) for p in prompts))

    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        gens = asyncio.run(go())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(g.token_ids) for g in gens)
    # the first new token comes from the prefill's last position; each later one is a decode over its context
    flops = forward_flops(shapes, [prompt] * rows, head_positions=rows) + sum(
        decode_flops(shapes, range(prompt + 1, prompt + len(g.token_ids))) for g in gens)
    return {"tokens": tokens, "tok_s": tokens / wall, "tok_cpu_s": tokens / cpu, "wall_s": wall, "cpu_s": cpu,
            "flop_s": flops / wall}


def measure(threads: int = 2, steps: int = 6, seconds: float = 1.0, profile: str = "tiny",
            echo=print) -> dict[str, float]:
    """Every figure of this benchmark, printed through ``echo``; returns ``{"sft_mfu", "rl_update_mfu",
    "decode_tok_s", "decode_mfu", "fp32_gflops", "bf16_gflops"}``."""
    torch.set_num_threads(threads)
    cfg, model = tiny_model(profile)
    shapes = Shapes.of(model)
    bound = matmul_bound(shapes.hidden, shapes.intermediate, seconds)
    echo(f"matmul bound at {threads} threads (GFLOP/s): "
         + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in bound["rates"].items()))
    fp32 = bound["fp32"]
    sft = sft_probe(cfg, model, steps)
    echo(f"SFT step ({cfg.sft.batch_size} rows): {sft['step_s']:.3f} s wall, {sft['cpu_s']:.3f} CPU s, "
         f"{sft['flops'] / 1e9:.1f} GFLOP -> {sft['flop_s'] / 1e9:.1f} GFLOP/s = {sft['flop_s'] / fp32:.1%} of fp32")
    _, model = tiny_model(profile)
    rl = rl_update_probe(cfg, model, steps)
    echo(f"RL update (48 rows): {rl['step_s']:.3f} s wall, {rl['cpu_s']:.3f} CPU s, {rl['flops'] / 1e9:.1f} GFLOP "
         f"-> {rl['flop_s'] / 1e9:.1f} GFLOP/s = {rl['flop_s'] / fp32:.1%} of fp32")
    dec = decode_probe(model)
    echo(f"decode (64 rows x 200 tokens): {dec['tok_s']:.0f} tokens/s wall, {dec['tok_cpu_s']:.0f} per CPU s; "
         f"{dec['flop_s'] / 1e9:.2f} GFLOP/s = {dec['flop_s'] / fp32:.2%} of fp32")
    return {"sft_mfu": sft["flop_s"] / fp32, "rl_update_mfu": rl["flop_s"] / fp32, "decode_tok_s": dec["tok_s"],
            "decode_mfu": dec["flop_s"] / fp32, "fp32_gflops": fp32 / 1e9, "bf16_gflops": bound["bf16"] / 1e9}


def result_line(m: dict[str, float]) -> str:
    """``sft_mfu=... rl_update_mfu=... decode_tok_s=... decode_mfu=... fp32_gflops=... bf16_gflops=...``."""
    return (f"sft_mfu={m['sft_mfu']:.3f} rl_update_mfu={m['rl_update_mfu']:.3f} decode_tok_s={m['decode_tok_s']:.0f} "
            f"decode_mfu={m['decode_mfu']:.4f} fp32_gflops={m['fp32_gflops']:.0f} bf16_gflops={m['bf16_gflops']:.0f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the tiny trainer's at most)")
    ap.add_argument("--steps", type=int, default=6, help="timed SFT steps and RL updates")
    ap.add_argument("--seconds", type=float, default=1.0, help="seconds per matmul size")
    ap.add_argument("--profile", default="tiny")
    a = ap.parse_args(argv)
    print(result_line(measure(a.threads, a.steps, a.seconds, a.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
