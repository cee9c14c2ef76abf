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


def test_each_kernel_gets_a_private_socket_folder_removed_at_shutdown(tmp_path, monkeypatch):
    """Two runs from one checkout must not share IPC socket names (jupyter_client's default is
    ``kernel-ipc-N`` in the working directory; two runs picked the same N at once)."""
    import asyncio
    import os

    from kit.pipeline.kernels import QuietKernelManager

    monkeypatch.chdir(tmp_path)

    async def go():
        a, b = QuietKernelManager(kernel_name="python3"), QuietKernelManager(kernel_name="python3")
        assert a.transport == "ipc" and os.path.dirname(a.ip) != os.path.dirname(b.ip)
        await a.start_kernel()
        kc = a.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            folder = os.path.dirname(a.ip)
            assert os.path.basename(folder).startswith("kit-kernel-") and os.listdir(folder)  # the sockets
            assert (os.stat(folder).st_mode & 0o777) == 0o700
        finally:
            kc.stop_channels()
            await a.shutdown_kernel(now=True)
        assert not os.path.exists(folder) and not list(tmp_path.iterdir())  # nothing left, nothing in the cwd

    asyncio.run(go())
