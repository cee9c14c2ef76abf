"""The kit's KV-cache balancer routing a real VERL run over two ``kit_cpu`` rollout replicas (issue #19).

One GRPO-RoC step (P = 2 prompts x 2G = 8 rollouts, multi-turn: the tiny SFT policy calls the
sandbox tool) through VERL 0.9.1's trainer on this CPU machine with two FSDP2 ranks, hence two
rollout replicas (``trainer.n_gpus_per_node=2``, two fake Ray GPUs), and ``rollout.balancer =
"kv_cache"``: VERL builds ``kit.bridge.kv_router.KvCacheRouter`` from the run's router YAML, the
replicas report their KV (``KitCpuServer.kv_load``), and the router writes its status file. The
test reads that file: both replicas served requests, every continuing turn stayed on the replica
holding its trajectory's prefix (no moves), and the reports arrived. Timings are printed.

Measured here under pytest (``python -m pytest -m verl_cpu tests/bridge/test_kv_router_verl_cpu.py``,
load average 3-9): 2 passed in 370 s, of which the shared SFT fixture ~177 s and the VERL step on
two replicas 178 s; 28 requests routed 14 + 14, 12 continuing turns sticky, 0 moves, 26 KV
reports, none bad, no engine down.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from kit.bridge.verl_cpu import runner, tiny_run  # noqa: E402
from kit.config import load  # noqa: E402

pytestmark = [pytest.mark.verl_cpu, pytest.mark.slow]


@pytest.fixture(scope="module")
def routed(tiny_verl_root):
    """One stage-1 step from the session's shared tiny SFT policy (``conftest.tiny_verl_root``)."""
    root = tiny_verl_root / "kv_router"  # beside the other verl_cpu tests' folders
    data = tiny_verl_root / "data" / "data"
    cfg = load("smoke", run_dir=str(root / "stage1"),
               overrides={**tiny_run.TWO_STEP, **tiny_run.sandbox_overrides(), "runtime": "verl",
                          "rollout.balancer": "kv_cache", "stages.stage1.steps": 1})
    paths, launch = runner.build_cpu_launch(cfg, "stage1", model_path=str(tiny_verl_root / "sft" / "policy"),
                                            train_files=str(data / "curated.parquet"),
                                            val_files=str(data / "val.parquet"),
                                            extra_overrides=["trainer.n_gpus_per_node=2"])
    t0 = time.perf_counter()
    res = runner.run_session([launch], Path(paths.run_dir) / "verl_session", num_gpus=2, timeout_s=900)
    run_s = time.perf_counter() - t0
    status_file = Path(paths.run_dir) / "verl" / "router_status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else None
    print(f"kv_router verl_cpu: one step on 2 replicas {run_s:.1f} s; router {status}")
    return {"res": res, "status": status, "log": launch.log}


def test_the_run_finished_with_the_kit_router(routed):
    res = routed["res"]
    assert res.ok, f"{res.error} codes {res.codes}; see {routed['log']}"
    assert routed["status"] is not None, f"the router wrote no status; see {routed['log']}"


def test_both_replicas_served_and_trajectories_stayed_home(routed):
    st = routed["status"]
    engines, counters = st["engines"], st["counters"]
    assert sorted(engines) == ["kit_cpu_server_0", "kit_cpu_server_1"]
    assert all(e["served"] > 0 for e in engines.values()), engines
    assert counters["routed"] == sum(e["served"] for e in engines.values())
    assert counters["routed"] >= 16  # 2 prompts x 8 rollouts, one request per turn
    assert counters["sticky"] > 0  # multi-turn trajectories came back for another turn
    assert counters["moves"] == 0  # ... each time to the replica holding its prefix
    assert counters["reports"] > 0 and counters["bad_reports"] == 0 and counters["engines_down"] == 0
