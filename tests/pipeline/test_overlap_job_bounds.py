"""The bounds of notebook 06's background job (kit.pipeline.overlap, kit.chain.ablation_job), property by property:

- it never outlives the runner: a runner ended by SIGTERM (``timeout``, a CI cancel, ``kill``) or SIGHUP
  (the terminal closed) stops the job's whole process group, so no later invocation finds a second job
  training the same arms;
- the cell limit bounds it: ``--cell-timeout`` limits the runner's wait for the job, as it limits a cell;
- bad parameters exit 2 with the missing key named, as ``python -m kit.chain.ablation_job`` documents;
- reruns follow the series order: a notebook after 06 in the series (07, 08) rerun does not retrain the
  ablation, though 06 executes after them;
- its seconds are its run time (``BackgroundRun.seconds``, times_table's "its training ran N s"), not the
  time until the runner reaped it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from doubles import write_notebook

from kit.pipeline import Layout, NotebookRun, PipelineError, overlap, run_series

#: a job that records its pid and then sleeps (a training that is still running)
HANG = ("import json, os, sys, time\nfrom pathlib import Path\np = json.loads(sys.argv[-1])\n"
        "Path(p['run_dir']).mkdir(parents=True, exist_ok=True)\n"
        "Path(p['run_dir'], 'job.pid').write_text(str(os.getpid()))\ntime.sleep(120)\n")
WRITE = "from pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False


def _series(tmp_path: Path, c_sleep: float) -> tuple[list[NotebookRun], Layout]:
    """a -> b (its job starts after a and hangs) -> c (sleeps ``c_sleep`` s) -> d (reads b's folder)."""
    src, lay = tmp_path / "src", Layout(root=tmp_path / "out", profile="tiny")
    a = write_notebook(src / "a.ipynb", 'run_dir = ""', WRITE)
    b = write_notebook(src / "b.ipynb", 'run_dir = ""', WRITE)
    c = write_notebook(src / "c.ipynb", 'run_dir = ""', WRITE + f"import time\ntime.sleep({c_sleep})")
    d = write_notebook(src / "d.ipynb", 'run_dir = ""\nb_dir = ""', WRITE)
    job = overlap.Background((sys.executable, "-c", HANG), after="a")
    return [NotebookRun(a, {"run_dir": lay.dir("a")}, (lay.dir("a"),)),
            NotebookRun(b, {"run_dir": lay.dir("b")}, (lay.dir("b"),), job),
            NotebookRun(c, {"run_dir": lay.dir("c")}, (lay.dir("c"),)),
            NotebookRun(d, {"run_dir": lay.dir("d"), "b_dir": lay.dir("b")}, (lay.dir("d"),))], lay


def _wait_for(path: Path, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


# ------------------------------------------------ it never outlives the runner


@pytest.mark.slow  # two kernel starts and a stop: ~25 s each while it fails
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_runner_ended_by_a_signal_leaves_no_background_job(tmp_path, sig):
    runs, lay = _series(tmp_path, c_sleep=60)
    spec = tmp_path / "series.json"
    spec.write_text(json.dumps({"root": str(lay.root), "runs": [
        {"source": str(nb.source), "parameters": nb.parameters, "outputs": list(nb.outputs),
         "job": list(nb.background.argv) if nb.background else None} for nb in runs]}))
    runner = textwrap.dedent("""
        import json, signal, sys
        from pathlib import Path
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a terminal: under nohup (CI) it arrives ignored
        from kit.pipeline import overlap
        from kit.pipeline import Layout, NotebookRun, run_series
        s = json.loads(Path(sys.argv[1]).read_text())
        runs = [NotebookRun(Path(r["source"]), r["parameters"], tuple(r["outputs"]),
                            overlap.Background(tuple(r["job"]), after="a") if r["job"] else None) for r in s["runs"]]
        run_series(runs, Layout(root=Path(s["root"]), profile="tiny"), progress_bar=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", runner, str(spec)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    pid_file, job_pid = lay.root / "b" / "job.pid", None
    try:
        assert _wait_for(pid_file, 120), "the background job never started"
        job_pid = int(pid_file.read_text())
        time.sleep(1.0)  # the runner is now in notebook c
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.time() + overlap.STOP_GRACE_S + 3
        while _alive(job_pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(job_pid), f"background job {job_pid} still running after the runner got {sig.name}"
    finally:
        for pid in (job_pid,):
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:  # the runner's process group (its notebook kernel) may still be there
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ------------------------------------------------ the cell limit bounds it


@pytest.mark.slow  # waits 45 s for the runner while it fails
def test_a_hanging_background_job_is_bounded_by_the_cell_timeout(tmp_path):
    runs, lay = _series(tmp_path, c_sleep=0)
    result: dict[str, BaseException | None] = {}

    def target():
        try:
            run_series(runs, lay, progress_bar=False, cell_timeout_s=5, echo=lambda s: None)
            result["error"] = None
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            result["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(45)  # a, c: kernel starts; then b waits on its job: at most 5 s (the cell limit)
    hung = t.is_alive()
    pid_file = lay.root / "b" / "job.pid"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # lets the thread finish
    t.join(30)
    assert not hung, "run_series still waited for the hanging job 45 s (cell limit: 5 s)"
    assert isinstance(result.get("error"), PipelineError)


# ------------------------------------------------ bad parameters exit 2


def test_the_ablation_job_exits_2_on_a_missing_parameter(capsys):
    from kit.chain import ablation_job

    assert ablation_job.main(["{}"]) == 2
    assert "profile" in capsys.readouterr().err


# ------------------------------------------------ reruns follow the series order

#: a job that writes its notebook's product and exits 0
DONE_JOB = ("import json, sys\nfrom pathlib import Path\np = json.loads(sys.argv[-1])\n"
            "Path(p['run_dir']).mkdir(parents=True, exist_ok=True)\n"
            "Path(p['run_dir'], 'product.txt').write_text('trained by the job')\n")


@pytest.mark.slow  # two invocations of a four-notebook series (~7 kernel starts)
def test_rerunning_a_notebook_after_it_in_the_series_does_not_rerun_the_deferred_notebook(tmp_path):
    src, lay = tmp_path / "src", Layout(root=tmp_path / "out", profile="tiny")
    a = write_notebook(src / "a.ipynb", 'run_dir = ""', WRITE)
    b = write_notebook(src / "b.ipynb", 'run_dir = ""', WRITE + "p = Path(run_dir, 'product.txt')\n"
                       "if not p.exists():\n    p.write_text('trained by the notebook')")
    c = write_notebook(src / "c.ipynb", 'run_dir = ""', WRITE)
    d = write_notebook(src / "d.ipynb", 'run_dir = ""\nb_dir = ""', WRITE)
    job = overlap.Background((sys.executable, "-c", DONE_JOB), after="a")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a")}, (lay.dir("a"),)),
            NotebookRun(b, {"run_dir": lay.dir("b")}, (lay.dir("b"),), job),
            NotebookRun(c, {"run_dir": lay.dir("c")}, (lay.dir("c"),)),
            NotebookRun(d, {"run_dir": lay.dir("d"), "b_dir": lay.dir("b")}, (lay.dir("d"),))]
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    write_notebook(c, 'run_dir = ""', WRITE + "x = 1  # edited")  # c (after b in the series) changes
    again = {r["notebook"]: r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lambda s: None)}
    assert again["c"] == "done" and again["b"] == "skipped", again
    assert (lay.root / "b" / "product.txt").read_text() == "trained by the job"


# ------------------------------------------------ its seconds are its run time


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_job_seconds_are_its_run_time_not_the_time_until_it_was_joined(tmp_path):
    job = overlap.start("b", overlap.Background((sys.executable, "-c", "pass"), after="a"), {}, tmp_path / "b.log")
    time.sleep(3.0)  # the job exits at once; the runner is busy with other notebooks
    assert job.join() == 0
    assert job.seconds < 2.0, f"the job ran about 0.1 s but its seconds say {job.seconds:.1f}"
