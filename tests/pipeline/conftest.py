"""Helpers for the pipeline tests: small throwaway notebooks written with nbformat, and the smoke run
that the smoke-chain and browser tests share."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from kit import cli, pipeline
from kit.config import load


def write_notebook(path: Path, parameters: str, *cells: str) -> Path:
    """Write a notebook with a cell tagged ``parameters`` followed by ``cells`` (code)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell(parameters)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"), p] + [nbformat.v4.new_code_cell(c) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def make_notebook():
    return write_notebook


def write_rl_metrics(path: Path, *, stage: str, algorithm: str, seed: int, steps: int, start_global: int = 0,
                     acc0: float = 0.3, acc_slope: float = 0.02, err0: float = 0.3, err_slope: float = -0.01,
                     length0: float = 100.0) -> Path:
    """A synthetic ``metrics.jsonl`` with every documented RL key (DEVELOPERS.md), values linear in step."""
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


#: the session's smoke chain profile: smoke with a fourth RL stage (tests/profiles/four_stages.toml)
SMOKE_PROFILE = "four_stages"


@pytest.fixture(scope="session")
def smoke_chain(tmp_path_factory):
    """The whole notebook series 00-09 with :data:`SMOKE_PROFILE` (the smoke profile plus a fourth
    RL stage of one step, defined only in tests/profiles/four_stages.toml: the recipe's stages are
    data, issue #29), run once per session by the runner `make reproduce` uses: ``(Layout, exit code)``,
    not asserted (:func:`smoke_run` asserts it; the browser test needs only its 01 and 02 to have
    finished). Nobody writes into it after it is built."""
    root = tmp_path_factory.mktemp("reports")
    t0 = time.perf_counter()
    # a cell that hangs fails the test with the notebook and cell named instead of blocking the suite
    code = cli.main(["reproduce", "--profile", SMOKE_PROFILE, "--run", "t", "--reports-root", str(root),
                     "--cell-timeout", "600"])
    print(f"smoke chain: {time.perf_counter() - t0:.0f} s")
    return pipeline.Layout.for_run(SMOKE_PROFILE, "t", root), code


@pytest.fixture(scope="session")
def smoke_run(smoke_chain):
    """The session's smoke chain, finished: ``(Layout, KitConfig)``. tests/pipeline/test_smoke_chain.py
    asserts it; the browser test copies its 01/02 products (data, cold-start policy) instead of training
    them again (~95 s of the suite)."""
    lay, code = smoke_chain
    assert code == 0, "the smoke chain failed; see the STOPPED message above"
    return lay, load(SMOKE_PROFILE, write=False)
