"""kit.jsonio: every JSON file of a run is strict JSON, an undefined value written as null."""

import json
import math

import numpy as np
import pytest

from kit import jsonio
from kit.report.figures import read_metrics
from kit.train.common import MetricsWriter, metric_rows


def _strict(text):
    def reject(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=reject)


def test_non_finite_floats_become_null_and_numpy_scalars_numbers(tmp_path):
    obj = {"nan": float("nan"), "inf": float("-inf"), "np": np.float64("nan"), "i": np.int64(3), "t": (1.5, 2),
           1: [float("nan")]}
    assert _strict(jsonio.dumps(obj)) == {"nan": None, "inf": None, "np": None, "i": 3, "t": [1.5, 2], "1": [None]}
    path = jsonio.write_json(tmp_path / "a" / "summary.json", {"ratio": float("nan"), "where": tmp_path})
    assert _strict(path.read_text()) == {"ratio": None, "where": str(tmp_path)}


def test_metrics_rows_with_an_undefined_ratio_are_strict_json_and_read_back_as_nan(tmp_path):
    MetricsWriter(tmp_path).write({"step": 1, "tool_error_ratio_correct_before": float("nan"), "accuracy": 0.5})
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    assert _strict(line)["tool_error_ratio_correct_before"] is None
    assert metric_rows(tmp_path)[0]["tool_error_ratio_correct_before"] is None
    df = read_metrics(tmp_path / "metrics.jsonl")
    assert math.isnan(df["tool_error_ratio_correct_before"].iloc[0]) and df["accuracy"].iloc[0] == 0.5


def test_bare_nan_is_what_the_strict_reader_rejects():
    with pytest.raises(ValueError, match="NaN"):
        _strict(json.dumps({"x": float("nan")}))  # the default json.dumps output the kit no longer writes


def test_write_json_replaces_the_file_whole_so_a_reader_never_sees_half_of_it(tmp_path):
    path = tmp_path / "router_status.json"
    jsonio.write_json(path, {"served": [1, 2], "note": "old"})
    with path.open() as reader:  # a reader that opened the old file keeps reading the old file, whole
        jsonio.write_json(path, {"served": [3, 4, 5], "note": "new"})
        assert json.loads(reader.read())["note"] == "old"
    assert json.loads(path.read_text())["note"] == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["router_status.json"]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644
