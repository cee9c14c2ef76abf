"""The whole notebook series with the `smoke` profile through the same runner as `make reproduce`.

Slow (a few minutes on 2 cores): it trains the tiny model for a few steps, evaluates on the real
benchmark files and builds the report. It asserts the artifacts, not the (near-zero) scores.
"""

from __future__ import annotations

import json
import subprocess
import time

import pandas as pd
import pytest

from kit import pipeline
from kit.config import load

pytestmark = pytest.mark.slow

RL_KEYS = ["stage", "step", "global_step", "reward_mean", "accuracy", "response_len_mean", "truncation_ratio",
           "tool_calls_per_traj", "tool_error_ratio_correct_before", "tool_error_ratio_correct_after",
           "p_format_mean", "kept", "time_generate_s", "time_tool_s", "time_verify_s", "time_update_s",
           "algorithm", "seed"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    t0 = time.perf_counter()
    # a cell that hangs fails the test with the notebook and cell named instead of blocking the suite
    code = pipeline.main(["run", "--profile", "smoke", "--run", "t", "--reports-root", str(root), "--cell-timeout", "600"])
    seconds = time.perf_counter() - t0
    print(f"smoke chain: {seconds:.0f} s")
    assert code == 0, "the smoke chain failed; see the STOPPED message above"
    return pipeline.Layout.for_run("smoke", "t", root), seconds


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_notebook_executed_and_recorded(smoke_run):
    lay, _ = smoke_run
    state = pipeline.read_state(lay)
    assert [n for n in pipeline.SERIES if state.get(n, {}).get("status") == "done"] == list(pipeline.SERIES)
    assert all((lay.executed / f"{n}.ipynb").exists() for n in pipeline.SERIES)


def test_rl_metrics_have_documented_keys_and_step_counts(smoke_run):
    lay, _ = smoke_run
    cfg = load("smoke", write=False)
    expected = {"stage1": cfg.stages.stage1.steps, "stage2": cfg.stages.stage2.steps, "stage3": cfg.stages.stage3.steps}
    last_global = 0
    for stage, steps in expected.items():
        rows = _rows(lay.root / stage / "metrics.jsonl")
        assert len(rows) == steps, stage
        assert all(set(RL_KEYS) <= set(r) for r in rows), f"{stage}: missing {set(RL_KEYS) - set(rows[0])}"
        assert [r["step"] for r in rows] == list(range(1, steps + 1))
        assert rows[0]["global_step"] == last_global + 1  # global steps continue across stages
        last_global = rows[-1]["global_step"]
    sft = _rows(lay.root / "sft" / "metrics.jsonl")
    assert len(sft) == cfg.sft.steps and all("loss" in r for r in sft)


def test_ablation_runs_both_algorithms_for_every_seed(smoke_run):
    lay, _ = smoke_run
    cfg = load("smoke", write=False)
    df = pd.concat([pd.DataFrame(_rows(p)) for p in (lay.root / "ablation").rglob("metrics.jsonl")])
    assert set(RL_KEYS) <= set(df.columns)
    counts = df.groupby(["algorithm", "seed"]).size()
    assert set(counts.index) == {(a, s) for a in ("grpo", "grpo_roc") for s in cfg.ablation.seeds}
    assert (counts == cfg.ablation.steps).all()


def test_evaluation_on_the_real_benchmarks(smoke_run):
    lay, _ = smoke_run
    cfg = load("smoke", write=False)
    for bench in ("aime24", "aime25", "math500", "hmmt25"):
        d = json.loads((lay.root / "eval" / "eval" / f"{bench}.json").read_text())
        assert d["n_samples"] == cfg.eval.n_samples and d["n_problems"] == cfg.eval.max_problems
        assert d["manifest"]["data_files"] and len(d["per_problem"]) == cfg.eval.max_problems
        correct = [c for p in d["per_problem"] for c in p["correct"]]
        assert len(correct) == cfg.eval.max_problems * cfg.eval.n_samples
        # the headline numbers are the per-sample grades in the same file, aggregated
        assert d["avg_at_n"] == pytest.approx(sum(correct) / len(correct))
        solved = sum(any(p["correct"]) for p in d["per_problem"]) / len(d["per_problem"])
        assert d["pass_at_k"][str(cfg.eval.n_samples)] == pytest.approx(solved)


def test_consistency_filter_and_passk_curves(smoke_run):
    lay, _ = smoke_run
    cfg = load("smoke", write=False)
    ev = lay.root / "eval"
    c = json.loads((ev / "consistency.json").read_text())
    assert c["n"] == cfg.data.consistency_samples and c["in"] == cfg.eval.consistency_problems
    assert c["in"] == c["no_samples"] + c["inconsistent"] + c["out"] == len(pd.read_parquet(ev / "consistency.parquet"))
    curves = pd.read_csv(ev / "passk" / "passk_curves.csv", index_col=0)
    assert list(curves.columns) == ["SFT (cold start)", "RL (stage 3)"]
    assert list(curves.index) == list(range(1, cfg.eval.passk_n + 1))
    assert ((curves >= 0) & (curves <= 1)).all().all() and (curves.diff().dropna() >= -1e-12).all().all()
    assert json.loads((ev / "passk" / "passk_curves.json").read_text())["problems"] == cfg.eval.passk_problems
    for ext in ("png", "pdf"):
        assert (ev / "passk" / f"passk_curves.{ext}").stat().st_size > 5000
        assert (lay.root / "figures" / f"passk_curves.{ext}").exists()  # copied by 09


def test_figures_tables_and_report(smoke_run):
    lay, _ = smoke_run
    for name in ("figure4_tool_errors", "figure8_stages", "figure9_roc_ablation"):
        for ext in ("png", "pdf"):
            assert (lay.root / "figures" / f"{name}.{ext}").stat().st_size > 5000, name
    for name in ("table3_math", "table4_response_tokens", "table5_generalization", "table6_32b"):
        df = pd.read_csv(lay.root / "tables" / f"{name}.csv", index_col=0)
        assert df.columns[0].startswith("reproduced: smoke, tiny Qwen3")
        assert any(c.startswith("paper: ") for c in df.columns[1:])
        assert (lay.root / "tables" / f"{name}.tex").exists()
    t3 = pd.read_csv(lay.root / "tables" / "table3_math.csv", index_col=0)
    assert t3.iloc[:, 0].notna().all()  # all four math benchmarks measured
    pdf = lay.report_pdf
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:")))
    images = len(subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True).stdout.splitlines()) - 2
    assert pages >= 10 and images >= 3


def test_claims_file_and_summary_page(smoke_run):
    """Notebook 09 writes claims.json in its schema; smoke is too short to reproduce anything, so no
    verdict may say it did; the report opens with the one-page summary (issue #16)."""
    from kit import claims

    lay, _ = smoke_run
    doc = claims.read_claims(lay.root / "claims.json")  # raises on a missing key or an unknown verdict
    assert doc["profile"] == "smoke" and doc["schema_version"] == claims.SCHEMA_VERSION
    assert [c["id"] for c in doc["claims"]] == [c["id"] for c in claims.load_claims()]
    assert {c["verdict"] for c in doc["claims"]} <= set(claims.VERDICTS)
    assert all(t["verdict"] in claims.VERDICTS for c in doc["claims"] for t in c["tests"])
    assert doc["counts"]["reproduced"] == 0, [c["id"] for c in doc["claims"] if c["verdict"] == "reproduced"]
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(lay.report_pdf), "-"], capture_output=True,
                           text=True, check=True).stdout
    assert "pre-registered" in first and "What this profile cannot show" in first
