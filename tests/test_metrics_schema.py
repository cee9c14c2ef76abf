"""kit.metrics: one schema (unit, population, VERL source) and the one metrics.jsonl reader."""

import json

import pytest

from kit.claims import load_claims
from kit.metrics import (
    POPULATIONS,
    RL_KEYS,
    SFT_KEYS,
    VERL_POPULATION,
    MetricsError,
    read_rows,
)


def test_every_verl_source_of_a_key_has_the_population_the_schema_declares():
    # the Figure 9 length claim once read VERL's response_length/mean (RoC's kept rows) against the
    # local mean over every sampled rollout: a key may only be filled with its declared population
    for key, m in {**RL_KEYS, **SFT_KEYS}.items():
        assert m.population in POPULATIONS and m.unit and m.meaning, key
        assert m.verl is not None or m.why or key in SFT_KEYS, f"{key}: absent on VERL without saying why"
        for name in m.verl or ():
            assert VERL_POPULATION[name] == m.population, (key, name)
    assert RL_KEYS["response_len_mean"].verl == ("rstar2/response_len_mean",)
    assert "response_length/mean" not in {n for m in RL_KEYS.values() for n in m.verl or ()}


def test_every_claimed_metrics_key_is_declared_with_a_population_verl_can_fill_or_says_why():
    keys = {t["key"] for c in load_claims() for t in c["tests"] if t["kind"].startswith(("ablation", "stage_"))}
    assert keys == {"tool_error_ratio_correct_before", "accuracy", "response_len_mean", "code_ratio"}  # the last: ReTool's
    assert {RL_KEYS[k].population for k in keys} == {"sampled"}


def test_the_one_reader_keeps_null_as_none_and_names_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(json.dumps({"step": 1, "r": None}) + "\n\n" + '{"step": 2, "r' + "\n")
    with pytest.raises(MetricsError, match=rf"{p}:3: not valid JSON"):
        read_rows(p)
    assert read_rows(p, partial_ok=True) == [{"step": 1, "r": None}]  # a killed run's partial last line
    p.write_text("[1]\n")
    with pytest.raises(MetricsError, match=rf"{p}:1: expected a JSON object, got list"):
        read_rows(p)
    with pytest.raises(MetricsError, match="metrics file not found"):
        read_rows(tmp_path / "none.jsonl")
    assert read_rows(tmp_path / "none.jsonl", missing_ok=True) == []
    p.write_bytes(b"\xff\n")
    with pytest.raises(MetricsError, match="not UTF-8 text"):
        read_rows(p, partial_ok=True, missing_ok=True)
