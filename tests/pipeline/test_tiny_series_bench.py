"""benchmarks/tiny_series.py on a finished run's state (``--read``): the per-notebook table with the machine's
CPU seconds, the host-speed factor (smoke against the tiny reference: the same SFT step) and the last line."""

from __future__ import annotations

import json

from doubles import load_benchmark

from kit.pipeline.timing import SFT_STEP_REFERENCE_S


def test_read_prints_the_table_the_host_factor_and_the_result_line(tmp_path, capsys):
    bench = load_benchmark("tiny_series")
    state = {"00_setup_and_sandbox_check": {"status": "done", "seconds": 10.0, "cpu_seconds": 4.0, "machine_cpu_seconds": 9.0},
             "01_data_curation": {"status": "done", "seconds": 20.0, "cpu_seconds": 16.0, "machine_cpu_seconds": 30.0},
             "02_cold_start_sft": {"status": "failed", "seconds": 5.0}}
    (tmp_path / "pipeline_state.json").write_text(json.dumps(state))
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "config.json").write_text(json.dumps({"profile": "smoke"}))
    ref = SFT_STEP_REFERENCE_S["tiny"][0]
    rows = [{"step": i, "loss": 1.0, "time_s": t * ref, "threads": th} for i, (t, th) in
            enumerate([(1.2, 2), (1.4, 2), (9.0, 1), (1.3, 2)], 1)]
    (tmp_path / "sft" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.main(["--read", str(tmp_path), "--no-limits"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "series_wall_s=30 series_cpu_s=20 machine_cpu_s=39 host_factor=1.30"  # median at 2 threads
    row = next(x for x in out if x.startswith("01_data_curation")).split()
    assert row[1:] == ["done", "20", "16", "30"] and not any(x.startswith("02_") for x in out)
    assert "the tiny reference: the same step" in next(x for x in out if x.startswith("host speed"))
    assert bench.reference_profile("smoke") == "tiny" and bench.reference_profile("tiny") == "tiny"
    assert bench.reference_profile("smoke", {"sft.batch_size": 8}) is None  # other work per step


def _run_folder(root, state, step_s):
    root.mkdir()
    (root / "pipeline_state.json").write_text(json.dumps(state))
    (root / "sft").mkdir()
    (root / "sft" / "config.json").write_text(json.dumps({"profile": "tiny"}))
    rows = [{"step": i, "loss": 1.0, "time_s": step_s, "threads": 2} for i in range(1, 4)]
    (root / "sft" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_read_of_several_seeds_prints_each_seed_per_notebook_and_the_target_on_complete_seeds(tmp_path, capsys):
    bench = load_benchmark("tiny_series")
    ref = SFT_STEP_REFERENCE_S["tiny"][0]
    nb = lambda w, m: {"status": "done", "seconds": w, "cpu_seconds": w, "machine_cpu_seconds": m}  # noqa: E731
    _run_folder(tmp_path / "s1", {"02_cold_start_sft": nb(600, 1200), "12_bstar": nb(300, 600)}, 1.5 * ref)
    _run_folder(tmp_path / "s2", {"02_cold_start_sft": nb(800, 1600), "12_bstar": nb(400, 800)}, 2.0 * ref)
    _run_folder(tmp_path / "s3", {"02_cold_start_sft": nb(500, 900)}, 1.0 * ref)  # a partial seed
    assert bench.main(["--read", *(str(tmp_path / s) for s in ("s1", "s2", "s3"))]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert next(x for x in out if x.startswith("12_bstar")).split() == ["12_bstar", "300/600", "400/800", "-", "350/700"]
    assert next(x for x in out if x.startswith("s3:")).startswith("s3: 1 of 2 notebooks, wall 500 s")
    # the target on the two complete seeds: mean wall 1050 s, machine 2100 CPU s over the median factor 1.5
    target = next(x for x in out if x.startswith("per seed"))
    assert "2 complete seed(s)" in target and "wall 700 s (target 1200: met)" in target
    assert "machine 1400 CPU s (target 2000: met)" in target
    assert out[-1] == "seeds=3 mean_wall_s=867 mean_machine_cpu_s=1700 host_factor=1.50"


def test_fanout_prints_its_wall_each_seed_and_the_ratio_to_one_seed_alone(tmp_path, capsys):
    bench = load_benchmark("tiny_series")
    (tmp_path / "fanout").mkdir()
    (tmp_path / "fanout" / "timings.json").write_text(json.dumps(
        {"wall_s": 1300.0, "seeds_s": {"1": 1250.0, "2": 1290.0}, "codes": {"1": 0, "2": 0}, "cpus_per_seed": 2,
         "ray_cpus": 16}))
    nb = {"status": "done", "seconds": 500.0, "cpu_seconds": 500.0}
    _run_folder(tmp_path / "solo", {"02_cold_start_sft": nb, "12_bstar": nb}, SFT_STEP_REFERENCE_S["tiny"][0])
    assert bench.main(["--fanout", str(tmp_path / "fanout"), "--solo", str(tmp_path / "solo")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "2 seeds, 2 CPU(s) each on 16 Ray CPUs, wall 1300 s; each seed's own: 1 1250 s, 2 1290 s" in out[0]
    assert "fan-out / alone = 1.30 (target <= 1.3" in out[1]
    assert out[-1] == "fanout_seeds=2 fanout_wall_s=1300 solo_wall_s=1000 ratio=1.30"

    (tmp_path / "alone").mkdir()  # one seed fanned out alone: the same clock
    (tmp_path / "alone" / "timings.json").write_text(json.dumps({"wall_s": 1100.0, "codes": {"1": 0}}))
    assert bench.main(["--fanout", str(tmp_path / "fanout"), "--solo", str(tmp_path / "alone")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("solo_wall_s=1100 ratio=1.18")
    (tmp_path / "fanout" / "timings.json").write_text(json.dumps({"wall_s": 900.0, "codes": {"1": 0, "2": 124}}))
    assert bench.main(["--fanout", str(tmp_path / "fanout"), "--solo", str(tmp_path / "alone")]) == 0
    out = capsys.readouterr().out
    assert "no ratio: seeds 2 (exit 124) did not finish" in out and out.strip().endswith("ratio=nan")
