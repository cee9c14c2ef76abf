"""``kit reproduce`` with ``runtime=verl`` on this CPU runs the whole series in ONE kit session
(one Ray head for every VERL stage of 03-06: ``kit.pipeline.run_in_verl_cpu_session``); fast, no Ray.

The session itself is faked here (``runner.run_session``); the real one runs in
tests/bridge/test_verl_cpu_chain.py.
"""

from __future__ import annotations

import sys

import pytest

from kit import cli, pipeline
from kit.bridge.verl_cpu import runner

ARGV = ["reproduce", "--profile", "smoke", "--run", "v", "--set", "runtime=verl"]


@pytest.fixture
def fake_session(monkeypatch):
    """Records the launches ``run_session`` gets; the series must not run in this process."""
    calls = []

    def run_session(launches, out_dir, **kw):
        calls.append((list(launches), out_dir, kw))
        return runner.SessionResult(codes={"chain": 0}, timings={"ray_start_s": 1.0, "session_s": 2.0},
                                    sandbox_workers_max=2, sandbox_workers_steady=2, peak_rss_bytes=0,
                                    peak_pss_bytes=0, orphans=[], pid_namespace="pid:[1]", log_dir=str(out_dir))

    def no_series(*a, **k):
        raise AssertionError("the series ran outside the session")

    monkeypatch.setattr(runner, "run_session", run_session)
    monkeypatch.setattr(runner, "check_verl_version", lambda: runner.VERL_PIN)
    monkeypatch.setattr(runner, "require_cpu_machine", lambda: None)
    monkeypatch.setattr(pipeline, "run_series", no_series)
    monkeypatch.setenv(runner.DEVICE_ENV, "cpu")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_the_whole_series_is_one_launch_in_one_session(fake_session, tmp_path):
    assert cli.main([*ARGV, "--reports-root", str(tmp_path)]) == 0
    assert len(fake_session) == 1
    (launch,), out, kw = fake_session[0]
    assert launch.name == "chain" and launch.argv[:3] == [sys.executable, "-m", "kit"]
    assert launch.argv[3:] == [*ARGV, "--reports-root", str(tmp_path)]  # the same command, run inside
    assert out == tmp_path / "smoke" / "v" / pipeline.VERL_SESSION_DIR and kw["timeout_s"] > 10 * 900


def test_a_failed_session_is_exit_1(fake_session, monkeypatch, tmp_path):
    def broken(launches, out_dir, **kw):
        return runner.SessionResult(codes={}, timings={}, sandbox_workers_max=-1, sandbox_workers_steady=-1,
                                    peak_rss_bytes=-1, peak_pss_bytes=-1, orphans=[], pid_namespace="",
                                    log_dir=str(out_dir), error="Ray did not start")

    monkeypatch.setattr(runner, "run_session", broken)
    assert cli.main([*ARGV, "--reports-root", str(tmp_path)]) == 1


def test_no_session_for_the_local_runtime_the_gpu_device_or_inside_a_session(fake_session, monkeypatch, tmp_path):
    lay = pipeline.Layout.for_run("smoke", "v", tmp_path)
    assert pipeline.run_in_verl_cpu_session(ARGV, lay, {}, session_timeout_s=60) is None  # runtime local
    monkeypatch.setenv(runner.DEVICE_ENV, "gpu")
    assert pipeline.run_in_verl_cpu_session(ARGV, lay, {"runtime": "verl"}, session_timeout_s=60) is None
    monkeypatch.setenv(runner.DEVICE_ENV, "cpu")
    monkeypatch.setattr(runner, "shared_ray_address", lambda env=None: "127.0.0.1:6379")
    assert pipeline.run_in_verl_cpu_session(ARGV, lay, {"runtime": "verl"}, session_timeout_s=60) is None
    assert fake_session == []


def test_a_machine_that_cannot_run_it_is_exit_2_naming_what_to_do(fake_session, monkeypatch, tmp_path, capsys):
    def wrong_version():
        raise runner.VerlCpuError("installed verl 0.10.0; install verl==0.9.1")

    monkeypatch.setattr(runner, "check_verl_version", wrong_version)
    assert cli.main([*ARGV, "--reports-root", str(tmp_path)]) == 2
    assert "verl==0.9.1" in capsys.readouterr().err and fake_session == []
