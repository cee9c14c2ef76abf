"""What a merged notebook needs before nbconvert's LaTeX PDF export can print all of it (``kit.report``).

nbconvert's default LaTeX route loses content without a word: an output in SVG alone stops the
export (no converter), box-drawing characters, arrows in code, Greek letters and CJK print as
blanks (Latin Modern has no glyphs for them), and a code line without a break point (a long
string literal) runs off the page. This module:

* rasterises SVG outputs to PNG with ``rsvg-convert`` (Debian ``librsvg2-bin``; checked by
  :func:`kit.preflight.preflight`); without it, an SVG-only output becomes a one-line note and a
  warning, and the PDF is still written;
* exports with :data:`TEMPLATE`, nbconvert's own template plus DejaVu Serif / Sans / Sans Mono
  (box drawing, arrows, Greek) and a CJK font switched in for CJK characters by XeTeX
  character classes (:data:`CJK_FONT`, Debian ``fonts-wqy-microhei``);
* warns naming the characters the chosen fonts still lack (:func:`missing_glyphs`);
* reads Markdown with :data:`MARKDOWN_FROM` (no raw TeX), so TeX outside math delimiters is
  printed as text instead of breaking the document;
* lets runs of more than :data:`WRAP_RUN` letters and digits in code and text outputs break at
  the page edge, the continuation marked with nbconvert's arrow (nbconvert itself breaks lines
  only at spaces and punctuation, so a long string literal ran off the page).

Shapes are not tensors here; sizes are characters. Used only by :mod:`kit.report`.
"""

from __future__ import annotations

import base64
import functools
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Callable, Iterable

import jinja2
import nbformat
from fontTools.ttLib import TTFont

#: Fonts of the PDF (fontconfig family names): prose, headings, code and outputs, CJK.
MAIN_FONT, SANS_FONT, MONO_FONT = "DejaVu Serif", "DejaVu Sans", "DejaVu Sans Mono"
CJK_FONT = "WenQuanYi Micro Hei Mono"
#: CJK blocks drawn with :data:`CJK_FONT` (radicals to ideographs, Hangul, compatibility, forms).
CJK_RANGES = ((0x2E80, 0x2FDF), (0x3000, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F),
              (0xFF00, 0xFFEF))
#: Runs of letters/digits longer than this get a line-break opportunity every ``BREAK_EVERY`` characters.
WRAP_RUN = 40
BREAK_EVERY = 16
#: The break opportunity: a zero-width space, which :data:`TEMPLATE` turns into a discretionary
#: break that starts the next line with nbconvert's red continuation arrow.
BREAK = "\u200b"

#: pandoc's reader for Markdown cells and Markdown outputs: nbconvert's own
#: (``markdown+tex_math_double_backslash``) without ``raw_tex`` (issue #30). With it, TeX outside
#: math delimiters (``ratio \\frac{a}{b} here``) went into the document as raw LaTeX in text mode and
#: stopped xelatex ("Missing $ inserted"); without it pandoc sets such TeX as the literal text the
#: reader saw in JupyterLab (MathJax typesets only what is inside ``$...$``, ``$$...$$``, ``\\(...\\)``).
#: Math inside the delimiters is pandoc's Math element and still typeset; bare LaTeX environments
#: (``\\begin{align}`` outside ``$$``) are printed as text, not typeset.
MARKDOWN_FROM = "markdown+tex_math_double_backslash-raw_tex"

_RANGES_TEX = "".join(f'\\kitcjkrange{{"{a:04X}}}{{"{b:04X}}}' for a, b in CJK_RANGES)
#: nbconvert's LaTeX template (``latex/index.tex.j2``) with the fonts set after fontspec loads.
TEMPLATE = r"""((*- extends 'index.tex.j2' -*))
((* block packages *))
((( super() )))
    \ifPDFTeX\else
    \IfFontExistsTF{@MAIN@}{\setmainfont{@MAIN@}[Scale=0.92]}{}
    \IfFontExistsTF{@SANS@}{\setsansfont{@SANS@}[Scale=0.92]}{}
    \IfFontExistsTF{@MONO@}{\setmonofont{@MONO@}[Scale=0.85]}{}
    \XeTeXinterchartokenstate=1
    \newXeTeXintercharclass\kitbreakclass
    \def\kitcjkrange#1#2{\count255=#1\relax\loop\XeTeXcharclass\count255=\kitcjkclass
      \ifnum\count255<#2\advance\count255 by 1\repeat}
    \IfFontExistsTF{@CJK@}{%
      \newfontfamily\kitcjkfont{@CJK@}[Scale=0.85]%
      \XeTeXinterchartokenstate=1
      \newXeTeXintercharclass\kitcjkclass
      @RANGES@
      \XeTeXinterchartoks 0 \kitcjkclass = {\begingroup\kitcjkfont}
      \XeTeXinterchartoks 4095 \kitcjkclass = {\begingroup\kitcjkfont}
      \XeTeXinterchartoks \kitcjkclass 0 = {\endgroup}
      \XeTeXinterchartoks \kitcjkclass 4095 = {\endgroup}
      \XeTeXinterchartoks \kitcjkclass \kitbreakclass = {\endgroup}
      \XeTeXinterchartoks \kitbreakclass \kitcjkclass = {\begingroup\kitcjkfont}
    }{}
    \XeTeXcharclass"200B=\kitbreakclass
    \def\kitbreak{\ifdefined\Wrappedafterbreak\discretionary{}{\Wrappedafterbreak}{}\else\hskip0pt\relax\fi}
    \XeTeXinterchartoks 0 \kitbreakclass = {\kitbreak}
    \XeTeXinterchartoks 4095 \kitbreakclass = {\kitbreak}
    \fi
((* endblock packages *))
((* block markdowncell scoped *))
    ((( cell.source | citation2latex | strip_files_prefix | convert_pandoc('@MARKDOWN@', 'json',extra_args=[]) | resolve_references | convert_explicitly_relative_paths | convert_pandoc('json','latex'))))
((* endblock markdowncell *))
((* block data_markdown -*))
    ((( output.data['text/markdown'] | citation2latex | strip_files_prefix | convert_pandoc('@MARKDOWN@', 'latex'))))
((* endblock data_markdown *))
""".replace("@MARKDOWN@", MARKDOWN_FROM).replace("@MAIN@", MAIN_FONT).replace("@SANS@", SANS_FONT).replace("@MONO@", MONO_FONT) \
   .replace("@CJK@", CJK_FONT).replace("@RANGES@", _RANGES_TEX)

_LONG_RUN = re.compile(r"[A-Za-z0-9]{" + str(WRAP_RUN + 1) + ",}")


def svg_converter() -> str | None:
    """Path of ``rsvg-convert`` (Debian ``librsvg2-bin``), or None."""
    return shutil.which("rsvg-convert")


def svg_to_png(svg: str, dpi: int = 150) -> bytes:
    """Rasterise one SVG document with ``rsvg-convert``.

    Raises:
        RuntimeError: no converter on PATH, or it failed (its stderr is in the message).
    """
    exe = svg_converter()
    if exe is None:
        raise RuntimeError("rsvg-convert not found (apt-get install librsvg2-bin)")
    proc = subprocess.run([exe, "-f", "png", "-d", str(dpi), "-p", str(dpi)], input=svg.encode(), capture_output=True,
                          timeout=60)
    if proc.returncode != 0 or not proc.stdout.startswith(b"\x89PNG"):
        raise RuntimeError(f"rsvg-convert failed: {proc.stderr.decode(errors='replace')[:200]}")
    return proc.stdout


def rasterize_svgs(cell, where: str, warn: Callable[[str], None]) -> int:
    """Replace SVG outputs of a code cell by PNG in place (a PNG/PDF already there is kept).

    Without a working converter the SVG becomes the note ``[SVG figure left out: ...]`` and
    ``warn`` names the cell. Returns the number of SVG outputs handled.
    """
    n = 0
    for out in cell.get("outputs", []):
        data = out.get("data") or {}
        if "image/svg+xml" not in data:
            continue
        n += 1
        svg = data.pop("image/svg+xml")
        if "image/png" in data or "application/pdf" in data:
            continue
        svg = "".join(svg) if isinstance(svg, list) else svg
        try:
            data["image/png"] = base64.b64encode(svg_to_png(svg)).decode()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            data["text/plain"] = f"[SVG figure left out of the PDF: {exc}]"
            warn(f"WARNING: an SVG output in {where} could not be converted ({exc}); the PDF shows a note instead")
    return n


def wrap_long_runs(text: str) -> str:
    """Add a line-break opportunity (:data:`BREAK`) every :data:`BREAK_EVERY` characters inside
    each run of more than :data:`WRAP_RUN` letters/digits; other text is unchanged. The PDF breaks
    such a run at the page edge and marks the continuation, like nbconvert's breaks at spaces."""
    def cut(m: re.Match) -> str:
        s = m.group(0)
        return BREAK.join(s[i:i + BREAK_EVERY] for i in range(0, len(s), BREAK_EVERY))

    return _LONG_RUN.sub(cut, text) if len(text) > WRAP_RUN else text


def wrap_cell(cell) -> None:
    """:func:`wrap_long_runs` on a code cell's source and its text outputs, in place."""
    cell.source = wrap_long_runs(cell.source)
    for out in cell.get("outputs", []):
        if "text" in out:
            out["text"] = wrap_long_runs("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        for mime in ("text/plain",):
            value = (out.get("data") or {}).get(mime)
            if value is not None:
                out["data"][mime] = wrap_long_runs("".join(value) if isinstance(value, list) else value)


@functools.lru_cache(maxsize=8)
def font_charset(family: str) -> frozenset[int] | None:
    """Code points with a glyph in the fontconfig font ``family`` (None: not installed)."""
    if shutil.which("fc-match") is None:
        return None
    found = subprocess.run(["fc-match", "-f", "%{file}|%{index}|%{family}", family], capture_output=True,
                           text=True).stdout
    path, _, rest = found.partition("|")
    index, _, families = rest.partition("|")
    if not path or family not in [f.strip() for f in families.split(",")]:  # fc-match's fallback is another font
        return None
    font = TTFont(path, fontNumber=int(index or 0), lazy=True)
    return frozenset(font.getBestCmap())


def _is_cjk(cp: int) -> bool:
    return any(a <= cp <= b for a, b in CJK_RANGES)


def missing_glyphs(texts: Iterable[str], family: str) -> dict[str, int]:
    """Characters of ``texts`` that print blank with ``family`` (and :data:`CJK_FONT` for CJK).

    Without the font installed, the check uses Latin Modern's coverage (ASCII and Latin-1), which
    is what xelatex falls back to. Whitespace and control characters are ignored.

    Returns:
        ``{char: occurrences}``.
    """
    main, cjk = font_charset(family), font_charset(CJK_FONT)
    seen: dict[str, int] = {}
    for text in texts:
        for ch in text:
            cp = ord(ch)
            if cp < 0x7F or ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf"):
                continue
            ok = cp <= 0xFF if main is None else cp in main
            if not ok and _is_cjk(cp) and cjk is not None:
                ok = cp in cjk
            if not ok:
                seen[ch] = seen.get(ch, 0) + 1
    return seen


def describe_missing(missing: dict[str, int], limit: int = 20) -> str:
    """``U+2603 '☃' (3x), ...`` for a warning (the ``limit`` most frequent)."""
    top = sorted(missing.items(), key=lambda kv: -kv[1])[:limit]
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    return ", ".join(f"U+{ord(c):04X} {c!r} ({n}x)" for c, n in top) + more


_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.S)


def check_glyphs(nb: nbformat.NotebookNode, warn: Callable[[str], None]) -> dict[str, int]:
    """Warn naming every character of ``nb`` the PDF's fonts cannot print (code and outputs in
    :data:`MONO_FONT`, prose outside ``$...$`` math in :data:`MAIN_FONT`). Returns the misses."""
    code, prose = [], []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            prose.append(_MATH.sub(" ", cell.source))
        elif cell.cell_type == "code":
            code.append(cell.source)
            for out in cell.get("outputs", []):
                code.append("".join(out.get("text", "")))
                plain = (out.get("data") or {}).get("text/plain", "")
                code.append("".join(plain) if isinstance(plain, list) else plain)
    missing = missing_glyphs(code, MONO_FONT)
    for ch, n in missing_glyphs(prose, MAIN_FONT).items():
        missing[ch] = missing.get(ch, 0) + n
    if missing:
        warn(f"WARNING: {len(missing)} character(s) have no glyph in the report's fonts and print blank in the "
             f"PDF: {describe_missing(missing)} (install fonts-dejavu-core and fonts-wqy-microhei: make setup)")
    return missing


def export_pdf(nb: nbformat.NotebookNode, title: str) -> bytes:
    """The PDF bytes of ``nb`` through nbconvert's PDF exporter with :data:`TEMPLATE` (xelatex).

    Raises:
        nbconvert.exporters.pdf.LatexFailed: xelatex failed (its log is in the exception).
    """
    from nbconvert import PDFExporter  # nbconvert's LaTeX export: heavy, only when a PDF is built

    exporter = PDFExporter(extra_loaders=[jinja2.DictLoader({"kit_report.tex.j2": TEMPLATE})],
                           template_file="kit_report.tex.j2")
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.exclude_input = True  # the report is an appendix of results: code stays in the notebooks (#16)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body
