"""The report PDF: the LaTeX route over executed notebooks, and the PdfPages fallback."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess

import nbformat
import numpy as np
import pytest
from matplotlib.figure import Figure

from kit import figures, report, tables
from kit.pipeline import Layout

needs_poppler = pytest.mark.skipif(shutil.which("pdftoppm") is None or shutil.which("pdfimages") is None,
                                   reason="poppler-utils (pdftoppm, pdfimages) not installed")


def _png() -> str:
    fig = Figure(figsize=(3, 2))
    fig.subplots().plot([0, 1, 2], [0, 1, 0.5])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode()


def _executed(layout: Layout, name: str, with_image: bool) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(f"# {name}\nSome prose with math $p_{{err}} = 0.5$."))
    code = nbformat.v4.new_code_cell("print('hello')", execution_count=1)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello 100% done\n")]
    nb.cells.append(code)
    if with_image:
        img = nbformat.v4.new_code_cell("fig", execution_count=2)
        img.outputs = [nbformat.v4.new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"})]
        nb.cells.append(img)
        df = tables.table3_math({"aime24": {"accuracy": 0.0}}, tables.RunInfo("smoke", "tiny Qwen3"))
        tab = nbformat.v4.new_code_cell("show(df)", execution_count=3)
        tab.outputs = [nbformat.v4.new_output("display_data", data={"text/latex": tables.show(df)._repr_latex_(),
                                                                     "text/plain": "table"})]
        nb.cells.append(tab)
    layout.executed.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, layout.executed / f"{name}.ipynb")


def _pages(pdf) -> int:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:")))


def _images(pdf) -> int:
    out = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True).stdout
    return len(out.splitlines()) - 2  # two header lines


def _first_page_ink(pdf, tmp_path) -> float:
    import matplotlib.image as mpimg

    subprocess.run(["pdftoppm", "-r", "40", "-png", "-f", "1", "-l", "1", str(pdf), str(tmp_path / "pg")], check=True)
    (png,) = tmp_path.glob("pg*.png")
    return float(np.mean(mpimg.imread(png)[..., :3] < 0.5))  # share of dark pixels


@needs_poppler
@pytest.mark.skipif(not report.latex_available(), reason="xelatex not installed")
def test_latex_route_merges_notebooks_with_figures(tmp_path):
    lay = Layout(root=tmp_path / "run", profile="smoke")
    _executed(lay, "01_data_curation", with_image=False)
    _executed(lay, "09_figures_and_tables", with_image=True)
    _executed(lay, "00_setup_and_sandbox_check", with_image=False)
    pdf = report.build_report(lay, echo=pytest.fail)  # any notice would mean the fallback ran
    assert pdf == lay.report_pdf and pdf.read_bytes().startswith(b"%PDF")
    assert _pages(pdf) >= 2
    assert _images(pdf) >= 1
    assert _first_page_ink(pdf, tmp_path) > 0.002
    merged = report.merge_notebooks(report._executed_notebooks(lay), "t")
    heads = [c.source for c in merged.cells if c.source.startswith("# Notebook")]
    assert heads == ["# Notebook `00_setup_and_sandbox_check`", "# Notebook `01_data_curation`",
                     "# Notebook `09_figures_and_tables`"]  # series order, not file order


@needs_poppler
def test_fallback_without_tex_prints_notice_and_keeps_figures(tmp_path, monkeypatch, rl_metrics):
    lay = Layout(root=tmp_path / "run", profile="smoke")
    _executed(lay, "09_figures_and_tables", with_image=False)
    m = rl_metrics(tmp_path / "m" / "metrics.jsonl", stage="ablation", algorithm="grpo", seed=0, steps=3)
    figures.save_figure(figures.figure9_roc_ablation(m), lay.root / "figures", "figure9", formats=("png",))
    figures.save_figure(figures.figure4_tool_errors(m), lay.root / "figures", "figure4", formats=("png",))
    tables.write_table(tables.table3_math({"aime24": {"accuracy": 0.0}}, tables.RunInfo("smoke", "tiny")),
                       lay.root / "tables")
    monkeypatch.setattr(report, "latex_available", lambda: False)
    notices: list[str] = []
    pdf = report.build_report(lay, echo=notices.append)
    assert len(notices) == 1 and "xelatex not found" in notices[0]
    assert _pages(pdf) == 1 + 1 + 2 + 1  # the summary (kit.summary), title, two figures, one table
    assert _images(pdf) == 2


def test_nothing_to_report_is_an_error(tmp_path, capsys):
    assert report.main(["--profile", "smoke", "--run", "empty", "--reports-root", str(tmp_path)]) == 1
    assert "make reproduce" in capsys.readouterr().err
