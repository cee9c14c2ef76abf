"""A new study is a package, a notebook, a claims section and one registry entry (issue #43): a throwaway
study from outside the kit (tests/studies/toy_study, registered by ``KIT_STUDIES`` alone) joins the
session's smoke series, which runs it, judges its claim and gives it a page of its own in the report.

The series is the session's finished smoke chain, copied: its notebooks are skipped as finished (a run
folder is relocatable, kit.pipeline.state), so only the toy notebook, 20 and the report run here."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.studies import KIT_STUDIES

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_study_from_outside_the_kit_runs_in_the_series_and_gets_its_page(smoke_run, tmp_path):
    lay, _ = smoke_run
    run = tmp_path / "reports" / lay.profile / "t"
    shutil.copytree(lay.root, run, symlinks=True)
    (run / "report.pdf").unlink(missing_ok=True)
    env = {**os.environ, "KIT_STUDIES": "toy_study.study:STUDY",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests" / "studies"), str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "kit", "reproduce", "--profile", lay.profile, "--run", "t",
                          "--reports-root", str(tmp_path / "reports"), "--cell-timeout", "600"],
                         capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ran = [line.split(":")[0].split("] ")[1] for line in res.stdout.splitlines()
           if line.startswith("[") and ": done in" in line]
    assert ran == ["19_toy", "20_figures_and_tables"], res.stdout[-3000:]  # the copied series was finished
    state = json.loads((run / "pipeline_state.json").read_text())
    assert state["19_toy"]["status"] == "done"
    assert state["20_figures_and_tables"]["parameters"]["study_dirs"]["toy"] == str(run / "toy")
    assert json.loads((run / "toy" / "summary.json").read_text())["heldout_n"] > 0
    assert (run / "figures" / "toy_figure.png").exists()
    doc = json.loads((run / "claims.json").read_text())
    (toy,) = [c for c in doc["claims"] if c["section"] == "Toy"]
    own = ROOT / "tests" / "studies" / "toy_study" / "claims.yaml"
    assert doc["study_claims_sha256"] == {"toy": hashlib.sha256(own.read_bytes()).hexdigest()}
    assert toy["id"] == "toy_heldout_reaches_the_claims" and toy["tests"][0]["value"] == 0.0
    assert toy["tests"][1]["kind"] == "toy_figures" and toy["tests"][1]["verdict"] == "reproduced"  # its own kind
    pages = subprocess.run(["pdfinfo", str(run / "summary.pdf")], capture_output=True, text=True, check=True).stdout
    # the kit's page, one per kit study (ReTool's, Agent-R's, any added inside the kit), the toy's
    assert int(re.search(r"^Pages:\s+(\d+)$", pages, re.M).group(1)) == 2 + len(KIT_STUDIES)
    page = str(2 + len(KIT_STUDIES))  # the toy's page comes after the kit's studies'
    last = subprocess.run(["pdftotext", "-f", page, "-l", page, str(run / "summary.pdf"), "-"],
                          capture_output=True, text=True, check=True).stdout
    assert "Toy study (a test fixture) on this run" in last
