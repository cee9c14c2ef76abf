"""``kit reproduce --seeds`` (issue #42): the series once per pipeline seed, then the claims pooled."""

import json
import shutil

import pytest

from kit import cli, pipeline
from kit.pipeline import write_partial_claims
from kit.pipeline.seeds import parse_seeds, pooled_name, reproduce_seeds, seed_command, seed_run_name
from kit.plan import Layout, needed_for


def test_seed_specs_are_ranges_and_lists_and_a_seed_counts_once():
    assert parse_seeds("101-105") == [101, 102, 103, 104, 105]
    assert parse_seeds("3, 7,1-2") == [3, 7, 1, 2]
    for bad, msg in (("5-1", "backwards"), ("1,x", "'x' is not a seed"), ("1-3,2", "seed 2 is given twice"),
                     ("", "is not a seed"), ("-1", "is not a seed")):
        with pytest.raises(ValueError, match=msg):
            parse_seeds(bad)


def test_each_seed_has_its_folder_and_its_own_command():
    assert seed_run_name("main", 7) == "s7" and seed_run_name("exp", 7) == "exp-s7"
    assert pooled_name("main") == "pooled" and pooled_name("exp") == "exp-pooled"
    assert pooled_name("main", ["11"]) == "only-11-pooled" and pooled_name("ar", ["10", "11"]) == "ar-only-10-11-pooled"
    cmd = ["reproduce", "--profile", "tiny", "--seeds", "1-2", "--run=exp", "--set", "a=1"]
    assert seed_command(cmd, "exp-s1", 1) == ["reproduce", "--profile", "tiny", "--set", "a=1",
                                              "--run", "exp-s1", "--seed", "1"]


def _claims_doc(value):
    test = {"name": "t", "kind": "ablation_drop", "comparison": ">", "threshold": 0.0, "value": value,
            "verdict": "inconclusive", "reason": ""}
    return {"schema_version": 3, "profile": "tiny", "counts": {}, "environment": {}, "repeatable": {"bitwise": True},
            "claims": [{"id": "c", "source": "Figure 4 (x)", "claim": "c", "paper": "p", "verdict": "inconclusive",
                        "value": value, "ci95": [None, None], "interval": "", "note": "", "tests": [test]}]}


def test_every_seed_runs_a_failed_one_is_reported_and_the_finished_are_pooled(tmp_path, capsys):
    calls = []

    def fake(profile, run, *, seed, command, reports_root, **kw):
        calls.append((run, seed, command[-4:]))
        root = tmp_path / profile / run
        root.mkdir(parents=True)
        (root / "pipeline_state.json").write_text(json.dumps({"01": {"parameters": {"seed": seed}}}))
        if seed == 2:  # this seed's series failed, after an earlier run of it wrote a claims.json: stale, not pooled
            (root / "claims.json").write_text(json.dumps(_claims_doc(-0.9)))
            return 1
        (root / "claims.json").write_text(json.dumps(_claims_doc(0.05 + 0.01 * seed)))
        return 0

    code = reproduce_seeds(fake, "tiny", "main", [1, 2, 3, 4], command=["reproduce", "--seeds", "1-4"],
                           reports_root=str(tmp_path))
    assert code == 1
    assert [c[:2] for c in calls] == [("s1", 1), ("s2", 2), ("s3", 3), ("s4", 4)]
    assert calls[0][2] == ["--run", "s1", "--seed", "1"]
    doc = json.loads((tmp_path / "tiny" / "pooled" / "pooled_claims.json").read_text())
    assert [r["seed"] for r in doc["runs"]] == [1, 3, 4]
    assert doc["claims"][0]["tests"][0]["n"] == 3 and doc["claims"][0]["verdict"] == "reproduced"
    err = capsys.readouterr().err
    assert "failed for seed(s) 2" in err


def test_bad_arguments_stop_before_the_next_seed(tmp_path):
    seen = []

    def fake(profile, run, *, seed, **kw):
        seen.append(seed)
        return 2

    assert reproduce_seeds(fake, "tiny", "main", [1, 2], reports_root=str(tmp_path)) == 2
    assert seen == [1]


def test_the_command_line_takes_a_range_and_refuses_seed_with_seeds(tmp_path, capsys):
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--dry-run", "--reports-root",
                     str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "seed 1 (1 of 2) -> run s1" in out and "seed 2 (2 of 2) -> run s2" in out
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--seed", "3", "--dry-run"]) == 2
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "2-1", "--dry-run"]) == 2
    assert "runs backwards" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_runs_claims_pool(smoke_chain, tmp_path):
    """The smoke chain's claims.json, as notebook 20 writes it, pools (two copies stand in for two seeds, each
    with a seed of its own: a pool refuses runs whose seed is not recorded)."""
    lay, code = smoke_chain
    assert code == 0
    for seed, name in enumerate(("a", "b")):
        (tmp_path / name).mkdir()
        shutil.copy(lay.root / "claims.json", tmp_path / name / "claims.json")
        (tmp_path / name / "pipeline_state.json").write_text(json.dumps({"01": {"parameters": {"seed": seed}}}))
    assert cli.main(["claims", "pool", str(tmp_path / "a"), str(tmp_path / "b"), "--section", "all",
                     "--out", str(tmp_path / "p")]) == 0
    doc = json.loads((tmp_path / "p" / "pooled_claims.json").read_text())
    run = json.loads((lay.root / "claims.json").read_text())
    assert sorted(c["id"] for c in doc["claims"]) == sorted(c["id"] for c in run["claims"])
    papers = list(dict.fromkeys(c["section"] for c in doc["claims"]))
    assert [c["section"] for c in doc["claims"]] == sorted((c["section"] for c in doc["claims"]), key=papers.index)
    for paper in papers:  # grouped by paper, within each primaries first and world checks last
        roles = [c["role"] for c in doc["claims"] if c["section"] == paper]
        assert roles == sorted(roles, key=["primary", "secondary", "world_check"].index), paper
    assert sum(len(c["tests"]) for c in doc["claims"]) == sum(len(c["tests"]) for c in run["claims"])


def test_only_runs_a_notebook_with_what_it_reads_and_names_a_bad_prefix(tmp_path, capsys):
    assert needed_for(["11"], "tiny") == ["00_setup_and_sandbox_check", "02_cold_start_sft", "11_agent_r"]
    assert needed_for(["08"], "tiny") == ["00_setup_and_sandbox_check", "01_data_curation", "02_cold_start_sft",
                                          "03_rl_stage1", "04_rl_stage2", "05_rl_stage3", "08_evaluation"]
    with pytest.raises(ValueError, match="'99' matches no notebook"):
        needed_for(["99"], "tiny")
    with pytest.raises(ValueError, match=r"a number names one exactly: 01, 10, 11, 12\?"):  # not 01, 10, 11 and 12 at once
        needed_for(["1"], "tiny")
    assert needed_for(["12_b"], "tiny")[-1] == "12_bstar"  # a longer prefix by its start
    assert needed_for(["08", "10"], "tiny", producers=False) == ["08_evaluation", "10_retool"]
    assert cli.main(["reproduce", "--profile", "smoke", "--only", "11", "--dry-run", "--reports-root",
                     str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "] 11_agent_r (runs: not run yet):" in out and "] 02_cold_start_sft (runs: not run yet):" in out
    assert "03_rl_stage1" not in out
    assert cli.main(["reproduce", "--profile", "smoke", "--only", "11", "--until", "02", "--dry-run"]) == 2
    assert "not both" in capsys.readouterr().err
    for bad in ("", ",", "11,"):  # an empty name would run the whole series
        assert cli.main(["reproduce", "--profile", "smoke", "--only", bad, "--dry-run"]) == 2
        assert "--only needs notebook names" in capsys.readouterr().err


@pytest.mark.slow
def test_a_partial_runs_claims_judge_what_it_ran(smoke_chain, tmp_path):
    """``--only 11``'s claims.json: the Agent-R claims read the smoke chain's folders, the rest say what is missing."""
    lay, code = smoke_chain
    assert code == 0
    part = Layout.for_run("smoke", "part", str(tmp_path))
    for folder in ("sft", "agent_r"):
        shutil.copytree(lay.root / folder, part.root / folder)
    # an earlier --only run finished 12 here and left 03 unfinished: only says what the claims were judged on
    (part.root / "pipeline_state.json").write_text(json.dumps({"12_bstar": {"status": "done"},
                                                               "03_rl_stage1": {"status": "running"}}))
    doc = json.loads(write_partial_claims(part, "smoke", ["stage1", "stage2"], ["02_cold_start_sft", "11_agent_r"]
                                          ).read_text())
    assert doc["only"] == ["02_cold_start_sft", "11_agent_r", "12_bstar"]
    full = {c["id"]: c for c in json.loads((lay.root / "claims.json").read_text())["claims"]}
    for c in doc["claims"]:
        if c["section"] == "Agent-R":  # the same verdicts as the full run's
            assert [t["verdict"] for t in c["tests"]] == [t["verdict"] for t in full[c["id"]]["tests"]], c["id"]
        elif c["section"] == "rStar2-Agent" and c["role"] != "world_check":
            assert c["verdict"] == "inconclusive", c["id"]


def test_only_with_force_reruns_the_named_notebooks_not_the_ones_they_read(tmp_path, monkeypatch, capsys):
    """``--only 08 --force`` (a changed evaluation design on finished seeds): 08 is forced, the cold start and
    the stages it reads are left to the usual resume rule, which skips them when finished."""
    seen = {}

    def fake_series(series, layout, *, force, **kw):
        seen["names"], seen["force"] = [nb.name for nb in series], force
        return []

    monkeypatch.setattr(pipeline, "run_series", fake_series)
    monkeypatch.setattr(pipeline, "write_partial_claims", lambda *a, **k: tmp_path / "claims.json")
    assert pipeline.reproduce("smoke", "t", only=["08"], force=True, reports_root=str(tmp_path)) == 0
    assert seen["names"][-1] == "08_evaluation" and "02_cold_start_sft" in seen["names"]
    assert seen["force"] == ["08_evaluation"]
    assert pipeline.reproduce("smoke", "t", only=["08"], reports_root=str(tmp_path)) == 0
    assert seen["force"] is False
    assert pipeline.reproduce("smoke", "t", only=["08"], force=True, dry_run=True, reports_root=str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "08_evaluation (forced):" in out and "02_cold_start_sft (runs: not run yet):" in out


def test_a_dry_run_of_several_seeds_says_where_the_pool_goes(tmp_path, capsys):
    ran = []
    code = reproduce_seeds(lambda profile, run, **kw: ran.append(run) or 0, "tiny", "ar", [1, 2], pool=False,
                           reports_root=str(tmp_path), dry_run=True)
    assert code == 0 and ran == ["ar-s1", "ar-s2"]
    assert f"pooled into {tmp_path / 'tiny' / 'ar-pooled'}" in capsys.readouterr().out
