"""The recipe's RL stages are data (issue #29): a profile's ``[[stages]]`` list, read by the series,
both runtimes and the report. The profiles here are defined only in tests/profiles/*.toml."""

from __future__ import annotations

import shlex

import pytest

from kit import cli, pipeline, plan
from kit.config import ConfigError, load


def test_a_fourth_stage_in_a_test_profile_adds_one_notebook_run_after_stage_3():
    cfg = load("four_stages", write=False)
    assert cfg.stages.names == ("stage1", "stage2", "stage3", "stage4")
    assert cfg.stages["stage4"].steps == 1 and cfg.stages["stage3"] == load("smoke", write=False).stages["stage3"]
    lay = plan.Layout.for_run("four_stages", "r", "/reports")
    params = dict(plan.series_parameters(lay, 0))
    names = list(params)
    assert names[3:7] == ["03_rl_stage1", "04_rl_stage2", "05_rl_stage3", "05_rl_stage4"]
    assert params["05_rl_stage4"]["stage"] == "stage4" and params["05_rl_stage4"]["init_dir"] == lay.dir("stage3")
    assert params["08_evaluation"]["policy_dir"] == lay.dir("stage4") and params["07_behavior_analysis"]["rl_dir"] == lay.dir("stage4")
    assert params["20_figures_and_tables"]["stage_dirs"] == [lay.dir(s) for s in cfg.stages.names]
    runs = pipeline.standard_series(lay, overlap_jobs=False)
    assert [nb.source.name for nb in runs][3:7] == ["03_rl_stage1.ipynb", "04_rl_stage2.ipynb", "05_rl_stage3.ipynb",
                                                    f"{plan.STAGE_TEMPLATE}.ipynb"]
    assert [nb.name for nb in runs] == names


@pytest.mark.parametrize("until,last", [("05", "05_rl_stage4"), ("05_rl_stage3", "05_rl_stage3"), ("04", "04_rl_stage2")])
def test_until_a_prefix_runs_every_notebook_it_names(until, last, tmp_path, capsys):
    """``--until 05`` stopped after stage 3 when the template also ran stage 4 as ``05_rl_stage4`` (stop 36's note)."""
    rc = cli.main(["reproduce", "--profile", "four_stages", "--run", "r", "--dry-run", "--until", until,
                   "--reports-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    names = list(dict(plan.series_parameters(plan.Layout.for_run("four_stages", "r", tmp_path), 0)))
    shown = [n for n in names if n in out]
    assert shown == names[:names.index(last) + 1]


def test_paper_like_dry_run_prints_four_verl_stage_launches(tmp_path, capsys):
    rc = cli.main(["reproduce", "--profile", "paper_four_stages", "--run", "r", "--dry-run", "--reports-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and not any(tmp_path.iterdir())
    root = tmp_path / "paper_four_stages" / "r"
    ppo = [shlex.split(ln.split("$ ", 1)[1]) for ln in out.splitlines() if "verl.trainer.main_ppo" in ln]
    stage_runs = [c for c in ppo if not any(a.startswith("trainer.default_local_dir=") and ("/ablation/" in a or "/retool/" in a)
                                            for a in c)]
    assert len(stage_runs) == 4 and len(ppo) == 4 + 2 + 1  # four stages, the two ablation arms, ReTool's PPO arm
    assert f"trainer.resume_from_path={root}/stage3/checkpoints/global_step_510" in stage_runs[3]
    assert "data.max_response_length=16384" in stage_runs[3] and "trainer.total_training_steps=550" in stage_runs[3]
    assert f"## 05_rl_stage4  run_dir {root}/stage4  (global steps 510 -> 550)" in out


def test_a_stage_override_names_the_stage_and_the_key():
    assert load("four_stages", ["stages.stage4.steps=3"], write=False).stages["stage4"].steps == 3
    with pytest.raises(ConfigError, match=r"unknown stage 'stages\.stage5'; the profile's stages are stage1, stage2, stage3, stage4"):
        load("four_stages", ["stages.stage5.steps=3"], write=False)
    with pytest.raises(ConfigError, match=r"'stages\.stage4\.stepz'"):
        load("four_stages", ["stages.stage4.stepz=3"], write=False)


@pytest.mark.parametrize("name", ["sft", "notebooks", "data", "ablation", "../../etc", "a.b", "stage 4", "4th"])
def test_a_stage_name_that_is_no_plain_identifier_or_a_run_folder_is_refused_at_load(tmp_path, monkeypatch, name):
    """A stage is its own run folder, which the runner empties before it runs afresh: ``sft`` would wipe the
    cold start, ``../../etc`` would leave the run; ``a.b`` could never be overridden (``stages.a.b.steps``)."""
    (tmp_path / "bad.toml").write_text(f'inherit = "smoke"\n[[stages]]\nname = "{name}"\nsteps = 1\n')
    monkeypatch.setenv("KIT_PROFILE_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"bad\.toml: stages\[0\]: stage name"):
        load("bad", write=False)


def test_the_series_folders_are_the_ones_stage_names_may_not_take():
    from kit.config.loading import RUN_FOLDERS

    folders = {e.folder for e in plan.series(("stage1",)) if e.folder and e.folder != "stage1"}
    assert folders <= RUN_FOLDERS and "notebooks" in RUN_FOLDERS and pipeline.VERL_SESSION_DIR in RUN_FOLDERS
