"""Checks before the expensive steps (notebook 00): packages, data files, TeX, and the sandbox.

:func:`preflight` lists what is present and what is missing without importing anything heavy;
:func:`require_preflight` stops the chain on a missing requirement; :func:`sandbox_selftest` runs
the sandbox's self-test and stops the chain when isolation, a limit or the tool semantics fail,
while speed below target on a busy machine only warns.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import io
import os
import re
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd

from kit.config.paths import data_dir as resolve_data_dir
from kit.report import latex_pdf
from kit.sandbox import selftest

#: Data files the tiny chain reads (relative to the data directory); all are required.
REQUIRED_DATA = (
    "benchmarks/aime2024.json", "benchmarks/aime2025.jsonl", "benchmarks/math500.json", "benchmarks/hmmt2025.jsonl",
    "train/dapo_math_17k.parquet", "train/gsm8k_train.jsonl", "train/project_euler_problems.txt",
    "train/project_euler_answers.md", "train/aime_1983_2025.csv", "train/openmathreasoning_sample.jsonl",
    "sft/glaive_toolcall_en_demo.json", "sft/toolace_sample.json", "sft/xlam_fc_sample.jsonl",
    "sft/reason_tool_use_demo_50.jsonl",
)
PACKAGES = ("torch", "transformers", "tokenizers", "verl", "math-verify", "papermill", "nbconvert", "pandas",
            "matplotlib")


def preflight(data_dir: str = "") -> list[dict[str, str]]:
    """Check what the chain needs before the expensive steps run.

    Args:
        data_dir: ``DataConfig.data_dir`` (empty: ``KIT_DATA_DIR`` or :func:`kit.config.paths.data_dir`'s default).
    Returns:
        Rows ``{"check", "status" ("ok" | "missing" | "warning"), "detail"}``: Python packages
        (versions from their metadata, nothing heavy is imported), bubblewrap, xelatex, the
        report's SVG converter and fonts (:func:`report_converter_rows`), the core count, and
        every file of :data:`REQUIRED_DATA`.
    """
    rows = [{"check": "python", "status": "ok", "detail": sys.version.split()[0]},
            {"check": "cpu cores", "status": "ok", "detail": str(os.cpu_count())}]
    for pkg in PACKAGES:
        try:
            rows.append({"check": pkg, "status": "ok", "detail": md.version(pkg)})
        except md.PackageNotFoundError:
            rows.append({"check": pkg, "status": "missing", "detail": "pip install -e . (make setup)"})
    bwrap = shutil.which("bwrap")
    rows.append({"check": "bubblewrap (sandbox isolation)", "status": "ok" if bwrap else "missing",
                 "detail": bwrap or "apt-get install bubblewrap (make setup)"})
    tex = shutil.which("xelatex")
    rows.append({"check": "xelatex (notebook PDF)", "status": "ok" if tex else "warning",
                 "detail": tex or "absent: the report falls back to a figures-and-tables PDF"})
    rows += report_converter_rows()
    base = resolve_data_dir(data_dir or None)
    for rel in REQUIRED_DATA:
        p = base / rel
        rows.append({"check": f"data: {rel}", "status": "ok" if p.exists() else "missing",
                     "detail": str(p) if p.exists() else f"not found in {base} (set KIT_DATA_DIR; see README, Profiles and data)"})
    return rows


def report_converter_rows() -> list[dict[str, str]]:
    """Rows for what the PDF report converts with: ``rsvg-convert`` (SVG outputs, Debian
    ``librsvg2-bin``) and the fonts of :mod:`kit.report.latex_pdf` (box drawing, arrows, Greek, CJK).
    Missing ones are warnings: the PDF is still written, with a note or blank characters, and
    the report names what it left out."""
    svg = latex_pdf.svg_converter()
    rows = [{"check": "rsvg-convert (SVG outputs in the PDF)", "status": "ok" if svg else "warning",
             "detail": svg or "absent: SVG-only outputs become a note in the PDF (apt-get install librsvg2-bin; "
                              "make setup)"}]
    for family, package in ((latex_pdf.MONO_FONT, "fonts-dejavu-core"), (latex_pdf.MAIN_FONT, "fonts-dejavu-core"),
                            (latex_pdf.CJK_FONT, "fonts-wqy-microhei")):
        ok = latex_pdf.font_charset(family) is not None
        rows.append({"check": f"font {family} (PDF)", "status": "ok" if ok else "warning",
                     "detail": "installed" if ok else f"absent: some characters print blank (apt-get install {package})"})
    return rows


def require_preflight(rows: Sequence[dict[str, str]]) -> None:
    """Raise ``RuntimeError`` listing every ``missing`` row of :func:`preflight` (warnings pass)."""
    missing = [f"{r['check']}: {r['detail']}" for r in rows if r["status"] == "missing"]
    if missing:
        raise RuntimeError("preflight failed; missing:\n  " + "\n  ".join(missing))


#: selftest checks that measure speed: on a busy machine they may miss their targets without anything
#: being unsafe, so they warn instead of stopping the chain.
PERFORMANCE_CHECKS = ("throughput", "latency", "pool start")


def sandbox_selftest(sandbox_cfg) -> Any:
    """Run ``python -m kit selftest`` in-process and return its checks as a DataFrame.

    Columns ``check, result (PASS/FAIL), detail``. Runs in a helper thread (the selftest owns an
    event loop; a notebook's is already running).

    Raises:
        RuntimeError: an isolation, limit or semantics check failed (the message lists them).
            Failed speed checks (:data:`PERFORMANCE_CHECKS`) only print a warning.
    """
    buf = io.StringIO()
    with ThreadPoolExecutor(1) as ex, contextlib.redirect_stdout(buf):
        ex.submit(selftest.main, sandbox_cfg).result()
    rows = [m.groups() for m in re.finditer(r"^(PASS|FAIL)  ([^:]+): (.*)$", buf.getvalue(), re.M)]
    df = pd.DataFrame(rows, columns=["result", "check", "detail"])[["check", "result", "detail"]]
    failed = df[df["result"] == "FAIL"]
    slow = failed[failed["check"].isin(PERFORMANCE_CHECKS)]
    if len(slow):
        print(f"WARNING: sandbox speed below target on this machine: {', '.join(slow['check'])}")
    bad = failed[~failed["check"].isin(PERFORMANCE_CHECKS)]
    if len(bad) or df.empty:
        raise RuntimeError("sandbox selftest failed: " + ("; ".join(f"{c}: {d}" for c, d in zip(bad["check"], bad["detail"], strict=True))
                                                           or "no check lines printed\n" + buf.getvalue()[-2000:]))
    return df
