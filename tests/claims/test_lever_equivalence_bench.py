"""benchmarks/lever_equivalence.py (issue #48 item 2): the registered equivalence rule on synthetic run folders."""

from __future__ import annotations

import json
import math

import pytest
from doubles import load_benchmark

eq = load_benchmark("lever_equivalence")

OLD = {101: 0.10, 102: 0.30, 103: 0.20, 104: 0.40, 105: 0.25}  # seed sd 0.1140


def _run(path, seed, values, world=0.5, learned=True):
    """A run folder with ``pipeline_state.json`` (its seed) and a schema-2 ``claims.json``: one primary claim
    whose test has ``values`` (it requires ``cold_start_learns``: ``learned``) and a world check that the rule
    must leave out."""
    path.mkdir(parents=True)
    (path / "pipeline_state.json").write_text(json.dumps({"00_setup": {"parameters": {"seed": seed}}}))
    test = lambda name, v: {"name": name, "verdict": "inconclusive", "value": v}  # noqa: E731
    claim = lambda cid, role, tests: {"id": cid, "source": "s", "claim": "c", "paper": "p", "verdict": "inconclusive",  # noqa: E731
                                      "value": None, "ci95": None, "interval": "", "note": "", "role": role,
                                      "requires": ["cold_start_learns"] if role == "primary" else [], "tests": tests}
    doc = {"schema_version": 2, "profile": "tiny", "counts": {},
           "preconditions": {"cold_start_learns": {"passed": learned}}, "claims": [
        claim("fig4", "primary", [test("gap", values), test("too little data", None)]),
        claim("world", "world_check", [test("share", world)])]}
    (path / "claims.json").write_text(json.dumps(doc))
    return path


def _sets(tmp_path, shift, jitter):
    old = [_run(tmp_path / f"old-{s}", s, v) for s, v in OLD.items()]
    new = [_run(tmp_path / f"new-{s}", s, v + shift + j) for (s, v), j in zip(OLD.items(), jitter, strict=True)]
    return old, new


def test_a_lever_that_keeps_runs_close_is_equivalent_and_the_world_check_is_left_out(tmp_path, capsys):
    old, new = _sets(tmp_path, 0.0, [0.01, -0.02, 0.0, 0.015, -0.01])
    assert eq.main(["--old", *map(str, old), "--new", *map(str, new)]) == 0
    out = capsys.readouterr().out
    assert "fig4: gap" in out and "world" not in out and "too little data" not in out
    assert out.strip().splitlines()[-1] == ("lever_equivalence tests=1 equivalent=1 different=0 undetermined=0 "
                                            "not_judged=0 adopt=yes")


def test_hand_computed_interval_and_margin():
    old = {s: {"t": v} for s, v in OLD.items()}
    d = [0.01, -0.02, 0.0, 0.015, -0.01]
    new = {s: {"t": v + x} for (s, v), x in zip(OLD.items(), d, strict=True)}
    (row,) = eq.check(old, new)
    mean = sum(d) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 4)
    half = 2.1318467813 * sd / math.sqrt(5)  # t(0.95, 4)
    assert row["diff"] == pytest.approx(mean) and row["hi"] - row["lo"] == pytest.approx(2 * half)
    vals = list(OLD.values())
    m = sum(vals) / 5
    assert row["margin"] == pytest.approx(math.sqrt(sum((v - m) ** 2 for v in vals) / 4))
    assert row["pairs"] == 5 and row["verdict"] == "equivalent"


def test_a_shift_beyond_the_margin_is_different_and_a_reseeding_lever_at_five_pairs_undetermined(tmp_path, capsys):
    old, new = _sets(tmp_path, 0.5, [0.01, -0.02, 0.0, 0.015, -0.01])
    eq.main(["--old", *map(str, old), "--new", *map(str, new)])
    assert "different=1" in capsys.readouterr().out.splitlines()[-1]
    # new runs that look like fresh seeds: differences as spread as the seeds themselves, no shift
    old2 = {s: {"t": v} for s, v in OLD.items()}
    new2 = {s: {"t": v} for s, v in zip(OLD, [0.35, 0.15, 0.40, 0.20, 0.15], strict=True)}
    (row,) = eq.check(old2, new2)
    assert row["verdict"] == "undetermined" and row["pairs_needed"] > 5
    assert eq.pairs_needed(math.sqrt(2.0), 1.0) == 19  # 80% power, a lever that reseeds every run


def test_identical_runs_are_equivalent_even_without_spread_and_the_margin_is_fixed_by_the_old_runs():
    flat = {s: {"t": 0.5} for s in OLD}
    (row,) = eq.check(flat, flat)
    assert row["margin"] == 0 and row["verdict"] == "equivalent"
    (row,) = eq.check(flat, {s: {"t": v} for s, v in zip(OLD, [0.5, 0.6, 0.4, 0.5, 0.5], strict=True)})
    assert row["verdict"] == "undetermined" and row["pairs_needed"] is None
    # six old runs, the sixth's new run without the statistic: the margin is still all six old runs' spread
    old = {**{s: {"t": v} for s, v in OLD.items()}, 106: {"t": 0.9}}
    new = {s: {"t": v + 0.05} for s, v in OLD.items()}
    (row,) = eq.check(old, new)
    vals = [*OLD.values(), 0.9]
    m = sum(vals) / 6
    assert row["pairs"] == 5 and row["margin"] == pytest.approx(math.sqrt(sum((v - m) ** 2 for v in vals) / 5))


def test_a_test_the_new_runs_lose_is_not_judged_and_blocks_adoption(tmp_path, capsys):
    old, new = _sets(tmp_path, 0.0, [0.0] * 5)
    lost = [_run(tmp_path / f"lost-{s}", s, v, learned=False) for s, v in OLD.items()]  # the cold start broke
    assert eq.main(["--old", *map(str, old), "--new", *map(str, lost)]) == 0
    out = capsys.readouterr().out
    assert "not judged: 0 pairs" in out and out.strip().endswith("not_judged=1 adopt=no")


def test_fewer_than_five_pairs_judge_nothing_and_unpaired_seeds_are_named(tmp_path, capsys):
    old, new = _sets(tmp_path, 0.0, [0.0] * 5)
    assert eq.main(["--old", *map(str, old[:4]), "--new", *map(str, new)]) == 0
    out = capsys.readouterr().out
    assert "seeds in only one set, left out: [105]" in out and "nothing to judge" in out and "adopt=no" in out
    # a pair whose new run failed the claim's precondition leaves that test with 4 pairs: not judged
    _run(tmp_path / "new-103-unlearned", 103, 0.2, learned=False)
    runs = [*map(str, old), *(str(r) for r in new if not r.name.endswith("103")), str(tmp_path / "new-103-unlearned")]
    assert eq.main(["--old", *runs[:5], "--new", *runs[5:]]) == 0
    assert "not judged: 4 pairs" in capsys.readouterr().out


def test_the_plan_states_what_five_pairs_can_certify(tmp_path, capsys):
    old, _ = _sets(tmp_path, 0.0, [0.0] * 5)
    assert eq.main(["--plan", *map(str, old)]) == 0
    out = capsys.readouterr().out
    assert "half-width 1.35 seed spreads at 5 pairs" in out
    assert out.strip().splitlines()[-1] == "lever_equivalence_plan tests=1 pairs_needed_if_reseeded=19"


def test_bad_folders_are_named(tmp_path, capsys):
    old, _ = _sets(tmp_path, 0.0, [0.0] * 5)
    (tmp_path / "bare").mkdir()
    assert eq.main(["--old", str(tmp_path / "bare"), "--new", str(old[0])]) == 2
    assert "bare: no readable pipeline_state.json" in capsys.readouterr().err
    assert eq.main(["--old", str(old[0]), str(old[0]), "--new", str(old[1])]) == 2
    assert "both pipeline seed 101" in capsys.readouterr().err
    other = json.loads((old[1] / "claims.json").read_text())
    (old[1] / "claims.json").write_text(json.dumps({**other, "claims_sha256": "another file"}))
    assert eq.main(["--old", str(old[0]), "--new", str(old[1])]) == 2
    assert "different claims files" in capsys.readouterr().err
