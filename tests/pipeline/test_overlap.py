"""The runner's background jobs (kit.pipeline.overlap): a notebook's training starts once its inputs are
ready, runs beside later notebooks, and the notebook itself runs just before the first notebook
that reads its folder; a failure stops the job; a failed job leaves the work to the notebook."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from kit import pipeline
from kit.chain import ablation_job
from kit.pipeline import Layout, NotebookRun, PipelineError, overlap, run_series
from kit.studies.retool import job as retool_job

WRITE = "from pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"

#: the job of notebook b: waits (at most 60 s) until notebook c has started, proving it runs beside
#: c, then writes b's product; with FAIL it exits 1 at once; with HANG it records its pid and sleeps
JOB = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    p = json.loads(sys.argv[-1])
    run = Path(p["run_dir"]); run.mkdir(parents=True, exist_ok=True)
    (run / "job.pid").write_text(str(os.getpid()))
    if p.get("mode") == "fail":
        sys.exit(1)
    if p.get("mode") == "hang":
        time.sleep(600)
    if p.get("mode") == "burn":  # CPU work of its own, then done while c still runs (c waits for it)
        t = time.process_time()
        while time.process_time() - t < 0.8:
            pass
    deadline = time.time() + 60
    while not Path(p["c_dir"], "started").exists():
        if time.time() > deadline:
            sys.exit(3)
        time.sleep(0.1)
    (run / "product.txt").write_text("trained by the job")
""")


def _series(tmp_path, make_notebook, mode="ok", c_fails=False):
    """a -> b (job after a) -> c -> d (reads b's folder)."""
    src = tmp_path / "src"
    lay = Layout(root=tmp_path / "out", profile="tiny")
    a = make_notebook(src / "a.ipynb", 'run_dir = ""', WRITE + "Path(run_dir, 'a.txt').write_text('a')")
    # b does the work itself when its job did not (a failed job): the notebook stays the source of truth
    b = make_notebook(src / "b.ipynb", 'run_dir = ""\nc_dir = ""\nmode = ""',
                      WRITE + "p = Path(run_dir, 'product.txt')\n"
                              "if not p.exists():\n    p.write_text('trained by the notebook')")
    c = make_notebook(src / "c.ipynb", 'run_dir = ""',
                      WRITE + "import time\nPath(run_dir, 'started').write_text('1')\ntime.sleep(1.0)"
                      + ("\nraise RuntimeError('planted failure')" if c_fails else ""))
    d = make_notebook(src / "d.ipynb", 'run_dir = ""\nb_dir = ""',
                      WRITE + "Path(run_dir, 'd.txt').write_text(Path(b_dir, 'product.txt').read_text())")
    job = overlap.Background((sys.executable, "-c", JOB), after="a")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a")}, (lay.dir("a"),)),
            NotebookRun(b, {"run_dir": lay.dir("b"), "c_dir": lay.dir("c"), "mode": mode}, (lay.dir("b"),), job),
            NotebookRun(c, {"run_dir": lay.dir("c")}, (lay.dir("c"),)),
            NotebookRun(d, {"run_dir": lay.dir("d"), "b_dir": lay.dir("b")}, (lay.dir("d"),))]
    return runs, lay


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_execution_order_defers_a_notebook_to_its_first_reader():
    names = ["a", "b", "c", "d", "e"]
    params = [{"run_dir": "/r/a"}, {"run_dir": "/r/b"}, {"run_dir": "/r/c"},
              {"run_dir": "/r/d", "dirs": ["/r/c", "/r/b"]}, {"run_dir": "/r/e"}]
    assert overlap.execution_order(names, params, ["b"]) == [0, 2, 1, 3, 4]
    assert overlap.execution_order(names, params, []) == [0, 1, 2, 3, 4]
    assert overlap.execution_order(names[:3], params[:3], ["b"]) == [0, 2, 1]  # no reader: last


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_job_runs_beside_the_next_notebooks_and_the_notebook_uses_its_work(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook)
    lines: list[str] = []
    recs = run_series(runs, lay, progress_bar=False, echo=lines.append)
    # b ran after c (its job waited for c to start: it ran beside c) and before d, its reader
    assert [r["notebook"] for r in recs] == ["a", "c", "b", "d"]
    assert (lay.root / "b" / "product.txt").read_text() == "trained by the job"  # never cleared by b's run
    assert (lay.root / "d" / "d.txt").read_text() == "trained by the job"
    by = {r["notebook"]: r for r in recs}
    assert by["b"]["background_exit"] == 0 and by["b"]["background_seconds"] > 0
    assert any(line.startswith("[bg] b:") for line in lines)
    assert (lay.executed / "b.background.log").exists()
    state = pipeline.read_state(lay)
    assert state["b"]["status"] == "done" and state["b"]["background_exit"] == 0
    assert "background job" in pipeline.times_table(recs)
    # a second invocation skips everything and starts no job
    lines.clear()
    again = run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert [r["status"] for r in again] == ["skipped"] * 4 and not any("[bg]" in x for x in lines)


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_job_reaped_during_another_notebook_counts_for_its_own(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, mode="burn")
    src = tmp_path / "src"  # c waits until the job is done, so the job is reaped in c's window
    # b's folder is not a parameter of c2 (a parameter naming it would make c2 b's reader and run b first)
    c = make_notebook(src / "c2.ipynb", 'run_dir = ""',
                      WRITE + "import time\nPath(run_dir, 'started').write_text('1')\n"
                              "while not Path(run_dir).parent.joinpath('b', 'product.txt').exists():\n    time.sleep(0.05)\n"
                              "time.sleep(1.0)")
    assert lay.dir("b") == str(Path(lay.dir("c")).parent / "b")
    runs[2] = NotebookRun(c, {"run_dir": lay.dir("c")}, (lay.dir("c"),))
    recs = run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    assert [r["notebook"] for r in recs] == ["a", "c2", "b", "d"]  # the job ends, and is reaped, while c2 runs
    by = {r["notebook"]: r for r in recs}
    assert by["b"]["cpu_seconds"] >= 0.75  # the job's 0.8 CPU s, though it was reaped while c ran
    assert by["c2"]["cpu_seconds"] < by["b"]["cpu_seconds"] - 0.5


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_failed_job_leaves_the_work_to_the_notebook(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, mode="fail")
    lines: list[str] = []
    recs = run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert {r["notebook"]: r["background_exit"] for r in recs if "background_exit" in r} == {"b": 1}
    assert (lay.root / "d" / "d.txt").read_text() == "trained by the notebook"
    assert any("exit 1" in x and "trains what is missing itself" in x for x in lines)


def test_a_failing_notebook_stops_the_job_and_leaves_no_process(tmp_path, make_notebook):
    runs, lay = _series(tmp_path, make_notebook, mode="hang", c_fails=True)
    with pytest.raises(PipelineError, match="planted failure"):
        run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    pid = int((lay.root / "b" / "job.pid").read_text())
    assert not _alive(pid)
    state = pipeline.read_state(lay)
    assert state["c"]["status"] == "failed" and state["b"]["status"] == "running"


def test_standard_series_gives_06_its_job_only_where_it_cannot_change_a_result(tmp_path):
    lay = Layout(root=tmp_path / "r", profile="tiny")
    jobs = {nb.name: nb.background for nb in pipeline.standard_series(lay) if nb.background}
    assert list(jobs) == ["06_roc_ablation", "10_retool"]  # ReTool's PPO arms (issue #33) too
    assert {j.after for j in jobs.values()} == {"02_cold_start_sft"}
    assert not any(nb.background for nb in pipeline.standard_series(lay, overlap_jobs=False))
    # the main stage-1 run could be an arm (same budget and steps): 06 may copy it, so no job
    same = {"stages.stage1.max_response_tokens": 384, "stages.stage1.steps": 40}
    assert not any(nb.background for nb in pipeline.standard_series(lay, overrides=same))
    assert not any(nb.background for nb in pipeline.standard_series(lay, overrides={"runtime": "verl"}))
    text = pipeline.dry_run_text(pipeline.standard_series(lay), lay)
    assert "06_roc_ablation: its training starts as a background job once 02_cold_start_sft is done" in text
    assert "background" not in pipeline.dry_run_text(pipeline.standard_series(lay, overlap_jobs=False), lay)


def test_the_ablation_job_refuses_bad_parameters(capsys):
    assert ablation_job.main([]) == 2 and ablation_job.main(["not json"]) == 2 and ablation_job.main(["[1]"]) == 2
    assert retool_job.main([]) == 2 and retool_job.main(["{}"]) == 2
    assert "usage" in capsys.readouterr().err
    with pytest.raises(KeyError, match="init_dir"):
        ablation_job.run({"profile": "tiny", "seed": 0, "run_dir": "/tmp/x", "data_dir": "/tmp/y"})
