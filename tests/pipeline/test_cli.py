"""`python -m kit <verb>`: the one command line (issue 31 part 4). Its verbs hand their options to the
functions that do the work; `--help` explains each; `config` prints every key with its help text."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit import cli, pipeline, plan
from kit.config import available_profiles, load
from kit.config.keyhelp import config_rows, profile_notes
from kit.report import builder

VERBS = ["reproduce", "report", "launch", "prepare-data", "serve", "selftest", "claims", "compare", "config"]
KIT = Path(cli.__file__).resolve().parent


def test_reproduce_passes_every_option_to_the_pipeline(monkeypatch):
    seen = {}
    monkeypatch.setattr(pipeline, "reproduce", lambda *a, **kw: seen.update(args=a, kw=kw) or 0)
    argv = ["reproduce", "--profile", "smoke", "--run", "x", "--seed", "7", "--force", "--no-overlap", "--until", "03",
            "--set", "eval.n_samples=2", "--set", "data.task_families=product", "--cell-timeout", "120",
            "--log-output", "--no-report", "--dry-run", "--reports-root", "/tmp/r"]
    assert cli.main(argv) == 0
    assert seen["args"] == ("smoke", "x")
    assert seen["kw"] == dict(seed=7, overrides={"eval.n_samples": 2, "data.task_families": "product"}, force=True,
                              log_output=True, cell_timeout=120, until="03", with_report=False, overlap=False,
                              dry_run=True, reports_root="/tmp/r", command=argv, only=None)
    cli.main(["reproduce", "--only", "11,10"])
    assert seen["kw"]["only"] == ["11", "10"]
    cli.main(["reproduce"])
    assert seen["args"] == ("tiny", "main") and seen["kw"]["overlap"] and seen["kw"]["with_report"]
    assert seen["kw"]["cell_timeout"] is None and seen["kw"]["overrides"] == {}


def test_bad_profile_bad_set_and_missing_run_give_error_codes(tmp_path, capsys):
    assert cli.main(["reproduce", "--profile", "nope"]) == 2
    assert cli.main(["reproduce", "--set", "no-equals-sign"]) == 2
    assert cli.main(["report", "--profile", "smoke", "--run", "none", "--reports-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err and "kit reproduce: --set 'no-equals-sign' is not of the form" in err
    # an unknown advantage estimator is named before any notebook runs, not inside a job minutes later
    assert cli.main(["reproduce", "--profile", "smoke", "--reports-root", str(tmp_path), "--dry-run",
                     "--set", "algorithm.adv_estimator=nonsense"]) == 2
    assert "algorithm.adv_estimator: 'nonsense' is not a registered advantage estimator" in capsys.readouterr().err
    assert "make reproduce" in err


def test_paper_dry_run_prints_the_verl_chain_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import shlex

    monkeypatch.setenv("KIT_NNODES", "8")
    rc = cli.main(["reproduce", "--profile", "paper-14b", "--run", "r", "--dry-run", "--reports-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and not any(tmp_path.iterdir())
    root = tmp_path / "paper-14b" / "r"
    n = len(plan.series(load("paper-14b", write=False).stages.names))  # the series grows with each study
    assert f"[4/{n}] 03_rl_stage1 (runs: not run yet): run_dir={root}/stage1, init_dir={root}/sft" in out
    ppo = [shlex.split(ln.split("$ ", 1)[1]) for ln in out.splitlines() if "verl.trainer.main_ppo" in ln]
    assert len(ppo) == 6 and all("trainer.nnodes=8" in c for c in ppo)  # 3 stages, 2 ablation arms, ReTool's PPO arm
    assert "algorithm.adv_estimator=gae" in ppo[-1] and "critic.enable=True" in ppo[-1]
    assert not any("algorithm.adv_estimator=gae" in c for c in ppo[:-1])
    assert "## 11_agent_r" in out and "kit.bridge.revision_sft" in out
    assert f"trainer.resume_from_path={root}/stage1/checkpoints/global_step_300" in ppo[1]
    assert f"--local_dir {root}/stage3/checkpoints/global_step_510/actor" in out


def test_report_and_allow_failed_reach_the_report_builder(monkeypatch, tmp_path, capsys):
    seen: dict = {}
    monkeypatch.setattr(builder, "build_report", lambda layout, **kw: seen.update(layout=layout, **kw) or Path("r.pdf"))
    assert cli.main(["report", "--profile", "tiny", "--run", "r", "--allow-failed", "--reports-root", str(tmp_path)]) == 0
    assert seen["layout"].root == tmp_path / "tiny" / "r" and seen["allow_failed"] is True
    assert "kit report: wrote r.pdf" in capsys.readouterr().out


def test_help_lists_every_verb_with_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for verb in VERBS:  # "  verb   summary" (a long name puts its summary on the next line)
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [verb])
        assert len(line.split()) > 1 or out.split(line, 1)[1].splitlines()[1].strip(), verb


def test_every_option_of_every_verb_explains_itself():
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == VERBS
    for verb, parser in sub.choices.items():
        assert parser.description, verb
        for action in parser._actions:
            assert action.help, f"{verb} {action.option_strings or action.dest}: no help text"


def test_unknown_verb_and_bad_option_are_named(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["frobnicate"])
    assert done.value.code == 2 and "invalid choice: 'frobnicate'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["selftest", "--isolation", "docker"])
    assert "argument --isolation: invalid choice: 'docker'" in capsys.readouterr().err
    assert cli.main(["launch", "--stage", "stage9", "--dry-run"]) == 2
    assert "kit launch: --stage 'stage9': profile paper-14b has the stages stage1, stage2, stage3" in capsys.readouterr().err


def test_the_older_command_lines_are_gone():
    """One command line: no `python -m kit.pipeline run`, `kit.runtime.paper`, `kit.sandbox selftest`,
    `kit.rollout.serve`, `kit.report`; only kit/cli.py (and the verifier worker) builds a parser."""
    for package in ("kit.pipeline", "kit.sandbox"):
        assert importlib.util.find_spec(f"{package}.__main__") is None, package
    parsers, guards = set(), set()
    for path in KIT.rglob("*.py"):
        text, name = path.read_text(), path.relative_to(KIT).as_posix()
        parsers |= {name} if "ArgumentParser(" in text else set()
        guards |= {name} if "if __name__ ==" in text else set()
    assert parsers == {"cli.py", "reward/worker.py"}
    assert not guards & {"recipe.py", "report/builder.py", "rollout/serve.py", "pipeline/__init__.py", "config/keyhelp.py"}
    makefile = (KIT.parent / "Makefile").read_text()
    assert "-m kit.sandbox" not in makefile and "-m kit selftest" in makefile
    old = re.compile(r"-m kit\.(pipeline|recipe|sandbox|report|rollout\.serve)\b")
    docs = [KIT.parent / p for p in ("README.md", "DEVELOPERS.md", "Makefile")]
    docs += [*(KIT.parent / "scripts").glob("*.sh"), *(KIT.parent / "notebooks").glob("*.ipynb")]
    stale = [f"{p.name}:{i}" for p in docs for i, line in enumerate(p.read_text().splitlines(), 1) if old.search(line)]
    assert stale == [], "use `python -m kit <verb>`"


# ---- python -m kit config ------------------------------------------------------------------------------


def _blocks(out: str) -> dict[str, list[str]]:
    """`key = value` / `[table]` line -> its indented help lines."""
    blocks: dict[str, list[str]] = {}
    last = ""
    for line in out.splitlines():
        if line.startswith(" "):
            blocks[last].append(line.strip())
        else:
            last = line
            blocks[last] = []
    return blocks


def test_config_stages_prints_help_for_every_stage_key(capsys):
    assert cli.main(["config", "--profile", "tiny", "stages"]) == 0
    blocks = _blocks(capsys.readouterr().out)
    assert all(k.startswith(("stages", "[stages")) for k in blocks) and len(blocks) > 20
    assert all(helps for helps in blocks.values()), [k for k, h in blocks.items() if not h]
    reset = [h for k, h in blocks.items() if ".reset_optimizer = " in k]
    assert len(reset) >= 3 and all(h[0].startswith("start the stage with a fresh optimizer") for h in reset)
    assert any(h[-1] == "tiny.toml: 15-turn analog" for k, h in blocks.items() if ".max_turns = 6" in k)


def test_config_key_filter_and_overrides(capsys):
    assert cli.main(["config", "--profile", "tiny", "algorithm.clip_ratio_high"]) == 0
    assert _blocks(capsys.readouterr().out) == {
        "algorithm.clip_ratio_high = 0.28": ["Clip-Higher upper bound: ratios above 1 + this are clipped"]}
    assert cli.main(["config", "--profile", "smoke", "--set", "algorithm.lr=0.001", "algorithm.lr"]) == 0
    lr = _blocks(capsys.readouterr().out)
    assert lr == {"algorithm.lr = 0.001": ["policy learning rate (AdamW)",
                                           "tiny.toml: measured: 2e-4 collapsed a 0.75-accuracy SFT policy "
                                           "(held-out greedy 0.75 -> 0.32)"]}  # smoke inherits tiny's note


def test_config_unknown_key_is_named_with_the_keys_there(capsys):
    assert cli.main(["config", "--profile", "tiny", "algorithm.clip_ratio_hi"]) == 2
    err = capsys.readouterr().err
    assert "kit config: unknown config key 'algorithm.clip_ratio_hi': algorithm has no key 'clip_ratio_hi'" in err
    assert "clip_ratio_high" in err
    assert cli.main(["config", "--profile", "tiny", "seed.x"]) == 2
    assert "seed has no keys under it" in capsys.readouterr().err


@pytest.mark.parametrize("profile", available_profiles())
def test_every_leaf_key_has_help_text(profile):
    rows = config_rows(load(profile, write=False), profile)
    leaves = [r for r in rows if not r.table]
    assert len(leaves) > 100
    assert [r.key for r in rows if not r.help] == []  # add a comment beside the field in kit/config/schema.py


@dataclass(frozen=True)
class _Stage:
    name: str = "s"  # the stage's name
    # RL steps of the stage
    steps: int = 1


@dataclass(frozen=True)
class _Root:
    """A config tree with a list of tables, as ``[[stages]]``."""

    seed: int = 0  # the seed
    stages: tuple[_Stage, ...] = dataclasses.field(default_factory=lambda: (_Stage("a"), _Stage("b", 5)))


def test_the_walk_reads_lists_of_tables_and_their_profile_comments(tmp_path):
    toml = tmp_path / "p.toml"
    toml.write_text('# header\nseed = 1  # why 1\n\n[[stages]]   # first\nname = "a#1"  # note a\n'
                    "steps = 3    # three\n             # (and why)\n[[stages]]\nname = 'b'\n")
    # a [[stages]] table goes by its name once it sets one: the form --set takes (stages.<name>.steps)
    assert profile_notes(toml) == {"seed": "why 1", "stages.a#1": "first", "stages.a#1.name": "note a",
                                   "stages.a#1.steps": "three (and why)"}
    rows = {r.key: r for r in config_rows(_Root(), "no-such-profile", "stages")}
    assert list(rows) == ["stages", "stages.a", "stages.a.name", "stages.a.steps", "stages.b", "stages.b.name",
                          "stages.b.steps"]
    assert rows["stages.b.steps"].value == 5 and rows["stages.b.steps"].help == "RL steps of the stage"
    assert rows["stages.a.name"].help == "the stage's name" and rows["stages"].table
    by_name = config_rows(_Root(), "no-such-profile", "stages.b.steps")  # an element by its name
    assert [(r.key, r.value, r.help) for r in by_name] == [("stages.b.steps", 5, "RL steps of the stage")]


def test_config_and_help_load_neither_torch_nor_papermill():
    code = ("import sys, kit.cli; kit.cli.main(['config', '--profile', 'tiny', 'seed']); "
            "print(sorted(m for m in ('torch', 'papermill', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["seed = 0", "    the run's seed (sampling, initialisation, data order)", "[]"]


def test_compare_exits_0_when_equal_1_when_a_file_differs_2_when_a_folder_is_missing(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for r in (a, b):
        r.mkdir()
        (r / "claims.json").write_text(json.dumps({"claims": [1], "created_utc": r.name}))
    assert cli.main(["compare", str(a), str(b)]) == 0 and "same results" in capsys.readouterr().out
    (b / "claims.json").write_text('{"claims": [2]}')
    assert cli.main(["compare", str(a), str(b)]) == 1 and "claims.json: record 0: claims" in capsys.readouterr().out
    assert cli.main(["compare", str(a), str(tmp_path / "nope")]) == 2 and "is not a folder" in capsys.readouterr().err
