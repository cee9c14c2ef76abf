"""Time score_samples on a MATH-500-sized evaluation (500 problems x 16 samples, synthetic
correctness and answers): every pass@k, maj@k for k in {1,2,4,8,16}, 1000 bootstrap resamples.

Usage: .venv/bin/python benchmarks/eval_scoring.py
"""

import time
from dataclasses import dataclass

import numpy as np

from kit.eval.evaluate import score_samples


@dataclass
class V:
    correct: bool
    extracted: str | None


def main(N: int = 500, n: int = 16) -> None:
    rng = np.random.default_rng(0)
    p = rng.beta(0.7, 0.7, size=N)
    answers = np.where(rng.random((N, n)) < p[:, None], 0, rng.integers(1, 4, size=(N, n)))
    verdicts = [[V(a == 0, str(a)) for a in row] for row in answers]
    trajs = [[{"response_len": int(rng.integers(100, 3000)), "response_mask": [], "tool_calls": 2,
               "tool_errors": {"exception": int(rng.random() < 0.1)}, "truncated": False} for _ in range(n)]
             for _ in range(N)]
    t0 = time.perf_counter()
    r = score_samples("synthetic", [str(i) for i in range(N)], trajs, verdicts, bootstrap_samples=1000)
    seconds = time.perf_counter() - t0
    print(f"problems={N} samples={n} avg@{n}={r.avg_at_n:.4f} ci95=({r.ci95[0]:.4f}, {r.ci95[1]:.4f}) "
          f"pass@{n}={r.pass_at_k[n]:.4f} maj@{n}={r.maj_at_k[n]:.4f}")
    print(f"score_samples seconds={seconds:.2f}")
    print("name=eval_scoring")


if __name__ == "__main__":
    main()
