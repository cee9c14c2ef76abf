"""Same code, same seed, same machine: the same result files, whatever else the machine runs (issue #41).

The session's smoke chain (notebooks 00-11, 20 and the report, ``tests/conftest.py::smoke_chain``, on a quiet
machine) is run a second time with the same command into another folder under load (``smoke_chain_loaded``,
``tests/loaded_chain.py``): in ``make test`` beside the VERL chain, whose Ray workers, FSDP ranks and sandbox
are the load, and whatever is left of it beside two busy loops; run alone, beside two busy loops. Every result
file (metrics, samples and rollout records, evaluation outputs, policy weights and trainer states, ``claims.json``, the tables' CSVs) must be byte-identical once the
fields that record time and host are stripped (:func:`kit.pipeline.compare.compare_runs`).
"""

from __future__ import annotations

import json

import pytest

from kit.pipeline.compare import compare_runs, run_notes, strip_time_fields

pytestmark = pytest.mark.slow


def other_cores(run_root) -> float:
    """Cores' worth of CPU the machine spent on work other than the run's kernels and jobs while its notebooks
    ran (``machine_cpu_seconds`` minus ``cpu_seconds`` over ``seconds``, from ``pipeline_state.json``): the
    load the run really had beside it (its own uncounted sandbox calls included, a small share)."""
    state = json.loads((run_root / "pipeline_state.json").read_text())
    done = [v for v in state.values() if isinstance(v, dict) and "machine_cpu_seconds" in v]
    return sum(v["machine_cpu_seconds"] - v["cpu_seconds"] for v in done) / sum(v["seconds"] for v in done)


def test_the_smoke_chain_under_load_is_the_same_run(smoke_run, smoke_chain_loaded):
    (lay, _), (loaded, code, beside) = smoke_run, smoke_chain_loaded
    assert code == 0, f"the second smoke chain failed; its log: {loaded.root.parent.parent / 'chain.log'}"
    # the premise: the loaded run had other work beside it, at least half a core on average (busy loops: ~1)
    load = other_cores(loaded.root)
    print(f"loaded run beside {beside}: {load:.2f} cores of other work on average")
    assert load >= 0.5, f"the loaded run had only {load:.2f} cores of other work beside it ({beside}): not a loaded run"
    compared = [p for p in lay.root.rglob("*") if p.is_file() and "notebooks" not in p.parts]
    kinds = {p.suffix for p in compared}
    assert {".jsonl", ".json", ".safetensors", ".pt"} <= kinds  # what the comparison covers really exists
    assert (lay.root / "claims.json").exists() and (loaded.root / "claims.json").exists()
    diffs = compare_runs(lay.root, loaded.root)
    assert not diffs, "the loaded run differs in: " + "; ".join(f"{d.path} ({d.what})" for d in diffs[:20])


def test_the_comparison_sees_a_one_ulp_change_and_ignores_time_fields(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for r in (a, b):
        (r / "sft" / "policy").mkdir(parents=True)
    row = {"step": 3, "loss": 0.1, "time_step_s": 1.5, "perf_threads": 2, "perf_decode_steps": 40, "wall_s": 9.0}
    (a / "sft" / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (b / "sft" / "metrics.jsonl").write_text(json.dumps({**row, "time_step_s": 7.25, "wall_s": 1.0}) + "\n")
    for r in (a, b):  # a tokenizer's vocabulary and a config's settings are data, even under time-like names
        (r / "sft" / "policy" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"date": 7}}}))
        (r / "sft" / "config.json").write_text(json.dumps({"sandbox": {"cpu_s": 5.0}}))
        (r / "sft" / "summary.json").write_text(json.dumps({"policy_dir": str(r / "sft" / "policy"), "seconds": 3}))
    (a / "w.bin").write_bytes(b"\x00\x01")
    (b / "w.bin").write_bytes(b"\x00\x01")
    assert compare_runs(a, b) == []  # time fields and each run's own folder aside, the same run
    (b / "sft" / "metrics.jsonl").write_text(json.dumps({**row, "loss": 0.10000000000000002, "perf_decode_steps": 41}) + "\n")
    (b / "w.bin").write_bytes(b"\x00\x02")
    (b / "sft" / "policy" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"date": 8}}}))
    (b / "sft" / "config.json").write_text(json.dumps({"sandbox": {"cpu_s": 6.0}, "bstar": {}}))
    got = {d.path: d.what for d in compare_runs(a, b)}
    assert got == {"sft/metrics.jsonl": "record 0: loss, perf_decode_steps", "w.bin": "bytes differ",
                   "sft/policy/tokenizer.json": "record 0: model", "sft/config.json": "record 0: bstar (b only), sandbox"}
    assert strip_time_fields({"cpu_s": 1, "loss_mean": 2, "nested": [{"seconds": 3, "accuracy": 4}]}) == \
        {"loss_mean": 2, "nested": [{"accuracy": 4}]}


def test_notes_name_the_fingerprint_the_stamp_and_the_code_version(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for r, key, bitwise, commit in ((a, "k1", True, "c1"), (b, "k2", False, "c2")):
        (r / "eval").mkdir(parents=True)
        (r / "pipeline_state.json").write_text(json.dumps({
            "environment": {"key": key}, "repeatable": {"bitwise": bitwise, "why": "model.torch_threads = -2: adaptive"}}))
        (r / "eval" / "aime24.json").write_text(json.dumps({"manifest": {"git_commit": commit}}))
    notes = run_notes(a, b)
    assert len(notes) == 3 and "k1 against k2" in notes[0] and "not bitwise repeatable" in notes[1] and "c1" in notes[2]
    assert run_notes(a, a) == []


def test_the_code_version_is_a_note_not_a_difference(tmp_path):
    """An evaluation manifest records the checkout's commit (``-dirty`` while files change): two runs of one
    code whose checkout was edited between them differ there only; ``run_notes`` names the versions."""
    a, b = tmp_path / "a", tmp_path / "b"
    for r, commit in ((a, "c1"), (b, "c1-dirty")):
        (r / "eval").mkdir(parents=True)
        (r / "eval" / "aime24.json").write_text(json.dumps({"manifest": {"git_commit": commit, "seed": 0}, "acc": 0.5}))
    assert compare_runs(a, b) == [] and "c1-dirty" in run_notes(a, b)[0]


def _state(r, seed, statuses, profile="smoke"):
    r.mkdir(parents=True, exist_ok=True)
    (r / "pipeline_state.json").write_text(json.dumps(
        {f"0{i}_nb": {"status": st, "parameters": {"profile": profile, "seed": seed}} for i, st in enumerate(statuses)}))


def test_comparing_nothing_a_folder_with_itself_or_runs_that_are_not_the_same_says_so(tmp_path):
    """Review of issue #41: "same results" must mean two runs of one seed agree, not that nothing was compared."""
    import pytest as _pytest

    a, b = tmp_path / "tiny" / "main", tmp_path / "tiny" / "again"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    with _pytest.raises(ValueError, match="nothing to compare"):
        compare_runs(a, b)
    with _pytest.raises(ValueError, match="the same folder"):
        compare_runs(a, a / ".." / "main")
    # claims.json names its run folder: two finished runs of one seed in two folders are still the same run
    for r in (a, b):
        (r / "claims.json").write_text(json.dumps({"profile": "tiny", "run": r.name, "claims": [{"id": "x", "value": 1}]}))
        (r / "sft").mkdir()
    assert compare_runs(a, b) == []
    # a file a killed run left half-written is one difference; the others are still compared
    (a / "sft" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (b / "sft" / "metrics.jsonl").write_text('{"step": 1, "lo')
    (b / "claims.json").write_text(json.dumps({"profile": "tiny", "run": "again", "claims": [{"id": "x", "value": 2}]}))
    got = {d.path: d.what for d in compare_runs(a, b)}
    assert set(got) == {"sft/metrics.jsonl", "claims.json"} and "does not parse as JSON in" in got["sft/metrics.jsonl"]
    # another seed, or a run that stopped half-way: said before any file
    assert any("no pipeline_state.json" in n for n in run_notes(a, b))
    _state(a, 0, ["done", "done"])
    _state(b, 1, ["done", "failed"])
    notes = run_notes(a, b)
    assert any("differ in seed (0 against 1)" in n for n in notes)
    assert any(f"{b} has not finished: 1 notebooks done" in n for n in notes)
