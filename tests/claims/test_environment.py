"""claims.json carries the run's environment fingerprint and repeatability stamp (issue #41), and
``python -m kit claims`` says when the runs it puts side by side differ in them."""

from __future__ import annotations

import json

import pytest

from kit import cli, fingerprint
from kit.claims import ClaimsError, RunDirs, evaluate_claims, read_claims, write_claims
from kit.claims.over_seeds import environment_notes, seeds_table
from kit.config import load


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return evaluate_claims(RunDirs.under(tmp_path_factory.mktemp("empty")))


def test_claims_json_copies_the_series_record_of_pipeline_state(tmp_path, results):
    env = {"schema": 1, "key": "0123456789ab", "cpu": {"model": "Recorded CPU"}, "warnings": ["resumed elsewhere"]}
    stamp = {"bitwise": True, "why": "model.torch_threads = 2"}
    (tmp_path / "pipeline_state.json").write_text(json.dumps({"environment": env, "repeatable": stamp,
                                                              "01_data_curation": {"status": "done"}}))
    doc = read_claims(write_claims(results, tmp_path / "claims.json", profile="tiny", run="r"))
    assert doc["schema_version"] == 5 and doc["environment"] == env and doc["repeatable"] == stamp


def test_without_a_series_record_claims_json_states_this_process_environment(tmp_path, results):
    doc = read_claims(write_claims(results, tmp_path / "claims.json", profile="tiny"))
    assert doc["environment"]["key"] == fingerprint.fingerprint_key(doc["environment"])
    tiny = load("tiny", write=False)
    assert doc["environment"]["threads"]["torch_threads"] == tiny.model.torch_threads
    assert doc["repeatable"] == fingerprint.repeatability(tiny)
    adaptive = load("tiny", {"model.torch_threads": -2}, write=False)  # a caller's own config wins over the profile's
    doc = read_claims(write_claims(results, tmp_path / "a" / "claims.json", profile="tiny", cfg=adaptive))
    assert doc["environment"]["threads"]["effective"] == "adaptive<=2" and doc["repeatable"]["bitwise"] is False
    unknown = read_claims(write_claims(results, tmp_path / "u" / "claims.json", profile="no-such-profile"))
    assert unknown["repeatable"]["bitwise"] is False and unknown["environment"]["threads"]["torch_threads"] is None


def test_a_schema_3_claims_json_without_its_environment_is_refused(tmp_path, results):
    path = write_claims(results, tmp_path / "claims.json", profile="tiny")
    doc = json.loads(path.read_text())
    del doc["environment"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ClaimsError, match="missing key 'environment'"):
        read_claims(path)


def _env(model="AMD EPYC", threads=2):
    env = {"schema": 1, "cpu": {"model": model, "arch": "x86_64", "flags": ["avx2"]}, "python": "3.11.7",
           "numpy": "2.4.6", "torch": {"version": "2.13.0"}, "threads": {"torch_threads": threads, "effective": str(threads),
                                                                         "env": {}}}
    return {**env, "key": fingerprint.fingerprint_key(env)}


def _run(path, env, stamp=None):
    path.mkdir()
    claim = {"id": "a", "source": "Figure 1 (x)", "claim": "claim a", "paper": "p", "verdict": "reproduced", "value": 0.5,
             "ci95": [0.1, 0.9], "interval": "", "note": "", "section": "ReTool",
             "tests": [{"name": "t", "value": 0.5, "verdict": "reproduced"}]}
    doc = {"schema_version": 3, "profile": "tiny", "counts": {}, "claims": [claim], "environment": env,
           "repeatable": stamp or {"bitwise": True, "why": "fixed"}}
    if env is None:  # a claims.json from before issue #41
        doc["schema_version"] = 2
        del doc["environment"], doc["repeatable"]
    (path / "claims.json").write_text(json.dumps(doc))
    return path


def test_runs_on_one_environment_and_repeatable_need_no_note(tmp_path):
    runs = [_run(tmp_path / "s7", _env()), _run(tmp_path / "s11", _env())]
    said: list[str] = []
    assert len(seeds_table(runs, "ReTool", echo=said.append)) == 2
    assert said == []


def test_runs_on_different_environments_are_said_with_the_fields_that_differ(tmp_path, capsys):
    runs = [_run(tmp_path / "s7", _env()), _run(tmp_path / "s11", _env("Intel Xeon")), _run(tmp_path / "s21", _env())]
    said: list[str] = []
    rows = seeds_table(runs, "ReTool", echo=said.append)
    assert rows[0] == ["claim", "s7", "s11", "s21"]  # the table itself stays the verdicts only
    assert len(said) == 1 and "2 different environments" in said[0]
    assert "s7, s21 on AMD EPYC" in said[0] and "s11 on Intel Xeon" in said[0] and "in cpu.model" in said[0]
    out = tmp_path / "t.csv"
    assert cli.main(["claims", *map(str, runs), "--section", "ReTool", "--out", str(out)]) == 0
    assert "kit claims: the runs ran in 2 different environments" in capsys.readouterr().err


def test_a_run_without_a_fingerprint_or_not_repeatable_is_named(tmp_path):
    old = _run(tmp_path / "s7", None)
    adaptive = _run(tmp_path / "s11", _env(threads=-2), {"bitwise": False, "why": "model.torch_threads = -2: adaptive"})
    docs = [(p.name, read_claims(p / "claims.json")) for p in (old, adaptive)]
    notes = environment_notes(docs)
    assert any("no environment fingerprint recorded in s7" in n for n in notes)
    assert "s11 is not bitwise repeatable: model.torch_threads = -2: adaptive" in notes
