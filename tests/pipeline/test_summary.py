"""kit.summary: the report's one-page summary (claims, figures, tables, limits) and how it opens the PDF."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from kit import claims, figures, summary, tables

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
    sections = doc["sections"]  # a variant's claims (Agent-R, issue #34) get their own block, one line each
    inside = [i for ids in sections.values() for i in ids]
    assert len(sections["agent_r"]) == 4 and len(rows) == len(doc["claims"]) - len(inside)
    assert {r[3] for r in rows} == {"inconclusive"}
    lines = summary.section_lines(doc)
    assert len(lines) == len(inside) and all(ln.startswith("agent_r: agentr_") and "inconclusive" in ln for ln in lines)
    assert "ablation folder" in rows[0][2]  # the reason an inconclusive claim is inconclusive


@needs_poppler
def test_summary_is_one_page_with_claims_figures_tables_and_limits(run, tmp_path):
    pdf = summary.write_summary_pdf(run, tmp_path / "s.pdf")
    assert _pages(pdf) == 1
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
def test_prepend_summary_opens_the_report_and_survives_problems(run, tmp_path):
    report = tmp_path / "report.pdf"
    with PdfPages(report) as pp:
        for _ in range(2):
            pp.savefig(Figure(figsize=(4, 3)))
    notices: list[str] = []
    assert summary.prepend_summary(run, report, echo=notices.append) == report
    assert _pages(report) == 3 and not notices
    assert "What this profile cannot show" in _text(report, 1)
    assert (run / "summary.pdf").exists()
    # a broken claims.json: the report stays as it was, with a notice
    (run / "claims.json").write_text(json.dumps({"claims": []}))
    summary.prepend_summary(run, report, echo=notices.append)
    assert _pages(report) == 3 and len(notices) == 1 and "could not be drawn" in notices[0]


def test_without_pdfunite_the_summary_is_a_separate_file(run, tmp_path, monkeypatch):
    report = tmp_path / "report.pdf"
    Figure().savefig(report, format="pdf")
    before = report.read_bytes()
    monkeypatch.setattr(summary.shutil, "which", lambda name: None)
    notices: list[str] = []
    summary.prepend_summary(run, report, echo=notices.append)
    assert report.read_bytes() == before
    assert len(notices) == 1 and "pdfunite" in notices[0] and str(run / "summary.pdf") in notices[0]
