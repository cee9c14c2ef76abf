"""Issue #44 part 9: the executed notebook names the kernel the runner ran it on, not the source's."""

from __future__ import annotations

import nbformat
import pytest

from kit.pipeline import Layout, NotebookRun, PipelineError, run_series
from kit.pipeline.kernels import KERNEL_NAME, kernelspec, record_kernelspec

FOREIGN = {"name": "someone-elses-env", "display_name": "Another Env", "language": "python"}


def _foreign(path):
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = dict(FOREIGN)
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("body,fails", [("x = 1", False), ("raise RuntimeError('planted failure')", True)])
def test_the_executed_notebook_records_the_runner_s_kernel(tmp_path, make_notebook, body, fails):
    src = _foreign(make_notebook(tmp_path / "src" / "k.ipynb", 'run_dir = ""', body))
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(src, {"run_dir": lay.dir("k")}, (lay.dir("k"),))]
    if fails:
        with pytest.raises(PipelineError, match="planted failure"):
            run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    else:
        run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    out = nbformat.read(lay.executed / "k.ipynb", as_version=4)
    assert out.metadata["kernelspec"] == kernelspec(KERNEL_NAME) and out.metadata["kernelspec"]["name"] == KERNEL_NAME
    assert nbformat.read(src, as_version=4).metadata["kernelspec"] == FOREIGN  # the source is left alone


def test_record_kernelspec_leaves_a_missing_or_broken_file(tmp_path):
    record_kernelspec(tmp_path / "none.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [')
    record_kernelspec(broken)
    assert broken.read_text() == '{"cells": ['
