"""kit.report.summary: the report's one-page summary (claims, figures, tables, limits) and how it opens the PDF."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from kit import claims, studies
from kit.report import figures, summary, tables

needs_poppler = pytest.mark.skipif(shutil.which("pdfinfo") is None or shutil.which("pdftotext") is None,
                                   reason="poppler-utils not installed")


def _pages(pdf) -> int:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:")))


def _text(pdf, page: int = 1) -> str:
    return subprocess.run(["pdftotext", "-f", str(page), "-l", str(page), "-layout", str(pdf), "-"],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def run(tmp_path, rl_metrics):
    root = tmp_path / "tiny" / "r"
    m = rl_metrics(tmp_path / "m" / "metrics.jsonl", stage="stage1", algorithm="grpo_roc", seed=0, steps=4)
    figures.save_figure(figures.figure4_tool_errors(m), root / "figures", "figure4_tool_errors", formats=("png",))
    figures.save_figure(figures.figure9_roc_ablation(m), root / "figures", "figure9_roc_ablation", formats=("png",))
    tables.write_table(tables.table3_math({"aime24": {"accuracy": 0.05}}, tables.RunInfo("tiny", "tiny")), root / "tables")
    claims.write_claims(claims.evaluate_claims(claims.RunDirs.under(root)), root / "claims.json", profile="tiny")
    return root


def test_table_rows_put_this_run_beside_the_first_published_value(run):
    rows = summary.table_rows(run / "tables")
    aime = next(r for r in rows if r[1] == "AIME24")
    assert aime[:3] == ["Table 3", "AIME24", "5.0"]  # percent
    assert aime[3] == "80.6 (rStar2-Agent-14B)"
    assert next(r for r in rows if r[1] == "MATH-500")[2] == "\u2014"  # absent stays absent


def test_claim_rows_show_every_claim_with_its_verdict_and_why(run):
    doc = claims.read_claims(run / "claims.json")
    rows = summary.claim_rows(doc)
    own = [c for c in doc["claims"] if c["section"] == claims.DEFAULT_SECTION]
    assert len(rows) == len(own) and {r[3] for r in rows} == {"inconclusive"}
    # another paper's claims (ReTool's, issue #33; Agent-R's, issue #34) are a section of their own, on a page
    # of their own, in the claims file's order
    assert summary.sections(doc) == [s.section for s in studies.STUDIES]  # ReTool, Agent-R, then any study added
    retool, agent_r = summary.claim_rows(doc, "ReTool"), summary.claim_rows(doc, "Agent-R")
    n_agent_r = sum(c.get("section") == "Agent-R" for c in claims.load_claims())  # the registered, not superseded
    assert len(retool) >= 4 and len(agent_r) == n_agent_r >= 5
    assert len(own) + sum(len(summary.claim_rows(doc, s.section)) for s in studies.STUDIES) == len(doc["claims"])
    assert all("ReTool" in r[0] for r in retool) and all("Agent-R" in r[0] for r in agent_r)
    flat = [[" ".join(cell.split()) for cell in r] for r in (retool[0], agent_r[0], rows[0])]
    assert "retool folder" in flat[0][2] and "probe_eval.jsonl" in flat[1][2]  # the primary Agent-R claim reads the probes (issue #46)
    assert "ablation folder" in flat[2][2]  # the reason an inconclusive claim is inconclusive
    # primaries first, world checks last and labelled (issue #45); a run without a cold start was not judged
    assert rows[0][0].startswith("[primary]") and rows[-1][0].startswith("[world check, not counted]")
    assert "precondition failed: cold_start_learns" in flat[2][2]
    assert summary.precondition_line(doc).startswith("Precondition failed: cold_start_learns")


@needs_poppler
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_summary_is_one_page_with_claims_figures_tables_and_limits(run, tmp_path):
    pdf = summary.write_summary_pdf(run, tmp_path / "s.pdf")
    # the kit's claims, then ReTool's section (issue #33), then Agent-R's (issue #34), then any study registered after
    assert _pages(pdf) == 1 + len(studies.STUDIES)
    first = " ".join(_text(pdf).split())
    n_agent_r = sum(c.get("section") == "Agent-R" for c in claims.load_claims())
    assert "ReTool claims on page 2" in first and f"{n_agent_r} Agent-R claims on page 3" in first, first
    second, third = " ".join(_text(pdf, 2).split()), " ".join(_text(pdf, 3).split())
    assert "ReTool (Feng et al. 2025) on this run" in second and "not drawn in this run" in second
    assert "Agent-R (Yuan et al. 2025) on this run" in third and f"{n_agent_r} Agent-R claims pre-registered" in third
    text = _text(pdf)
    for needle in ("pre-registered", "inconclusive", "Figure 4", "Tables 3-6", "What this profile cannot show",
                   "80.6"):
        assert needle in text, needle
    assert "Figure 8: not drawn in this run" in text  # a missing figure is said, not hidden
    # the whole list fits on the page beside the claims' notes (a fresh review found it cut off mid-sentence)
    last_words = " ".join(summary.CPU_LIMITS[-1].split()[-3:])
    assert last_words in " ".join(text.split()), last_words
    smoke = " ".join(_text(summary.write_summary_pdf(run, tmp_path / "smoke.pdf", profile="smoke")).split())
    assert summary.SMOKE_NOTE.split()[0] in smoke and last_words in smoke, last_words  # its list is one bullet longer


@needs_poppler
def test_the_first_page_links_the_run_s_static_rollout_explorer_pages(run, tmp_path):
    """Issue #32: a reader without a kernel finds the explorer's static views from page 1."""
    assert "no static page in this run" in _text(summary.write_summary_pdf(run, tmp_path / "none.pdf"))
    for folder in ("stage1", "ablation"):
        (run / folder).mkdir()
        (run / folder / "explorer.html").write_text("<html></html>")
    assert summary.explorer_pages(run) == ["ablation/explorer.html", "stage1/explorer.html"]
    pdf = summary.write_summary_pdf(run, tmp_path / "s.pdf")
    assert _pages(pdf) == 1 + len(studies.STUDIES) and "stage1/explorer.html" in _text(pdf)  # the kit's, each study's
    raw = pdf.read_bytes()
    assert b"/URI (stage1/explorer.html)" in raw and b"/URI (ablation/explorer.html)" in raw  # links, not just text


@needs_poppler
def test_prepend_summary_opens_the_report_and_survives_problems(run, tmp_path):
    report = tmp_path / "report.pdf"
    with PdfPages(report) as pp:
        for _ in range(2):
            pp.savefig(Figure(figsize=(4, 3)))
    notices: list[str] = []
    assert summary.prepend_summary(run, report, echo=notices.append) == report
    assert _pages(report) == 3 + len(studies.STUDIES) and not notices  # summary pages (the kit's, each study's), then 2
    assert "What this profile cannot show" in _text(report, 1)
    assert (run / "summary.pdf").exists()
    # a broken claims.json: the report stays as it was, with a notice
    (run / "claims.json").write_text(json.dumps({"claims": []}))
    summary.prepend_summary(run, report, echo=notices.append)
    assert _pages(report) == 3 + len(studies.STUDIES) and len(notices) == 1 and "could not be drawn" in notices[0]


def test_without_pdfunite_the_summary_is_a_separate_file(run, tmp_path, monkeypatch):
    report = tmp_path / "report.pdf"
    Figure().savefig(report, format="pdf")
    before = report.read_bytes()
    monkeypatch.setattr(summary.shutil, "which", lambda name: None)
    notices: list[str] = []
    summary.prepend_summary(run, report, echo=notices.append)
    assert report.read_bytes() == before
    assert len(notices) == 1 and "pdfunite" in notices[0] and str(run / "summary.pdf") in notices[0]


def test_a_benchmark_subset_is_stated_beside_this_runs_numbers(run):
    """Issue #35: on tiny, notebook 08 runs the first eval.max_problems problems of each benchmark (a check of
    the evaluation path); the summary page says n/N beside the benchmark and why, in the limits box."""
    out = run / "eval" / "eval"
    out.mkdir(parents=True)
    (out / "aime24.json").write_text(json.dumps({"avg_at_n": 0.05, "n_samples": 4, "n_problems": 2,
                                                 "manifest": {"benchmark_size": 30}}))
    (out / "math500.json").write_text(json.dumps({"avg_at_n": 0.0, "n_samples": 4, "n_problems": 500,
                                                  "manifest": {"benchmark_size": 500}}))  # the whole file: no mark
    subsets = summary.eval_subsets(run / "eval")
    assert subsets == {"AIME24": (2, 30)}
    rows = summary.table_rows(run / "tables", subsets)
    assert next(r for r in rows if r[0] == "Table 3" and r[1].startswith("AIME24"))[1:3] == ["AIME24 (2/30)", "5.0"]
    assert "AIME24" in [r[1] for r in summary.table_rows(run / "tables")]  # no subsets given: no mark
    page = " ".join(t.get_text() for t in summary.summary_page(run).texts)
    assert "the first n of each benchmark's N problems" in " ".join(page.split())
    shutil.rmtree(run / "eval")
    assert "the first n of each" not in " ".join(" ".join(t.get_text() for t in summary.summary_page(run).texts).split())


def test_a_claim_with_several_tests_shows_each_and_the_reason_of_the_deciding_one():
    tests = [{"name": "vs good-only", "value": 0.01, "ci95": [-0.01, 0.03], "verdict": "inconclusive",
              "reason": "95% interval [-0.01, 0.03] contains 0", "interval": "bootstrap over problems"},
             {"name": "vs cold start", "value": -0.15, "ci95": [-0.24, -0.06], "verdict": "not reproduced",
              "reason": "95% interval [-0.24, -0.06] lies at or below 0", "interval": "bootstrap over problems"}]
    doc = {"claims": [{"id": "x", "source": "Agent-R (x)", "claim": "recovers more", "paper": "p", "section": "Agent-R",
                       "verdict": "not reproduced", "statistic": "vs good-only", "value": 0.01, "ci95": [-0.01, 0.03],
                       "interval": "bootstrap over problems", "note": "", "tests": tests}]}
    (row,) = summary.claim_rows(doc, "Agent-R")
    text = row[2].replace("\n", " ")
    assert "vs good-only: 0.01 [-0.01, 0.03] (inconclusive)" in text
    assert "vs cold start: -0.15 [-0.24, -0.06] (not reproduced)" in text
    assert "lies at or below 0" in text and "contains 0" not in text  # the deciding test's reason


def test_the_first_page_states_the_environment_and_whether_the_run_is_bitwise_repeatable(run, tmp_path):
    """Issue #41: under the heading, the fingerprint of claims.json and the stamp; a run resumed on another
    environment says so in red; a claims document without them (older, or computed for the page) falls back
    to pipeline_state.json."""
    from kit import fingerprint
    from kit.config import load

    doc = claims.read_claims(run / "claims.json")
    doc["repeatable"] = fingerprint.repeatability(load("tiny", {"model.torch_threads": -2}, write=False))
    (run / "claims.json").write_text(json.dumps(doc))
    page = " ".join(t.get_text() for t in summary.summary_page(run).texts)
    assert f"key {doc['environment']['key']}" in page and "NOT bitwise repeatable: model.torch_threads = -2" in " ".join(page.split())
    doc["environment"]["warnings"] = ["resuming a run whose stored environment (aaaa) differs"]
    doc["repeatable"] = {"bitwise": True, "why": "model.torch_threads = 2: fixed"}
    (run / "claims.json").write_text(json.dumps(doc))
    lines = summary.environment_lines(run, claims.read_claims(run / "claims.json"))
    assert lines[1] == ("Bitwise repeatable on this machine type: yes (model.torch_threads = 2: fixed)", "yes")
    assert lines[2] == ("WARNING: resuming a run whose stored environment (aaaa) differs", "warning")
    texts = {t.get_text().replace("\n", " "): t for t in summary.summary_page(run).texts}
    warn = next(t for k, t in texts.items() if k.startswith("WARNING: resuming"))
    assert warn.get_color() == summary.STAMP_COLOR["warning"]
    # no claims.json: the page reads pipeline_state.json's record
    (run / "claims.json").unlink()
    env = {"key": "feedbeef0000", "cpu": {"model": "Recorded CPU"}}
    (run / "pipeline_state.json").write_text(json.dumps({"environment": env, fingerprint.REPEATABLE_KEY: doc["repeatable"]}))
    lines = summary.environment_lines(run, {"claims": []})
    assert "Recorded CPU" in lines[0][0] and "key feedbeef0000" in lines[0][0] and lines[1][1] == "yes"
    (run / "pipeline_state.json").unlink()
    assert summary.environment_lines(run, {})[1] == ("Bitwise repeatable: not recorded (a run before issue #41)", "no")


def test_the_environment_lines_leave_the_claims_table_below_them(run, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = summary.summary_page(run)
    renderer = FigureCanvasAgg(fig).get_renderer()
    env = [t for t in fig.texts if t.get_text().startswith(("Environment:", "NOT bitwise", "Bitwise"))]
    assert len(env) == 2
    lowest = min(t.get_window_extent(renderer).y0 for t in env)
    table_top = max(ax.get_window_extent(renderer).y1 for ax in fig.axes if ax.tables)
    assert table_top <= lowest
    assert max(t.get_window_extent(renderer).x1 for t in env) <= fig.bbox.width  # and inside the page


def test_a_study_page_gives_each_of_its_figures_its_own_band_below_the_claims(run, monkeypatch):
    """Issue #43: a study with several figures had them drawn over each other in one rectangle."""
    import dataclasses

    from kit import studies

    two = dataclasses.replace(studies.RETOOL, figures=(("figure4_tool_errors", "a"), ("figure9_roc_ablation", "b")))
    monkeypatch.setattr(summary, "by_section", lambda section: two if section == "ReTool" else None)
    fig = summary.section_page(run, "ReTool", profile="tiny")
    images = sorted((ax for ax in fig.axes if ax.images), key=lambda ax: -ax.get_position().y0)
    assert len(images) == 2
    (upper, lower) = (ax.get_position() for ax in images)
    table_bottom = min(ax.get_position().y0 for ax in fig.axes if ax.tables)
    assert lower.y1 <= upper.y0 and upper.y1 <= table_bottom
