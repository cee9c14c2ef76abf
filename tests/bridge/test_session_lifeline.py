"""Issue #44 defect 8: a VERL CPU session dies with the process that started it.

A small starter process opens a session through the real code path (``runner.run_session``: the
``unshare`` namespace, ``kit.bridge.verl_cpu.session`` as its PID 1), without Ray (``start_ray=False``,
as ``test_verl_cpu_runtime`` does) and with a launch that daemonises a sleeper as Ray's daemons do.
The test SIGKILLs the starter (what a test timeout or a killed notebook kernel does) and requires
every process of the session gone within a bounded time.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

pytest.importorskip("verl")

from kit.bridge.verl_cpu import ray_local  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                                reason="needs unshare and ip")

GONE_WITHIN_S = 20.0  # SIGTERM, 2 s grace, SIGKILL, PID 1 exits; seconds, with room for a loaded machine


def _with_token(token: str) -> list[int]:
    """Host PIDs whose command line contains ``token``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(token in a for a in p.info["cmdline"] or []):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _wait(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_killing_the_starter_ends_the_session(tmp_path):
    token = f"kit-lifeline-{uuid.uuid4().hex[:8]}"  # names every process of this session
    ready = tmp_path / "ready"
    # the launch: a daemonised sleeper in its own session (as `ray start` leaves its daemons), then sleep
    launch = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{token}"], start_new_session=True)
        open({str(ready)!r}, "w").write("up")
        time.sleep(600)
    """)
    starter = textwrap.dedent(f"""
        import sys
        from kit.bridge.verl_cpu import runner
        ln = runner.Launch("sleeper", [sys.executable, "-c", {launch!r}, "{token}"], {str(tmp_path / "sleeper.log")!r})
        runner.run_session([ln], {str(tmp_path / "s")!r}, start_ray=False, timeout_s=600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", starter], start_new_session=True)
    try:
        _wait(ready.exists, 120, "the session's launch to start")
        ns = json.loads((tmp_path / "s" / "session.json").read_text())["pid_namespace"]
        assert len(set(_with_token(token)) - {proc.pid}) == 2  # the launch and its daemonised sleeper
        assert len(ray_local.processes_in_namespace(ns)) >= 3  # PID 1 (kit's session), the launch, the sleeper
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        _wait(lambda: not ray_local.processes_in_namespace(ns) and not _with_token(token), GONE_WITHIN_S,
              "the session's processes to end after its starter was killed")
        took = time.monotonic() - t0
        assert not _with_token(str(tmp_path / "s" / "session_spec.json"))  # nor the unshare process
        info = json.loads((tmp_path / "s" / "session.json").read_text())
        assert info["error"].startswith("starter_gone")
        print(f"session gone {took:.1f} s after its starter was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _with_token(token):  # leave nothing behind if the test failed
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_a_session_whose_starter_lives_runs_to_its_end(tmp_path):
    # the lifeline does not end a session early: the starter alive, the launch's exit status comes back
    from kit.bridge.verl_cpu import runner

    ln = runner.Launch("ok", [sys.executable, "-c", "import time; time.sleep(1.5); print('done')"],
                       str(tmp_path / "ok.log"))
    res = runner.run_session([ln], tmp_path / "s", start_ray=False, timeout_s=120)
    assert res.codes == {"ok": 0} and res.ok and res.orphans == []
    assert (tmp_path / "ok.log").read_text().strip() == "done"
