"""The rollout's decode forward eager against ``torch.compile`` (issue #35: does compiling the per-token
forward remove the framework cost that the tiny model's decode pays?).

Usage::

    .venv/bin/python benchmarks/decode_compile.py [--threads 1] [--repeats 150]

Times one decode step (T = 1 new token per row after L cached columns, every third row left-padded) of a
tiny policy through :class:`kit.models.decode.Qwen3DecodeStep`, eager and under
``torch.compile(dynamic=True)`` (inductor, CPU), at four (B rows, L columns) shapes of a tiny RL step. The
case is ``benchmarks/stacked_arms.py``'s :class:`DecodeCase` with one arm: the engine's attention
(``use_gqa_attention``) and its in-place KV buffer (``BufferLayer``), reset to L columns before each call.
CPU seconds per forward (``time.process_time``), after 5 warm-up calls; the compile's own CPU seconds (the
first call) are printed.

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

import torch  # noqa: E402
from stacked_arms import DecodeCase, cpu, models  # noqa: E402

from kit.models.decode import Qwen3DecodeStep  # noqa: E402

SHAPES = ((8, 100), (20, 150), (36, 300), (48, 500))  # (rows, cached columns): a tiny stage-1 step's range


def warm_cpu_ms(case: DecodeCase, repeats: int) -> float:
    """CPU milliseconds of one ``case.separate()`` (the one arm's decode step) after 5 warm-up calls."""
    cpu(case.separate, 5)
    return cpu(case.separate, repeats) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ablation's arms run at 1)")
    ap.add_argument("--repeats", type=int, default=150)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    (model,) = models(1)
    eager_step = Qwen3DecodeStep(model)
    compiled = torch.compile(eager_step.__call__, dynamic=True)
    ratios, diff, compile_s = [], 0.0, 0.0
    for n, (rows, cols) in enumerate(SHAPES):
        case = DecodeCase([model], [rows], cols)
        case.steps = [eager_step]
        eager, ref = warm_cpu_ms(case, a.repeats), case.separate()[0]
        case.steps = [compiled]
        if n == 0:
            c0 = time.process_time()
            case.separate()
            compile_s = time.process_time() - c0
            print(f"torch.compile(dynamic=True) first call: {compile_s:.1f} CPU s", flush=True)
        comp = warm_cpu_ms(case, a.repeats)
        diff = max(diff, float((case.separate()[0] - ref).abs().max()))
        ratios.append(comp / eager)
        print(f"B={rows:3d} L={cols:4d}: eager {eager:.2f} CPU ms, compiled {comp:.2f} CPU ms, "
              f"ratio {comp / eager:.2f}", flush=True)
    print(f"compile_over_eager={statistics.median(ratios):.2f} compile_cpu_s={compile_s:.1f} max_abs_diff={diff:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
