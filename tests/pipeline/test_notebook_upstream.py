"""Notebooks run on their own (issue #20): each checks its upstream folders before any work and
says in one line which notebook, or which pipeline command, writes a missing one; its parameters
cell declares only parameters it uses."""

from __future__ import annotations

import ast

import nbformat
import papermill
import pytest

from kit import pipeline, plan
from kit.config import StagesConfig
from kit.plan import Layout, UpstreamMissing, require_upstream


def _code(name: str) -> tuple[nbformat.NotebookNode, list[str]]:
    nb = nbformat.read(pipeline.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    return nb, [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", pipeline.SERIES)
def test_every_declared_parameter_is_used(name):
    _, cells = _code(name)
    declared = [n.target.id for n in ast.parse(cells[0]).body if isinstance(n, ast.AnnAssign)]
    used = {n.id for src in cells[1:] for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
    unused = [p for p in declared if p not in used]
    assert not unused, f"{name} declares parameters no cell uses: {unused}"


@pytest.mark.parametrize("name", pipeline.SERIES)
def test_first_cell_checks_every_upstream_parameter(name):
    _, cells = _code(name)
    declared = {n.target.id for n in ast.parse(cells[0]).body if isinstance(n, ast.AnnAssign)}
    calls = [n for n in ast.walk(ast.parse(cells[1])) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "require_upstream"]
    expected = {e.name: e.upstream for e in plan.series(StagesConfig().names)}.get(name, {})
    if not expected:
        assert not calls and not {p for p in declared if p.endswith(("_dir", "_dirs")) and p != "run_dir"}
        return
    assert len(calls) == 1, f"{name}: the cell after the parameters calls require_upstream once"
    call = calls[0]
    assert ast.literal_eval(call.args[0]) == name
    assert {k.arg for k in call.keywords} == set(expected) | {"profile"}  # profile: the command is for it
    optional = {"reuse_dirs"}  # 06: finished runs that *may* already be an arm; nothing needs them
    upstream_params = {p for p in declared if p.endswith(("_dir", "_dirs")) and p != "run_dir"} - optional
    assert upstream_params == set(expected), f"{name}: every upstream folder parameter is checked"


def test_missing_upstream_is_one_line_naming_the_notebook_and_the_command(tmp_path):
    lay = Layout.for_run("smoke", "t", tmp_path)
    (tmp_path / "smoke" / "t" / "data" / "data").mkdir(parents=True)
    (tmp_path / "smoke" / "t" / "data" / "data" / "curated.parquet").write_bytes(b"x")
    with pytest.raises(UpstreamMissing) as err:
        require_upstream("03_rl_stage1", init_dir=lay.dir("sft"), data_dir=lay.dir("data"))
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{lay.dir('sft')}/policy" in msg and "02_cold_start_sft writes" in msg
    assert (f"python -m kit reproduce --profile smoke --run t --until 02 --reports-root {tmp_path.resolve()}"
            in msg)
    # both missing: the earliest is named, and the command runs up to the latest
    with pytest.raises(UpstreamMissing, match="01_data_curation writes: run 01_data_curation to 02_cold_start_sft "
                                              r"\(and the notebooks before\) first, or .*--until 02 "):
        empty = Layout.for_run("smoke", "empty", tmp_path)
        require_upstream("03_rl_stage1", init_dir=empty.dir("sft"), data_dir=empty.dir("data"))
    # 20's list parameter: one producer per item
    with pytest.raises(UpstreamMissing, match="04_rl_stage2 writes"):
        (tmp_path / "s1" / "policy").mkdir(parents=True)
        require_upstream("20_figures_and_tables", stage_dirs=[tmp_path / "s1", tmp_path / "s2", tmp_path / "s3"])
    with pytest.raises(KeyError, match="no upstream parameter 'init_dir'"):
        require_upstream("07_behavior_analysis", init_dir=lay.dir("sft"))
    assert plan.pipeline_command(plan.REPORTS_ROOT / "tiny" / "lab" / "sft", "02") == \
        "python -m kit reproduce --profile tiny --run lab --until 02"


def test_notebook_03_alone_fails_in_one_line_and_writes_nothing(tmp_path):
    """Notebook 03 run before 02 (the issue's report: a 13-frame FileNotFoundError and a config.json
    left behind); now the kernel shows one line and the run folder is not created."""
    lay = Layout.for_run("smoke", "t", tmp_path)
    out = tmp_path / "03.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(
            str(pipeline.NOTEBOOK_DIR / "03_rl_stage1.ipynb"), str(out), kernel_name="python3", progress_bar=False,
            cwd=str(pipeline.NOTEBOOK_DIR),
            parameters={"profile": "smoke", "run_dir": lay.dir("stage1"), "init_dir": lay.dir("sft"),
                        "data_dir": lay.dir("data")})
    assert err.value.ename == "UpstreamMissing"
    assert "01_data_curation writes" in err.value.evalue and "--until 02" in err.value.evalue
    assert len(err.value.traceback) == 1, err.value.traceback  # the message, not 13 frames of the kit
    assert not (tmp_path / "smoke" / "t" / "stage1").exists()


def test_no_pipeline_command_is_offered_for_folders_no_pipeline_run_writes(tmp_path):
    # notebook 05 alone with folders outside a run's layout: the command guessed from the path
    # (`--profile <parent> --run <folder>`) would write other folders than the notebook reads
    with pytest.raises(UpstreamMissing) as err:
        require_upstream("05_rl_stage3", init_dir=tmp_path / "up" / "init", data_dir=tmp_path / "up" / "data")
    msg = str(err.value)
    assert "\n" not in msg and "01_data_curation writes: run 01_data_curation to 04_rl_stage2" in msg
    assert "--profile" not in msg and "point its parameters at folders of a pipeline run" in msg
    # two different runs: no one command writes both
    a, b = Layout.for_run("smoke", "a", tmp_path), Layout.for_run("smoke", "b", tmp_path)
    with pytest.raises(UpstreamMissing) as err:
        require_upstream("04_rl_stage2", init_dir=a.dir("stage1"), data_dir=b.dir("data"))
    assert "--profile" not in str(err.value)
    # the layout's own folders still get the command
    with pytest.raises(UpstreamMissing, match=r"`python -m kit reproduce --profile smoke --run a --until 04 "):
        require_upstream("05_rl_stage3", init_dir=a.dir("stage2"), data_dir=a.dir("data"))
    with pytest.raises(ValueError, match=r"stage_dirs takes 3 folders, one per notebook \(03_rl_stage1, "):
        require_upstream("20_figures_and_tables", stage_dirs=[a.dir("stage1")])


def test_folders_of_another_profile_get_this_profile_s_command(tmp_path):
    # JupyterLab: notebook 03 with profile smoke but the default folders (reports/tiny/lab/...): the
    # folder's profile would train tiny (minutes) for a smoke user; the command is for smoke
    tiny = Layout.for_run("tiny", "lab", tmp_path)
    with pytest.raises(UpstreamMissing) as err:
        require_upstream("03_rl_stage1", profile="smoke", init_dir=tiny.dir("sft"), data_dir=tiny.dir("data"))
    msg = str(err.value)
    smoke_root = tmp_path.resolve() / "smoke" / "lab"
    assert "\n" not in msg and "--profile tiny" not in msg
    assert f"`python -m kit reproduce --profile smoke --run lab --until 02 --reports-root {tmp_path.resolve()}`" in msg
    assert f"point data_dir, init_dir into {smoke_root}/" in msg
    with pytest.raises(UpstreamMissing, match="--profile tiny --run lab --until 02"):  # same profile: its own folders
        require_upstream("03_rl_stage1", profile="tiny", init_dir=tiny.dir("sft"), data_dir=tiny.dir("data"))
