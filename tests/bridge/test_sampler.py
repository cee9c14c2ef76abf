"""The VERL runtime's step rows carry the local trainer's tool metrics (``tool_calls_per_traj``,
``time_tool_s``) on GRPO and GRPO-RoC: the kit's v1 replay buffers (``kit.bridge.sampler``) on VERL's
own ``ReplayBuffer.sample`` loop, TransferQueue served by ``doubles.FakeTQ``.

A previous review found VERL rows without them; the parity test runs the local trainer's
``collect`` and the VERL agent loop's ``extra_fields`` over the same trajectories.
"""

import json

import pytest
import smoke_checks as checks
import torch
from doubles import FakeExecutor, FakeTQ, Res, call
from omegaconf import OmegaConf

from kit import prompts
from kit.analysis import code_behaviour
from kit.analysis.code_behaviour import CodeUse
from kit.bridge import stages
from kit.config import load
from kit.data.tasks import TaskProblem
from kit.metrics import RL_KEYS
from kit.models import train_tokenizer
from kit.reward.verdict import Verdict
from kit.rollout import ScriptedBackend
from kit.train import rollouts, tracking

pytest.importorskip("verl")

from kit.bridge import roc_hook, sampler  # noqa: E402
from kit.bridge.agent_loop import trajectory_to_output  # noqa: E402

ANSWER = "so</reason> <answer> \\boxed{42} </answer>"
#: first turn per problem: one clean call; two clean calls and a malformed one; one call the sandbox
#: service fails (an infra error: answered, not counted by the local row); then the answer
FIRST_TURN = {"Q0": call("print(1)"), "Q1": call("print(2)") + call("print(3)") + "<tool_call>\nnot json\n</tool_call>",
              "Q2": call("boom")}
WALL_S = {"print(1)": 0.5, "print(2)": 0.25, "print(3)": 0.125}


def _script(context: str) -> str:
    if prompts.TOOL_RESPONSE_OPEN in context:
        return ANSWER
    return next(turn for q, turn in FIRST_TURN.items() if q in context)


def _sandbox(code, stdin):
    if code == "boom":
        raise ConnectionError("sandbox service down")
    return Res("ok", stdout="42\n", wall_s=WALL_S[code])


async def test_verl_extra_fields_give_the_local_rows_tool_numbers_on_the_same_trajectories(monkeypatch):
    texts = [prompts.render_prompt(q) + t + prompts.IM_END + prompts.feedback_block(["42"]) + ANSWER + prompts.IM_END
             for q, t in FIRST_TURN.items()]
    tok = train_tokenizer(texts * 10, 400)
    monkeypatch.setattr(rollouts, "make_backend", lambda model, tk, rc, seed: ScriptedBackend(tk, _script))

    async def grade(pairs):
        return [Verdict(True, "correct", "42", 0.0) for _ in pairs]

    monkeypatch.setattr(rollouts, "grade", grade)
    problems = [TaskProblem(f"t-{q}", "arith", 1, q, "42", "print(42)") for q in FIRST_TURN]
    batch = await rollouts.collect(load("tiny", write=False), None, tok, problems, 2, FakeExecutor(_sandbox), seed=0,
                                   max_response_tokens=400, max_turns=3, temperature=1.0)
    local = rollouts.batch_stats(batch)
    flat = batch.flat()
    assert [t.infra_errors for t in flat] == [0, 0, 0, 0, 1, 1] and [t.tool_calls for t in flat] == [1, 1, 3, 3, 1, 1]
    # answered calls per trajectory (1, 1, 3, 3, 0, 0); sandbox seconds 2 x 0.5 + 2 x (0.25 + 0.125)
    assert local["tool_calls_per_traj"] == pytest.approx(8 / 6) and batch.time_tool_s == pytest.approx(1.75)
    extras = [trajectory_to_output(t, 400).extra_fields for t in flat]
    verl = sampler.tool_metrics(extras)
    assert verl == {"rstar2/tool_calls_per_traj": pytest.approx(local["tool_calls_per_traj"]),
                    "rstar2/time_tool_s": pytest.approx(batch.time_tool_s)}
    # the sampled-population keys (kit.metrics) from the same extra_fields and rewards as the local row's
    sampled = sampler.sampled_metrics(extras, batch.rewards.reshape(-1).tolist())
    assert sampled == {f"rstar2/{k}": pytest.approx(local[k])
                       for k in ("reward_mean", "accuracy", "response_len_mean", "truncation_ratio")}
    # ReTool's behaviour keys: the local step's definition over the same trajectories (one call fails: infra)
    here = code_behaviour.trajectory_metrics(flat, (batch.rewards.reshape(-1) > 0).tolist(), tok)
    there = sampler.behaviour_metrics([trajectory_to_output(t, 400, call_open_id=code_behaviour.call_open_id(tok))
                                       .extra_fields for t in flat], batch.rewards.reshape(-1).tolist())
    assert there == {f"rstar2/{k}": pytest.approx(v) for k, v in here.items()}
    assert here["code_ratio"] == pytest.approx(4 / 6) and here["code_lines_per_call"] == 1.0
    assert here["code_pass_rate"] == pytest.approx(6 / 8)  # 8 counted calls (infra ones not); Q1's malformed third fails
    assert here["first_call_position"] == 0.0  # the scripted first turns open with the call


def test_tool_metrics_bad_input_names_the_trajectory_and_the_key():
    good = {"tool_calls": 2, "infra_errors": 0, "tool_wall_s": 0.5}
    assert sampler.tool_metrics([]) == {}
    with pytest.raises(KeyError, match="trajectory 1 has no 'tool_wall_s'.*rstar2_kit"):
        sampler.tool_metrics([good, {"tool_calls": 1, "infra_errors": 0}])
    with pytest.raises(ValueError, match=r"trajectory 0: extra_fields\['tool_wall_s'\] = -1.0"):
        sampler.tool_metrics([{**good, "tool_wall_s": -1.0}])
    with pytest.raises(ValueError, match=r"extra_fields\['tool_calls'\] = None"):
        sampler.tool_metrics([good, {**good, "tool_calls": None}])


def _group(uid, calls, infra, wall, rewards, index=0, lengths=None):
    T = 4
    rows = []
    lengths = lengths or [10 * (c + 1) for c in calls]  # a call lengthens the response by its feedback
    for s, (c, i, w, r, n) in enumerate(zip(calls, infra, wall, rewards, lengths, strict=True)):
        score = torch.zeros(T)
        score[-1] = r
        extra = {"tool_calls": c, "tool_errors": 0, "infra_errors": i, "answer_tags": 1, "turns": c + 1,
                 "tool_wall_s": w, "response_tokens": n, "truncated": n >= 40,
                 # c calls of 2 lines, the first fails and the rest pass; the first call after 2 tokens
                 **CodeUse(c, max(c - 1, 0), 2 * c, c, int(c >= 2), 2 if c else None).fields()}
        rows.append(dict(uid=uid, session=s, index=index, score=score, responses=torch.arange(T), extra=extra))
    return rows


def _kwargs(**kw):
    return OmegaConf.create(kw)


def test_grpo_buffer_logs_every_sampled_session_and_trains_on_all_of_them(monkeypatch):
    store = FakeTQ().install(monkeypatch)
    store.add_group(_group("A", [1, 2, 0, 3], [0, 1, 0, 0], [0.5, 0.25, 0.0, 1.0], [1, 0, 0, 1]))
    # session B_0 emitted two outputs: its last one (index 1) stands for it, as in RoC
    b = _group("B", [0, 4, 1, 1], [0, 0, 0, 1], [0.0, 2.0, 0.5, 0.0], [0, 1, 1, 0])
    store.add_group(b + [dict(b[0], index=1, extra={**b[0]["extra"], "tool_calls": 2, "tool_wall_s": 0.75})])
    buf = sampler.KitReplayBuffer("sync", OmegaConf.create({}), 8, "drop", _kwargs(train_batch_size=2),
                                  poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=1, partition_id="train", batch_size=2)
    assert len(meta.keys) == 9 and sorted(meta.keys) == sorted(set(store.values["train"]))  # nothing dropped
    # answered calls (1, 1, 0, 3 | 2, 4, 1, 0) over 8 sessions; seconds 1.75 + 0.75 + 2.0 + 0.5
    # lengths 20 30 10 40 | 10 50 20 20 (B_0's last output keeps its first's length), truncated at 40 tokens: 2 of 8;
    # rewards 1 0 0 1 | 0 1 1 0
    # code behaviour (calls 1 2 0 3 | 0 4 1 1 of B_0's first output's summary): 6 of 8 call, 6 of 12 calls pass,
    # 5 of the correct ones' 9; self-corrections where c >= 2 (A_1, A_3, B_1), 2 of the 4 correct; first call at token 2
    assert metrics == {"rstar2/tool_calls_per_traj": pytest.approx(12 / 8), "rstar2/time_tool_s": pytest.approx(5.0),
                       "rstar2/reward_mean": 0.5, "rstar2/accuracy": 0.5,
                       "rstar2/response_len_mean": pytest.approx(200 / 8), "rstar2/truncation_ratio": 0.25,
                       "rstar2/code_ratio": 0.75, "rstar2/code_lines_per_call": 2.0, "rstar2/code_pass_rate": 0.5,
                       "rstar2/code_pass_rate_correct": pytest.approx(5 / 9), "rstar2/self_corrections": 3.0,
                       "rstar2/self_correction_rate_correct": 0.5,
                       "rstar2/first_call_position": pytest.approx((2 / 20 + 2 / 30 + 2 / 40 + 2 / 50 + 2 / 20 + 2 / 20) / 6)}
    store.add_group(_group("V", [1], [0], [9.0], [1]), partition="val")
    buf._step_metrics = {}
    val = buf._materialize_batch("val", ["V"], {k: t for k, t in store.tags["val"].items() if not t.get("is_prompt")})
    assert val.keys == ["V_0_0"] and buf._step_metrics == {}  # validation: passed through, not counted


def test_grpo_buffer_takes_its_settings_from_sampler_kwargs():
    from verl.utils.import_utils import load_extern_object

    from kit.bridge.overrides import GRPO_SAMPLER

    assert load_extern_object(*GRPO_SAMPLER) is sampler.KitReplayBuffer
    buf = sampler.KitReplayBuffer("sync", {}, 8, "drop", _kwargs(train_batch_size=3, poll_interval_s=0.1))
    assert (buf.train_batch_size, buf.gen_batch_size, buf.filter_groups_metric, buf.poll_interval) == (3, 3, None, 0.1)
    with pytest.raises(KeyError, match="sampler_kwargs.train_batch_size is required by KitReplayBuffer"):
        sampler.KitReplayBuffer("sync", {}, 8, "drop", _kwargs())
    with pytest.raises(ValueError, match="KitReplayBuffer supports trainer.v1.trainer_mode=sync only"):
        sampler.KitReplayBuffer("colocate_async", {}, 8, "drop", _kwargs(train_batch_size=3))


def test_roc_buffer_logs_the_tool_metrics_of_all_2g_before_it_keeps_g(monkeypatch):
    store = FakeTQ().install(monkeypatch)
    # 2G = 8: the correct sessions make many calls, the wrong ones none; RoC keeps G = 4 (2 + 2)
    store.add_group(_group("A", [4, 4, 4, 4, 0, 0, 0, 0], [0] * 8, [1.0] * 4 + [0.0] * 4, [1, 1, 1, 1, 0, 0, 0, 0]))
    kw = _kwargs(group_size=4, oversample=8, train_batch_size=1, mode="rank", min_positive=2, min_negative=2,
                 drop_equal_reward_groups=False, reading="counters", seed=0)
    buf = roc_hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw, poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=1, partition_id="train", batch_size=1)
    assert len(meta.keys) == 4 and metrics["rstar2/roc/kept"] == 4 and metrics["rstar2/roc/sampled"] == 8
    # over the 8 sampled, as the local row's batch_stats: the kept 4 alone would give 2.0 calls and 2 s
    assert metrics["rstar2/tool_calls_per_traj"] == pytest.approx(16 / 8)
    assert metrics["rstar2/time_tool_s"] == pytest.approx(4.0)
    # the sampled-population keys over the 8 too: the kept 4 (2 correct with 4 calls, 2 wrong with none)
    # would give 30 tokens, 0.5 truncated; RoC's own accuracy_before is the same sampled accuracy
    assert metrics["rstar2/response_len_mean"] == pytest.approx((4 * 50 + 4 * 10) / 8)
    assert metrics["rstar2/truncation_ratio"] == 0.5
    assert metrics["rstar2/accuracy"] == metrics["rstar2/roc/accuracy_before"] == 0.5


def test_sampled_metrics_bad_input_names_the_trajectory_and_the_key():
    good = {"response_tokens": 12, "truncated": False}
    assert sampler.sampled_metrics([], []) == {}
    with pytest.raises(KeyError, match="trajectory 1 has no 'truncated'.*rstar2_kit"):
        sampler.sampled_metrics([good, {"response_tokens": 3}], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"trajectory 0: extra_fields\['response_tokens'\] = -1"):
        sampler.sampled_metrics([{**good, "response_tokens": -1}], [1.0])
    with pytest.raises(ValueError, match="2 trajectories but 1 scores"):
        sampler.sampled_metrics([good, good], [1.0])


def test_verl_rows_carry_both_keys_under_the_local_trackers_names(tmp_path):
    # one dashboard name per quantity on both runtimes: the VERL buffer logs what LocalTracker logs
    local = tracking.tracker_metrics({"tool_calls_per_traj": 1.5, "time_tool_s": 2.0}, tracking.RL_NAMES)
    assert set(local) == {"rstar2/tool_calls_per_traj", "rstar2/time_tool_s"}
    assert {k: stages.METRIC_MAP[k] for k in ("tool_calls_per_traj", "time_tool_s")} == {
        "tool_calls_per_traj": ("rstar2/tool_calls_per_traj",), "time_tool_s": ("rstar2/time_tool_s",)}
    src = tmp_path / "step_metrics.jsonl"
    src.write_text(json.dumps({"step": 3, "data": {"critic/score/mean": 0.5, **local}}) + "\n")
    assert stages.convert_metrics(src, tmp_path / "metrics.jsonl", stage="stage1", start_step=2, algorithm="grpo",
                                  seed=0) == 1
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert (row["tool_calls_per_traj"], row["time_tool_s"], row["step"]) == (1.5, 2.0, 1)


def test_the_keys_every_verl_row_must_have_are_local_keys_the_metric_map_writes():
    # the contract the VERL smoke chain checks (tests/smoke_checks.py) cannot list a key VERL never
    # writes, and both tool metrics stay in it
    assert {"tool_calls_per_traj", "time_tool_s"} <= set(checks.VERL_RL_KEYS) <= set(checks.LOCAL_RL_KEYS)
    assert set(checks.VERL_RL_KEYS) - tracking.IDENTIFIERS <= set(stages.METRIC_MAP)
    assert set(checks.LOCAL_RL_KEYS) <= set(RL_KEYS)  # every required key declared in the one schema


def _with_reasons(rows, reasons):
    """``rows`` with compute_score's reward_extra_info in each extra_fields, as VERL 0.9.1's reward loop
    stores it on the final output (``extra_fields["reward_extra_info"]``)."""
    return [dict(r, extra={**r["extra"], "reward_extra_info": {"score": float(r["score"].sum()), "reason": why,
                                                                "extracted": "", "verify_s": 0.1}})
            for r, why in zip(rows, reasons, strict=True)]


def test_the_verifier_s_reason_is_read_from_reward_extra_info():
    extras = [{"reward_extra_info": {"reason": "infra_error"}}, {"reward_extra_info": {"reason": "wrong"}},
              {"tool_calls": 1}, {"reward_extra_info": {"score": 0.0}}]
    assert sampler.verifier_reasons(extras) == ["infra_error", "wrong", None, None]
    assert sampler.graded_rows(sampler.verifier_reasons(extras)).tolist() == [1, 2, 3]
    assert sampler.graded_rows(["infra_error"] * 2).tolist() == []


def test_grpo_buffer_leaves_out_the_sessions_the_verifier_could_not_grade(monkeypatch):
    """A verifier that failed twice scores 0 with reason infra_error (kit.bridge.reward_fn); the local
    trainer leaves the row out of the update, and so must VERL's buffer: out of the batch the trainer
    gets (its group's advantage, the loss) and out of TransferQueue (issue #44 item 5)."""
    store = FakeTQ().install(monkeypatch)
    store.add_group(_with_reasons(_group("A", [1, 0, 0, 1], [0] * 4, [0.0] * 4, [1, 0, 0, 1]),
                                  ["correct", "infra_error", "wrong", "correct"]))
    store.add_group(_with_reasons(_group("B", [0] * 4, [0] * 4, [0.0] * 4, [0, 1, 0, 1]),
                                  ["no_answer", "correct", "wrong", "correct"]))
    buf = sampler.KitReplayBuffer("sync", OmegaConf.create({}), 8, "drop", _kwargs(train_batch_size=2),
                                  poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=1, partition_id="train", batch_size=2)
    assert sorted(meta.keys) == ["A_0_0", "A_2_0", "A_3_0", "B_0_0", "B_1_0", "B_2_0", "B_3_0"]
    assert len(meta.tags) == 7 and "A_1_0" not in store.values["train"]
    assert buf._kept_sessions.tolist() == [0, 2, 3, 4, 5, 6, 7]  # the rollout records' decision
    assert metrics["rstar2/reward_mean"] == 0.5  # sampled-population metrics still count every session
