"""kit.pipeline as a package of cohesive modules (the series runner, failures, the VERL runtime,
the command line): every name the one-file module had is still importable from ``kit.pipeline``,
``python -m kit reproduce`` runs it, and no module passes the style's ~400 lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit import pipeline, plan
from kit.config import load

ROOT = Path(__file__).resolve().parents[2]
#: the public names of kit/pipeline.py before the split (its own and the ones callers took from it)
ONE_FILE_NAMES = ("CELL_TIMEOUT_S", "KERNEL_ENV", "NOTEBOOK_DIR", "OTHER_PROFILE_CELL_TIMEOUT_S", "SERIES",
                  "VERL_SESSION_DIR", "ConfigError", "Layout", "NotebookRun", "PipelineError", "available_profiles",
                  "children_cpu_s", "default_cell_timeout", "dry_run_text", "load", "mark_not_run",
                  "read_state", "reproduce", "run_in_verl_cpu_session", "run_series", "series_parameters", "standard_series",
                  "times_table")


def test_every_name_of_the_one_file_module_is_still_exported():
    assert [n for n in ONE_FILE_NAMES if not hasattr(pipeline, n)] == []
    assert set(ONE_FILE_NAMES) <= set(pipeline.__all__)
    assert all(hasattr(pipeline, n) for n in pipeline.__all__)
    assert pipeline.default_cell_timeout("smoke") == pipeline.CELL_TIMEOUT_S["smoke"]


def test_each_module_holds_one_concept_under_400_lines():
    files = {f.name: len(f.read_text().splitlines()) for f in (ROOT / "kit" / "pipeline").glob("*.py")}
    assert set(files) == {"__init__.py", "series.py", "failures.py", "timing.py", "verl_runtime.py", "kernels.py",
                          "compare.py", "lock.py", "seeds.py", "fanout.py", "overlap.py", "state.py"}
    assert {name: n for name, n in files.items() if n > 400} == {}
    assert not (ROOT / "kit" / "pipeline.py").exists()


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_command_line_runs_the_package(tmp_path):
    """``python -m kit reproduce`` is the one entry point (issue #31: ``python -m kit.pipeline`` is gone)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "kit", "reproduce", "--profile", "smoke", "--run", "t", "--dry-run",
                          "--reports-root", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    assert "kit.pipeline (dry run): profile smoke" in res.stdout
    n = len(plan.series(load("smoke", write=False).stages.names))
    assert f"[{n}/{n}] 20_figures_and_tables (runs: not run yet):" in res.stdout  # the studies (10-12) run before it
    assert not any(tmp_path.iterdir())
