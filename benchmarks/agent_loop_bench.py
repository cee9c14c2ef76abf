"""Figures behind kit.rollout: feedback lengths from the real sandbox, HF engine throughput, loop overhead.

1. Feedback lengths (the ``tool_response_max_tokens`` default, kit/rollout/protocol.py): runs a
   fixed set of erroring and printing snippets in ``kit.sandbox`` and prints, per snippet, the
   rendered feedback length in characters and in tiny-tokenizer tokens, and whether the
   release's 256-character middle cut would remove part of it.
2. ``HFBackend`` throughput: the tiny Qwen3 (random weights) sampling ``--new`` tokens for ``c``
   concurrent requests (c = 1, 8, 32), tokens per second and the number of micro-batches.
3. Agent-loop overhead: ``ScriptedBackend`` + a no-op executor, 2-turn trajectories; microseconds
   of kit code per turn (parsing, rendering, tokenizing the feedback), no model, no sandbox.

Usage: ``.venv/bin/python benchmarks/agent_loop_bench.py [--new 64]``
Last line: ``name=agent_loop_bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time

SNIPPETS = {
    "zero_div": "1/0",
    "name_in_helper": "def f(x):\n    return g(x)\nprint(f(1))",
    "numpy_shape": "import numpy as np\na=np.ones((3,4))\nb=np.ones((5,2))\nprint(a@b)",
    "recursion": "def f(n):\n    return f(n+1)\nf(0)",
    "sympy_internal": "import sympy as sp\nprint(sp.factorint(2.5))",
    "bad_stdin": "n=int(input())\nprint(n)",
    "table_39_rows": "for i in range(1,40):\n    print(i, i**2, i**3)",
    "value_only": "sum(k*k for k in range(100))",
}


def tokenizer():
    from kit import prompts
    from kit.models import train_tokenizer

    corpus = [prompts.render_prompt(f"What is {a} * {a + 3}?") + f"print({a}*{a + 3}) Traceback (most recent call last)"
              for a in range(200)]
    return train_tokenizer(corpus, vocab_size=800)


async def feedback_lengths(tok):
    from kit.config import load
    from kit.rollout.protocol import render_result
    from kit.sandbox import SandboxPool, ToolCall

    cfg = dataclasses.replace(load("tiny", write=False).sandbox, num_workers=1)
    async with SandboxPool(cfg) as pool:
        results = await pool.run_batch([ToolCall(c, input="abc") for c in SNIPPETS.values()])
    print(f"{'snippet':16s} {'status':7s} {'chars':>6s} {'tokens':>6s} cut_by_256_chars")
    for name, r in zip(SNIPPETS, results, strict=True):
        text = render_result(r)
        n_tok = len(tok.encode(text, add_special_tokens=False))
        print(f"{name:16s} {r.status:7s} {len(text):6d} {n_tok:6d} {'yes' if len(text) > 256 else 'no'}")


async def hf_throughput(tok, new_tokens):
    import torch

    from kit import prompts
    from kit.config import load
    from kit.models import build_tiny_model
    from kit.rollout import HFBackend

    model = build_tiny_model(load("tiny", write=False).model, tok).eval()
    prompt = tok.encode(prompts.render_prompt("What is 12 * 34?"), add_special_tokens=False)
    torch.set_num_threads(1)
    for c in (1, 8, 32):
        be = HFBackend(model, tok, batch_size=64, seed=0)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(be.generate(prompt, new_tokens, 1.0, 1.0, []) for _ in range(c)))
        dt = time.perf_counter() - t0
        n = sum(len(o.token_ids) for o in outs)
        print(f"HFBackend concurrency={c:3d}: {n} tokens in {dt:.2f} s = {n / dt:8.0f} tokens/s "
              f"({be.stats['batches']} micro-batches, no stop ids)")


async def loop_overhead(tok, n=200):
    from kit.config import RolloutConfig
    from kit.rollout import ScriptedBackend, run_trajectory

    class Echo:
        async def run_batch(self, calls):
            from kit.sandbox import ToolResult
            return [ToolResult("ok", stdout="42\n") for _ in calls]

    turn1 = ('<tool_call>\n{"name": "execute_python_code_with_standard_io", "arguments": '
             '{"code": "print(6*7)", "input": ""}}\n</tool_call>')
    cfg = RolloutConfig(max_prompt_tokens=4096, max_response_tokens=2048, max_turns=4)
    t0 = time.perf_counter()
    for _ in range(n):
        await run_trajectory(ScriptedBackend(tok, [turn1, "</reason> <answer> 42 </answer>"]), tok, "q", Echo(), cfg)
    dt = time.perf_counter() - t0
    print(f"agent loop overhead: {dt / (2 * n) * 1e6:.0f} us per turn ({n} two-turn trajectories, scripted model)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", type=int, default=64, help="tokens sampled per request in the HF throughput test")
    args = ap.parse_args()
    tok = tokenizer()
    asyncio.run(feedback_lengths(tok))
    asyncio.run(hf_throughput(tok, args.new))
    asyncio.run(loop_overhead(tok))
    print("name=agent_loop_bench")


if __name__ == "__main__":
    main()
