"""Verifier throughput and agreement: kit.reward.verify_batch against plain in-process math_verify.

Builds ``--pairs`` (default 2,000) graded pairs from real golds read at run time: half from
MATH-500 (LaTeX golds), half from DAPO-Math-17k (integer golds), each gold once against an
equal answer and once against a perturbed one (a digit changed). Half of the equal MATH-500
answers are the gold respaced inside a brace group (``{\\frac{ 1}{ 2}}``: same value, other
text). Both paths grade the same
responses in the same run:

* plain: the release's call (research note ``rstar2_agent_release.md`` §5), gold boxed with
  ``LatexExtractionConfig``, the whole response with ``(ExprExtractionConfig,
  LatexExtractionConfig)``, ``verify`` with math_verify's own 5 s alarm, one process. It runs
  in a forked child watched by a guard: an item with no answer after ``--guard-s`` seconds is
  counted as a hang, the child is killed and restarted after it, so the benchmark finishes.
* kit: ``Verifier(--workers).verify_batch`` on a pool started beforehand (start-up reported
  separately).

Prints verifications/s for both, disagreements (with examples), timeouts and hangs; the last
line is ``throughput_ratio=<kit over plain>``. Run: ``.venv/bin/python benchmarks/verify_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import time

import pandas as pd

from kit.config.paths import data_file
from kit.prompts import ANSWER_CLOSE, ANSWER_OPEN, REASON_CLOSE
from kit.reward import Verifier, count_reasons


def perturb(answer: str, rng: random.Random) -> str:
    """A different answer of the same shape: one digit changed, else ``+1`` appended."""
    digits = [m.start() for m in re.finditer(r"\d", answer)]
    if not digits:
        return answer + "+1"
    i = rng.choice(digits)
    return answer[:i] + str((int(answer[i]) + rng.randint(1, 9)) % 10) + answer[i + 1 :]


def response_for(answer: str) -> str:
    return f"Some reasoning.{REASON_CLOSE} {ANSWER_OPEN} The answer is \\boxed{{{answer}}}. {ANSWER_CLOSE}"


def build_pairs(n: int, seed: int = 0) -> list[tuple[str, str, str, bool]]:
    """``(source, gold, response, is_equal)`` rows: n/2 from MATH-500, n/2 from DAPO."""
    rng = random.Random(seed)
    math500 = [r["answer"] for r in json.loads(data_file("benchmarks/math500.json").read_text())]
    dapo = pd.read_parquet(data_file("train/dapo_math_17k.parquet"), columns=["reward_model"])
    dapo_golds = [str(r["ground_truth"]) for r in dapo["reward_model"]]
    rows = []
    for source, golds in (("math500", math500), ("dapo", dapo_golds)):
        picked = [golds[i % len(golds)] for i in rng.sample(range(max(len(golds), n // 4)), n // 4)]
        for j, g in enumerate(picked):
            # every other LaTeX gold comes back respaced ("\\frac{ 1}{ 2}") and in a brace group:
            # equal in value, other text, so the kit's same-text rule cannot settle it
            same = "{" + re.sub(r"(?<!\\begin)(?<!\\end)\{", "{ ", g) + "}" if source == "math500" and j % 2 else g
            rows.append((source, g, response_for(same), True))
            rows.append((source, g, response_for(perturb(g, rng)), False))
    return rows


ADVERSARIAL = [("3", "7^{7^{7^{7^7}}}"), ("3.1", "3.1e99999999"), ("3", "\\binom{10^{8}}{5\\cdot 10^{7}}"),
               ("3", "\\prod_{k=1}^{10^{9}} k"), ("3", "3.1\\times 10^{99999999}"), ("3", "10^{10^{10}}!")]


def _plain_child(items, start, conn):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    for i in range(start, len(items)):
        gold, response = items[i]
        t = time.perf_counter()
        try:
            g = parse("\\boxed{" + gold + "}", extraction_config=[LatexExtractionConfig()])
            p = parse(response, extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()])
            ok = bool(verify(g, p))
        except Exception:  # noqa: BLE001  (scored 0 like the release)
            ok = False
        conn.send((i, ok, time.perf_counter() - t))
    conn.send(None)


def run_plain(items: list[tuple[str, str]], guard_s: float) -> tuple[list[bool | None], list[float], float, int, int]:
    """Plain math_verify in one forked process with a hang guard.

    Returns:
        (verdicts with None for a hang, per-item seconds, wall seconds, hangs, items slower
        than 5 s).
    """
    ctx = mp.get_context("fork")
    results: list[bool | None] = [None] * len(items)
    seconds = [guard_s] * len(items)
    hangs = slow = 0
    start, t0 = 0, time.perf_counter()
    while start < len(items):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_plain_child, args=(items, start, send), daemon=True)
        proc.start()
        send.close()
        nxt = start
        while True:
            if not recv.poll(guard_s):
                hangs += 1
                proc.kill()
                proc.join()
                start = nxt + 1
                break
            msg = recv.recv()
            if msg is None:
                proc.join()
                start = len(items)
                break
            i, ok, dt = msg
            results[i], seconds[i] = ok, dt
            slow += dt > 5.0
            nxt = i + 1
    return results, seconds, time.perf_counter() - t0, hangs, slow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=5.0)
    ap.add_argument("--guard-s", type=float, default=15.0)
    ap.add_argument("--adversarial", action="store_true",
                    help="append the hang-prone answers of issue #4 (both paths must still finish)")
    args = ap.parse_args()

    rows = build_pairs(args.pairs)
    if args.adversarial:
        rows += [("adversarial", g, response_for(a), False) for g, a in ADVERSARIAL]
    items = [(g, r) for _, g, r, _ in rows]
    print(f"pairs={len(rows)} (math500={sum(s == 'math500' for s, *_ in rows)}, dapo={sum(s == 'dapo' for s, *_ in rows)})")

    plain, plain_item_s, plain_s, hangs, plain_slow = run_plain(items, args.guard_s)

    t0 = time.perf_counter()
    with Verifier(args.workers, timeout_s=args.timeout_s) as v:
        v.verify("1", "\\boxed{\\frac{2}{2}}")  # wait until a worker is warm
        startup_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        kit = v.verify_batch(items)
        kit_s = time.perf_counter() - t1
        stats = dict(v.stats)

    kit_rate, plain_rate = len(items) / kit_s, len(items) / plain_s
    disagree = [(row, k, p) for row, k, p in zip(rows, kit, plain, strict=True) if p is not None and k.correct != p]
    counts = count_reasons(kit)
    kit_wrong_on_equal = sum(1 for row, k in zip(rows, kit, strict=True) if row[3] and not k.correct)
    kit_right_on_perturbed = sum(1 for row, k in zip(rows, kit, strict=True) if not row[3] and k.correct)
    plain_wrong_on_equal = sum(1 for row, p in zip(rows, plain, strict=True) if row[3] and p is False)
    plain_right_on_perturbed = sum(1 for row, p in zip(rows, plain, strict=True) if not row[3] and p)

    print(f"kit_startup_s={startup_s:.2f} workers={args.workers} timeout_s={args.timeout_s}")
    print(f"kit_verifications_per_s={kit_rate:.1f} kit_wall_s={kit_s:.2f} kit_reasons={counts} "
          f"kit_hard_kills={stats['hard_kills']} kit_timeouts={counts['timeout']}")
    print(f"plain_verifications_per_s={plain_rate:.1f} plain_wall_s={plain_s:.2f} plain_hangs={hangs} "
          f"plain_items_over_5s={plain_slow}")
    print(f"kit: equal graded wrong={kit_wrong_on_equal} perturbed graded correct={kit_right_on_perturbed}")
    print(f"plain: equal graded wrong={plain_wrong_on_equal} perturbed graded correct={plain_right_on_perturbed}")
    for source in ("math500", "dapo"):
        idx = [i for i, r in enumerate(rows) if r[0] == source]
        print(f"  {source}: kit_mean_item_s={sum(kit[i].seconds for i in idx) / len(idx):.4f} "
              f"plain_mean_item_s={sum(plain_item_s[i] for i in idx) / len(idx):.4f}")
    for (_source, gold, _response, equal), k in zip(rows, kit, strict=True):
        if not equal and k.correct:
            print(f"  perturbed but still equal: gold={gold!r} answer={k.extracted!r} ({k.detail})")
    print(f"disagreements={len(disagree)} (math500={sum(r[0] == 'math500' for r, *_ in disagree)}, "
          f"dapo={sum(r[0] == 'dapo' for r, *_ in disagree)})")
    for (source, gold, _response, equal), k, p in disagree[:12]:
        ans = k.extracted
        print(f"  [{source}] gold={gold!r} answer={ans!r} equal_by_construction={equal} "
              f"kit={k.reason}/{k.detail} plain={p}")
    print(f"throughput_ratio={kit_rate / plain_rate:.2f}")


if __name__ == "__main__":
    main()
