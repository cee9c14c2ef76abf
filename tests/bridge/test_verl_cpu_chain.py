"""The whole `smoke` notebook chain 00-20 with ``runtime=verl`` through VERL's own trainer on CPU (issue #15).

``python -m kit reproduce --profile smoke --set runtime=verl`` with ``KIT_VERL_DEVICE=cpu`` (what
``kit reproduce`` runs): the runner wraps the whole papermill series in ONE kit session (private
network and PID namespace, one Ray head; ``kit.pipeline.run_in_verl_cpu_session``), so 03-06 launch
VERL on that head. 02 takes the linked-checkpoint route (``KIT_SFT_CHECKPOINT`` = the shared tiny SFT
policy, ``conftest.tiny_verl_root``; VERL's SFT trainer on CPU is not run here); 03-05 chain through
VERL (stage 2 resumes stage 1's checkpoint, stage 3 loads stage 2's weights with a fresh optimizer
and trains on its hard subset, sampled from the stage-2 policy the kit serves on loopback); 06 trains both arms through VERL; 07, 08, 10, 11 and 20 analyse, evaluate and
report on the merged policies. One GRPO-RoC step per stage and per arm
(:data:`kit.bridge.verl_cpu.tiny_run.SMOKE_CHAIN`).

Asserted as the local smoke chain asserts (``tests/smoke_checks.py``), with VERL's subset of the RL
keys and the linked cold start, plus what only VERL has: one Ray start for the chain, the resume
and weights-only chain of checkpoints, no orphan processes, sandbox workers = the pool size.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest
import smoke_checks as checks
import torch
from loaded_chain import LoadedChain, loaded_chain_wanted

pytest.importorskip("verl")

from kit import cli, pipeline  # noqa: E402
from kit.bridge.hard_subset import source_id  # noqa: E402
from kit.bridge.verl_cpu import runner, tiny_run  # noqa: E402
from kit.config import from_json  # noqa: E402
from kit.models import load_policy  # noqa: E402

pytestmark = [pytest.mark.verl_cpu, pytest.mark.slow]

RUN = "verl"
ARMS = ("grpo_seed0", "grpo_roc_seed0")


def adam_steps(run, step: int) -> set[int]:
    """Adam's step counts in ``run``'s saved optimizer at ``global_step_<step>`` (one fake GPU: rank 0
    holds every parameter): how many updates that optimizer state has seen."""
    path = run / "checkpoints" / f"global_step_{step}" / "actor" / "optim_world_size_1_rank_0.pt"
    state = torch.load(path, map_location="cpu", weights_only=False)["state"]  # DTensor moments: not weights_only
    return {int(v["step"]) for v in state.values()}


@pytest.fixture(scope="module")
def chain(tiny_verl_root, tmp_path_factory, request):
    if loaded_chain_wanted(request.session.items):  # the repeatability test's loaded chain runs beside this one
        LoadedChain.start(tmp_path_factory, "the VERL chain")
    root = tmp_path_factory.mktemp("verl_reports")
    sets = {**tiny_run.SMOKE_CHAIN, **tiny_run.sandbox_overrides(), "runtime": "verl"}
    argv = ["reproduce", "--profile", "smoke", "--run", RUN, "--reports-root", str(root), "--cell-timeout", "900",
            *[f"--set={k}={json.dumps(v)}" for k, v in sets.items()]]
    lay = pipeline.Layout.for_run("smoke", RUN, root)
    t0 = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_SFT_CHECKPOINT", str(tiny_verl_root / "sft" / "policy"))
        for name in ("KIT_HARD_COUNTS", "KIT_SAMPLER_URL", "RAY_ADDRESS"):  # stage 3 serves its stage-2 policy
            mp.delenv(name, raising=False)
        mp.setenv(runner.DEVICE_ENV, "cpu")
        code = cli.main(argv)
    seconds = time.perf_counter() - t0
    session = json.loads((lay.root / pipeline.VERL_SESSION_DIR / "session.json").read_text())
    print(f"verl_cpu smoke chain 00-20: {seconds:.0f} s; session {session['timings']}; peak PSS "
          f"{session['peak_pss_bytes'] / 2**30:.2f} GiB; sandbox workers steady {session['sandbox_workers_steady']}")
    log = lay.root / pipeline.VERL_SESSION_DIR / "chain.log"
    assert code == 0, f"the VERL smoke chain failed; chain log tail:\n{log.read_text()[-3000:]}"
    cfg = from_json(lay.root / "stage3" / "config.json")
    summaries = {s: json.loads((lay.root / s / "summary.json").read_text()) for s in cfg.stages.names}
    return {"lay": lay, "cfg": cfg, "session": session, "s": summaries, "sft_policy": tiny_verl_root / "sft" / "policy"}


def test_every_notebook_executed_and_recorded(chain):
    checks.every_notebook_executed_and_recorded(chain["lay"])


def test_rl_metrics_through_verl(chain):
    lay, cfg = chain["lay"], chain["cfg"]
    checks.rl_metrics_have_keys_and_step_counts(lay, cfg, checks.VERL_RL_KEYS)
    assert all(r["engine"] == "verl" for s in cfg.stages.names for r in checks.rows(lay.root / s / "metrics.jsonl"))
    # every claimed key filled with the population kit.metrics declares (issue #29)
    assert all(checks.claimed_keys_have_their_declared_population(lay.root / s) > 0 for s in cfg.stages.names)
    sft = json.loads((lay.root / "sft" / "summary.json").read_text())  # the linked route trains nothing here
    assert sft["engine"] == "linked" and not (lay.root / "sft" / "metrics.jsonl").exists()
    assert (lay.root / "sft" / "policy").resolve() == chain["sft_policy"].resolve()


def test_ablation_both_arms_through_verl(chain):
    lay, cfg = chain["lay"], chain["cfg"]
    checks.ablation_runs_both_algorithms_for_every_seed(lay, cfg, checks.VERL_RL_KEYS)
    assert all(checks.claimed_keys_have_their_declared_population(lay.root / "ablation" / arm) > 0 for arm in ARMS)
    for arm in ARMS:
        s = json.loads((lay.root / "ablation" / arm / "summary.json").read_text())
        assert s["engine"] == "verl" and s["launched"] and s["merged"] and s["end_step"] == cfg.ablation.steps
        assert (lay.root / "ablation" / arm / "policy" / "config.json").exists()


def test_evaluation_on_the_real_benchmarks(chain):
    checks.evaluation_on_the_real_benchmarks(chain["lay"], chain["cfg"])


def test_consistency_filter_and_passk_curves(chain):
    checks.consistency_filter_and_passk_curves(chain["lay"], chain["cfg"])


def test_figures_tables_and_report(chain):
    checks.figures_tables_and_report(chain["lay"])


def test_claims_file_and_summary_page(chain):
    checks.claims_file_and_summary_page(chain["lay"])


def test_one_ray_start_for_the_whole_chain_and_nothing_left_running(chain):
    lay, sess = chain["lay"], chain["session"]
    assert sess["error"] is None and sess["codes"] == {"chain": 0} and "ray_start_s" in sess["timings"]
    assert sess["orphans"] == [] and runner.ray_local.processes_in_namespace(sess["pid_namespace"]) == []
    runs = [lay.root / s for s in chain["cfg"].stages.names] + [lay.root / "ablation" / a for a in ARMS]
    for run in runs:  # no stage started a session (and a Ray) of its own; each ran VERL on the shared head
        assert not (run / "verl_session").exists(), run
        assert any(run.glob("verl_stage*.log")), run


def test_sandbox_workers_equal_the_pool_size(chain):
    assert chain["session"]["sandbox_workers_steady"] == chain["cfg"].sandbox.num_workers


def test_stage2_resumes_stage1s_last_checkpoint(chain):
    root, s = chain["lay"].root.resolve(), chain["s"]
    assert s["stage1"]["start_step"] == 0 and s["stage1"]["end_step"] == 1 and s["stage1"]["resumed_from"] is None
    assert s["stage2"]["resumed_from"] == str(root / "stage1" / "checkpoints" / "global_step_1")
    assert s["stage2"]["start_step"] == 1 and s["stage2"]["end_step"] == 2
    assert s["stage2"]["model_path"] == str(root / "stage1" / "policy")
    assert not any("load_contents" in a for a in s["stage2"]["launch_command"])  # model and optimizer
    # the optimizer went on: stage 1's one Adam step plus stage 2's
    assert adam_steps(root / "stage1", 1) == {1} and adam_steps(root / "stage2", 2) == {2}


def test_stage3_loads_stage2_weights_with_a_fresh_optimizer_on_the_hard_subset(chain):
    root, s = chain["lay"].root.resolve(), chain["s"]
    assert s["stage3"]["resumed_from"] == str(root / "stage2" / "checkpoints" / "global_step_2")
    assert s["stage3"]["start_step"] == 2 and s["stage3"]["end_step"] == 3
    assert "actor_rollout_ref.actor.checkpoint.load_contents=[model]" in s["stage3"]["launch_command"]
    assert adam_steps(root / "stage3", 3) == {1}  # a fresh optimizer: stage 3's own one step, not 2 + 1
    assert s["stage3"]["train_files"] == str(root / "stage3" / "data" / "hard.parquet")


def test_stage3_hard_subset_sampled_from_the_served_stage2_policy(chain):
    """The kit served stage2/policy on loopback and sampled every curated problem n times; hard.parquet
    is the curated pool minus the problems solved n/n."""
    root, cfg = chain["lay"].root.resolve(), chain["cfg"]
    n = cfg.stages["stage3"].hard_filter_samples
    info = json.loads((root / "stage3" / "hard_subset.json").read_text())
    assert info["route"]["kind"] == "kit_cpu" and info["route"]["url"].startswith("http://127.0.0.1:")
    curated = pd.read_parquet(root / "data" / "data" / "curated.parquet")
    counts = json.loads((root / "stage3" / "solve_counts.json").read_text())
    assert set(counts) == {source_id(r) for r in curated.to_dict("records")} and all(0 <= c <= n for c in counts.values())
    hard = pd.read_parquet(root / "stage3" / "data" / "hard.parquet")
    assert {source_id(r) for r in hard.to_dict("records")} == {k for k, c in counts.items() if c < n}


def test_every_trained_policy_is_merged_and_loads(chain):
    root = chain["lay"].root.resolve()
    for run in [root / s for s in chain["cfg"].stages.names] + [root / "ablation" / a for a in ARMS]:
        model, _ = load_policy(run / "policy")
        assert sum(p.numel() for p in model.parameters()) > 0


def test_both_runtimes_rollout_records_read_through_one_reader(chain, smoke_run):
    """Issue #32: step 1 of stage 1 on the session's local smoke chain and on this VERL chain, read by one
    reader into one schema, every always-filled column filled; notebooks 03 and 06 exported their views."""
    from kit.records import SCHEMA, check_record, read_records
    from kit.records.schema import NULLABLE

    local_lay, local_cfg = smoke_run
    for runtime, lay, cfg in (("local", local_lay, local_cfg), ("verl", chain["lay"], chain["cfg"])):
        recs = read_records(lay.root / "stage1", stage="stage1", steps=[1])
        assert len(recs) == cfg.algorithm.prompts_per_step * cfg.algorithm.oversample, (runtime, len(recs))
        rec = recs[0]
        check_record(rec, f"{runtime} record")
        assert rec["runtime"] == runtime and rec["step"] == 1 and rec["algorithm"] == "grpo_roc"
        assert [c for c in SCHEMA.names if c not in NULLABLE and rec[c] is None] == []
        assert rec["response_ids"] and 1 in rec["response_mask"] and len(rec["logprobs"]) == len(rec["response_ids"])
        first = next(r for r in checks.rows(lay.root / "stage1" / "metrics.jsonl") if r["step"] == 1)
        assert sum(r["kept"] for r in recs) == first["kept"] and len(recs) == first["sampled"]  # RoC's decision
        # the local rollout records its sampling entropy; VERL's servers give none, recorded as missing
        assert (rec["entropy"] is not None) == (runtime == "local")
        for folder in ("stage1", "ablation"):
            assert (lay.root / folder / "explorer.html").exists(), (runtime, folder)
