"""The committed notebooks: typed parameters cells that papermill parses, matching what the runner passes."""

from __future__ import annotations

import ast

import nbformat
import pytest
from papermill.translators import PythonTranslator

from kit import pipeline
from kit.pipeline import Layout


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    return pipeline.standard_series(Layout.for_run("smoke", "t", tmp_path_factory.mktemp("r")))


def _params_cell(nb):
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    return cells[0]


@pytest.mark.parametrize("name", pipeline.SERIES)
def test_parameters_cell_is_typed_and_parsed_by_papermill(name, series, capsys):
    nb = nbformat.read(pipeline.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    cell = _params_cell(nb)
    assert nb.cells.index(cell) == 1, "the parameters cell follows the title"
    declared = PythonTranslator.inspect(cell)
    assert "Unable to parse" not in capsys.readouterr().out
    assignments = [n for n in ast.parse(cell.source).body if isinstance(n, ast.AnnAssign)]
    assert len(assignments) == len(declared) == len(
        [ln for ln in cell.source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]), \
        "every parameter is one typed line papermill can read"
    names = {p.name for p in declared}
    assert {"profile", "run_dir"} <= names
    passed = next(r.parameters for r in series if r.name == name)
    assert set(passed) <= names, f"the runner passes parameters the notebook does not declare: {set(passed) - names}"


@pytest.mark.parametrize("name", pipeline.SERIES)
def test_cells_stay_thin(name):
    nb = nbformat.read(pipeline.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert len(cell.source.splitlines()) <= 15, f"{name}: a cell over 15 lines belongs in kit"
            assert "def " not in cell.source and "class " not in cell.source, f"{name}: define functions in kit"
