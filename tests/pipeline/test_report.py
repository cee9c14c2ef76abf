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

from kit import cli, studies
from kit.pipeline import Layout
from kit.report import builder, figures, tables

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
@pytest.mark.skipif(not builder.latex_available(), reason="xelatex not installed")
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_latex_route_merges_notebooks_with_figures(tmp_path):
    lay = Layout(root=tmp_path / "run", profile="smoke")
    _executed(lay, "01_data_curation", with_image=False)
    _executed(lay, "20_figures_and_tables", with_image=True)
    _executed(lay, "00_setup_and_sandbox_check", with_image=False)
    # issue #30: TeX outside math delimiters, in a Markdown cell and in a Markdown output, stopped xelatex
    # ("Missing $ inserted"); it is printed as the text the reader saw, math inside $...$ still typeset
    path = lay.executed / "01_data_curation.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(r"ratio \frac{a}{b} here, x^2_1 and \alpha; typeset $\frac{7}{9}$"))
    md = nbformat.v4.new_code_cell("display(Markdown(s))", execution_count=5)
    md.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": r"an output with \sqrt{2} too",
                                                                "text/plain": "md"})]
    nb.cells.append(md)
    nbformat.write(nb, path)
    pdf = builder.build_report(lay, echo=pytest.fail)  # any notice would mean the fallback ran
    assert pdf == lay.report_pdf and pdf.read_bytes().startswith(b"%PDF")
    text = " ".join(_pdftext(pdf).split())
    assert r"ratio \frac{a}{b} here, x^2_1 and \alpha; typeset" in text and r"an output with \sqrt{2} too" in text
    assert r"\frac{7}{9}" not in text  # inside $...$: typeset
    assert _pages(pdf) >= 2
    assert _images(pdf) >= 1
    assert _first_page_ink(pdf, tmp_path) > 0.002
    merged = builder.merge_notebooks(builder._executed_notebooks(lay), "t")
    heads = [c.source for c in merged.cells if c.source.startswith("# Notebook")]
    assert heads == ["# Notebook `00_setup_and_sandbox_check`", "# Notebook `01_data_curation`",
                     "# Notebook `20_figures_and_tables`"]  # series order, not file order


@needs_poppler
def test_fallback_without_tex_prints_notice_and_keeps_figures(tmp_path, monkeypatch, rl_metrics):
    lay = Layout(root=tmp_path / "run", profile="smoke")
    _executed(lay, "20_figures_and_tables", with_image=False)
    m = rl_metrics(tmp_path / "m" / "metrics.jsonl", stage="ablation", algorithm="grpo", seed=0, steps=3)
    figures.save_figure(figures.figure9_roc_ablation(m), lay.root / "figures", "figure9", formats=("png",))
    figures.save_figure(figures.figure4_tool_errors(m), lay.root / "figures", "figure4", formats=("png",))
    tables.write_table(tables.table3_math({"aime24": {"accuracy": 0.0}}, tables.RunInfo("smoke", "tiny")),
                       lay.root / "tables")
    monkeypatch.setattr(builder, "latex_available", lambda: False)
    notices: list[str] = []
    pdf = builder.build_report(lay, echo=notices.append)
    assert len(notices) == 1 and "xelatex not found" in notices[0]
    # the summary (kit.report.summary: the kit's claims, then each study's), title, two figures, one table
    assert _pages(pdf) == 1 + len(studies.STUDIES) + 1 + 2 + 1
    assert _images(pdf) == 2


def test_nothing_to_report_is_an_error(tmp_path, capsys):
    assert cli.main(["report", "--profile", "smoke", "--run", "empty", "--reports-root", str(tmp_path)]) == 1
    assert "make reproduce" in capsys.readouterr().err


# ---------------------------------------------------------------- issue #17: failed runs, SVG, glyphs, long lines

needs_latex = pytest.mark.skipif(not builder.latex_available() or shutil.which("pdftotext") is None,
                                 reason="xelatex or poppler-utils not installed")


def _pdftext(pdf, *args) -> str:
    return subprocess.run(["pdftotext", *args, str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def _failed_run(tmp_path) -> Layout:
    """Notebook 01 finished, 02 was killed in cell 3 (as kit.pipeline leaves it)."""
    import json

    from kit.pipeline import mark_not_run

    lay = Layout(root=tmp_path / "smoke" / "r1", profile="smoke")
    _executed(lay, "01_data_curation", with_image=False)
    _executed(lay, "02_cold_start_sft", with_image=False)
    mark_not_run(lay.executed / "02_cold_start_sft.ipynb", 1, "DeadKernelError: Kernel died")
    lay.state_path.write_text(json.dumps({
        "01_data_curation": {"status": "done"},
        "02_cold_start_sft": {"status": "failed", "error": "notebook 02_cold_start_sft failed in cell 1 "
                                                           "`print('hello')`: DeadKernelError: Kernel died"}}))
    return lay


def test_a_failed_run_is_refused_unless_asked(tmp_path, capsys):
    """Issue #17: a run with a dead notebook used to give a PDF and exit code 0 with no sign of it."""
    lay = _failed_run(tmp_path)
    assert builder.failed_notebooks(lay) == {"02_cold_start_sft": "notebook 02_cold_start_sft failed in cell 1 "
                                                                 "`print('hello')`: DeadKernelError: Kernel died"}
    argv = ["report", "--profile", "smoke", "--run", "r1", "--reports-root", str(tmp_path)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "did not finish" in err and "02_cold_start_sft" in err and "--allow-failed" in err
    assert not lay.report_pdf.exists()
    with pytest.raises(builder.ReportError, match="02_cold_start_sft"):
        builder.build_report(lay, echo=lambda s: None)
    # the state file may be gone (a copied run folder): the executed notebook's metadata still says it failed
    lay.state_path.unlink()
    assert "stopped in cell 1" in builder.failed_notebooks(lay)["02_cold_start_sft"]


@needs_latex
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_an_allowed_failed_run_says_so_on_its_first_page(tmp_path):
    lay = _failed_run(tmp_path)
    notes: list[str] = []
    pdf = builder.build_report(lay, echo=notes.append, allow_failed=True)
    first = " ".join(_pdftext(pdf, "-f", "1", "-l", "1").split())
    assert "This run did not finish: 1 notebook(s) failed" in first and "02_cold_start_sft" in first
    assert "DeadKernelError" in first
    assert any("failed run" in n for n in notes)


@needs_latex
@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert (librsvg2-bin) not installed")
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_svg_only_output_is_rasterised_and_without_a_converter_noted(tmp_path, monkeypatch):
    """Issue #17: an SVG-only output made the LaTeX export fail."""
    from kit.report import latex_pdf

    fig = Figure(figsize=(3, 2), layout="tight")
    fig.subplots().bar(["a", "b"], [3, 1])
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    lay = Layout(root=tmp_path / "run", profile="smoke")
    _executed(lay, "01_data_curation", with_image=False)
    nb = nbformat.read(lay.executed / "01_data_curation.ipynb", as_version=4)
    cell = nbformat.v4.new_code_cell("fig", execution_count=9)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/svg+xml": buf.getvalue(), "text/plain": "<F>"})]
    nb.cells.append(cell)
    nbformat.write(nb, lay.executed / "01_data_curation.ipynb")
    pdf = builder.build_report(lay, echo=pytest.fail)  # LaTeX route, no notice, no warning
    assert _images(pdf) == 1
    monkeypatch.setattr(latex_pdf, "svg_converter", lambda: None)
    notes: list[str] = []
    pdf = builder.build_report(lay, echo=notes.append)
    assert notes and "SVG output in notebook 01_data_curation could not be converted" in notes[0]
    assert _images(pdf) == 0 and "SVG figure left out of the PDF" in " ".join(_pdftext(pdf).split())
    from kit import preflight

    rows = {r["check"]: r for r in preflight.preflight()}
    assert rows["rsvg-convert (SVG outputs in the PDF)"]["status"] == "warning"


def _fonts(pdf) -> str:
    return subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout


@needs_latex
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_box_drawing_arrows_greek_and_cjk_print_and_missing_glyphs_are_named(tmp_path):
    """Issue #17: these characters printed as blanks with no warning."""
    from kit.report import latex_pdf

    if latex_pdf.font_charset(latex_pdf.MONO_FONT) is None or latex_pdf.font_charset(latex_pdf.CJK_FONT) is None:
        pytest.skip("fonts-dejavu-core / fonts-wqy-microhei not installed")
    lay = Layout(root=tmp_path / "run", profile="smoke")
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("# Glyphs\nloss ↓ while λ grows; 数学 in prose"))
    code = nbformat.v4.new_code_cell("print(table)", execution_count=1)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="╔═══╗\n║ θ ║ ⇒ 答案 ⊢ ψ\n╚═══╝ \U0001d11e\n")]
    nb.cells.append(code)
    lay.executed.mkdir(parents=True)
    nbformat.write(nb, lay.executed / "08_evaluation.ipynb")
    notes: list[str] = []
    pdf = builder.build_report(lay, echo=notes.append)
    text = _pdftext(pdf)
    for s in ("╔═══╗", "║ θ ║", "⇒", "答案", "ψ", "↓", "λ", "数学"):
        assert s in text, s
    fonts = _fonts(pdf)
    assert "DejaVuSansMono" in fonts and "WenQuanYi" in fonts
    assert len(notes) == 1 and "U+1D11E" in notes[0] and "print blank" in notes[0]  # the musical G clef


@needs_latex
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_long_code_line_wraps_inside_the_page(tmp_path):
    """Issue #17: a line without spaces (a long literal) ran off the right edge and was lost. The
    report omits code inputs (#16), so the printed line is what must wrap; the summary pages come first."""
    import re

    token = "".join(f"w{i:03d}" for i in range(60))  # 240 letters and digits, no break point
    lay = Layout(root=tmp_path / "run", profile="smoke")
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell(f"key = '{token}'\nprint(len(key))", execution_count=1)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=token + "\n")]
    nb.cells.append(code)
    lay.executed.mkdir(parents=True)
    nbformat.write(nb, lay.executed / "08_evaluation.ipynb")
    pdf = builder.build_report(lay, echo=pytest.fail)
    first = 2 + len(studies.STUDIES)  # after the summary pages (the kit's claims, then each study's)
    bbox = _pdftext(pdf, "-f", str(first), "-bbox")
    width = float(re.search(r'<page width="([\d.]+)"', bbox).group(1))
    right = [float(x) for x in re.findall(r'xMax="([\d.]+)"', bbox)]
    assert right and max(right) < width - 36  # inside the right margin (36 pt = 1/2 inch)
    flat = re.sub(r"[\s\u200b\u21aa]", "", _pdftext(pdf, "-f", "2"))
    assert flat.count(token) == 1  # nothing lost: the printed line, whole (the code input is omitted)


def test_a_corrupt_state_file_is_a_report_error_naming_it(tmp_path):
    """The report reads pipeline_state.json through the runner's one reader (kit.plan.read_state)
    and turns its error into a ReportError that names the file."""
    lay = _failed_run(tmp_path)
    lay.state_path.write_text("{not json")
    with pytest.raises(builder.ReportError, match="pipeline_state.json: not valid JSON"):
        builder.failed_notebooks(lay)
    lay.state_path.write_text("[1, 2]")
    with pytest.raises(builder.ReportError, match="expected a JSON object, got list"):
        builder.failed_notebooks(lay)


@needs_poppler
def test_the_figures_only_fallback_also_lists_failed_notebooks(tmp_path, monkeypatch, rl_metrics):
    lay = _failed_run(tmp_path)
    m = rl_metrics(tmp_path / "m" / "metrics.jsonl", stage="ablation", algorithm="grpo", seed=0, steps=3)
    figures.save_figure(figures.figure9_roc_ablation(m), lay.root / "figures", "figure9", formats=("png",))
    monkeypatch.setattr(builder, "latex_available", lambda: False)
    pdf = builder.build_report(lay, echo=lambda s: None, allow_failed=True)
    first = " ".join(_pdftext(pdf, "-f", "1", "-l", "1").split())
    assert "this run did not finish: 1 notebook(s) failed" in first.lower() and "02_cold_start_sft" in first


@needs_latex
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_failure_message_with_tex_specials_prints_as_written(tmp_path):
    """Review r17: the failure list went into markdown as it was, so an error message with ``$``
    and a backslash (a sympy or LaTeX error, a price) became TeX math, the LaTeX export failed
    and, with no figures to fall back on, no PDF was written at all."""
    import json

    lay = _failed_run(tmp_path)
    error = r"notebook 02_cold_start_sft failed in cell 1: ValueError: cost $5 \frac{1}{0 and $x_1$ \nosuchmacro *a* #2"
    lay.state_path.write_text(json.dumps({"01_data_curation": {"status": "done"},
                                          "02_cold_start_sft": {"status": "failed", "error": error}}))
    notes: list[str] = []
    pdf = builder.build_report(lay, echo=notes.append, allow_failed=True)
    assert not any("LaTeX export failed" in n for n in notes), notes
    first = " ".join(_pdftext(pdf, "-f", "1", "-l", "1").split())
    assert r"cost $5 \frac{1}{0 and $x_1$ \nosuchmacro *a* #2" in first


@needs_poppler
def test_the_figures_only_fallback_prints_tex_specials_as_written(tmp_path, monkeypatch, rl_metrics):
    """Review r17: matplotlib read ``$...$`` in the failure list as mathtext and the fallback
    failed on an unbalanced ``\\frac``."""
    import json

    lay = _failed_run(tmp_path)
    lay.state_path.write_text(json.dumps({"02_cold_start_sft": {"status": "failed",
                                                                "error": r"ValueError: cost $\frac{1}{0$ and $x_1$"}}))
    m = rl_metrics(tmp_path / "m" / "metrics.jsonl", stage="ablation", algorithm="grpo", seed=0, steps=3)
    figures.save_figure(figures.figure9_roc_ablation(m), lay.root / "figures", "figure9", formats=("png",))
    monkeypatch.setattr(builder, "latex_available", lambda: False)
    pdf = builder.build_report(lay, echo=lambda s: None, allow_failed=True)
    first = " ".join(_pdftext(pdf, "-f", "1", "-l", "1").split())
    assert r"cost $\frac{1}{0$ and $x_1$" in first
