"""A call's outcome is decided by what it used, never by how busy the machine is (issue #41,
kit.sandbox.limits): CPU limit and used time are the model's timeout; the wall clock is a
backstop whose reaching (a starved call) is retried once, then infra_error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from kit.config import SandboxConfig
from kit.rollout.protocol import render_result
from kit.sandbox import SyncSandboxPool, ToolCall, isolation
from kit.sandbox import limits as lim_mod
from kit.sandbox.limits import Limits, limits, next_check, rlimit_cpu, used_time, verdict

OPTS = {"timeout_s": 10.0, "cpu_s": 10.0}


def test_limits_of_a_request():
    assert limits(OPTS, {}) == Limits(10.0, 10.0, 300.0)  # 30x the time limit
    assert limits(OPTS, {"timeout_s": 2.0}) == Limits(2.0, 2.0, 60.0)
    assert limits({**OPTS, "wall_factor": 4.0}, {"timeout_s": 0.5}) == Limits(0.5, 0.5, 5.5)  # the 5 s floor wins
    assert limits({"timeout_s": 10.0, "cpu_s": 3.0}, {}) == Limits(3.0, 10.0, 300.0)
    assert limits({**OPTS, "wall_factor": 1.5, "wall_floor_s": 0.0}, {"timeout_s": 2.0}).wall_s == 3.0
    assert rlimit_cpu(0.3) == (1, 2) and rlimit_cpu(10.0) == (10, 11)
    with pytest.raises(KeyError):
        limits({"timeout_s": 1.0}, {})


def test_verdict_tells_the_models_timeout_from_starvation():
    lim = Limits(10.0, 10.0, 40.0)
    # time.sleep(100): no CPU, no run-queue wait: all 10 s of wall clock are its own
    assert verdict(used_time(10.0, 0.0, 0.0), 10.0, lim) == "timeout"
    # a busy loop on an idle machine: its CPU reaches the limit
    assert verdict(used_time(10.0, 0.0, 10.0), 10.0, lim) == "timeout"
    # the same loop on a 3x loaded machine: 30 s of wall clock, 20.5 s waiting for a CPU: go on
    assert verdict(used_time(30.0, 20.5, 9.5), 30.0, lim) is None
    # 5x loaded: the backstop passes with 8 s used: starved, the machine's fault
    assert verdict(used_time(40.0, 32.0, 8.0), 40.0, lim) == "starved"
    # its own processes keep its first one waiting: their CPU counts, so it is its own timeout
    assert verdict(used_time(40.0, 32.0, 40.0), 40.0, lim) == "timeout"
    # no schedstat: the plain wall clock counts (the old rule)
    assert verdict(used_time(10.0, None, 0.1), 10.0, lim) == "timeout"
    assert verdict(10.0, 40.0, lim) == "timeout"  # a tie is not starvation
    assert next_check(0.0, 0.0, lim) == lim_mod.CHECK_S and next_check(9.995, 10.0, lim) == lim_mod.MIN_CHECK_S
    assert next_check(2.0, 39.5, lim) == pytest.approx(0.5)


def test_proc_readers_on_this_process():
    x = 0
    for i in range(300_000):  # burn a little CPU
        x += i
    assert lim_mod.cpu_seconds(os.getpid()) > 0.0
    assert lim_mod.cpu_seconds(2**22 + 12345) == 0.0 and lim_mod.run_delay(2**22 + 12345) is None
    if os.path.exists("/proc/self/schedstat"):
        d = lim_mod.run_delay(os.getpid())
        assert d is not None and d >= 0.0


@pytest.fixture(scope="module")
def short_pool(monkeypatch_module):
    """1 s limits, and a backstop of 2 s (injected: 2x, no floor)."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    monkeypatch_module.setattr(lim_mod, "WALL_FACTOR", 2.0)
    monkeypatch_module.setattr(lim_mod, "WALL_FLOOR_S", 0.0)
    p = SyncSandboxPool(SandboxConfig(isolation="bwrap", timeout_s=1.0, cpu_s=1.0, memory_mb=768, max_output_chars=2000,
                                      max_procs=32, num_workers=1, preimport=()))
    yield p
    p.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("code", ["import time\ntime.sleep(100)",  # blocked by choice
                                  "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)",  # stopped itself
                                  "import threading\nthreading.Event().wait()"])  # waits forever
def test_a_call_that_sleeps_or_blocks_is_the_models_timeout(short_pool, code):
    r = short_pool.run(ToolCall(code))
    assert r.status == "timeout" and "1 s time limit" in r.stderr, r
    assert r.cpu_s < 0.5 and 1.0 <= r.wall_s < 2.0, r  # killed at its 1 s of used time, before the backstop
    assert render_result(r, 1.0).endswith("did not finish within 1 s and was stopped.")


def test_a_call_that_ignores_sigxcpu_is_killed_by_the_hard_cpu_limit_as_a_timeout(short_pool):
    # a 5 s time limit, so the hard RLIMIT_CPU (1 s + 1) is what stops it: SIGKILL, still a timeout
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    r = short_pool.run(ToolCall(code, timeout_s=5.0))
    assert r.status == "timeout" and r.exit_code == -9 and r.cpu_s >= 1.0, r  # past the soft limit (SIGXCPU)


def _hogs(n: int) -> list[subprocess.Popen]:
    """``n`` busy processes on CPU 0, each in a session of its own: with autogroup scheduling
    (``kernel.sched_autogroup_enabled``) CPU time is shared between sessions, and every call is a
    session of its own (setsid), so hogs in one session would take only half of CPU 0 together."""
    return [subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"],
                             start_new_session=True) for _ in range(n)]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_call_starved_by_load_is_retried_then_infra_error(short_pool):
    """Six busy processes outside the sandbox share CPU 0 with a busy call pinned there: it gets
    about a seventh of the CPU, so after its 2 s backstop it has used ~0.3 s of its 1 s."""
    before = short_pool.stats()
    hogs = _hogs(6)
    try:
        r = short_pool.run(ToolCall("import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass"))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert r.status == "infra_error" and "starved of CPU by load" in r.stderr, r
    assert (r.stdout, r.value, r.exit_code) == ("", "", None)
    after = short_pool.stats()
    assert after.get("starved", 0) - before.get("starved", 0) == 2  # the try and its one retry
    assert after.get("retries", 0) - before.get("retries", 0) == 1
    assert render_result(r).startswith("The code could not be run: the execution service failed")


def test_the_cpu_of_all_its_processes_is_a_calls_used_time(monkeypatch):
    """Eight busy processes of one call: its first process gets an eighth of what the call gets, so
    its own time (wall clock minus waits for a CPU) would need >= 8 s to reach the 1 s limit; the CPU
    of all eight reaches it within a few seconds even on a loaded machine. Load a call makes itself
    is its own timeout, never blamed on the machine (a 20x backstop here keeps other load out of it)."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    monkeypatch.setattr(lim_mod, "WALL_FACTOR", 20.0)
    monkeypatch.setattr(lim_mod, "WALL_FLOOR_S", 0.0)
    code = "import os\nfor _ in range(7):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass"
    with SyncSandboxPool(SandboxConfig(isolation="bwrap", timeout_s=1.0, cpu_s=1.0, memory_mb=768, max_procs=32,
                                       num_workers=1, preimport=())) as pool:
        r = pool.run(ToolCall(code))
    assert r.status == "timeout" and "1 s time limit" in r.stderr, r
    assert r.wall_s < 8.0 and r.cpu_s < 0.9, r  # killed by the CPU of all of them, not its own



FORK_BURN = """import os, time
t0 = time.monotonic()
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
kids = []
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        burn({each})
        os._exit(0)
    kids.append(pid)
while kids and time.monotonic() - t0 < 2.5:  # wait for them, without reaping when {nowait}
    kids = [p for p in kids if os.waitid(os.P_PID, p, os.WEXITED | os.WNOHANG | {nowait}) is None]
    time.sleep(0.01)
print("late" if kids else "done")  # late: the machine is too busy for it to end before the first look"""


@pytest.mark.parametrize("reaped", [True, False], ids=["children-reaped", "children-left-as-zombies"])
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_multi_process_call_that_exits_between_two_looks_is_judged_at_exit(monkeypatch, reaped):
    """Eight children burn 0.6 s of CPU each (4.8 s in all, past the 3 s limit) and the call exits
    after ~2.4 s on 2 idle cores, before the first look at its used time (3 s in; the check interval
    is made 30 s here, so no look falls earlier). It is the model's timeout all the same, judged on
    exit by the CPU of all its processes (kit.sandbox.limits.verdict_at_exit), whether it reaped its
    children or left them as zombies; two children of 0.3 s end ok. On a machine too busy for the
    children to finish in 2.5 s the call gives up ("late") and the test skips: a look would judge it."""
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    monkeypatch.setattr(lim_mod, "CHECK_S", 30.0)
    monkeypatch.setattr(lim_mod, "WALL_FACTOR", 20.0)  # load must not turn it into a starved call
    nowait = "0" if reaped else "os.WNOWAIT"
    with SyncSandboxPool(SandboxConfig(isolation="bwrap", timeout_s=3.0, cpu_s=3.0, memory_mb=768, max_procs=32,
                                       num_workers=1, preimport=())) as pool:
        over = pool.run(ToolCall(FORK_BURN.format(n=8, each=0.6, nowait=nowait)))
        under = pool.run(ToolCall(FORK_BURN.format(n=2, each=0.3, nowait=nowait)))
    if "late\n" in (over.stdout, under.stdout):
        pytest.skip(f"the machine was too busy for the calls to end before the first look: {over}, {under}")
    assert under.status == "ok" and under.stdout == "done\n", under
    assert over.stdout == "done\n" and over.wall_s < 3.0, over  # it ran to its end, before any look
    assert over.status == "timeout" and "3 s time limit" in over.stderr, over


@pytest.mark.parametrize(("cpu_all", "status"), [(3.5, "timeout"), (2.5, "ok")])
def test_the_worker_judges_a_call_on_the_cpu_its_processes_used_at_exit(monkeypatch, tmp_path, cpu_all, status):
    """The worker loop itself, in this process (no bwrap, no load to depend on): a call that exits at
    once, long before the first look (3 s in), whose processes' CPU reads ``cpu_all`` when it exits."""
    from kit.sandbox.worker import Worker

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    w = Worker({"timeout_s": 3.0, "cpu_s": 3.0, "memory_mb": 1 << 20, "max_output_chars": 2000, "max_procs": 4096,
                "check_s": 30.0, "isolation": "none", "uid": None})
    monkeypatch.setattr(w, "_call_cpu", lambda pid: cpu_all)
    req = {"kind": "code", "code": "print('done')", "input": "", "timeout_s": None}
    out = w.run(req, json.dumps(req).encode())
    assert (out["status"], out["stdout"]) == (status, "done\n") and out["wall_s"] < 3.0, out


@pytest.mark.parametrize("code", ["print(1266 * 139", "print(math.lcm(459292, 14528))", "print('done')"])
def test_a_worker_kept_off_its_cpu_does_not_charge_its_wait_to_a_call_that_had_exited(monkeypatch, tmp_path, code):
    """The worker loop in this process, kept from running after it handed the call over: it reads the
    call's run-queue wait only once the call has exited, then "sleeps" past the 0.5 s limit, so its first
    look falls after the call's end. The call is judged at exit on its CPU (a few ms), not charged the
    worker's wait as its own time. Before the fix both error calls, copied from a series run at nice 19
    (2026-12-07, seed 102's ablation), ended ``timeout`` this way."""
    from kit.sandbox import worker as worker_mod

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    w = worker_mod.Worker({"timeout_s": 0.5, "cpu_s": 0.5, "memory_mb": 1 << 20, "max_output_chars": 2000,
                           "max_procs": 4096, "check_s": 0.05, "isolation": "none", "uid": None})
    real, first = worker_mod.run_delay, []

    def starved_worker(pid):
        if not first:  # right after the hand-over: the call runs to its end while the worker waits
            first.append(pid)
            deadline = time.monotonic() + 10.0
            while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                assert time.monotonic() < deadline, "the call did not exit within 10 s"
                time.sleep(0.005)
            time.sleep(0.8)  # past the call's 0.5 s limit before the worker's first look
        return real(pid)

    monkeypatch.setattr(worker_mod, "run_delay", starved_worker)
    req = {"kind": "code", "code": code, "input": "", "timeout_s": None}
    out = w.run(req, json.dumps(req).encode())
    assert first and out["wall_s"] >= 0.8, out  # the worker did look late
    assert out["status"] == ("ok" if code == "print('done')" else "error"), out
    assert "time limit" not in out["stderr"] and "Timeout" not in out["stderr"], out
