"""One writer per run folder (kit.pipeline.lock): a second reproduce into a folder another process is
writing stops at once, names the holder, and runs nothing; a dead holder leaves no lock behind."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kit import cli
from kit.pipeline.lock import LOCK_NAME, RunLocked, run_lock

HOLD = "import sys, time\nfrom kit.pipeline.lock import run_lock\nwith run_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_second_run_into_a_held_folder_stops_and_runs_nothing(tmp_path, capsys):
    root = tmp_path / "reports"
    run = root / "smoke" / "r"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code = cli.main(["reproduce", "--profile", "smoke", "--run", "r", "--reports-root", str(root)])
        err = capsys.readouterr().err
        assert code == 2 and f"pid {holder.pid}" in err and "Nothing was run" in err
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # no notebook started
        with pytest.raises(RunLocked, match=str(holder.pid)):
            with run_lock(run):
                pass
    finally:
        holder.kill()
        holder.wait()
    t0 = time.monotonic()
    with run_lock(run):  # the killed holder's lock went with it
        assert time.monotonic() - t0 < 5
