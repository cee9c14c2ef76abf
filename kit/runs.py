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

import json
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


def read_state(layout: Layout) -> dict[str, Any]:
    """The run's ``pipeline_state.json``: ``{notebook: entry}`` (empty dict when absent). The one
    reader of the state file, for the runner (:mod:`kit.pipeline.series`) and the report (:mod:`kit.report`).

    Raises:
        ValueError: the file exists but is not a JSON object (the message names the file).
    """
    if not layout.state_path.exists():
        return {}
    try:
        state = json.loads(layout.state_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{layout.state_path}: not valid JSON ({exc}); delete it to rerun everything") from exc
    if not isinstance(state, dict):
        raise ValueError(f"{layout.state_path}: expected a JSON object, got {type(state).__name__}")
    return state


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
        ("02_cold_start_sft", {**common, "run_dir": d("sft")}),
        ("03_rl_stage1", {**common, "run_dir": d("stage1"), "init_dir": d("sft"), "data_dir": d("data")}),
        ("04_rl_stage2", {**common, "run_dir": d("stage2"), "init_dir": d("stage1"), "data_dir": d("data")}),
        ("05_rl_stage3", {**common, "run_dir": d("stage3"), "init_dir": d("stage2"), "data_dir": d("data")}),
        ("06_roc_ablation", {**common, "run_dir": d("ablation"), "init_dir": d("sft"), "data_dir": d("data"),
                             "reuse_dirs": [d("stage1")]}),
        ("07_behavior_analysis", {**common, "run_dir": d("analysis"), "sft_dir": d("sft"), "rl_dir": d("stage3")}),
        ("08_evaluation", {**common, "run_dir": d("eval"), "policy_dir": d("stage3"), "sft_dir": d("sft"),
                          "data_dir": d("data")}),
        ("09_figures_and_tables", {"profile": lay.profile, "run_dir": str(lay.root),  # trains nothing: no seed
                                   "stage_dirs": [d("stage1"), d("stage2"), d("stage3")],
                                   "ablation_dir": d("ablation"), "eval_dir": d("eval"), "sft_dir": d("sft"),
                                   "analysis_dir": d("analysis")}),
    ]


SERIES: tuple[str, ...] = tuple(name for name, _ in series_parameters(Layout(Path("."), "tiny"), 0))
#: the name of each notebook's run directory inside a pipeline run (``sft``, ``stage1``, ...)
RUN_DIR_NAME: dict[str, str] = {name: Path(p["run_dir"]).name for name, p in series_parameters(Layout(Path("/r"), "p"), 0)}


# ------------------------------------------------------------------ upstream checks of a notebook

#: what a finished notebook leaves in its run directory for the notebooks after it (a file or folder)
PRODUCT: dict[str, str] = {
    "01_data_curation": "data/curated.parquet",
    "02_cold_start_sft": "policy",
    "03_rl_stage1": "policy",
    "04_rl_stage2": "policy",
    "05_rl_stage3": "policy",
    "06_roc_ablation": "ablation.json",
    "07_behavior_analysis": "entropy_tokens.jsonl",
    "08_evaluation": "eval",
}

#: each notebook's upstream parameters and the notebook that writes each (a list parameter: one per item)
UPSTREAM: dict[str, dict[str, str | tuple[str, ...]]] = {
    "03_rl_stage1": {"init_dir": "02_cold_start_sft", "data_dir": "01_data_curation"},
    "04_rl_stage2": {"init_dir": "03_rl_stage1", "data_dir": "01_data_curation"},
    "05_rl_stage3": {"init_dir": "04_rl_stage2", "data_dir": "01_data_curation"},
    "06_roc_ablation": {"init_dir": "02_cold_start_sft", "data_dir": "01_data_curation"},
    "07_behavior_analysis": {"sft_dir": "02_cold_start_sft", "rl_dir": "05_rl_stage3"},
    "08_evaluation": {"policy_dir": "05_rl_stage3", "sft_dir": "02_cold_start_sft", "data_dir": "01_data_curation"},
    "09_figures_and_tables": {"stage_dirs": ("03_rl_stage1", "04_rl_stage2", "05_rl_stage3"),
                              "ablation_dir": "06_roc_ablation", "eval_dir": "08_evaluation",
                              "sft_dir": "02_cold_start_sft", "analysis_dir": "07_behavior_analysis"},
}


class UpstreamMissing(FileNotFoundError):
    """An upstream run folder of a notebook lacks what its notebook writes.

    In IPython the error shows as its one-line message, without the traceback (the kit's
    frames say nothing the message does not); papermill and the pipeline still fail the run.
    """

    def _render_traceback_(self) -> list[str]:  # IPython's hook for an exception's own rendering
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def pipeline_command(folder: str | os.PathLike, until: str) -> str:
    """The pipeline command that fills ``folder`` (a run directory ``<reports>/<profile>/<run>/<name>``)
    up to and including notebook ``until`` (e.g. ``"02"``); without ``--reports-root`` when
    ``folder`` is under the repository's ``reports/``."""
    path = Path(folder).resolve()
    run, profile, base = path.parent.name, path.parent.parent.name, path.parent.parent.parent
    root = "" if base == REPORTS_ROOT.resolve() else f" --reports-root {base}"
    return f"python -m kit reproduce --profile {profile} --run {run} --until {until}{root}"


def _pipeline_run(missing: list[tuple[str, Path, str, str]]) -> Path | None:
    """The one ``<reports>/<profile>/<run>`` whose pipeline run writes every missing folder where the
    notebook looks (each named as the pipeline names its notebook's run directory), else None."""
    roots = {Path(folder).resolve().parent for _, _, folder, _ in missing}
    if len(roots) == 1 and all(Path(f).resolve().name == RUN_DIR_NAME[m] for m, _, f, _ in missing):
        return roots.pop()
    return None


def require_upstream(notebook: str, *, profile: str | None = None, **dirs: str | os.PathLike | list) -> None:
    """Check, before a notebook does any work, that its upstream run folders hold what their notebooks write.

    Args:
        notebook: the notebook's name, e.g. ``"03_rl_stage1"`` (a key of :data:`UPSTREAM`;
            notebooks 00-02 have no upstream folder).
        dirs: the notebook's upstream parameters by name (``init_dir=..., data_dir=...``;
            ``stage_dirs`` a list), relative to the working directory (the notebook's folder in
            JupyterLab). Each must be one of the notebook's :data:`UPSTREAM` parameters.
        profile: the notebook's profile: a command is for it, never for the profile a folder's path
            names (``reports/tiny/lab/...`` read with ``profile="smoke"`` gets the smoke command and
            where to point the parameters).
    Raises:
        UpstreamMissing: in one line, the earliest missing product (its path and the notebook that
            writes it), and the pipeline command that writes every missing one (``--until`` the
            latest notebook missing) when one pipeline run writes them all where the notebook looks
            (else how to point the parameters at a pipeline run's folders).
        KeyError: ``notebook`` or a parameter name is not in :data:`UPSTREAM`.
        ValueError: a list parameter (09's ``stage_dirs``) has not one folder per producing notebook.
    """
    producers = UPSTREAM.get(notebook, {})
    missing: list[tuple[str, Path, str, str]] = []
    for name, value in dirs.items():
        if name not in producers:
            raise KeyError(f"{notebook} has no upstream parameter {name!r}; known: {sorted(producers)}")
        makers = producers[name]
        if isinstance(makers, tuple) and (isinstance(value, str | os.PathLike) or len(value) != len(makers)):
            raise ValueError(f"{notebook}: {name} takes {len(makers)} folders, one per notebook "
                             f"({', '.join(makers)}), got {value!r}")
        pairs = zip(value, makers, strict=True) if isinstance(makers, tuple) else [(value, makers)]
        for folder, maker in pairs:
            product = Path(folder) / PRODUCT[maker]
            if not product.exists():
                missing.append((maker, product, str(folder), name))
    if not missing:
        return
    maker, product, _, _ = min(missing)  # the earliest notebook first: it is the one to run first
    last, _, last_folder, _ = max(missing)  # ... and the pipeline runs up to the latest one missing
    span = maker if last == maker else f"{maker} to {last}"
    root = _pipeline_run(missing)
    if root is None:
        how = ("point its parameters at folders of a pipeline run (`<reports>/<profile>/<run>/`), which "
               "`python -m kit reproduce --until NN` writes")
    elif profile is None or root.parent.name == profile:
        how = f"`{pipeline_command(last_folder, last[:2])}`"
    else:  # the folders are another profile's run: its command would train that profile
        mine = root.parent.parent / profile / root.name
        names = ", ".join(sorted({n for *_, n in missing}))
        how = (f"`{pipeline_command(mine / RUN_DIR_NAME[last], last[:2])}` and point {names} into {mine}/ "
               f"(the folders given are a {root.parent.name} run's; this notebook runs {profile})")
    raise UpstreamMissing(
        f"{notebook} needs {product}, which {maker} writes: run {span} (and the notebooks before) first, or {how}")
