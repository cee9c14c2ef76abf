"""The folders of one pipeline run and the series that fills them.

One run of the notebook series lives in ``reports/<profile>/<run>/`` (:class:`Layout`): one run
directory per notebook (``data/ sft/ stage1/ stage2/ stage3/ ablation/ analysis/ eval/``),
``figures/`` and ``tables/`` (09), ``notebooks/`` (the executed copies), ``report.pdf`` and
``pipeline_state.json``. :func:`series_parameters` is the ordered series with the parameters
each notebook receives, upstream run directories named explicitly. The runner
(:mod:`kit.pipeline`) and the report builder (:mod:`kit.report`) both read this module; it
imports neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.paths import REPO_ROOT

REPORTS_ROOT = REPO_ROOT / "reports"
STATE_FILE = "pipeline_state.json"


@dataclass(frozen=True)
class Layout:
    """Paths of one pipeline run: ``<reports_root>/<profile>/<run>/`` and its run directories."""

    root: Path
    profile: str

    @classmethod
    def for_run(cls, profile: str, run: str, reports_root: str | os.PathLike | None = None) -> Layout:
        """Layout of ``reports/<profile>/<run>`` (``reports_root`` defaults to the repo's ``reports/``).

        Raises:
            ValueError: ``profile`` or ``run`` is empty or contains a path separator.
        """
        for what, value in (("profile", profile), ("run", run)):
            if not value or "/" in value or os.sep in value or value in (".", ".."):
                raise ValueError(f"--{what} must be a plain folder name, got {value!r}")
        base = Path(reports_root) if reports_root is not None else REPORTS_ROOT
        return cls(root=(base / profile / run).resolve(), profile=profile)

    def dir(self, name: str) -> str:
        """Absolute path (str, for papermill) of the run directory ``name`` inside the run."""
        return str(self.root / name)

    @property
    def executed(self) -> Path:
        """Folder of the executed notebooks."""
        return self.root / "notebooks"

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    @property
    def report_pdf(self) -> Path:
        return self.root / "report.pdf"


# The series and the parameters each notebook receives. Upstream run directories are passed
# explicitly, so a notebook's inputs are visible in its parameters cell.
def series_parameters(lay: Layout, seed: int, overrides: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    common: dict[str, Any] = {"profile": lay.profile, "seed": seed}
    if overrides:
        common["overrides"] = dict(overrides)
    d = lay.dir
    return [
        ("00_setup_and_sandbox_check", {**common, "run_dir": d("setup")}),
        ("01_data_curation", {**common, "run_dir": d("data")}),
        ("02_cold_start_sft", {**common, "run_dir": d("sft"), "data_dir": d("data")}),
        ("03_rl_stage1", {**common, "run_dir": d("stage1"), "init_dir": d("sft"), "data_dir": d("data")}),
        ("04_rl_stage2", {**common, "run_dir": d("stage2"), "init_dir": d("stage1"), "data_dir": d("data")}),
        ("05_rl_stage3", {**common, "run_dir": d("stage3"), "init_dir": d("stage2"), "data_dir": d("data")}),
        ("06_roc_ablation", {**common, "run_dir": d("ablation"), "init_dir": d("sft"), "data_dir": d("data"),
                             "reuse_dirs": [d("stage1")]}),
        ("07_behavior_analysis", {**common, "run_dir": d("analysis"), "sft_dir": d("sft"),
                                  "rl_dir": d("stage3"), "data_dir": d("data")}),
        ("08_evaluation", {**common, "run_dir": d("eval"), "policy_dir": d("stage3"), "sft_dir": d("sft"),
                          "data_dir": d("data")}),
        ("09_figures_and_tables", {**common, "run_dir": str(lay.root),
                                   "stage_dirs": [d("stage1"), d("stage2"), d("stage3")],
                                   "ablation_dir": d("ablation"), "eval_dir": d("eval")}),
    ]


SERIES: tuple[str, ...] = tuple(name for name, _ in series_parameters(Layout(Path("."), "tiny"), 0))
