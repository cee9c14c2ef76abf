"""``kit reproduce --seeds ... --ray`` (issue #48): seeds side by side as Ray tasks, same folders and files as
one after another, Ray in a private namespace and nothing left running."""

import json
from datetime import datetime

import psutil
import pytest

from kit import cli
from kit.bridge import seed_fanout
from kit.pipeline import fanout
from kit.pipeline.compare import compare_runs
from kit.pipeline.lock import run_lock
from kit.pipeline.seeds import fanout_name, seed_command


def test_a_seeds_command_drops_the_fan_out_options():
    cmd = ["reproduce", "--profile", "tiny", "--seeds", "1-2", "--ray", "local", "--ray-cpus=4", "--only", "02"]
    assert seed_command(cmd, "s1", 1) == ["reproduce", "--profile", "tiny", "--only", "02", "--run", "s1", "--seed", "1"]


def test_a_seed_asks_for_its_thread_count_and_a_plan_that_cannot_run_is_refused():
    assert fanout.plan(2, "local", 5, 16) == (2, 5)
    assert fanout.plan(2, "local", 5, 6) == (2, 3)
    assert fanout.plan(-3, "local", 5, 6) == (3, 2)  # adaptive up to 3 threads asks for 3
    assert fanout.plan(2, "10.0.0.5:6379", 5, 2) == (2, None)  # a cluster's CPUs are known once joined
    assert fanout.plan(1, "ray://head:10001", 2, 2) == (1, None)
    with pytest.raises(fanout.FanOutError, match="asks for 4 CPUs .* has 2"):
        fanout.plan(4, "local", 5, 2)
    with pytest.raises(fanout.FanOutError, match="torch_threads=N"):
        fanout.plan(0, "local", 5, 16)
    with pytest.raises(fanout.FanOutError, match="host:port"):
        fanout.plan(1, "foo", 2, 2)
    assert fanout_name("main") == "fanout" and fanout_name("ar") == "ar-fanout"


def test_a_local_seed_gets_the_callers_environment_back():
    caller = {"PYTHONPATH": "/mine", "RAY_ADDRESS": None, "RAY_AUTH_MODE": None, "KIT_VERL_SESSION_NS": None}
    assert set(caller) == set(fanout.SESSION_VARS)
    in_session = {"PYTHONPATH": "/checkout:/mine", "RAY_ADDRESS": "127.0.0.1:6379", "RAY_AUTH_MODE": "disabled",
                  "KIT_VERL_SESSION_NS": "pid:[1]", "MKL_CBWR": "AUTO,STRICT"}
    env = seed_fanout._seed_env({"address": None, "restore": caller}, in_session)
    assert env == {"PYTHONPATH": "/mine", "MKL_CBWR": "AUTO,STRICT"}
    assert seed_fanout._seed_env({"address": "h:1", "restore": caller}, in_session) is None  # a cluster node's own


def test_the_command_line_refuses_what_the_fan_out_cannot_run_dry_run_included(tmp_path, capsys):
    root = ["--reports-root", str(tmp_path)]
    assert cli.main(["reproduce", "--profile", "smoke", "--seed", "1", "--ray", "local", *root]) == 2
    assert "give them with --seeds" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "h:6379", "--ray-cpus", "2",
                     *root]) == 2
    assert "--ray-cpus is the CPU count of a local Ray head" in capsys.readouterr().err
    for dry in ([], ["--dry-run"]):  # a dry run refuses what the real run refuses
        assert cli.main(["reproduce", "--profile", "paper-14b", "--seeds", "1-2", "--ray", "local", *dry, *root]) == 2
        assert "runtime=verl" in capsys.readouterr().err
        assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "local", "--ray-cpus", "1",
                         "--set", "model.torch_threads=2", *dry, *root]) == 2
        assert "asks for 2 CPUs" in capsys.readouterr().err
        assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "nohost", *dry, *root]) == 2
        assert "host:port" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "local", "--ray-cpus", "4",
                     "--set", "model.torch_threads=1", "--dry-run", *root]) == 0
    assert "side by side on a local Ray head (4 CPUs" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # no abbreviations: each seed's command is re-run as given
        cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "local", "--ray-c", "2", *root])
    assert not (tmp_path / "smoke" / "fanout").exists(), "nothing starts for a refused command"


def _window(state: dict) -> tuple[float, float]:
    """(first start, last end) of a run's notebooks, epoch seconds, from pipeline_state.json."""
    spans = []
    for v in state.values():
        if isinstance(v, dict) and v.get("status") == "done":
            end = datetime.fromisoformat(v["finished_at"].replace("Z", "+00:00")).timestamp()
            spans.append((end - v["seconds"], end))
    return min(s for s, _ in spans), max(e for _, e in spans)


def _ray_processes(marker: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in a for a in (p.info["cmdline"] or [])):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


@pytest.mark.slow  # a local Ray head (~20-80 s to start on 2 loaded cores) and four short smoke runs (~4 min)
def test_smoke_seeds_side_by_side_on_a_local_ray_match_the_serial_run_and_a_refused_seed_stops_no_other(
        tmp_path, capsys, monkeypatch):
    common = ["--profile", "smoke", "--only", "01", "--set", "model.torch_threads=1"]
    fanned, serial = tmp_path / "fanned", tmp_path / "serial"
    monkeypatch.chdir(tmp_path)  # a relative --reports-root is the caller's, for the seeds as for the pool
    with run_lock(fanned / "smoke" / "s5"):  # seed 5's folder is held by "another run": that seed alone refuses
        code = cli.main(["reproduce", *common, "--seeds", "3-5", "--ray", "local", "--ray-cpus", "2",
                         "--reports-root", "fanned"])
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert code == 2, out + err
    assert "2 at once, 1 CPU(s) each" in out and "seed 3 exited 0" in out and "seed 4 exited 0" in out
    assert "seed 5 exited 2" in out and "being written by another run" in out  # its log's last lines
    assert "seed(s) 5 refused to run" in err
    # each seed in its own run folder, as one after another would write it
    runs = {s: fanned / "smoke" / f"s{s}" for s in (3, 4)}
    states = {s: json.loads((r / "pipeline_state.json").read_text()) for s, r in runs.items()}
    for s, st in states.items():
        assert st["01_data_curation"]["status"] == "done" and st["01_data_curation"]["parameters"]["seed"] == s
    # side by side: the two seeds' notebooks ran in overlapping windows
    (a0, a1), (b0, b1) = _window(states[3]), _window(states[4])
    assert a0 < b1 and b0 < a1, f"the seeds ran one after another: {(a0, a1)} {(b0, b1)}"
    # Ray ran in a private namespace that was emptied at the end: no process of it left on the host
    session = json.loads((fanned / "smoke" / "fanout" / "session.json").read_text())
    assert session["codes"] == {"seeds": 1} and session["orphans"] == [] and session["error"] is None
    assert json.loads((fanned / "smoke" / "fanout" / "results.json").read_text()) == {"3": 0, "4": 0, "5": 2}
    timings = json.loads((fanned / "smoke" / "fanout" / "timings.json").read_text())
    assert set(timings["seeds_s"]) == {"3", "4", "5"} and timings["ray_cpus"] == 2 and timings["cpus_per_seed"] == 1
    assert timings["wall_s"] < timings["seeds_s"]["3"] + timings["seeds_s"]["4"]  # side by side, not in a row
    assert not _ray_processes("kitray-"), "a Ray process of the session outlived it"
    assert not _ray_processes(str(fanned)), "a seed's process outlived the fan-out"
    # the fanned-out seeds pool as any runs do
    assert cli.main(["claims", "pool", str(runs[3]), str(runs[4]), "--out", str(tmp_path / "pooled")]) == 0
    # the same seed one after another, here, gives the same result files byte for byte
    assert cli.main(["reproduce", *common, "--seeds", "3", "--reports-root", str(serial)]) == 0
    diffs = compare_runs(runs[3], serial / "smoke" / "s3")  # result files, paths and time fields aside
    assert not diffs, "a seed's files depend on how it was scheduled: " + "; ".join(f"{d.path} ({d.what})" for d in diffs)
