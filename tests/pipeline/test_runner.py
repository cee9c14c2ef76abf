"""The papermill runner on small throwaway notebooks: order, failure report, resume, --force."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import nbformat
import pytest

from kit import cli, pipeline, studies
from kit.pipeline import Layout, NotebookRun, PipelineError, overlap, run_series
from kit.pipeline.state import forced_names, inputs_changed, plan, upstream_names

WRITE = "from pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"


def _series(tmp_path, make_notebook, fail_second: bool):
    """A -> B -> C; B reads A's file and (optionally) raises in its second code cell."""
    src = tmp_path / "src"
    a = make_notebook(src / "a.ipynb", 'run_dir = ""\nvalue = 0',
                      WRITE + "Path(run_dir, 'a.txt').write_text(str(value * 2))")
    b_cells = ["from pathlib import Path\nx = int(Path(upstream, 'a.txt').read_text())",
               "raise ValueError('planted failure')" if fail_second else "y = x + 1",
               WRITE + "Path(run_dir, 'b.txt').write_text(str(y))"]
    b = make_notebook(src / "b.ipynb", 'run_dir = ""\nupstream = ""', *b_cells)
    c = make_notebook(src / "c.ipynb", 'run_dir = ""', WRITE + "Path(run_dir, 'c.txt').write_text('c')")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a"), "value": 21}, (lay.dir("a"),)),
            NotebookRun(b, {"run_dir": lay.dir("b"), "upstream": lay.dir("a")}, (lay.dir("b"),)),
            NotebookRun(c, {"run_dir": lay.dir("c")}, (lay.dir("c"),))]
    return runs, lay


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_failure_names_notebook_and_cell_then_resume_skips_finished(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, fail_second=True)
    lines: list[str] = []
    with pytest.raises(PipelineError) as info:
        run_series(runs, lay, progress_bar=False, echo=lines.append)
    msg = str(info.value)
    assert info.value.notebook == "b"
    # markdown 0, parameters 1, injected parameters 2, first code cell 3, failing cell 4
    assert info.value.cell_index == 4
    assert "notebook b failed in cell 4" in msg and "planted failure" in msg and "ValueError" in msg
    assert str(lay.executed / "b.ipynb") in msg
    assert (lay.root / "a" / "a.txt").read_text() == "42"  # parameters were injected
    assert not (lay.root / "c").exists(), "the runner must stop at the first failure"
    state = json.loads(lay.state_path.read_text())
    assert state["a"]["status"] == "done" and state["b"]["status"] == "failed" and "c" not in state

    # fix b's source: a is skipped, b resumes (its folder is kept, as a trainer's checkpoints), c runs
    (lay.root / "b").mkdir()
    (lay.root / "b" / "checkpoint.txt").write_text("partial work")
    nb = nbformat.read(runs[1].source, as_version=4)
    nb.cells[3].source = "y = x + 1"
    nbformat.write(nb, runs[1].source)
    a_mtime = (lay.executed / "a.ipynb").stat().st_mtime_ns
    lines.clear()
    records = run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert [r["status"] for r in records] == ["skipped", "done", "done"]
    assert (lay.executed / "a.ipynb").stat().st_mtime_ns == a_mtime
    assert (lay.root / "b" / "b.txt").read_text() == "43"
    assert (lay.root / "b" / "checkpoint.txt").exists()
    assert "skipped" in lines[0] and lines[0].startswith("[1/3] a")


@pytest.mark.slow  # two invocations of a three-notebook series (~5 kernel starts)
def test_a_rerun_notebook_reruns_its_readers_and_not_the_notebooks_that_only_follow_it(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, fail_second=False)
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    c_mtime = (lay.executed / "c.ipynb").stat().st_mtime_ns
    # a's source changes (it now writes 3 * value): b reads a's folder and reruns on the new file; c reads
    # nothing of a's and is skipped although it comes after a in the series
    make_notebook(runs[0].source, 'run_dir = ""\nvalue = 0',
                  WRITE + "Path(run_dir, 'a.txt').write_text(str(value * 3))")
    records = run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    assert [r["status"] for r in records] == ["done", "done", "skipped"]
    assert (lay.root / "b" / "b.txt").read_text() == "64"
    assert (lay.executed / "c.ipynb").stat().st_mtime_ns == c_mtime


@pytest.mark.slow  # five kernel starts
def test_forcing_named_notebooks_reruns_them_and_their_readers_only(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, fail_second=False)
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    (lay.root / "a" / "stale.txt").write_text("from the first run")
    # resumed "elsewhere" (the stored environment differs): what is kept of the other machine is said
    raw = json.loads(lay.state_path.read_text())
    raw["environment"]["cpu"]["model"] = "Some Other CPU"
    raw["environment"]["key"] = "elsewhere"
    lay.state_path.write_text(json.dumps(raw))
    lines: list[str] = []
    records = run_series(runs, lay, force={"a"}, progress_bar=False, echo=lines.append)
    assert [r["status"] for r in records] == ["done", "done", "skipped"]  # b reads a's folder, c does not
    running = [s for s in lines if ": running (" in s]
    assert "a: running (forced)" in running[0] and "b: running (an earlier notebook was rerun)" in running[1]
    assert not (lay.root / "a" / "stale.txt").exists(), "a forced notebook starts from an empty folder"
    warning = next(s for s in lines if s.startswith("WARNING"))
    assert "finished there (c) are kept" in warning, warning  # b reruns on a's new files: not kept
    assert "c: finished earlier" in lines[-1] and "--force reruns only the notebooks named" in lines[-1]
    records = run_series(runs, lay, force={"b"}, progress_bar=False, echo=lambda s: None)
    assert [r["status"] for r in records] == ["skipped", "done", "skipped"]
    with pytest.raises(TypeError, match="not the string 'b'"):
        run_series(runs, lay, force="b", progress_bar=False, echo=lambda s: None)


@pytest.mark.slow  # five kernel starts
def test_a_reader_left_out_of_a_forced_rerun_reruns_the_next_time_it_is_selected(tmp_path, make_notebook):
    """``--only 08 --force`` reruns 08 but not 20, which reads it and lies outside the selection; the next plain
    ``kit reproduce`` found 20 finished and kept a report built on 08's old files."""
    runs, lay = _series(tmp_path, make_notebook, fail_second=False)
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    c_mtime = (lay.executed / "c.ipynb").stat().st_mtime_ns
    (lay.root / "b" / "from_old_a.txt").write_text("b's output on a's old files")
    assert [r["status"] for r in run_series(runs[:1], lay, force={"a"}, graph=runs, progress_bar=False,
                                            echo=lambda s: None)] == ["done"]  # b is not in this selection
    assert plan(runs, lay) == [None, "a ran again since it finished", None]  # what --dry-run prints
    lines: list[str] = []
    records = run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert [r["status"] for r in records] == ["skipped", "done", "skipped"]
    assert "b: running (a ran again since it finished)" in next(s for s in lines if ": running (" in s)
    assert not (lay.root / "b" / "from_old_a.txt").exists(), "b reran from an empty folder"
    assert (lay.executed / "c.ipynb").stat().st_mtime_ns == c_mtime  # c reads nothing of a's
    assert plan(runs, lay) == [None, None, None]
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lambda s: None)] == ["skipped"] * 3


@pytest.mark.slow  # six kernel starts
def test_what_a_notebook_read_does_not_depend_on_the_selection_it_ran_in(tmp_path, make_notebook):
    """Review of eb2bae5: ``--only 06`` leaves out stage 1, whose folder 06 reuses; 06 recorded no read of it, and
    the next plain run rerun it "because stage 1 ran again", which it had not. ``graph`` names the whole series."""
    runs, lay = _series(tmp_path, make_notebook, fail_second=False)
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    assert [r["status"] for r in run_series(runs[1:2], lay, force={"b"}, graph=runs, progress_bar=False,
                                            echo=lambda s: None)] == ["done"]
    assert json.loads(lay.state_path.read_text())["b"]["read"] == {"a": json.loads(lay.state_path.read_text())["a"]["run_id"]}
    assert plan(runs, lay) == [None, None, None]
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lambda s: None)] == ["skipped"] * 3


@pytest.mark.slow  # five kernel starts
def test_a_failed_reader_starts_afresh_when_what_it_read_ran_again_since(tmp_path, make_notebook):
    """A failed or interrupted notebook resumes from its checkpoints, unless what it read ran again in between
    (an interrupted 06 resumed its arms on checkpoints of the old cold start after ``--only 02 --force``)."""
    runs, lay = _series(tmp_path, make_notebook, fail_second=True)
    with pytest.raises(PipelineError):
        run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    (lay.root / "b").mkdir()
    (lay.root / "b" / "checkpoint.txt").write_text("made on a's old files")
    run_series(runs[:1], lay, force={"a"}, graph=runs, progress_bar=False, echo=lambda s: None)
    nb = nbformat.read(runs[1].source, as_version=4)
    nb.cells[3].source = "y = x + 1"
    nbformat.write(nb, runs[1].source)
    assert plan(runs, lay) == [None, "a ran again since it began", "not run yet"]
    lines: list[str] = []
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lines.append)] == ["skipped", "done",
                                                                                                 "done"]
    assert "b: running (a ran again since it began)" in next(s for s in lines if ": running (" in s)
    assert not (lay.root / "b" / "checkpoint.txt").exists(), "b started afresh, not from the old checkpoint"


def test_inputs_changed_compares_the_run_a_notebook_read():
    state = {"a": {"status": "done", "run_id": "a2"}, "b": {"status": "done", "run_id": "b1"},
             "c": {"status": "running"}}
    reader = {"status": "done", "read": {"a": "a1", "b": "b1", "c": "c1"}}
    assert inputs_changed(reader, ["a", "b", "c"], state) == ["a", "c"]  # a finished again; c is running again
    assert inputs_changed(reader, ["b"], state) == []
    # a failed or interrupted reader keeps what it began on: it resumes only on the same inputs
    assert inputs_changed({**reader, "status": "failed"}, ["a"], state) == ["a"]
    assert inputs_changed({**reader, "status": "running"}, ["b"], state) == []
    # a name the entry does not record (a background job's entry: not finished when the job began) is not compared
    assert inputs_changed({"status": "running", "read": {"b": "b1"}}, ["a", "b"], state) == []
    # a run folder from before ``read`` was kept: nothing to compare, not rerun wholesale
    assert inputs_changed({"status": "done"}, ["a"], state) == []
    assert inputs_changed(None, ["a"], state) == []
    # an upstream that finished before ``run_id`` was kept, read as None, then rerun: changed
    assert inputs_changed({"status": "done", "read": {"a": None}}, ["a"], state) == ["a"]
    assert inputs_changed({"status": "done", "read": {"a": None}}, ["a"], {"a": {"status": "done"}}) == []


def test_upstream_names_come_from_the_whole_series_not_the_selection(tmp_path, make_notebook):
    runs, _ = _series(tmp_path, make_notebook, fail_second=False)
    assert upstream_names(runs) == {"a": [], "b": ["a"], "c": []}
    assert upstream_names(runs[1:2]) == {"b": []}
    assert upstream_names(runs[1:2], graph=runs) == {"b": ["a"]}
    with pytest.raises(TypeError, match="not the string 'a'"):
        forced_names("a", ["a"])
    assert forced_names(True, ["a", "b"]) == {"a", "b"} and forced_names(False, ["a"]) == set()


def test_upstream_indices_follow_the_folders_a_notebook_reads_transitively():
    params = [{"run_dir": "/r/a"}, {"run_dir": "/r/b", "init_dir": "/r/a"}, {"run_dir": "/r/c"},
              {"run_dir": "/r/d", "dirs": ["/r/b"]}, {"run_dir": "/r/e", "study_dirs": {"x": "/r/c"}}]
    assert overlap.upstream_indices(params) == [set(), {0}, set(), {0, 1}, {2}]


def test_finished_series_is_skipped_and_force_reruns(tmp_path, make_notebook):
    src = tmp_path / "src"
    a = make_notebook(src / "a.ipynb", 'run_dir = ""',
                      WRITE + "import time\nPath(run_dir, 'stamp.txt').write_text(str(time.time_ns()))")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a")}, (lay.dir("a"),))]
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lambda s: None)] == ["done"]
    first = (lay.root / "a" / "stamp.txt").read_text()
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lambda s: None)] == ["skipped"]
    assert (lay.root / "a" / "stamp.txt").read_text() == first
    # changed parameters are not "finished"
    runs2 = [NotebookRun(a, {"run_dir": lay.dir("a2")}, (lay.dir("a2"),))]
    assert [r["status"] for r in run_series(runs2, lay, progress_bar=False, echo=lambda s: None)] == ["done"]
    (lay.root / "a2" / "stale.txt").write_text("from an older run")
    assert [r["status"] for r in run_series(runs2, lay, force=True, progress_bar=False,
                                            echo=lambda s: None)] == ["done"]
    assert not (lay.root / "a2" / "stale.txt").exists(), "a forced rerun starts from an empty run folder"
    executed = nbformat.read(lay.executed / "a.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "a2" in injected[0].source


def test_standard_series_passes_upstream_run_dirs(tmp_path):
    lay = Layout.for_run("smoke", "t", reports_root=tmp_path)
    series = pipeline.standard_series(lay)
    assert [r.name for r in series] == list(pipeline.SERIES)
    assert len(series) == 10 + len(studies.STUDIES) and series[0].name.startswith("00_") and series[-1].name.startswith("20_")
    by = {r.name: r.parameters for r in series}
    # ReTool's comparison (issue #33) and Agent-R (issue #34) run before 20, which reads their folders;
    # ReTool's training is a background job, Agent-R's search is not
    assert [r.name for r in series][-1 - len(studies.STUDIES):] == [*(s.notebook for s in studies.STUDIES),
                                                                    "20_figures_and_tables"]
    assert by["20_figures_and_tables"]["study_dirs"] == {s.key: by[s.notebook]["run_dir"] for s in studies.STUDIES}
    assert by["10_retool"]["ablation_dir"] == by["06_roc_ablation"]["run_dir"]
    assert by["10_retool"]["init_dir"] == by["02_cold_start_sft"]["run_dir"]
    assert by["11_agent_r"]["sft_dir"] == by["02_cold_start_sft"]["run_dir"]
    names = [r.name for r in series]
    order = [names[i] for i in overlap.execution_order(names, [r.parameters for r in series],
                                                                 ["06_roc_ablation", "10_retool"])]
    # each deferred notebook just before its first reader
    assert order[-5:] == ["11_agent_r", "12_bstar", "06_roc_ablation", "10_retool", "20_figures_and_tables"]
    assert by["04_rl_stage2"]["init_dir"] == by["03_rl_stage1"]["run_dir"]
    assert by["05_rl_stage3"]["init_dir"] == by["04_rl_stage2"]["run_dir"]
    assert by["08_evaluation"]["policy_dir"] == by["05_rl_stage3"]["run_dir"]
    assert all(p["profile"] == "smoke" for p in by.values())
    assert all(str(tmp_path) in p["run_dir"] for p in by.values())


@pytest.mark.parametrize("argv", [["reproduce", "--profile", "nope"], ["reproduce", "--run", "../x"], ["reproduce", "--run", ""],
                                  # review r17: nbclient reads a negative timeout as "no limit"
                                  ["reproduce", "--profile", "smoke", "--cell-timeout", "-5"]])
def test_main_rejects_bad_arguments_without_running(argv, tmp_path, capsys):
    assert cli.main([*argv, "--reports-root", str(tmp_path)]) == 2
    assert "kit.pipeline:" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_outputs_outside_the_run_folder_are_never_cleared(tmp_path, make_notebook):
    a = make_notebook(tmp_path / "src" / "a.ipynb", 'run_dir = ""', "pass")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    with pytest.raises(ValueError, match="refusing to clear"):
        run_series([NotebookRun(a, {"run_dir": ""}, (str(tmp_path / "src"),))], lay, progress_bar=False,
                   echo=lambda s: None)
    assert a.exists()


@pytest.mark.parametrize("untag", ["drop", "markdown"])
def test_a_notebook_without_a_parameters_cell_is_refused_before_anything_runs(tmp_path, make_notebook, untag):
    """Issue #30: papermill only warns and injects the parameters at the top, where the notebook's own
    defaults overwrite them; the runner recorded such a notebook as done with the series' profile."""
    runs, lay = _series(tmp_path, make_notebook, fail_second=False)
    nb = nbformat.read(runs[1].source, as_version=4)
    if untag == "drop":
        nb.cells[1].metadata["tags"] = []
    else:  # the tag moved to a Markdown cell: papermill would inject after it, the defaults still win
        nb.cells[1].metadata["tags"], nb.cells[0].metadata["tags"] = [], ["parameters"]
    nbformat.write(nb, runs[1].source)
    with pytest.raises(PipelineError, match=r"notebook b \(.*b\.ipynb\) has no code cell tagged 'parameters'.*"
                                            r"\(run_dir, upstream\)\. Add the tag 'parameters'") as info:
        run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    assert info.value.notebook == "b"
    assert not (lay.executed / "a.ipynb").exists() and not Path(lay.dir("a"), "a.txt").exists()  # nothing ran


def test_corrupt_state_file_is_named(tmp_path):
    lay = Layout(root=tmp_path, profile="tiny")
    lay.state_path.write_text("{not json")
    with pytest.raises(ValueError, match="pipeline_state.json"):
        pipeline.read_state(lay)


def test_set_overrides_reach_every_notebook_and_bad_keys_stop_early(tmp_path, capsys):
    lay = Layout.for_run("smoke", "t", reports_root=tmp_path)
    series = pipeline.standard_series(lay, overrides=cli.parse_sets(["rollout.max_response_tokens=64",
                                                                           "data.train_pools=dapo,gsm8k"]))
    # every notebook that resolves a config; 20 reads the config.json the stages trained with (#20: no unused parameters)
    assert all(r.parameters["overrides"] == {"rollout.max_response_tokens": 64, "data.train_pools": "dapo,gsm8k"}
               for r in series if r.name != "20_figures_and_tables")
    assert "overrides" not in series[-1].parameters and series[-1].name == "20_figures_and_tables"
    assert "overrides" not in pipeline.standard_series(lay)[0].parameters
    assert cli.main(["reproduce", "--profile", "smoke", "--set", "rollout.no_such_key=1",
                          "--reports-root", str(tmp_path)]) == 2
    assert "rollout.no_such_key" in capsys.readouterr().err
    with pytest.raises(ValueError, match="key=value"):
        cli.parse_sets(["novalue"])


def test_kernels_get_the_kernel_env_without_overriding_the_user(tmp_path, make_notebook, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    nb = make_notebook(tmp_path / "src" / "env.ipynb", 'run_dir = ""',
                       "import os\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True)\n"
                       "Path(run_dir, 'env.txt').write_text(' '.join(os.environ.get(k, '-') for k in "
                       "('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', 'HF_HUB_DISABLE_PROGRESS_BARS')))")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    run_series([NotebookRun(nb, {"run_dir": lay.dir("e")})], lay, progress_bar=False, echo=lambda s: None)
    assert (lay.root / "e" / "env.txt").read_text() == "- 10000 1"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice wins: no bounded spin added
    run_series([NotebookRun(nb, {"run_dir": lay.dir("u")})], lay, progress_bar=False, echo=lambda s: None)
    assert (lay.root / "u" / "env.txt").read_text() == "ACTIVE - 1"
    import os

    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ and "GOMP_SPINCOUNT" not in os.environ  # restored


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_hanging_cell_is_killed_and_named(tmp_path, make_notebook):
    nb = make_notebook(tmp_path / "src" / "hang.ipynb", 'run_dir = ""', "x = 1", "import time\ntime.sleep(60)")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    with pytest.raises(PipelineError) as info:
        run_series([NotebookRun(nb, {"run_dir": ""})], lay, progress_bar=False, echo=lambda s: None, cell_timeout_s=3)
    assert info.value.notebook == "hang" and info.value.cell_index == 4
    assert "import time" in str(info.value) and "Timeout" in str(info.value)


def test_a_killed_kernel_fails_the_notebook_and_marks_what_did_not_run(tmp_path, make_notebook):
    """Issue #17: papermill left the killed cell and every later cell 'completed'; now the killed
    cell is 'failed' (with an error output) and the later ones 'pending' with no outputs."""
    nb = make_notebook(tmp_path / "src" / "oom.ipynb", 'run_dir = ""', "print('loaded')",
                       "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does",
                       "print('never')", "z = 3")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    with pytest.raises(PipelineError) as info:
        run_series([NotebookRun(nb, {"run_dir": ""})], lay, progress_bar=False, echo=lambda s: None)
    assert info.value.notebook == "oom" and info.value.cell_index == 4
    assert "failed in cell 4 `import os, signal`" in str(info.value) and "DeadKernelError" in str(info.value)
    out = nbformat.read(lay.executed / "oom.ipynb", as_version=4)
    status = [c.metadata.get("papermill", {}).get("status") for c in out.cells]
    assert status[:4] == ["completed"] * 4 and status[4] == "failed" and status[5:] == ["pending", "pending"]
    assert [o.get("ename") for o in out.cells[4].outputs] == ["DeadKernelError"]
    assert all(c.outputs == [] and c.execution_count is None for c in out.cells[5:])
    assert out.metadata["kit_pipeline"]["failed_cell"] == 4 and "Kernel died" in out.metadata["kit_pipeline"]["error"]
    assert json.loads(lay.state_path.read_text())["oom"]["status"] == "failed"
    # review r17: the added error output had an empty traceback, which is what nbconvert prints, so
    # the report showed an empty red box where the cell died
    from nbconvert import LatexExporter

    latex, _ = LatexExporter().from_notebook_node(out)
    assert "this cell did not finish" in latex


def test_an_exception_keeps_its_traceback_and_marks_the_right_cell(tmp_path, make_notebook):
    """Review r17: papermill inserts two markdown cells into a notebook that raised (an error banner
    first, an anchor before the failing cell), so the index it reports is off by one in the
    executed file: the injected-parameters cell was marked failed and the failing cell, traceback
    and all, was emptied as 'not run'. And the error saved for the report was cut at the first
    ': ' of the message, which falls inside the cell's first line here."""
    nb = make_notebook(tmp_path / "src" / "raise.ipynb", 'run_dir = ""', "print('first')",
                       "table = {'a': 1}; raise KeyError('k: v')", "print('never')")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    with pytest.raises(PipelineError) as info:
        run_series([NotebookRun(nb, {"run_dir": ""})], lay, progress_bar=False, echo=lambda s: None)
    assert info.value.cell_index == 4 and "KeyError" in str(info.value)
    out = nbformat.read(lay.executed / "raise.ipynb", as_version=4)
    failed = [i for i, c in enumerate(out.cells) if c.metadata.get("papermill", {}).get("status") == "failed"]
    assert len(failed) == 1
    cell = out.cells[failed[0]]
    assert cell.source.startswith("table = {'a': 1}")
    assert [o.get("ename") for o in cell.outputs] == ["KeyError"] and cell.outputs[0].traceback
    injected = [c for c in out.cells if c.source.startswith("# Parameters")][0]
    assert injected.metadata.papermill.status == "completed" and injected.execution_count is not None
    never = [c for c in out.cells if c.source == "print('never')"][0]
    assert never.metadata.papermill.status == "pending" and never.outputs == []
    assert out.metadata["kit_pipeline"]["error"] == "KeyError: 'k: v'"
    assert out.metadata["kit_pipeline"]["failed_cell"] == failed[0]


def test_the_command_line_applies_the_profile_cell_timeout(monkeypatch, tmp_path):
    seen: list = []
    monkeypatch.setattr(pipeline, "run_series", lambda *a, **kw: seen.append(kw["cell_timeout_s"]) or [])
    base = ["reproduce", "--profile", "tiny", "--run", "t", "--reports-root", str(tmp_path), "--no-report"]
    assert cli.main(base) == 0 and seen[-1] == pipeline.default_cell_timeout("tiny") == 1800
    assert cli.main(base + ["--cell-timeout", "45"]) == 0 and seen[-1] == 45
    assert cli.main(base + ["--cell-timeout", "0"]) == 0 and seen[-1] == 0  # no limit
    assert pipeline.default_cell_timeout("paper-14b") >= 86400
    assert pipeline.default_cell_timeout("smoke") < pipeline.default_cell_timeout("tiny")


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_each_notebook_gets_its_cpu_seconds_and_the_run_a_times_table(tmp_path, make_notebook):
    """Wall time on a shared machine is an upper bound; the runner also records the CPU seconds
    of each notebook's kernel (children's rusage) and prints a table at the end (issue #16)."""
    src = tmp_path / "src"
    busy = make_notebook(src / "busy.ipynb", 'run_dir = ""',
                         WRITE + "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass")
    idle = make_notebook(src / "idle.ipynb", 'run_dir = ""', WRITE + "import time\ntime.sleep(1.0)")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(busy, {"run_dir": lay.dir("busy")}, (lay.dir("busy"),)),
            NotebookRun(idle, {"run_dir": lay.dir("idle")}, (lay.dir("idle"),))]
    lines = []
    recs = run_series(runs, lay, progress_bar=False, echo=lines.append)
    by = {r["notebook"]: r for r in recs}
    assert by["busy"]["cpu_seconds"] >= 0.9, by  # the kernel's busy second is counted
    assert by["idle"]["cpu_seconds"] < by["busy"]["cpu_seconds"] - 0.5, by  # sleeping is not
    assert all(r["seconds"] >= r["cpu_seconds"] * 0.5 for r in recs)
    assert "CPU s" in lines[1] and "load average" in lines[1]
    state = pipeline.read_state(lay)
    assert state["busy"]["cpu_seconds"] == pytest.approx(by["busy"]["cpu_seconds"])
    # the machine's busy CPU seconds while each ran (/proc/stat, every process): at least the kernel's own
    assert by["busy"]["machine_cpu_seconds"] >= 0.9 and state["idle"]["machine_cpu_seconds"] >= 0
    table = pipeline.times_table(recs)
    assert "busy" in table and "idle" in table and "total" in table
    # a second invocation skips both and the table shows the earlier times
    again = run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    table2 = pipeline.times_table(again)
    assert table2.count("earlier") == 2 and f"{by['busy']['cpu_seconds']:.0f}" in table2.splitlines()[1]


def test_cores_busy_line_gives_the_counted_cpu_the_machines_busy_share_and_the_wall_time_floor():
    """Issue #16: the end of a run says how much CPU it counted, how busy the machine's cores were
    (every process: the count misses the sandbox's per-call children) and the least wall time
    that much work allows, so a slow run reads as "too much work" or as "cores left idle"."""
    recs = [{"notebook": "a", "status": "done", "seconds": 300.0, "cpu_seconds": 500.0},
            {"notebook": "b", "status": "done", "seconds": 900.0, "cpu_seconds": 1300.0},
            {"notebook": "c", "status": "skipped", "earlier_seconds": 50.0, "earlier_cpu_seconds": 99.0}]
    line = pipeline.cores_busy_line(recs, 1200.0, cores=2, machine_busy_s=2160.0)
    assert "1800 CPU s counted" in line and "the 2 cores were busy 2160 CPU s" in line and "= 90% of 1200 s" in line
    assert "if all of it was this run's, no order finishes it under 1080 s on 2 cores" in line
    assert pipeline.cores_busy_line(recs, 1200.0, cores=2).endswith("the background job)")  # not measured


def test_host_speed_line_compares_the_cold_start_step_with_the_shipped_reference(tmp_path):
    """Issue #16: the same tiny SFT took 298-391 s on one VM in one day, so a run's wall time is
    printed with the host's speed beside it (the cold start's median step against the reference host's,
    kit/reference/host_speed.yaml)."""
    path = tmp_path / "metrics.jsonl"
    assert pipeline.host_speed_line(path, "tiny") is None  # no cold start here (linked, or VERL's)
    rows = [{"step": i, "loss": 1.0, "time_s": t, "threads": 2} for i, t in enumerate([0.50, 0.57, 9.0], 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    line = pipeline.host_speed_line(path, "tiny")
    ref = pipeline.timing.SFT_STEP_REFERENCE_S["tiny"][0]
    assert "host speed (cold start): median step 0.570 s over 3 steps, 3 at 2 threads: median 0.570 s" in line
    assert f"{0.57 / ref:.2f} times as long for the same steps" in line and "left out" not in line
    assert pipeline.host_speed_line(path, "smoke").endswith("over 3 steps")  # no reference for smoke
    assert "an earlier invocation's cold start" in pipeline.host_speed_line(path, "tiny", earlier=True)
    path.write_text(json.dumps(rows[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        pipeline.host_speed_line(path, "tiny")
    path.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    assert pipeline.host_speed_line(path, "tiny") is None  # no timed step


def test_host_speed_line_compares_steps_at_the_reference_threads_only(tmp_path):
    """A step the thread policy ran at one thread (another process held a core) measures load, not the
    host: one tiny run had 333 of 600 such steps, median 0.686 s over all, 0.480 s at 2 threads."""
    path = tmp_path / "metrics.jsonl"
    ref = pipeline.timing.SFT_STEP_REFERENCE_S["tiny"][0]
    rows = [{"time_s": 0.5, "threads": 2}] * 3 + [{"time_s": 0.9, "threads": 1}] * 4
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = pipeline.host_speed_line(path, "tiny")
    assert "median step 0.900 s over 7 steps, 3 at 2 threads: median 0.500 s" in line
    assert f"{0.5 / ref:.2f} times as long" in line and "4 steps at other thread counts left out" in line
    path.write_text(json.dumps({"time_s": 0.9, "threads": 1}) + "\n")
    assert "none at 2 threads, so not compared" in pipeline.host_speed_line(path, "tiny")
    path.write_text(json.dumps({"time_s": 0.5, "threads": 2}) + "\n")
    line = pipeline.host_speed_line(path, "tiny", overrides=["sft.batch_size", "algorithm.lr", "model.hidden_size"])
    assert line.endswith("--set sft.batch_size, model.hidden_size changes a step's work")
    for same_work in ("model.torch_threads", "sft.steps", "sft.lr"):
        assert "times as long" in pipeline.host_speed_line(path, "tiny", overrides=[same_work])


@pytest.mark.parametrize("body", [b"[1, 2]\n", b"3\n", b"null\n", b"\xff\xfe{}\n"])
def test_host_speed_line_names_the_file_for_rows_that_are_not_objects(tmp_path, body):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(body)
    with pytest.raises(ValueError, match=r"metrics.jsonl"):
        pipeline.host_speed_line(path, "tiny")


def test_host_speed_line_skips_times_that_are_not_finite_seconds(tmp_path):
    path = tmp_path / "metrics.jsonl"
    odd = ['{"time_s": true, "threads": 2}', '{"time_s": "0.5", "threads": 2}', '{"time_s": NaN, "threads": 2}',
           '{"time_s": Infinity, "threads": 2}', '{"time_s": -1, "threads": 2}', '{"time_s": 0.4, "threads": [2]}']
    path.write_text("\n".join(odd[:-1]) + "\n")
    assert pipeline.host_speed_line(path, "tiny") is None
    path.write_text("\n".join(odd) + "\n")  # the one good time, at an unreadable thread count
    assert "median step 0.400 s over 1 steps, none at 2 threads" in pipeline.host_speed_line(path, "tiny")


def test_a_damaged_sft_metrics_file_costs_only_the_host_speed_line(monkeypatch, tmp_path, capsys):
    """The line is printed after the run finished: whatever is in sft/metrics.jsonl, the run still ends
    with its summary line and exit code 0."""
    monkeypatch.setattr(pipeline, "run_series", lambda *a, **kw: [
        {"notebook": "02_cold_start_sft", "status": "done", "seconds": 1.0, "cpu_seconds": 1.0}])
    sft = tmp_path / "tiny" / "t" / "sft"
    sft.mkdir(parents=True)
    (sft / "metrics.jsonl").write_text('{"time_s": 0.4, "threads": 2}\n[0.4]\n')
    argv = ["reproduce", "--profile", "tiny", "--run", "t", "--reports-root", str(tmp_path), "--no-report"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "host speed: not read (" in out and "metrics.jsonl:2: expected a JSON object" in out
    assert out.rstrip().splitlines()[-1].startswith("kit.pipeline: all ")
    (sft / "metrics.jsonl").write_text('{"time_s": 0.4, "threads": 2}\n')
    monkeypatch.setattr(pipeline, "run_series", lambda *a, **kw: [
        {"notebook": "02_cold_start_sft", "status": "skipped", "seconds": 0.0}])
    assert cli.main(argv + ["--set", "sft.batch_size=8"]) == 0  # resumed: 02 ran in an earlier invocation
    out = capsys.readouterr().out
    assert "host speed (an earlier invocation's cold start)" in out and "--set sft.batch_size changes" in out


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc/stat (not Linux)")
def test_machine_busy_cpu_s_counts_this_process_spinning_on_its_own_cpus_only():
    assert pipeline.machine_busy_cpu_s(cpus=[]) is None and pipeline.machine_busy_cpu_s(cpus=[10**6]) is None
    before = pipeline.machine_busy_cpu_s()
    t = time.process_time()
    while time.process_time() - t < 0.5:
        pass
    after = pipeline.machine_busy_cpu_s()
    assert before is not None and after - before >= 0.4


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_log_output_streams_what_the_cells_print(tmp_path, make_notebook, capfd):
    # --log-output: papermill logs a cell's stdout at INFO, which Python drops without a handler, so
    # before the fix a papermill log showed no cell output and no progress bar at all
    a = make_notebook(tmp_path / "src" / "a.ipynb", 'run_dir = ""',
                      "import sys\nprint('cell says hello')\nprint('\\rbar 50%', end='', flush=True)\n"
                      "print('cell warns', file=sys.stderr)")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a")}, (lay.dir("a"),))]
    logger = logging.getLogger("papermill")
    level, handlers = logger.level, list(logger.handlers)
    run_series(runs, lay, progress_bar=False, log_output=True, echo=lambda s: None)
    out = capfd.readouterr().out
    assert "cell says hello\n" in out and "\rbar 50%" in out and "cell warns" in out
    assert (logger.level, logger.handlers, logger.propagate) == (level, handlers, True)  # restored
    run_series(runs, lay, progress_bar=False, force=True, echo=lambda s: None)
    assert "cell says hello" not in capfd.readouterr().out  # without --log-output: the executed notebook only


def test_step_reference_comes_from_the_shipped_file_and_bad_files_are_named(tmp_path):
    ref = pipeline.timing.load_step_reference()
    assert ref["tiny"][:2] == (0.380, 2) and ref == pipeline.timing.SFT_STEP_REFERENCE_S
    bad = tmp_path / "host.yaml"
    bad.write_text("tiny:\n  step_s: 0\n  threads: 2\n  where: x\n")
    with pytest.raises(ValueError, match=r"host.yaml: profile 'tiny': step_s must be > 0"):
        pipeline.timing.load_step_reference(bad)
    bad.write_text("tiny:\n  threads: 2\n")
    with pytest.raises(ValueError, match=r"host.yaml: profile 'tiny' needs step_s, threads and where"):
        pipeline.timing.load_step_reference(bad)
