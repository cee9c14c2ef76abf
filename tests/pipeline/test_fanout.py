"""``kit reproduce --seeds ... --ray`` (issue #48): seeds side by side as Ray tasks, same folders and files as
one after another, Ray in a private namespace and nothing left running."""

import json
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from kit import cli
from kit.pipeline import fanout
from kit.pipeline.compare import compare_runs
from kit.pipeline.seeds import seed_command


def test_a_seeds_command_drops_the_fan_out_options():
    cmd = ["reproduce", "--profile", "tiny", "--seeds", "1-2", "--ray", "local", "--ray-cpus=4", "--only", "02"]
    assert seed_command(cmd, "s1", 1) == ["reproduce", "--profile", "tiny", "--only", "02", "--run", "s1", "--seed", "1"]


def test_seeds_at_once_follow_the_cpus_and_a_seed_that_cannot_fit_is_refused():
    assert fanout.seed_parallelism(16, 2, 5) == 5
    assert fanout.seed_parallelism(6, 2, 5) == 3
    assert fanout.seed_parallelism(2, 2, 5) == 1
    with pytest.raises(ValueError, match="asks for 4 CPUs .* Ray has 2"):
        fanout.seed_parallelism(2, 4, 5)
    assert fanout.cpus_per_seed(2) == 2 and fanout.cpus_per_seed(0) == 1
    assert fanout.fanout_name("main") == "fanout" and fanout.fanout_name("ar") == "ar-fanout"


def test_the_command_line_refuses_ray_without_seeds_and_for_the_verl_runtime(tmp_path, capsys):
    root = ["--reports-root", str(tmp_path)]
    assert cli.main(["reproduce", "--profile", "smoke", "--seed", "1", "--ray", "local", *root]) == 2
    assert "give them with --seeds" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "h:6379", "--ray-cpus", "2",
                     *root]) == 2
    assert "--ray-cpus is the CPU count of a local Ray head" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "paper-14b", "--seeds", "1-2", "--ray", "local", *root]) == 2
    assert "runtime=verl" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "smoke", "--seeds", "1-2", "--ray", "local", "--ray-cpus", "1",
                     "--set", "model.torch_threads=2", *root]) == 2
    assert "asks for 2 CPUs" in capsys.readouterr().err
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


@pytest.mark.slow  # a local Ray head (~20-80 s to start on 2 loaded cores) and three short smoke runs (~3 min)
def test_two_smoke_seeds_side_by_side_on_a_local_ray_match_the_serial_run(tmp_path, capsys):
    common = ["--profile", "smoke", "--only", "01", "--set", "model.torch_threads=1"]
    fanned, serial = tmp_path / "fanned", tmp_path / "serial"
    code = cli.main(["reproduce", *common, "--seeds", "3-4", "--ray", "local", "--ray-cpus", "2",
                     "--reports-root", str(fanned)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 at once, 1 CPU(s) each" in out and "seed 3 exited 0" in out and "seed 4 exited 0" in out
    # each seed in its own run folder, as one after another would write it, and pooled afterwards
    runs = {s: fanned / "smoke" / f"s{s}" for s in (3, 4)}
    states = {s: json.loads((r / "pipeline_state.json").read_text()) for s, r in runs.items()}
    for s, st in states.items():
        assert st["01_data_curation"]["status"] == "done" and st["01_data_curation"]["parameters"]["seed"] == s
    assert (fanned / "smoke" / "only-01-pooled" / "pooled_claims.json").exists()
    # side by side: the two seeds' notebooks ran in overlapping windows
    (a0, a1), (b0, b1) = _window(states[3]), _window(states[4])
    assert a0 < b1 and b0 < a1, f"the seeds ran one after another: {(a0, a1)} {(b0, b1)}"
    # Ray ran in a private namespace that was emptied at the end: no process of it left on the host
    session = json.loads((fanned / "smoke" / "fanout" / "session.json").read_text())
    assert session["codes"] == {"seeds": 0} and session["orphans"] == [] and session["error"] is None
    spec = json.loads((fanned / "smoke" / "fanout" / "fanout_spec.json").read_text())
    assert spec["cpus_per_seed"] == 1
    assert not _ray_processes("kitray-"), "a Ray process of the session outlived it"
    assert not _ray_processes(str(fanned)), "a seed's process outlived the fan-out"
    # the same seed one after another, here, gives the same result files byte for byte
    assert cli.main(["reproduce", *common, "--seeds", "3", "--reports-root", str(serial)]) == 0
    diffs = compare_runs(runs[3], serial / "smoke" / "s3")  # result files, paths and time fields aside
    assert not diffs, "a seed's files depend on how it was scheduled: " + "; ".join(f"{d.path} ({d.what})" for d in diffs)
    assert Path(fanned / "smoke" / "fanout" / "seed-3.log").read_text().strip()
