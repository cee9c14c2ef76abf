"""The notebooks teach (issue #31): each training notebook opens with the method it runs, equations included,
ends with what its run showed (computed by kit.chain.findings, not a fixed sentence; 03 and 06 then end with
the rollout explorer, issue #32), and its parameters cell
holds only the notebook's subject: config keys travel in ``overrides``, not as sentinel mirrors."""

from __future__ import annotations

import dataclasses

import nbformat
import pytest
from papermill.translators import PythonTranslator

from kit import pipeline
from kit.config import load

#: training notebooks and the findings function their last cell shows (a study's own findings live in its wing)
FINDINGS = {"02_cold_start_sft": "sft_findings", "03_rl_stage1": "stage_findings", "04_rl_stage2": "stage_findings",
            "05_rl_stage3": "stage_findings", "06_roc_ablation": "ablation_findings",
            "10_retool": "kit.studies.retool.chain:retool_findings"}
#: training notebooks that end with the rollout explorer (issue #32), after their findings
EXPLORED = ("03_rl_stage1", "06_roc_ablation")
#: config fields a notebook may take as parameters: the run's identity and folders, which ``load`` takes too
IDENTITY = {"profile", "seed", "run_dir", "data_dir"}


def _read(name):
    return nbformat.read(pipeline.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


def _config_field_names() -> set[str]:
    names: set[str] = set()

    def walk(obj):
        for f in dataclasses.fields(obj):
            names.add(f.name)
            if dataclasses.is_dataclass(getattr(obj, f.name)):
                walk(getattr(obj, f.name))

    walk(load("tiny"))
    return names


def test_parameters_cells_do_not_mirror_config_keys():
    fields = _config_field_names()
    for name in pipeline.SERIES:
        cell = next(c for c in _read(name).cells if "parameters" in c.metadata.get("tags", []))
        declared = {p.name for p in PythonTranslator.inspect(cell)}
        assert not (declared & fields) - IDENTITY, f"{name}: set these through overrides: {(declared & fields) - IDENTITY}"


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_training_notebooks_open_with_the_method_and_end_with_this_run_s_findings(name):
    nb = _read(name)
    opening = nb.cells[0]
    assert opening.cell_type == "markdown" and "## The method" in opening.source and "$$" in opening.source
    assert "## What to look at" in opening.source
    code = [c for c in nb.cells if c.cell_type == "code"]
    last = code[-2] if name in EXPLORED else code[-1]
    if name in EXPLORED:  # then the explorer: the static export and the widget, thin calls into kit.explore
        assert "export_html(run_dir)" in code[-1].source and "explore(run_dir)" in code[-1].source
        assert nb.cells[-1] is code[-1]
    module, _, function = FINDINGS[name].rpartition(":")
    assert f"from {module or 'kit.chain.findings'} import {function}" in last.source
    assert f"Markdown({function}(run_dir))" in last.source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"


def test_the_roc_lesson_states_the_kit_s_selection_rule():
    text = _read("03_rl_stage1").cells[0].source
    for part in (r"p_{\mathrm{total}} = p_{\mathrm{err}} + p_{\mathrm{format}}", r"1 / p_{\mathrm{total}}",
                 "uniformly at random", r"\varepsilon_{\mathrm{high}} = 0.28", r"\mathrm{round}(n_+ G / 2G)"):
        assert part in text
