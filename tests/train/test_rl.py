"""RL stages on the local engine: selection, update, stage files, hard subset, exact resume, ablation.

The end-to-end tests run the real agent loop, sandbox pool and update on a randomly initialised
tiny model. Such a model is never right, so the grader is replaced by a test double that
rewards responses of even length: the rewards are then mixed, advantages non-zero and every
update real, which is what the resume test needs to mean something.
"""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from rl_cases import build_policy
from rl_cases import rl_cfg as _cfg
from rl_cases import traj as _traj

from kit import plan
from kit.config import load
from kit.data import tasks
from kit.records import read_records
from kit.train import ablation, common, rl, rollouts
from kit.train.rollouts import Batch, batch_stats

METRIC_KEYS = ("stage", "step", "global_step", "reward_mean", "accuracy", "response_len_mean", "truncation_ratio",
               "tool_calls_per_traj", "tool_error_ratio_correct_before", "tool_error_ratio_correct_after",
               "p_format_mean", "bstar_balance", "kept", "time_generate_s", "time_tool_s", "time_verify_s", "time_update_s",
               "algorithm", "seed")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_policy(tmp_path_factory.mktemp("rl_init"))


@pytest.fixture
def parity_grader(monkeypatch):
    async def grade(pairs):
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    # the double decides every reward, a truncated trajectory's too: the untrained policy is cut almost
    # always, and these tests are about the stage's plumbing (the cut-off rule: tests/train/test_truncation.py)
    monkeypatch.setattr(rollouts, "cut_truncated", lambda verdicts, trajectories: list(verdicts))


def _batch(rewards, trajs):
    P = len(rewards)
    probs = [tasks.TaskProblem(f"p{i}", "product", 1, f"q{i}", "1", "print(1)") for i in range(P)]
    return Batch(probs, trajs, np.asarray(rewards, dtype=float), [["x"] * len(r) for r in rewards], 0.0, 0.0, 0.0)


def test_select_grpo_keeps_all_roc_keeps_g_and_prefers_clean_positives():
    cfg = _cfg(**{"algorithm.roc_mode": "rank"})
    # one group of 2G = 8: 4 correct (2 with a failed call), 4 wrong
    rewards = [[1, 1, 1, 1, 0, 0, 0, 0]]
    trajs = [[_traj(2, 1), _traj(2, 1), _traj(1, 0), _traj(1, 0), _traj(), _traj(), _traj(), _traj()]]
    kept, m = rl.select(cfg, _batch(rewards, trajs), "roc", seed=0)
    assert kept.size == 4
    assert m["tool_error_ratio_correct_before"] == pytest.approx(2 / 6)
    assert m["tool_error_ratio_correct_after"] == 0.0  # the two clean positives are kept
    kept_all, m_all = rl.select(cfg, _batch(rewards, trajs), "all", seed=0)
    assert kept_all.tolist() == list(range(8))
    assert m_all["tool_error_ratio_correct_after"] == m_all["tool_error_ratio_correct_before"]
    with pytest.raises(ValueError, match="unknown selection 'grpo_roc'"):  # the label is not a selection
        rl.select(cfg, _batch(rewards, trajs), "grpo_roc", seed=0)


def test_tool_error_ratio_is_undefined_without_correct_tool_calls():
    cfg = _cfg(**{"algorithm.roc_mode": "rank"})
    wrong = [[0] * 8]
    _, m = rl.select(cfg, _batch(wrong, [[_traj(2, 1) for _ in range(8)]]), "roc", seed=0)
    assert math.isnan(m["tool_error_ratio_correct_before"]) and math.isnan(m["tool_error_ratio_correct_after"])
    no_calls = [[1, 1, 0, 0, 0, 0, 0, 0]]
    _, m = rl.select(cfg, _batch(no_calls, [[_traj(0, 0) for _ in range(8)]]), "all", seed=0)
    assert math.isnan(m["tool_error_ratio_correct_before"])
    stats = batch_stats(_batch(wrong, [[_traj(2, 1) for _ in range(8)]]))
    assert math.isnan(stats["tool_error_ratio_correct"]) and stats["accuracy"] == 0.0
    # aggregates skip undefined steps instead of reading them as "no errors"
    assert common.nanmean([float("nan"), 0.5, 0.25]) == pytest.approx(0.375)
    assert math.isnan(common.nanmean([float("nan")]))
    assert ablation._nanmean_columns([[float("nan"), 0.2], [0.4, float("nan")]]) == pytest.approx([0.4, 0.2])


def test_step_problems_are_a_seeded_walk():
    pool = tasks.make_split(10, 0, 0).train
    a = [rl.step_problems(pool, s, 4, seed=1) for s in range(5)]
    assert a == [rl.step_problems(pool, s, 4, seed=1) for s in range(5)]
    first_pass = [p.id for s in a[:2] for p in s] + [p.id for p in a[2][:2]]
    assert sorted(first_pass) == sorted(p.id for p in pool)  # 10 problems, each once per pass
    with pytest.raises(ValueError, match="pool is empty"):
        rl.step_problems([], 0, 2, 0)


def test_stage_kill_and_resume_matches_an_uninterrupted_run(policy, tmp_path, parity_grader):
    cfg = _cfg()
    a = rl.run_stage(cfg, "stage1", policy, tmp_path / "a", evaluate=False)
    rows_a = common.metric_rows(tmp_path / "a")
    assert [r["step"] for r in rows_a] == [1, 2, 3, 4]
    for key in METRIC_KEYS:
        assert key in rows_a[0], key
    assert any(0 < r["reward_mean"] < 1 for r in rows_a) and any(r["grad_norm"] > 0 for r in rows_a)
    assert (tmp_path / "a" / "policy" / "optimizer.pt").exists() and a["policy_dir"]
    assert json.loads((tmp_path / "a" / "policy" / rl.RL_STATE).read_text())["global_step"] == 4
    same = lambda x, y: json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)  # noqa: E731 (NaN-aware)
    assert same(rl.run_stage(cfg, "stage1", policy, tmp_path / "a", evaluate=False), a)  # finished: not re-run
    assert len(common.metric_rows(tmp_path / "a")) == 4

    class Killed(Exception):
        pass

    def die(row):
        if row.get("step") == 3:
            raise Killed  # dies after step 3 is written; the last checkpoint is step 2

    with pytest.raises(Killed):
        rl.run_stage(cfg, "stage1", policy, tmp_path / "b", progress=die, evaluate=False)
    assert common.latest_checkpoint(tmp_path / "b").name == "step_2"
    rl.run_stage(cfg, "stage1", policy, tmp_path / "b", evaluate=False)

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("time_", "perf_"))} for r in rows]

    assert same(strip(common.metric_rows(tmp_path / "b")), strip(rows_a))
    samples = [json.loads(x) for x in (tmp_path / "b" / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == sorted(s["step"] for s in samples) and samples[-1]["step"] == 4
    # rollout records (issue #32): every step, every prompt (smoke), what the update used; the resumed run's are the same
    recs_a, recs_b = read_records(tmp_path / "a"), read_records(tmp_path / "b")
    P, n = cfg.algorithm.prompts_per_step, cfg.algorithm.oversample
    assert len(recs_a) == 4 * P * n and [len(read_records(tmp_path / "a", steps=[s])) for s in (1, 4)] == [P * n] * 2
    for row in rows_a:
        step = [r for r in recs_a if r["step"] == row["step"]]
        assert sum(r["kept"] for r in step) == row["kept"] and {r["global_step"] for r in step} == {row["global_step"]}
        assert np.mean([r["reward"] for r in step]) == pytest.approx(row["reward_mean"])
        assert all(math.isnan(r["advantage"]) != r["kept"] for r in step)
        assert all(len(r["entropy"]) == len(r["logprobs"]) == len(r["response_ids"]) for r in step)
        assert any(h > 0 for r in step for h in r["entropy"]) and {r["verdict"] for r in step} == {"test-double"}
    assert same(recs_b, recs_a)


def test_hard_subset_drops_problems_solved_every_time(policy, tmp_path, monkeypatch):
    cfg = _cfg()
    pool = rl.stage_pool(cfg, rl.stage_config(cfg, "stage3"))
    easy = {p.question for p in pool[::2]}

    async def grade(pairs):  # a double that "solves" every other problem
        return [SimpleNamespace(correct=False, reason="x") for _ in pairs]

    async def collect(cfg_, model, tok, problems, n, executor, **kw):
        r = np.array([[1.0 if p.question in easy else float(i % 2) for i in range(n)] for p in problems])
        return Batch(list(problems), [[None] * n for _ in problems], r, [], 0.0, 0.0, 0.0)

    monkeypatch.setattr(rl, "collect", collect)
    from kit.models import load_policy

    model, tok = load_policy(policy)
    import asyncio

    kept, info = asyncio.run(rl._hard_subset_async(cfg, model, tok, rl.stage_config(cfg, "stage3"), pool,
                                                   tmp_path, 0, None))
    assert kept and not {p.question for p in kept} & easy
    assert info["kept"] + info["solved_all"] == info["candidates"]
    again, _ = asyncio.run(rl._hard_subset_async(cfg, model, tok, None, pool, tmp_path, 0, None))  # cached
    assert [p.id for p in again] == [p.id for p in kept]


def test_a_hard_subset_built_before_the_stage_is_the_one_the_stage_would_build(policy, tmp_path, parity_grader):
    cfg = _cfg(**{"stages.stage3.hard_filter_samples": 1, "algorithm.prompts_per_step": 6})
    info = rl.prepare_hard_subset(cfg, "stage3", policy, tmp_path / "first")  # as kit.chain calls it
    assert 0 < info["kept"] < info["candidates"]
    first = rl.run_stage(cfg, "stage3", policy, tmp_path / "first", evaluate=False)
    inside = rl.run_stage(cfg, "stage3", policy, tmp_path / "inside", evaluate=False)  # builds it itself

    def read(d):
        hard = json.loads((d / "hard_subset.json").read_text())
        rows = [{k: v for k, v in r.items() if not k.startswith(("time_", "perf_"))} for r in common.metric_rows(d)]
        return json.dumps([hard["kept_ids"], rows])

    assert read(tmp_path / "first") == read(tmp_path / "inside")
    assert first["hard_subset"]["kept"] == inside["hard_subset"]["kept"] == info["kept"]
    with pytest.raises(ValueError, match="only a 'hard' stage"):
        rl.prepare_hard_subset(cfg, "stage1", policy, tmp_path / "s1")


def test_ablation_reports_both_algorithms_over_seeds(policy, tmp_path, parity_grader):
    cfg = _cfg()
    s = ablation.run_ablation(cfg, policy, tmp_path, seeds=(0, 1))
    assert set(s["runs"]) == {"grpo_seed0", "grpo_roc_seed0", "grpo_seed1", "grpo_roc_seed1"}
    for alg in ("grpo", "grpo_roc"):
        spread = s[alg]["reward_last"]
        assert spread["n"] == 2 and spread["min"] <= spread["mean"] <= spread["max"]
        # the error ratio is summarised over the seeds where it is defined (NaN: no correct tool call)
        err = s[alg]["tool_error_ratio_correct_last"]
        defined = [s["runs"][f"{alg}_seed{k}"]["tool_error_ratio_correct_last"] is not None for k in (0, 1)]
        assert err["n"] == sum(defined)
        assert len(s["curves"][alg]) == 2
    roc_rows = common.metric_rows(tmp_path / "grpo_roc_seed0")
    assert all(r["sampled"] == 2 * 8 for r in roc_rows) and all(r["kept"] <= 2 * 4 for r in roc_rows)
    grpo_rows = common.metric_rows(tmp_path / "grpo_seed0")
    assert all(r["sampled"] == r["kept"] == 2 * 4 for r in grpo_rows)
    assert json.loads((tmp_path / "ablation.json").read_text())["seeds"] == [0, 1]
    # run again (notebook 06 after the pipeline's background job): nothing trains, and every finished
    # arm's rows still reach the progress display, so the notebook shows them as trained
    seen = []
    again = ablation.run_ablation(cfg, policy, tmp_path, seeds=(0, 1), progress=seen.append)
    rows = [r for r in seen if "step" in r]
    assert len(rows) == 4 * cfg.ablation.steps and again["runs"].keys() == s["runs"].keys()
    assert {(r["algorithm"], r["seed"]) for r in rows} == {(a, k) for a in ("grpo", "grpo_roc") for k in (0, 1)}


def test_ablation_reuses_a_matching_stage_run_and_only_that(policy, tmp_path, parity_grader):
    cfg = _cfg(**{"stages.stage1.steps": 2})  # = ablation.steps: the stage run is the grpo_roc seed-0 arm
    stage = tmp_path / "stage1"
    rl.run_stage(cfg, "stage1", policy, stage, evaluate=False)
    fresh = ablation.run_ablation(cfg, policy, tmp_path / "fresh", seeds=(0,))
    reused = ablation.run_ablation(cfg, policy, tmp_path / "reused", seeds=(0,), reuse=[stage])
    assert reused["runs"]["grpo_roc_seed0"]["reused_from"] == str(stage)
    assert "reused_from" not in reused["runs"]["grpo_seed0"] and "reused_from" not in fresh["runs"]["grpo_roc_seed0"]

    def rows(d):
        return json.dumps([{k: v for k, v in r.items() if not k.startswith(("time_", "perf_"))} for r in common.metric_rows(d)])

    assert rows(tmp_path / "reused" / "grpo_roc_seed0") == rows(tmp_path / "fresh" / "grpo_roc_seed0")
    # a run with any training setting different is not the arm
    other = _cfg(**{"stages.stage1.steps": 2, "algorithm.lr": 5e-4})
    assert not ablation.reusable_run(plan.ablation_arms(other)[1], stage, {"stage": "stage1", "algorithm": "grpo_roc",
                                                                         "seed": 0, "steps": 2, "init_dir": str(policy)})
    assert not ablation.reusable_run(plan.ablation_arms(cfg)[1], stage, {"stage": "stage1", "algorithm": "grpo_roc",
                                                                       "seed": 1, "steps": 2, "init_dir": str(policy)})


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_ablation_arms_in_worker_processes(policy, tmp_path):
    cfg = _cfg(**{"ablation.workers": 2})
    seen = []
    s = ablation.run_ablation(cfg, policy, tmp_path / "par", seeds=(0,), progress=seen.append)
    assert set(s["runs"]) == {"grpo_seed0", "grpo_roc_seed0"}
    for arm in s["runs"]:
        assert [r["step"] for r in common.metric_rows(tmp_path / "par" / arm)] == [1, 2]
        assert json.loads((tmp_path / "par" / arm / "config.json").read_text())["model"]["torch_threads"] == 1
    # every arm's rows reached the caller's progress callback (then the summary)
    assert sorted((r["algorithm"], r["step"]) for r in seen[:-1]) == [("grpo", 1), ("grpo", 2), ("grpo_roc", 1), ("grpo_roc", 2)]
    assert seen[-1]["stage"] == "ablation"
    with pytest.raises(RuntimeError, match=r"ablation arm grpo(_roc)? seed 0 failed"):
        ablation.run_ablation(cfg, tmp_path / "no_such_policy", tmp_path / "bad", seeds=(0,))


def test_bad_arguments_are_rejected(policy, tmp_path):
    with pytest.raises(ValueError, match="unknown stage"):
        rl.run_stage(_cfg(), "stage9", policy, tmp_path)
    with pytest.raises(ValueError, match="kl_coef"):
        rl.run_stage(_cfg(**{"algorithm.kl_coef": 0.1}), "stage1", policy, tmp_path)


def test_a_step_row_carries_its_cpu_seconds_and_engine_counts(policy, tmp_path, parity_grader):
    """Each RL metrics row profiles its step in load-insensitive terms (issue #16): CPU seconds of
    the rollout and the update, decode forwards, decoded tokens and tool calls."""
    rl.run_stage(_cfg(**{"stages.stage1.steps": 1}), "stage1", policy, tmp_path, evaluate=False)
    row = common.metric_rows(tmp_path)[0]
    assert row["time_cpu_generate_s"] > 0 and row["time_cpu_update_s"] > 0
    # every sampled token came from a decode forward or a prefill; each forward decodes a batch
    assert row["perf_decoded_tokens"] >= row["sampled"] and row["perf_decode_steps"] > 0
    assert row["perf_row_steps"] >= row["perf_decode_steps"]
    assert row["tool_calls_total"] == pytest.approx(row["tool_calls_per_traj"] * row["sampled"])
    assert row["perf_threads"] == 1
    # ReTool's behaviour keys (kit.analysis.code_behaviour) on the same sampled rollouts
    assert row["code_ratio"] == pytest.approx(row["tool_use_rate"])  # no call here is infra or skipped
    assert row["self_corrections"] >= 0 and {"code_pass_rate", "first_call_position"} <= set(row)


def test_stage_end_greedy_readout_on_a_subset_sampled_on_all(policy):
    cfg = _cfg(**{"data.task_heldout_size": 6, "eval.max_tokens": 16, "eval.max_turns": 1})
    from kit.models import load_policy

    model, tok = load_policy(policy)
    model.eval()
    probs = list(tasks.task_split(cfg).heldout)
    ev = rollouts.evaluate_policy(cfg, model, tok, probs, greedy_problems=2)
    assert ev["heldout_n"] == 6 and ev["heldout_greedy_n"] == 2
    full = rollouts.evaluate_policy(cfg, model, tok, probs)
    assert full["heldout_greedy_n"] == 6
    # the sampled reward (what the Figure 8 claim reads) does not depend on the greedy subset
    assert ev["heldout_sampled_reward"] == full["heldout_sampled_reward"]
    assert ev["heldout_sampled_tool_rate"] == full["heldout_sampled_tool_rate"]


def test_ablation_seeds_follow_the_run_seed():
    """``--seed 7`` checks the ablation on seeds 7, 8, ... (never tuned on), seed 0 on the listed ones."""
    assert plan.arm_seeds(_cfg(**{"ablation.seeds": [0, 1, 2]})) == (0, 1, 2)
    cfg7 = load("smoke", overrides={"ablation.seeds": [0, 1, 2]}, seed=7, write=False)
    assert plan.arm_seeds(cfg7) == (7, 8, 9)
    # every arm trains on the run's problems: the split's seed stays the run's (7), not the arm's
    arms = plan.ablation_arms(cfg7)
    assert [a.seed for a in arms] == [7, 7, 8, 8, 9, 9] and {a.data.split_seed for a in arms} == {7}
    assert {tasks.task_split(a).train[0].id for a in arms} == {tasks.task_split(cfg7).train[0].id}


def test_ablation_arms_keep_rollouts_budget_when_stage1_binds_tighter(policy, tmp_path, parity_grader):
    """Tiny's main stage 1 has a tighter budget than rollout's (Figure 8); the ablation arms run at
    rollout's budget, and the stage-1 run is then not one of them (issue #16)."""
    cfg = _cfg(**{"stages.stage1.steps": 2, "stages.stage1.max_response_tokens": 12})
    assert {a.stages["stage1"].max_response_tokens for a in plan.ablation_arms(cfg)} == {24}
    stage = tmp_path / "stage1"
    rl.run_stage(cfg, "stage1", policy, stage, evaluate=False)
    s = ablation.run_ablation(cfg, policy, tmp_path / "abl", seeds=(0,), reuse=[stage])
    assert "reused_from" not in s["runs"]["grpo_roc_seed0"]
    arm = json.loads((tmp_path / "abl" / "grpo_roc_seed0" / "summary.json").read_text())
    assert arm["max_response_tokens"] == 24
    # the stage's own runs stay within its 12 tokens; the arms may use up to 24
    stage_rows = common.metric_rows(stage)
    arm_rows = common.metric_rows(tmp_path / "abl" / "grpo_roc_seed0")
    assert max(r["response_len_mean"] for r in stage_rows) <= 12 + 1e-9
    assert max(r["response_len_mean"] for r in arm_rows) > 12


def test_masked_logprobs_equal_the_full_ones_where_the_loss_reads_them(policy):
    """The update computes the LM head and log-softmax on response-mask positions only (issue #16
    speed-up); there the log-probs and their gradients equal the full computation's."""
    from kit.models import load_policy
    from kit.train.batching import pad_rows

    model, _ = load_policy(policy)
    g = torch.Generator().manual_seed(0)
    rows = []
    for n_prompt, n_resp in ((5, 9), (3, 4), (7, 12)):
        ids = torch.randint(5, 300, (n_prompt + n_resp,), generator=g).tolist()
        resp_mask = [1] * n_resp
        resp_mask[2] = 0  # a tool-feedback token inside the response
        rows.append((ids, [0] * n_prompt + resp_mask))
    ids, att, msk = pad_rows(rows, 0)
    full = rl.token_logprobs(model, ids, att)
    part = rl.token_logprobs(model, ids, att, msk)
    m = msk > 0
    assert torch.allclose(part[m], full[m], atol=1e-5) and bool((part[~m] == 0).all())
    grads = []
    for lp_fn in (lambda: rl.token_logprobs(model, ids, att), lambda: rl.token_logprobs(model, ids, att, msk)):
        model.zero_grad(set_to_none=True)
        (lp_fn() * msk).sum().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_the_local_runtime_trains_on_the_curated_parquet_when_data_source_says_so(policy, tmp_path, monkeypatch):
    """``data.source = "curated"``: the local runtime's stage draws its problems from notebook 01's
    ``<data_dir>/data/curated.parquet`` (kit.data.pool), not from the task family; smoke keeps the family."""
    from kit.data.curate import curate, write_curated
    from kit.data.pools import Problem
    from kit.runtime import local

    rows = [Problem("gsm8k", "train-17", "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                    "many clips in May. How many clips did Natalia sell altogether in April and May?", "72"),
            Problem("dapo", "dapo-3", "Find the number of ordered pairs $(m, n)$ of positive integers with "
                    "$m^2 n = 20^{20}$.", "231"),
            Problem("aime_history", "1983_AIME_1", "Let $x$, $y$ and $z$ all exceed $1$ and let $w$ be a positive "
                    "number such that $\\log_x w = 24$, $\\log_y w = 40$ and $\\log_{xyz} w = 12$. Find $\\log_z w$.", "60")]
    write_curated(tmp_path / "data_run", curate({p.source: [p] for p in rows}))  # as notebook 01 writes it
    golds: list[str] = []

    async def grade(pairs):
        golds.extend(g for g, _ in pairs)
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    cfg = _cfg(**{"stages.stage1.steps": 1, "data.source": "curated"})
    local.run_stage(cfg, "stage1", run_dir=tmp_path / "s1", init_dir=policy.parent, data_dir=tmp_path / "data_run")
    assert golds and set(golds[:16]) <= {"72", "231", "60"}  # the step's 2 prompts x 2G = 8 rollouts each
    ids = {json.loads(line)["problem_id"] for line in (tmp_path / "s1" / "samples.jsonl").read_text().splitlines()}
    assert ids <= {"gsm8k/train-17", "dapo/dapo-3", "aime_history/1983_AIME_1"} and ids
    assert {p.id for p in rl.stage_pool(_cfg(), rl.stage_config(_cfg(), "stage1"))} <= \
        {p.id for p in tasks.task_split(_cfg()).train}  # data.source "auto" on the local runtime: the task family
