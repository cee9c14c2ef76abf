"""`python -m kit reproduce|report` hands its arguments to the pipeline and the report builder."""

from __future__ import annotations

from kit import cli, pipeline, report


def test_reproduce_passes_every_option_to_the_pipeline(monkeypatch):
    seen = {}
    monkeypatch.setattr(pipeline, "main", lambda argv: seen.setdefault("argv", argv) and 0)
    assert cli.main(["reproduce", "--profile", "smoke", "--run", "x", "--seed", "7", "--force", "--no-overlap",
                     "--until", "03", "--set", "eval.n_samples=2"]) == 0
    assert seen["argv"] == ["run", "--profile", "smoke", "--run", "x", "--seed", "7", "--force", "--no-overlap",
                            "--until", "03", "--set=eval.n_samples=2"]


def test_bad_profile_and_missing_run_give_error_codes(tmp_path, capsys):
    assert cli.main(["reproduce", "--profile", "nope"]) == 2
    assert report.main(["--profile", "smoke", "--run", "none", "--reports-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err and "make reproduce" in err


def test_paper_dry_run_prints_the_verl_chain_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import shlex

    monkeypatch.setenv("KIT_NNODES", "8")
    rc = pipeline.main(["run", "--profile", "paper-14b", "--run", "r", "--dry-run", "--reports-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and not any(tmp_path.iterdir())
    root = tmp_path / "paper-14b" / "r"
    assert f"[4/10] 03_rl_stage1: run_dir={root}/stage1, init_dir={root}/sft" in out
    ppo = [shlex.split(ln.split("$ ", 1)[1]) for ln in out.splitlines() if "verl.trainer.main_ppo" in ln]
    assert len(ppo) == 5 and all("trainer.nnodes=8" in c for c in ppo)
    assert f"trainer.resume_from_path={root}/stage1/checkpoints/global_step_300" in ppo[1]
    assert f"--local_dir {root}/stage3/checkpoints/global_step_510/actor" in out


def test_reproduce_passes_dry_run(monkeypatch):
    seen = {}
    monkeypatch.setattr(pipeline, "main", lambda argv: seen.setdefault("argv", argv) and 0)
    assert cli.main(["reproduce", "--profile", "paper-14b", "--dry-run"]) == 0
    assert seen["argv"][-1] == "--dry-run"


def test_cell_timeout_and_allow_failed_reach_the_pipeline_and_the_report(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(pipeline, "main", lambda argv: seen.setdefault("run", argv) and 0)
    monkeypatch.setattr(report, "main", lambda argv: seen.setdefault("report", argv) and 0)
    assert cli.main(["reproduce", "--profile", "tiny", "--cell-timeout", "120"]) == 0
    assert seen["run"][-2:] == ["--cell-timeout", "120"]
    assert cli.main(["report", "--profile", "tiny", "--run", "r", "--allow-failed"]) == 0
    assert seen["report"] == ["--profile", "tiny", "--run", "r", "--allow-failed"]
