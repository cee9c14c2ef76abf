"""README.md is the user's document (issue #31): short, without commit hashes, its claims table the file the
repository ships, and every code block marked ``bash runnable`` runs as written (dry runs where it would train).

The runnable blocks use the one command line ``python -m kit <verb>`` (reproduce, report, launch, prepare-data,
serve, selftest, config); ``test_runnable_blocks_run`` fails until that command line has every verb it calls.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLAIMS_FILE = "reports/claims_pooled.csv"  # the pooled table (issue #42: at least 5 untuned seeds)

#: a fenced block whose info string is ``bash runnable``: its body runs in the repository root
RUNNABLE = re.compile(r"^```bash runnable\n(.*?)^```", re.S | re.M)


def runnable_blocks(text: str) -> list[str]:
    return [m.group(1) for m in RUNNABLE.finditer(text)]


def markdown_table_after(text: str, marker: str) -> list[list[str]]:
    """The rows of the Markdown table right after the line ``marker`` (header first, the ``|---|`` line left
    out), each a list of stripped cells."""
    lines = text.splitlines()
    start = lines.index(marker) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not all(set(c) <= {"-", ":"} for c in cells):
            rows.append(cells)
    return rows


def test_readme_is_short_and_names_no_commit():
    text = README.read_text()
    assert len(text.encode()) < 16 * 1024, f"README.md is {len(text.encode())} bytes (limit 16 KB)"
    assert text.count("\n") <= 200
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", w)]
    assert not hashes, f"commit hashes in README.md (history goes to reports/LOG.md): {hashes}"


def test_readme_claims_tables_are_the_shipped_files():
    """Every ``<!-- claims-table: FILE -->`` marker is followed by FILE's rows, FILE a committed CSV."""
    text = README.read_text()
    files = re.findall(r"^<!-- claims-table: (\S+) -->$", text, re.M)
    assert CLAIMS_FILE in files
    for name in files:
        with (ROOT / name).open(newline="") as fh:
            shipped = [[c.strip() for c in row] for row in csv.reader(fh)]
        assert markdown_table_after(text, f"<!-- claims-table: {name} -->") == shipped, name


def test_readme_marks_runnable_blocks_and_every_other_command_block_is_plain():
    text = README.read_text()
    blocks = runnable_blocks(text)
    assert blocks and any("--dry-run" in b for b in blocks)
    for b in blocks:  # a runnable block must not train: reproduce and launch only as dry runs
        for line in b.splitlines():
            if re.search(r"python -m kit (reproduce|launch)\b", line):
                assert "--dry-run" in line, f"runnable README line would train: {line}"


@pytest.mark.parametrize("block", runnable_blocks(README.read_text()), ids=lambda b: b.splitlines()[0][:60])
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_runnable_blocks_run(block, tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}
    before = sorted(p.relative_to(ROOT) for p in (ROOT / "reports").rglob("*"))
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"README block failed (exit {proc.returncode}):\n{block}\n{proc.stdout[-3000:]}" \
                                 f"\n{proc.stderr[-3000:]}"
    assert sorted(p.relative_to(ROOT) for p in (ROOT / "reports").rglob("*")) == before, "a dry run wrote files"
