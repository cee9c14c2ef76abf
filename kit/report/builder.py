"""The report PDF of a pipeline run (``make report``).

Route 1 (preferred): the executed notebooks of ``reports/<profile>/<run>/notebooks/`` merged in
series order into one notebook and exported with nbconvert ``--to pdf`` (xelatex): prose, code,
tables, figures and math as the reader saw them in JupyterLab.

Before the export (:mod:`kit.report.latex_pdf`): SVG outputs are rasterised (``rsvg-convert``), fonts
that cover box drawing, arrows, Greek and CJK are set, characters still without a glyph are named
in a warning, and long runs of letters/digits in code may break at the page edge.

Route 2 (fallback, printed as a notice): when ``xelatex`` is not installed or the LaTeX export
fails, a figures-and-tables PDF made with matplotlib's ``PdfPages`` from the run's ``figures/*.png``
and ``tables/*.csv``. It has no notebook prose or code.

A run whose ``pipeline_state.json`` (or an executed notebook's ``kit_pipeline`` metadata, written
by :func:`kit.pipeline.mark_not_run`) records a notebook that did not finish is refused, unless
``--allow-failed`` is given; then the PDF's first page lists the notebooks that failed.

Command line::

    python -m kit report --profile tiny --run main [--allow-failed]
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from kit.plan import SERIES, Layout, read_state
from kit.report import latex_pdf
from kit.report.summary import prepend_summary

# control characters xelatex rejects ("Text line contains an invalid character"); \t \n \r and ESC
# (ANSI colours, which nbconvert converts) are kept. A tiny model's samples are full of them.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")


def _clean(text):
    if isinstance(text, list):
        return [_clean(t) for t in text]
    return _CONTROL.sub("\ufffd", text) if isinstance(text, str) else text


def sanitize_outputs(cell) -> None:
    """Replace control characters in a code cell's outputs (text, tracebacks, text data) in place."""
    for out in cell.get("outputs", []):
        if "text" in out:
            out["text"] = _clean(out["text"])
        if "traceback" in out:
            out["traceback"] = _clean(out["traceback"])
        for mime, value in (out.get("data") or {}).items():
            if mime.startswith("text/"):
                out["data"][mime] = _clean(value)


class ReportError(RuntimeError):
    """Nothing to report (no executed notebooks, figures or tables), or a failed run without
    ``allow_failed``."""


def failed_notebooks(layout: Layout) -> dict[str, str]:
    """Notebooks of the run that did not finish, in series order: ``{name: what happened}``.

    Read from ``pipeline_state.json`` (status other than ``done``: ``failed``, or ``running`` for
    a run that was killed) and from the executed notebooks' ``kit_pipeline`` metadata.

    Raises:
        ReportError: ``pipeline_state.json`` exists but is not a JSON object (names the file).
    """
    found: dict[str, str] = {}
    try:
        state = read_state(layout)
    except ValueError as exc:
        raise ReportError(str(exc)) from exc
    for name, entry in state.items():
        status = entry.get("status") if isinstance(entry, dict) else None
        if status != "done":
            error = entry.get("error", "") if isinstance(entry, dict) else ""
            found[name] = (error.splitlines()[0] if error else
                           f"status {status!r} (the run was interrupted while it ran)")
    for p in _executed_notebooks(layout):
        try:
            meta = json.loads(p.read_text()).get("metadata", {}).get("kit_pipeline", {})
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("status") == "failed" and p.stem not in found:
            found[p.stem] = f"stopped in cell {meta.get('failed_cell')}: {meta.get('error', '')}"
    order = {name: i for i, name in enumerate(SERIES)}
    return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def _literal(text: str) -> str:
    """``text`` as literal markdown: every ASCII punctuation mark backslash-escaped, so an error
    message's ``$``, ``\\``, ``*`` or ``#`` prints as written instead of becoming TeX math or markup."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def failure_text(failed: Mapping[str, str]) -> str:
    """Markdown for the first page: which notebooks failed and why (the reasons as literal text)."""
    lines = [f"**This run did not finish: {len(failed)} notebook(s) failed.** Their results below stop where "
             "they failed, and notebooks after them may use stale or missing inputs.", ""]
    lines += [f"- `{name}`: {_literal(why)}" for name, why in failed.items()]
    return "\n".join(lines)


def _executed_notebooks(layout: Layout) -> list[Path]:
    """Executed notebooks in series order, then any others by name."""
    found = {p.stem: p for p in sorted(layout.executed.glob("*.ipynb"))}
    ordered = [found.pop(name) for name in SERIES if name in found]
    return ordered + list(found.values())


def merge_notebooks(paths: Sequence[Path], title: str, failed: Mapping[str, str] | None = None) -> nbformat.NotebookNode:
    """One notebook holding the cells of ``paths`` in order, each part under a heading.

    The papermill ``injected-parameters`` cells are kept (they show what each notebook ran with).
    Control characters in outputs (a tiny model samples them) are replaced by U+FFFD, which
    xelatex accepts. With ``failed`` (:func:`failed_notebooks`), the first cell lists the failed
    notebooks and each failed part starts with a note.
    """
    merged = nbformat.v4.new_notebook()
    merged.metadata["title"] = title
    merged.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if failed:
        merged.cells.append(nbformat.v4.new_markdown_cell(failure_text(failed)))
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        merged.cells.append(nbformat.v4.new_markdown_cell(f"# Notebook `{p.stem}`"))
        if failed and p.stem in failed:
            merged.cells.append(nbformat.v4.new_markdown_cell(
                f"**This notebook failed:** {_literal(failed[p.stem])}. Cells after the failed one did not run."))
        for cell in nb.cells:
            cell = nbformat.from_dict(cell)
            if cell.cell_type == "markdown":  # demote headings one level under the part heading
                cell.source = "\n".join("#" + ln if ln.startswith("#") else ln for ln in cell.source.splitlines())
            elif cell.cell_type == "code":
                sanitize_outputs(cell)
            merged.cells.append(cell)
    for n, cell in enumerate(merged.cells):
        cell["id"] = f"cell-{n}"  # ids must be unique across the merged parts
    return merged


def latex_available() -> bool:
    """True when ``xelatex`` is on PATH (nbconvert's PDF route needs it)."""
    return shutil.which("xelatex") is not None


def notebook_pdf(paths: Sequence[Path], out: Path, title: str, failed: Mapping[str, str] | None = None,
                 echo=print) -> Path:
    """Export the merged notebooks to ``out`` through nbconvert's LaTeX PDF exporter.

    SVG outputs are rasterised, long letter/digit runs broken, and characters the fonts lack are
    named in a warning through ``echo`` (:mod:`kit.report.latex_pdf`).

    Raises:
        nbconvert.exporters.pdf.LatexFailed: xelatex failed (its log is in the exception).
    """
    nb = merge_notebooks(paths, title, failed)
    part = ""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# Notebook `"):
            part = cell.source[len("# Notebook `"):].rstrip("`")
        elif cell.cell_type == "code":
            latex_pdf.rasterize_svgs(cell, f"notebook {part}", echo)
            latex_pdf.wrap_cell(cell)
    latex_pdf.check_glyphs(nb, echo)
    body = latex_pdf.export_pdf(nb, title)  # code inputs omitted: an appendix of results (#16)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(body)
    return out


def figures_tables_pdf(layout: Layout, out: Path, title: str, failed: Mapping[str, str] | None = None) -> Path:
    """Fallback PDF: a title page, each ``figures/*.png`` on a page, each ``tables/*.csv`` on a page.

    Raises:
        ReportError: there are neither figures nor tables in the run folder.
    """

    figs = sorted((layout.root / "figures").glob("*.png"))
    tabs = sorted((layout.root / "tables").glob("*.csv"))
    if not figs and not tabs:
        raise ReportError(f"no figures or tables under {layout.root} to put in a report; run the notebooks first")
    out.parent.mkdir(parents=True, exist_ok=True)
    with PdfPages(out) as pdf:
        page = Figure(figsize=(8.27, 11.69))
        page.text(0.5, 0.6, title, ha="center", fontsize=16)
        page.text(0.5, 0.55, "figures and tables only (no LaTeX: install xelatex for the full notebook report)",
                  ha="center", fontsize=9, color="0.4")
        if failed:
            text = f"THIS RUN DID NOT FINISH: {len(failed)} notebook(s) failed\n" + \
                   "\n".join(f"{name}: {why[:110]}" for name, why in failed.items())
            text = text.replace("$", r"\$")  # an error's "$...$" is text, not mathtext
            page.text(0.08, 0.48, text, ha="left", va="top", fontsize=8, color="darkred", wrap=True)
        pdf.savefig(page)
        for f in figs:
            page = Figure(figsize=(11.69, 8.27))
            ax = page.add_axes((0.02, 0.02, 0.96, 0.9))
            ax.imshow(mpimg.imread(f))
            ax.set_axis_off()
            page.suptitle(f.stem)
            pdf.savefig(page)
        for t in tabs:
            df = pd.read_csv(t, index_col=0, keep_default_na=True)
            page = Figure(figsize=(11.69, 8.27))
            ax = page.add_axes((0.02, 0.05, 0.96, 0.8))
            ax.set_axis_off()
            cells = [["\u2014" if pd.isna(v) else f"{v:.1f}" if isinstance(v, float) else str(v) for v in row]
                     for row in df.itertuples(index=False)]
            tab = ax.table(cellText=cells, rowLabels=list(df.index), colLabels=[c.replace(": ", ":\n") for c in df.columns],
                           loc="upper center")
            tab.auto_set_font_size(False)
            tab.set_fontsize(7)
            tab.scale(1, 2.2)
            page.suptitle(t.stem)
            pdf.savefig(page)
    return out


def build_report(layout: Layout, *, echo=print, allow_failed: bool = False) -> Path:
    """Write ``layout.report_pdf`` by route 1 when possible, else route 2 with a printed notice.

    Args:
        layout: the run's folders.
        echo: where notices and warnings go.
        allow_failed: build a report of a run with failed notebooks (:func:`failed_notebooks`);
            its first page then says which ones failed.
    Returns:
        The path of the PDF.
    Raises:
        ReportError: the run holds no executed notebooks, figures or tables, or a notebook failed
            and ``allow_failed`` is False (the message names them).
    """
    title = f"rStar2-Agent reproduction: profile {layout.profile}, run {layout.root.name}"
    failed = failed_notebooks(layout)
    if failed and not allow_failed:
        raise ReportError(f"the run {layout.root} did not finish; failed: " +
                          "; ".join(f"{name} ({why})" for name, why in failed.items()) +
                          ". Fix and rerun `make reproduce`, or pass --allow-failed for a report that lists them "
                          "on its first page.")
    if failed:
        echo(f"WARNING: building a report of a failed run ({', '.join(failed)} failed); its first page says so.")
    notebooks = _executed_notebooks(layout)
    out = layout.report_pdf
    if notebooks and latex_available():
        try:
            return _with_summary(layout, notebook_pdf(notebooks, out, title, failed, echo=echo), title, echo, failed)
        except Exception as exc:  # noqa: BLE001 - LaTeX failures fall back, loudly
            echo(f"NOTICE: the LaTeX export failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                 "writing the figures-and-tables PDF instead.")
    elif notebooks:
        echo("NOTICE: xelatex not found (install texlive-xetex, or run `make setup`); "
             "writing the figures-and-tables PDF with matplotlib instead of the notebook report.")
    if not notebooks and not (layout.root / "figures").exists():
        raise ReportError(f"no executed notebooks in {layout.executed}; run `make reproduce` first")
    return _with_summary(layout, figures_tables_pdf(layout, out, title, failed), title, echo, failed)


def _with_summary(layout: Layout, pdf: Path, title: str, echo, failed: Mapping[str, str] | None = None) -> Path:
    """Open ``pdf`` with the one-page summary of :mod:`kit.report.summary` (claims, figures, tables); a
    failed run's summary page opens with the failed notebooks."""
    return prepend_summary(layout.root, pdf, title=title, echo=echo, failed=failed)
