"""Helpers for the pipeline tests: small throwaway notebooks written with nbformat. The smoke run that
the smoke-chain and browser tests share (``smoke_chain``, ``smoke_run``) is in the root conftest: the
VERL CPU chain's test reads it too (both runtimes' rollout records through one reader)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doubles import write_notebook


@pytest.fixture
def make_notebook():
    return write_notebook


def write_rl_metrics(path: Path, *, stage: str, algorithm: str, seed: int, steps: int, start_global: int = 0,
                     acc0: float = 0.3, acc_slope: float = 0.02, err0: float = 0.3, err_slope: float = -0.01,
                     length0: float = 100.0) -> Path:
    """A synthetic ``metrics.jsonl`` with every RL key kit.metrics declares, values linear in step."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in range(1, steps + 1):
        acc = min(1.0, acc0 + acc_slope * s)
        err = max(0.0, err0 + err_slope * s)
        rows.append({
            "stage": stage, "step": s, "global_step": start_global + s, "reward_mean": acc, "accuracy": acc,
            "response_len_mean": length0 + 2.0 * s, "truncation_ratio": 0.0, "tool_calls_per_traj": 1.5,
            "tool_error_ratio_correct_before": err,
            "tool_error_ratio_correct_after": (err / 2 if algorithm == "grpo_roc" else err),
            "p_format_mean": 0.1, "kept": 64, "time_generate_s": 1.0, "time_tool_s": 0.1,
            "time_verify_s": 0.01, "time_update_s": 0.2, "algorithm": algorithm, "seed": seed,
        })
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def rl_metrics():
    return write_rl_metrics


def smoke_run_selected(items) -> bool:
    """Whether a test of the session's selection (``session.items``) asserts the smoke run: then the
    browser test copies its 01/02 products; run alone (``-m browser``, ``-m "not slow"``, its file) it
    runs 01 and 02 itself instead of the whole chain."""
    return any("smoke_run" in getattr(item, "fixturenames", ()) for item in items)


@pytest.fixture(scope="session")
def smoke_run_wanted():
    """:func:`smoke_run_selected`, for the browser test's module-scoped fixture and its own test."""
    return smoke_run_selected
