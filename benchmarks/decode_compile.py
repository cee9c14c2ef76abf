"""The rollout's decode forward eager against ``torch.compile`` (issue #35: does compiling the per-token
forward remove the framework cost that the tiny model's decode pays?).

Usage::

    .venv/bin/python benchmarks/decode_compile.py [--threads 1] [--repeats 150]

Builds the tiny profile's Qwen3 (random weights, no tokenizer), wraps it in
:class:`kit.models.decode.Qwen3DecodeStep` (what the engine calls once per decode step), and times one
decode forward (T = 1 new token per row after L cached columns, left padding on some rows, as in the
engine) eager and under ``torch.compile(dynamic=True)`` (inductor, CPU) at four (B rows, L columns) shapes
of a tiny RL step. The cache layer hands back preallocated (B, kv_heads, L + 1, head_dim) keys and values,
as the engine's in-place buffer does, so neither variant pays a copy. CPU seconds per forward
(``time.process_time``), after 5 warm-up calls; the compile's own CPU seconds (first call) are printed.

Last line: ``compile_over_eager=<median over shapes of compiled ms / eager ms> compile_cpu_s=<first call>
max_abs_diff=<largest logit difference>`` (a ratio above 1: compiling is slower).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine_limit  # noqa: E402
import torch  # noqa: E402

from kit.models.decode import Qwen3DecodeStep  # noqa: E402

SHAPES = ((8, 100), (20, 150), (36, 300), (48, 500))  # (rows, cached columns): a tiny stage-1 step's range


class _Layer:
    """A cache layer whose ``update`` returns fixed (B, kv_heads, L + 1, head_dim) keys and values (no copy)."""

    def __init__(self, rows: int, cols: int, kv_heads: int, head_dim: int):
        self.k = torch.randn(rows, kv_heads, cols + 1, head_dim)
        self.v = torch.randn(rows, kv_heads, cols + 1, head_dim)

    def update(self, k, v, layer_idx):
        return self.k, self.v


def inputs(model, rows: int, cols: int):
    """``(ids, pos, mask, layers)`` for one decode step of ``rows`` rows after ``cols`` cached columns;
    row ``b`` has ``7 b mod 120`` padding columns on the left."""
    cfg = model.config
    mask = torch.ones(rows, cols + 1, dtype=torch.long)
    for b in range(rows):
        mask[b, : (b * 7) % 120] = 0
    layers = [_Layer(rows, cols, cfg.num_key_value_heads, cfg.head_dim) for _ in range(cfg.num_hidden_layers)]
    return torch.randint(5, cfg.vocab_size, (rows, 1)), torch.full((rows, 1), min(cols, 500)), mask, layers


def cpu_ms(fn, args, repeats: int) -> float:
    """Mean CPU milliseconds of ``fn(*args)`` over ``repeats`` calls after 5 warm-up calls."""
    for _ in range(5):
        fn(*args)
    c0 = time.process_time()
    for _ in range(repeats):
        fn(*args)
    return (time.process_time() - c0) / repeats * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ablation's arms run at 1)")
    ap.add_argument("--repeats", type=int, default=150)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    _, model = machine_limit.tiny_model()
    model.eval()
    step = Qwen3DecodeStep(model)
    compiled = torch.compile(step.__call__, dynamic=True)
    ratios, diff = [], 0.0
    with torch.inference_mode():
        c0 = time.process_time()
        compiled(*inputs(model, 20, 150))
        compile_s = time.process_time() - c0
        print(f"torch.compile(dynamic=True) first call: {compile_s:.1f} CPU s", flush=True)
        for rows, cols in SHAPES:
            args = inputs(model, rows, cols)
            eager, comp = cpu_ms(step, args, a.repeats), cpu_ms(compiled, args, a.repeats)
            diff = max(diff, float((step(*args) - compiled(*args)).abs().max()))
            ratios.append(comp / eager)
            print(f"B={rows:3d} L={cols:4d}: eager {eager:.2f} CPU ms, compiled {comp:.2f} CPU ms, "
                  f"ratio {comp / eager:.2f}", flush=True)
    print(f"compile_over_eager={statistics.median(ratios):.2f} compile_cpu_s={compile_s:.1f} max_abs_diff={diff:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
