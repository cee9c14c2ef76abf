"""Stage 1 -> stage 2 through VERL's own trainer on CPU, in ONE kit session (one Ray start).

The chain's VERL part as the notebooks run it with ``runtime=verl`` (``kit.runtime.verl.run_stage``
for ``stage1`` then ``stage2``, :func:`kit.bridge.verl_cpu.tiny_run.run_chain`), run as one command
inside :func:`kit.bridge.verl_cpu.runner.run_session`: each stage runs on that session's Ray head
instead of starting its own (VERL's and Ray's start-up are most of a small stage's cost). One
GRPO-RoC step per stage from the shared tiny SFT policy (``conftest.tiny_verl_root``).

Asserted as the local smoke chain asserts its RL stages (``tests/pipeline/test_smoke_chain.py``):
per-stage ``metrics.jsonl`` rows with the documented keys VERL provides, global steps continuing across stages,
a merged ``policy/`` per stage; plus what only VERL has: stage 2 resumed from stage 1's last
checkpoint (model and optimizer) and wrote its own ``global_step_2``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from kit.bridge.verl_cpu import runner, tiny_run  # noqa: E402
from kit.models import load_policy  # noqa: E402

pytestmark = [pytest.mark.verl_cpu, pytest.mark.slow]

#: the keys of the local chain's RL rows that VERL's step metrics give (kit.bridge.stages.METRIC_MAP)
RL_KEYS = ["stage", "step", "global_step", "reward_mean", "accuracy", "response_len_mean", "kept",
           "time_generate_s", "time_update_s", "algorithm", "seed"]


@pytest.fixture(scope="module")
def chain(tiny_verl_root):
    root = tiny_verl_root / "chain"  # beside the two-step test's stage1/
    log = str(tiny_verl_root / "chain.log")
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "kit.bridge.verl_cpu.tiny_run", str(tiny_verl_root), str(root)]
    res = runner.run_session([runner.Launch("chain", argv, log, env={runner.DEVICE_ENV: "cpu"})],
                             tiny_verl_root / "chain_session", timeout_s=1800)
    print(f"verl_cpu chain stage1+stage2 (1 step each) in one session: {time.perf_counter() - t0:.1f} s; "
          f"{res.timings}; peak PSS {res.peak_pss_bytes / 2**30:.2f} GiB")
    assert res.ok, f"{res.error}; codes {res.codes}; chain log tail:\n{Path(log).read_text()[-3000:]}"
    return root, res, {s: json.loads((root / s / "summary.json").read_text()) for s in tiny_run.CHAIN_STAGES}


def test_one_ray_start_for_both_stages_and_nothing_left_running(chain):
    root, res, _ = chain
    assert "ray_start_s" in res.timings and res.orphans == []
    for stage in tiny_run.CHAIN_STAGES:  # neither stage started a session (and a Ray) of its own
        assert not (root / stage / "verl_session").exists() and (root / stage / f"verl_{stage}.log").exists()


def test_stage2_resumes_from_stage1s_checkpoint(chain):
    root, _, s = chain
    assert s["stage1"]["start_step"] == 0 and s["stage1"]["end_step"] == 1 and s["stage1"]["resumed_from"] is None
    assert s["stage2"]["resumed_from"] == str(root.resolve() / "stage1" / "checkpoints" / "global_step_1")
    assert s["stage2"]["start_step"] == 1 and s["stage2"]["end_step"] == 2
    assert (root / "stage2" / "checkpoints" / "global_step_2" / "actor").is_dir()
    assert s["stage2"]["model_path"] == str(root.resolve() / "stage1" / "policy")


def test_metrics_like_the_local_chain(chain):
    root, _, _ = chain
    last = 0
    for stage in tiny_run.CHAIN_STAGES:
        rows = [json.loads(x) for x in (root / stage / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1]
        assert set(RL_KEYS) <= set(rows[0]), f"{stage}: missing {set(RL_KEYS) - set(rows[0])}"
        assert rows[0]["global_step"] == last + 1  # global steps continue across stages
        last = rows[0]["global_step"]


def test_each_stage_leaves_a_merged_policy_that_loads(chain):
    root, _, s = chain
    for stage in tiny_run.CHAIN_STAGES:
        model, _ = load_policy(s[stage]["policy_dir"])
        assert s[stage]["policy_dir"] == str(root.resolve() / stage / "policy") and s[stage]["merged"]
        assert sum(p.numel() for p in model.parameters()) > 0
