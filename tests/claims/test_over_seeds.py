"""kit.claims.over_seeds: runs' verdicts side by side, from their claims.json files."""

import json

import pytest

from kit import cli
from kit.claims.over_seeds import seeds_table


def _claim(cid, section, value, lo, hi, verdict, tests=1):
    t = [{"name": f"t{k}", "value": value + k, "verdict": verdict} for k in range(tests)]
    return {"id": cid, "source": "Figure 1 (x)", "claim": f"claim {cid}", "paper": "p", "verdict": verdict,
            "value": value, "ci95": [lo, hi], "interval": "", "note": "", "section": section, "tests": t}


def _run(path, claims):
    path.mkdir()
    (path / "claims.json").write_text(json.dumps({"schema_version": 2, "profile": "tiny", "counts": {}, "claims": claims}))
    return path


def test_rows_per_claim_of_the_section_and_columns_per_run(tmp_path):
    a = _run(tmp_path / "s7", [_claim("a", "ReTool", 0.5, 0.1, 0.9, "reproduced"),
                               _claim("b", "rStar2-Agent", 1.0, 0.0, 2.0, "inconclusive")])
    b = _run(tmp_path / "s11", [_claim("b", "rStar2-Agent", 1.0, 0.0, 2.0, "inconclusive"),
                                _claim("a", "ReTool", -0.25, -0.5, -0.125, "not reproduced", tests=2)])
    rows = seeds_table([a, b], "ReTool")
    assert rows == [["claim", "s7", "s11"],
                    ["Figure 1: claim a", "+0.500 (+0.100 to +0.900) reproduced", "-0.250, +0.750 not reproduced"]]
    out = tmp_path / "t.csv"
    assert cli.main(["claims", str(a), str(b), "--section", "ReTool", "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0] == "claim,s7,s11"


def test_a_claim_missing_from_a_run_is_named(tmp_path):
    a = _run(tmp_path / "s7", [_claim("a", "ReTool", 0.5, 0.1, 0.9, "reproduced")])
    b = _run(tmp_path / "s11", [])
    with pytest.raises(KeyError, match="'a' is not in s11"):
        seeds_table([a, b], "ReTool")


def test_a_claim_of_the_claims_file_shows_its_current_wording_and_all_sections_come_together(tmp_path):
    old = _claim("retool_first_call_stays_at_start", "ReTool", 0.07, 0.06, 0.08, "reproduced")
    old["claim"] = "old wording; see the block comment"
    a = _run(tmp_path / "s7", [_claim("b", "rStar2-Agent", 1.0, 0.0, 2.0, "inconclusive"), old])
    rows = seeds_table([a], None)
    assert [r[0].split(":")[0] for r in rows[1:]] == ["Figure 1", "ReTool §3.3"]
    assert "block comment" not in rows[2][0] and "stays at the start" in rows[2][0]
