"""With ``runtime=verl`` the device the VERL stages launch on is checked before the first notebook
(it failed only at 03, after minutes of SFT); ``KIT_VERL_DEVICE`` with ``runtime=local`` is said once.
Fast: CUDA is faked with ``torch.cuda.is_available``, the series and the session are stubs."""

from __future__ import annotations

import pytest
import torch

from kit import cli, pipeline
from kit.bridge.verl_cpu import runner

VERL = ["reproduce", "--profile", "smoke", "--run", "d", "--set", "runtime=verl", "--no-report"]


@pytest.fixture
def ran(monkeypatch):
    """What ran: the series in this process or a VERL CPU session (both stubs that succeed)."""
    calls: list[str] = []

    def session(launches, out_dir, **kw):
        calls.append("session")
        return runner.SessionResult(codes={"chain": 0}, timings={}, sandbox_workers_max=0, sandbox_workers_steady=0,
                                    peak_rss_bytes=0, peak_pss_bytes=0, orphans=[], pid_namespace="",
                                    log_dir=str(out_dir))

    monkeypatch.setattr(pipeline, "run_series", lambda *a, **k: calls.append("series") or [])
    monkeypatch.setattr(runner, "run_session", session)
    monkeypatch.setattr(runner, "check_verl_version", lambda: runner.VERL_PIN)
    monkeypatch.setattr(runner, "plugin_route", lambda env=None: {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100")
    monkeypatch.delenv(runner.DEVICE_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_runtime_verl_on_a_cpu_machine_without_the_selection_stops_before_the_first_notebook(ran, tmp_path, capsys):
    assert cli.main([*VERL, "--reports-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("kit.pipeline:") == 1 and "Nothing was run" in err
    assert "03_rl_stage1, 04_rl_stage2, 05_rl_stage3, 06_roc_ablation, 10_retool launch VERL" in err
    assert "no CUDA GPU is visible" in err and "set KIT_VERL_DEVICE=cpu" in err
    assert ran == [] and not any(tmp_path.iterdir())


@pytest.mark.parametrize("device, cuda, says", [("gpu", False, "KIT_VERL_DEVICE=gpu but no CUDA GPU"),
                                                ("tpu", False, "KIT_VERL_DEVICE='tpu'"),
                                                ("cpu", True, "a CUDA GPU is visible (NVIDIA H100)")])
def test_a_device_the_machine_cannot_give_is_refused_before_anything_runs(ran, monkeypatch, tmp_path, capsys,
                                                                          device, cuda, says):
    monkeypatch.setenv(runner.DEVICE_ENV, device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert cli.main([*VERL, "--reports-root", str(tmp_path)]) == 2
    assert says in capsys.readouterr().err and ran == []


def test_a_machine_that_can_launch_them_runs(ran, monkeypatch, tmp_path):
    monkeypatch.setenv(runner.DEVICE_ENV, "cpu")  # a CPU machine that chose the CPU runtime: one session
    assert cli.main([*VERL, "--reports-root", str(tmp_path)]) == 0 and ran == ["session"]
    monkeypatch.setenv(runner.DEVICE_ENV, "gpu")  # a CUDA machine: the series runs, its stages on SGLang
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.main([*VERL, "--reports-root", str(tmp_path)]) == 0 and ran == ["session", "series"]


def test_a_series_that_launches_no_verl_stage_is_not_checked(ran, tmp_path):
    # --until 02: data and the cold start only (the SFT link), nothing a VERL launcher starts
    assert cli.main([*VERL, "--until", "02", "--reports-root", str(tmp_path)]) == 0 and ran == ["series"]
    pipeline.check_verl_device("local", pipeline.SERIES, {})  # the local runtime launches no VERL


def test_the_check_is_the_launchers_own_choice(ran):
    assert set(pipeline.LAUNCHES_VERL) <= set(pipeline.SERIES)
    with pytest.raises(runner.VerlCpuError) as stage:
        runner.default_launcher({})
    with pytest.raises(pipeline.VerlDeviceError) as series:
        pipeline.check_verl_device("verl", pipeline.SERIES, {})
    assert str(stage.value) in str(series.value)  # one message, the stage's own
    pipeline.check_verl_device("verl", pipeline.SERIES, {runner.DEVICE_ENV: "cpu"})


LOCAL = ["reproduce", "--profile", "smoke", "--run", "l", "--no-report"]


def test_kit_verl_device_with_the_local_runtime_is_said_once_and_the_run_goes_on(ran, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(runner.DEVICE_ENV, "cpu")
    assert cli.main([*LOCAL, "--reports-root", str(tmp_path)]) == 0 and ran == ["series"]
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "KIT_VERL_DEVICE" in line]
    assert len(said) == 1 and said[0].startswith("kit.pipeline: warning: KIT_VERL_DEVICE=cpu is ignored with runtime=local")
    assert "--set runtime=verl" in said[0]
    assert cli.main([*LOCAL, "--dry-run", "--reports-root", str(tmp_path)]) == 0
    assert "is ignored with runtime=local" in capsys.readouterr().err  # the dry run says it too


def test_no_warning_without_the_variable_or_with_runtime_verl(ran, monkeypatch, tmp_path, capsys):
    assert cli.main([*LOCAL, "--reports-root", str(tmp_path)]) == 0
    assert "KIT_VERL_DEVICE" not in capsys.readouterr().err
    assert pipeline.ignored_device_warning("verl", {runner.DEVICE_ENV: "cpu"}) == ""
    assert pipeline.ignored_device_warning("local", {runner.DEVICE_ENV: " "}) == ""
    assert "KIT_VERL_DEVICE=gpu is ignored" in pipeline.ignored_device_warning("local", {runner.DEVICE_ENV: "gpu"})
    assert pipeline.DEVICE_ENV == runner.DEVICE_ENV  # the name the runtime reads
