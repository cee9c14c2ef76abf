"""The session's smoke run (tests/pipeline/conftest.py) is built only when a selected test asserts it:
the browser test, selected alone (``-m browser``, ``-m "not slow"``, its file), runs notebooks 01 and
02 for itself instead of the whole chain, as the README says."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kit.config.paths import REPO_ROOT


class _Item:
    def __init__(self, *fixturenames: str) -> None:
        self.fixturenames = fixturenames


def test_the_smoke_run_is_shared_only_when_a_selected_test_asserts_it(smoke_run_wanted):
    chain, lab = _Item("smoke_run", "request"), _Item("lab", "browser", "upstream", "smoke_run_wanted")
    assert smoke_run_wanted([lab, chain]) and smoke_run_wanted([chain])
    assert not smoke_run_wanted([lab]) and not smoke_run_wanted([])


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_browser_test_alone_plans_no_smoke_chain():
    """``--setup-plan`` lists the fixtures a selection sets up without running any: the browser test's
    own list names no smoke chain (it asks for one only when another selected test asserts it)."""
    plan = subprocess.run([sys.executable, "-m", "pytest", "tests/pipeline/test_browser_lab.py", "-m", "browser",
                           "--setup-plan", "-q", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "upstream" in plan.stdout and "test_notebook_03_runs_all_in_jupyterlab" in plan.stdout
    assert not re.search(r"\bsmoke_(run|chain)\b", plan.stdout), plan.stdout
