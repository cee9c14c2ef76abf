"""The report's first page: a one-page summary of a pipeline run (issue #16), and a page for each
other paper whose claims the run tests (ReTool's, issue #33; Agent-R's, issue #34: :func:`section_page`).

One A4 page drawn with matplotlib (no TeX needed): the pre-registered claims with this run's
statistic, 95% interval and verdict (``claims.json`` from notebook 20, else computed here with
:mod:`kit.claims`), Figures 4, 8 and 9 (``figures/*.png`` of notebook 20), Tables 3-6 with this
run's value beside the paper's (``tables/*.csv``), what the profile cannot show, and at its foot links
to the static rollout-explorer pages of the run (``<folder>/explorer.html``, :func:`explorer_pages`).
Under its heading, the environment the run computed on and whether it is bitwise repeatable
(:func:`environment_lines`, issue #41).

:func:`summary_page` returns the Figure; :func:`write_summary_pdf` writes it as a one-page PDF;
:func:`prepend_summary` puts that page in front of an existing report PDF (poppler's
``pdfunite``; without it the summary stays a separate ``summary.pdf`` and a notice says so).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from kit import claims, fingerprint
from kit.plan import Layout, read_run_keys
from kit.report import tables
from kit.studies import by_section

VERDICT_COLOR = {"reproduced": "#1a7f37", "not reproduced": "#cf222e", "inconclusive": "#9a6700", "invalid design": "#57606a"}
FIGURES = (("figure4_tool_errors", "Figure 4"), ("figure9_roc_ablation", "Figure 9"), ("figure8_stages", "Figure 8"),
           ("passk_curves", "pass@k"))
TABLES = ("table3_math", "table4_response_tokens", "table5_generalization", "table6_32b")

#: What a CPU profile's run cannot show, printed on the summary page (tiny and smoke).
CPU_LIMITS = (
    "Absolute numbers: the policy is a ~0.5M-parameter Qwen3 trained from scratch on generated integer tool "
    "tasks; it scores about 0 on AIME, MATH-500 and HMMT. Tables 3-6 put that beside the paper's 14B/32B "
    "values; they are not reproduced and no claim here is about them.",
    "Training curves are on the tiny task family (accuracy of training rollouts), not AIME; lengths are "
    "hundreds of tokens (budgets 384/576 stand in for 8K/12K).",
    "Table 5's BFCL, IFEval and Arena-Hard are not run (GPQA-Diamond only with a user-supplied file); "
    "Table 1's cold-start benchmarks are replaced by format and accuracy measures on held-out tasks.",
    "Cluster effects (45K concurrent tool calls, the load-balanced rollout scheduler) are modelled by "
    "benchmarks/scheduler_sim.py, not run; nothing here ran on a GPU.",
    "One-seed claims (stages, pass@k, cold start, entropy) carry intervals over problems, steps or "
    "trajectories of that seed, which leave out the spread between seeds.",
    "Reflection on tool feedback (§5.4): the text after a tool response is mostly a template copying the "
    "printed number, so RL has little reflection to add; 'more reflection than SFT' was inconclusive on "
    "the untuned seeds 7, 11 and 21 (+0.006, -0.001, -0.010).",
)
SMOKE_NOTE = "Profile 'smoke': too short to reproduce anything; its verdicts are inconclusive by construction."
#: The limits box's first bullet when the run evaluated a subset of a benchmark (``eval.max_problems``).
SUBSET_NOTE = ("Tables 3-6, this run: a fixed subset, the first n of each benchmark's N problems "
               "(n/N beside its name; eval.max_problems): a check of the evaluation path on the real files, "
               "not an accuracy estimate; the paper's values are over the whole benchmark.")


def _claims_doc(root: Path) -> dict[str, Any]:
    """``root/claims.json`` when present, else the claims evaluated on ``root``'s folders now."""
    path = root / "claims.json"
    if path.exists():
        return claims.read_claims(path)
    results = claims.evaluate_claims(claims.RunDirs.under(root))
    return {"counts": {v: sum(r.verdict == v for r in results) for v in claims.VERDICTS},
            "claims": [r.to_dict() for r in results], "computed_for_summary": True}


#: colours of the environment lines: a repeatable run, one that is not, a resume across environments
STAMP_COLOR = {"yes": "0.25", "no": "#9a6700", "warning": "#b00000"}


def environment_lines(root: str | os.PathLike, doc: Mapping[str, Any] | None = None,
                      profile: str = "") -> list[tuple[str, str]]:
    """The summary page's lines on where the run computed and whether it is bitwise repeatable, as
    ``(text, colour key of STAMP_COLOR)`` pairs.

    Args:
        root: the run folder; its ``pipeline_state.json`` is read where ``doc`` lacks the keys.
        doc: the run's claims document (``claims.json`` from schema 3 carries ``environment`` and ``repeatable``).
        profile: the run's profile (for :class:`kit.plan.Layout`; the path is all that is read).
    Returns:
        ``[("Environment: <kit.fingerprint.describe>", "yes"), ("Bitwise repeatable: yes (why)" or
        "NOT bitwise repeatable: why", "yes" | "no"), ("WARNING: <resume warning>", "warning") ...]``; a run
        with neither record says so in one line. Never raises for a damaged state file (the line says
        "not recorded").
    """
    doc = doc or {}
    env, stamp = doc.get(fingerprint.ENVIRONMENT_KEY), doc.get(fingerprint.REPEATABLE_KEY)
    if env is None or stamp is None:
        try:
            stored = read_run_keys(Layout(root=Path(root), profile=profile))
        except ValueError:
            stored = {}
        env = env if env is not None else stored.get(fingerprint.ENVIRONMENT_KEY)
        stamp = stamp if stamp is not None else stored.get(fingerprint.REPEATABLE_KEY)
    lines = [(f"Environment: {fingerprint.describe(env)}", "yes")]
    if stamp is None:
        lines.append(("Bitwise repeatable: not recorded (a run before issue #41)", "no"))
    elif stamp.get("bitwise"):
        lines.append((f"Bitwise repeatable on this machine type: yes ({stamp.get('why', '')})", "yes"))
    else:
        lines.append((f"NOT bitwise repeatable: {stamp.get('why', '')}. Reruns agree in distribution only.", "no"))
    lines += [(f"WARNING: {w}", "warning") for w in (env or {}).get("warnings") or []]
    return lines


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "\u2014"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _section(c: Mapping[str, Any]) -> str:
    return c.get("section") or claims.DEFAULT_SECTION


def sections(doc: Mapping[str, Any]) -> list[str]:
    """The sections of a claims document after the kit's own, in file order (each gets a page)."""
    return list(dict.fromkeys(_section(c) for c in doc["claims"] if _section(c) != claims.DEFAULT_SECTION))


def _test_line(t: Mapping[str, Any], several: bool) -> str:
    """One test of a claim as ``name: value [lo, hi]``; with ``several`` tests the line also ends
    with the test's own verdict."""
    lo, hi = t.get("ci95") or (None, None)
    stat = f"{_fmt(t.get('value'))} [{_fmt(lo)}, {_fmt(hi)}]" if t.get("value") is not None else "\u2014"
    return f"{t['name']}: {stat}" + (f" ({t['verdict']})" if several else "")


#: how a claim's role (issue #45) opens its row: primaries first, world checks last and apart
ROLE_LABEL = {"primary": "[primary] ", "world_check": "[world check, not counted] "}


def ordered(docs: Any) -> list[Mapping[str, Any]]:
    """Claims with the primaries first, then the secondaries, the world checks last (file order within each)."""
    rank = {"primary": 0, "secondary": 1, "world_check": 2}
    return sorted(docs, key=lambda c: rank.get(c.get("role", "secondary"), 1))


def precondition_line(doc: Mapping[str, Any]) -> str:
    """"" when every registered precondition passed (or none was recorded), else the line naming the failed
    ones: the claims that require them were not judged on this run (issue #45)."""
    pre = (doc.get("preconditions") or {}).items()
    failed = [f"{name} ({p.get('reason', '')})" for name, p in pre if not p.get("passed")]
    if not failed:
        return ""
    invalid = [name for name, p in pre if not p.get("passed") and p.get("on_fail") == "invalid design"]
    return (f"Precondition failed: {'; '.join(failed)}. The claims that require it were not judged on this run "
            "(shown inconclusive with their statistic"
            + (f"; 'invalid design' where {', '.join(invalid)} failed: the experiment's own control" if invalid else "")
            + "); a pool over seeds leaves this run out of them.")


def claim_rows(doc: Mapping[str, Any], section: str = claims.DEFAULT_SECTION) -> list[list[str]]:
    """Rows ``[claim, paper, this run, verdict]`` of the summary's claims table (wrapped text), for
    the claims of ``section`` (default the kit's paper's; each other paper's claims, e.g. ReTool's,
    have a page of their own: :func:`section_page`): primaries first, world checks last, each
    labelled (:data:`ROLE_LABEL`)."""
    rows = []
    for c in ordered(c for c in doc["claims"] if _section(c) == section):
        run = "\n".join(_test_line(t, several=len(c["tests"]) > 1) for t in c["tests"])
        if c.get("interval"):  # the first test's interval kind (claims.json's ``interval``); the others' are in claims.json
            run += f"\n{c['interval']}"
        if c["verdict"] != "reproduced":  # the reason of the test that decided the verdict
            decider = next(t for t in c["tests"] if t["verdict"] == c["verdict"])
            run += f"\n{decider['reason'].replace('not enough data: ', '')}"
        claim = textwrap.fill(f"{ROLE_LABEL.get(c.get('role'), '')}{c['source'].split(' (')[0]}: {c['claim']}", 52)
        if c.get("note"):  # the claims file's note: what the verdict means at this scale
            claim += "\n" + textwrap.fill(f"Note: {c['note']}", 52)
        rows.append([claim,
                     textwrap.fill(c["paper"], 38), "\n".join(textwrap.fill(p, 50) for p in run.splitlines()),
                     c["verdict"]])
    return rows


def eval_subsets(eval_dir: Path) -> dict[str, tuple[int, int]]:
    """``{benchmark label: (n evaluated, N in the benchmark)}`` for the benchmarks that notebook 08 ran on
    fewer problems than the file holds (``eval.max_problems``; :func:`kit.report.tables.eval_summary`); ``{}`` when
    ``eval_dir`` holds no results."""
    try:
        found = tables.eval_summary(eval_dir)
    except (FileNotFoundError, ValueError):
        return {}
    return {tables.BENCH_LABEL.get(b, b): (int(v["n_problems"]), int(v["benchmark_size"])) for b, v in found.items()
            if v.get("n_problems") is not None and v.get("benchmark_size") not in (None, v["n_problems"])}


def table_rows(tables_dir: Path, subsets: Mapping[str, tuple[int, int]] | None = None) -> list[list[str]]:
    """Rows ``[table, benchmark, this run, paper (model)]`` from ``tables/*.csv`` (first paper column); a
    benchmark of ``subsets`` (:func:`eval_subsets`) with a value of this run reads ``AIME24 (8/30)``."""
    rows = []
    for name in TABLES:
        p = tables_dir / f"{name}.csv"
        if not p.exists():
            continue
        df = pd.read_csv(p, index_col=0)
        ours = [c for c in df.columns if c.startswith("reproduced")]
        papers = [c for c in df.columns if c.startswith("paper")]
        label = name.split("_")[0].replace("table", "Table ")
        for bench, row in df.iterrows():
            ref = next(((c, row[c]) for c in papers if pd.notna(row[c])), (None, np.nan))
            model = ref[0].replace("paper: ", "") if ref[0] else ""
            mine = f"{float(row[ours[0]]):.1f}" if ours and pd.notna(row[ours[0]]) else "\u2014"
            name = str(bench)
            if subsets and name in subsets and mine != "\u2014":
                name += f" ({subsets[name][0]}/{subsets[name][1]})"
            rows.append([label, name, mine, f"{float(ref[1]):.1f} ({model})" if ref[0] else "\u2014"])
    return rows


def _draw_table(ax, rows: list[list[str]], cols: list[str], widths: list[float], fontsize: float,
                verdict_col: int | None = None) -> None:
    ax.set_axis_off()
    if not rows:
        ax.text(0.0, 0.5, "(not available in this run)", fontsize=fontsize, color="0.4")
        return
    tab = ax.table(cellText=rows, colLabels=cols, colWidths=widths, loc="upper left", cellLoc="left")
    tab.auto_set_font_size(False)
    tab.set_fontsize(fontsize)
    heights = [max(c.count("\n") + 1 for c in row) for row in rows]
    unit = 1.0 / (sum(heights) + 1.2)
    for (r, c), cell in tab.get_celld().items():
        cell.set_linewidth(0.3)
        cell.set_height(unit * (1.2 if r == 0 else heights[r - 1]))
        cell.PAD = 0.02
        if r == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#eeeeee")
        elif verdict_col is not None and c == verdict_col:
            cell.set_text_props(color="white", weight="bold")
            cell.set_facecolor(VERDICT_COLOR.get(rows[r - 1][c], "0.5"))


def _claims_table(fig: Figure, doc: Mapping[str, Any], section: str, top: float, max_h: float) -> float:
    """Draw the claims table of ``section`` across the page from ``top`` down (at most ``max_h`` of
    the page's height); returns its lower edge (figure fraction)."""
    rows = claim_rows(doc, section)
    n_lines = sum(max(c.count("\n") + 1 for c in r) for r in rows) + 1
    h = min(max_h, 0.0092 * n_lines + 0.01)
    _draw_table(fig.add_axes((0.04, top - h, 0.92, h)), rows, ["claim", "paper", "this run: statistic [95% interval]", "verdict"],
                [0.33, 0.24, 0.32, 0.11], 5.6, verdict_col=3)
    return top - h


def _figure_image(fig: Figure, rect: tuple[float, float, float, float], root: Path, name: str, label: str) -> None:
    """The run's ``figures/<name>.png`` in ``rect`` of the page, or a line saying it was not drawn."""
    ax = fig.add_axes(rect)
    ax.set_axis_off()
    p = root / "figures" / f"{name}.png"
    if p.exists():
        ax.imshow(mpimg.imread(p))
    else:
        ax.text(0.5, 0.5, f"{label}: not drawn in this run", ha="center", fontsize=7, color="0.4")


def summary_page(root: str | os.PathLike, *, title: str = "", profile: str = "",
                 failed: Mapping[str, str] | None = None) -> Figure:
    """The one-page summary of the run in ``root`` (``reports/<profile>/<run>/``) as an A4 Figure.

    Args:
        root: the run folder (reads ``claims.json``, ``figures/*.png``, ``tables/*.csv``).
        title: page title (default names the folder).
        profile: the profile name, for the limits box (default: the parent folder's name).
        failed: notebook -> why, for a run with failed notebooks (``kit.report.builder.failed_notebooks``):
            the page then opens with a red line naming them (issue #17: a failed run says so first).
    Returns:
        A portrait A4 Figure (8.27 x 11.69 in).
    """
    root = Path(root)
    profile = profile or root.parent.name
    doc = _claims_doc(root)
    fig = Figure(figsize=(8.27, 11.69))
    own = claims.counted([c for c in doc["claims"] if _section(c) == claims.DEFAULT_SECTION])
    world = [c for c in doc["claims"] if _section(c) == claims.DEFAULT_SECTION and c.get("role") == "world_check"]
    counts = {v: sum(c["verdict"] == v for c in own) for v in claims.VERDICTS}
    fig.text(0.04, 0.982, title or f"rStar2-Agent reproduction: {root.parent.name}/{root.name}", fontsize=12,
             weight="bold", va="top")
    others = "".join(f"; {sum(_section(c) == x for c in doc['claims'])} {x} claims on page {k}"
                     for k, x in enumerate(sections(doc), start=2))
    primaries = sum(c.get("role") == "primary" for c in own)
    head = (f"Profile {profile}: {len(own)} claims pre-registered in kit/reference/claims.yaml before tuning "
            f"({primaries} primary); " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICT_COLOR
                                                   if v != "invalid design" or counts.get(v))
            + (f"; {len(world)} world checks (properties the tiny world guarantees) listed last, not counted" if world
               else "") + others
            + ". A verdict compares the statistic's 95% interval with the pre-registered threshold: reproduced when "
              "it lies on the claimed side, not reproduced when on the other side, else inconclusive.")
    shift = 0.0
    pre = precondition_line(doc)
    if pre:  # a line or more (two failed preconditions wrap): the heading moves down by as many (~0.0105 a line)
        pre = textwrap.fill(pre, 130)  # bold 7 pt: 130 characters fill the A4 width
        fig.text(0.04, 0.966, pre, fontsize=7, va="top", color="#b00000", weight="bold", parse_math=False)
        shift = 0.0095 + 0.0105 * (pre.count("\n") + 1)
    if failed:
        names = "; ".join(f"{name} ({why[:160]})" for name, why in failed.items())
        line = textwrap.fill(f"This run did not finish: {len(failed)} notebook(s) failed: {names}", 130)
        fig.text(0.04, 0.966 - shift, line, fontsize=7, va="top", color="#b00000", weight="bold",
                 parse_math=False)  # error text, not mathtext
        shift += 0.0095 + 0.0105 * (line.count("\n") + 1)
    head = textwrap.fill(head, 160)
    fig.text(0.04, 0.962 - shift, head, fontsize=6.6, va="top", color="0.25", linespacing=1.3)
    # where it computed, and whether a rerun gives the same bits (issue #41): under the heading, ~0.0102 a line
    y = 0.962 - shift - 0.0102 * (head.count("\n") + 1) - 0.002
    for text, colour in environment_lines(root, doc, profile):
        text = textwrap.fill(text, 175 if colour == "yes" else 155)  # bold letters are wider
        fig.text(0.04, y, text, fontsize=6, va="top", color=STAMP_COLOR[colour], linespacing=1.3,
                 weight="normal" if colour == "yes" else "bold", parse_math=False)
        y -= 0.0093 * (text.count("\n") + 1)
    extra = max(0.0, (0.928 - shift) - (y - 0.004))
    top = _claims_table(fig, doc, claims.DEFAULT_SECTION, 0.928 - shift - extra, 0.5 - shift - extra) - 0.008
    limits = list(CPU_LIMITS) if profile in ("tiny", "smoke") else [
        "Paper profile: the claims use the same statistics; the published numbers are the paper's, not this run's."]
    subsets = eval_subsets(root / "eval")
    if subsets:
        limits.insert(0, SUBSET_NOTE)
    if profile == "smoke":
        limits.insert(0, SMOKE_NOTE)
    text = "\n".join(textwrap.fill("\u2022 " + s, 78, subsequent_indent="   ") for s in limits)
    # the figures give up height so that the list below them fits on the page (5.6 pt at 1.3 line
    # spacing is ~0.0088 of an A4 page a line; its heading and the margins ~0.05)
    need = 0.0088 * (text.count("\n") + 1) + 0.05
    fh = max(0.075, min(0.155, (top - 0.012 - need) / 2))
    slots = [(0.04, top - fh, 0.45, fh), (0.51, top - fh, 0.45, fh),
             (0.04, top - 2 * fh, 0.45, fh), (0.51, top - 2 * fh, 0.45, fh)]
    for (name, label), rect in zip(FIGURES, slots, strict=True):
        _figure_image(fig, rect, root, name, label)
    top -= 2 * fh + 0.012
    fig.text(0.04, top, "Tables 3-6: this run beside the paper (first published model of each row)",
             fontsize=6.8, weight="bold", va="top")
    trows = table_rows(root / "tables", subsets)
    _draw_table(fig.add_axes((0.04, 0.02, 0.47, top - 0.035)), trows, ["table", "benchmark", "this run", "paper"],
                [0.13, 0.2, 0.14, 0.53], 5.2)
    fig.text(0.54, top, "What this profile cannot show", fontsize=6.8, weight="bold", va="top")
    fig.text(0.54, top - 0.018, text, fontsize=5.6, va="top", linespacing=1.3)
    _explorer_links(fig, root)
    return fig


#: the static rollout explorer pages (``kit.explore.export_html``) the first page links, at most this many
MAX_EXPLORER_LINKS = 4


def explorer_pages(root: str | os.PathLike) -> list[str]:
    """The static rollout-explorer pages of the run (``<notebook folder>/explorer.html``, written by
    notebooks 03 and 06), as paths relative to ``root`` (where the report PDF lies), in folder order."""
    root = Path(root)
    return [p.relative_to(root).as_posix() for p in sorted(root.glob("*/explorer.html"))]


def _explorer_links(fig: Figure, root: Path) -> None:
    """One line at the page's foot linking each explorer page (PDF link annotations, relative to
    the report's folder), or saying there is none."""
    pages = explorer_pages(root)
    label = ("Rollout explorer, static pages (a browser, no kernel; relative to this PDF's folder):" if pages else
             "Rollout explorer: no static page in this run (notebooks 03 and 06 write <folder>/explorer.html)")
    fig.text(0.04, 0.004, label, fontsize=6, va="bottom", color="0.25")
    for i, rel in enumerate(pages[:MAX_EXPLORER_LINKS]):
        fig.text(0.47 + 0.125 * i, 0.004, rel, fontsize=6, va="bottom", color="#1f4e9c", url=rel)
    if len(pages) > MAX_EXPLORER_LINKS:
        fig.text(0.97, 0.004, f"+{len(pages) - MAX_EXPLORER_LINKS}", fontsize=6, va="bottom", ha="right")


def section_page(root: str | os.PathLike, section: str, *, profile: str = "") -> Figure:
    """The summary page of another paper's claims on the run in ``root`` (``section``, e.g. ``ReTool``):
    their statistic, 95% interval and verdict, and the run's figures for them (the study's record,
    :data:`kit.studies.STUDIES`).

    Returns:
        A portrait A4 Figure.
    """
    root = Path(root)
    profile = profile or root.parent.name
    doc = _claims_doc(root)
    study = by_section(section)  # its page's title, text and figures (kit.studies)
    title, what, figs = (study.title, study.what, study.figures) if study else (f"{section} on this run", "", ())
    everything = [c for c in doc["claims"] if _section(c) == section]
    mine = claims.counted(everything)
    world = len(everything) - len(mine)
    fig = Figure(figsize=(8.27, 11.69))
    fig.text(0.04, 0.982, title, fontsize=12, weight="bold", va="top")
    source = Path(study.claims_file).name if study and study.claims_file else "kit/reference/claims.yaml"
    head = (f"Profile {profile}: {len(mine)} {section} claims pre-registered in {source} before any run "
            "of them; " + ", ".join(f"{sum(c['verdict'] == v for c in mine)} {v}" for v in VERDICT_COLOR)
            + (f"; {world} world checks listed last, not counted" if world else "")
            + ". Same verdict rule as the first page. " + what)
    fig.text(0.04, 0.962, textwrap.fill(head, 160), fontsize=6.6, va="top", color="0.25", linespacing=1.3)
    top = _claims_table(fig, doc, section, 0.925, 0.5) - 0.015
    band = (top - 0.03) / max(1, len(figs))  # the figures share the space below the table, one band each
    for i, (name, label) in enumerate(figs):
        _figure_image(fig, (0.04, top - (i + 1) * band, 0.92, band - 0.01), root, name, label)
    return fig


def write_summary_pdf(root: str | os.PathLike, out: str | os.PathLike, **kw: Any) -> Path:
    """Write :func:`summary_page` of ``root`` at ``out``, followed by a :func:`section_page` for each
    other paper whose claims the run has (ReTool's, Agent-R's); returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    first = summary_page(root, **kw)
    with PdfPages(out) as pdf:
        pdf.savefig(first)
        for section in sections(_claims_doc(Path(root))):
            pdf.savefig(section_page(root, section, profile=kw.get("profile", "")))
    return out


def prepend_summary(root: str | os.PathLike, pdf: str | os.PathLike, *, title: str = "",
                    echo: Callable[[str], None] = print, failed: Mapping[str, str] | None = None) -> Path:
    """Put the summary page in front of ``pdf`` (in place) with ``pdfunite``.

    The page is also kept as ``root/summary.pdf``. Without ``pdfunite`` (poppler-utils) or when
    it fails, ``pdf`` is left as it was and a notice names the separate summary file; when the
    page cannot be drawn at all (say a malformed ``claims.json``), a notice says why.

    Returns:
        ``pdf``.
    """
    root, pdf = Path(root), Path(pdf)
    try:
        page = write_summary_pdf(root, root / "summary.pdf", title=title, failed=failed)
    except Exception as exc:  # noqa: BLE001 - a broken summary must not cost the report
        echo(f"NOTICE: the one-page summary could not be drawn ({type(exc).__name__}: {exc}); report without it")
        return pdf
    tool = shutil.which("pdfunite")
    if tool is None:
        echo(f"NOTICE: pdfunite (poppler-utils) not found; the one-page summary is a separate file: {page}")
        return pdf
    merged = pdf.with_name(pdf.stem + ".with_summary.pdf")
    proc = subprocess.run([tool, str(page), str(pdf), str(merged)], capture_output=True, text=True)
    if proc.returncode != 0 or not merged.exists():
        echo(f"NOTICE: pdfunite failed ({proc.stderr.strip()[:200]}); the summary is a separate file: {page}")
        return pdf
    merged.replace(pdf)
    return pdf
