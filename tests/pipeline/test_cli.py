"""`python -m kit reproduce|report` hands its arguments to the pipeline and the report builder."""

from __future__ import annotations

from kit import cli, pipeline, report


def test_reproduce_passes_every_option_to_the_pipeline(monkeypatch):
    seen = {}
    monkeypatch.setattr(pipeline, "main", lambda argv: seen.setdefault("argv", argv) and 0)
    assert cli.main(["reproduce", "--profile", "smoke", "--run", "x", "--force", "--until", "03",
                     "--set", "eval.n_samples=2"]) == 0
    assert seen["argv"] == ["run", "--profile", "smoke", "--run", "x", "--force", "--until", "03",
                            "--set=eval.n_samples=2"]


def test_bad_profile_and_missing_run_give_error_codes(tmp_path, capsys):
    assert cli.main(["reproduce", "--profile", "nope"]) == 2
    assert report.main(["--profile", "smoke", "--run", "none", "--reports-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err and "make reproduce" in err
