"""The runner's console carries no warning nobody can act on (issue #31): a throwaway notebook run
through :func:`kit.pipeline.run_series`, its kernel's output captured at the file descriptors."""

from __future__ import annotations

from kit.pipeline import Layout, NotebookRun, run_series


def test_runner_console_has_no_unencrypted_tcp_warning(tmp_path, make_notebook, capfd):
    nb = make_notebook(tmp_path / "src" / "a.ipynb", 'run_dir = ""', "import sys\nprint('cell ran', file=sys.stderr)")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    lines: list[str] = []
    records = run_series([NotebookRun(nb, {"run_dir": lay.dir("a")})], lay, progress_bar=False, log_output=True,
                         echo=lines.append)
    out, err = capfd.readouterr()
    assert [r["status"] for r in records] == ["done"]
    assert "cell ran" in out + err, "the cell's own output must still reach the console"
    assert "without encryption" not in out + err + "\n".join(lines)
    assert lines and all(line.startswith("[1/1] a: ") for line in lines), lines  # the status lines name it
