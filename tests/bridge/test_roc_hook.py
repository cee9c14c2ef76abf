"""The RoC hook on real VERL objects: a DataProto of synthetic trajectories, and the v1 sampler.

The v1 sampler runs VERL's own ``ReplayBuffer.sample`` loop (equal-reward eviction and refill
included); only the three TransferQueue calls it makes are served by an in-memory store that
returns VERL's real container types (``doubles.FakeTQ``), because TransferQueue
needs a Ray cluster (and hangs on 2-CPU nodes, verl #7656).
"""

import math

import numpy as np
import pytest
import torch
from doubles import FakeTQ
from omegaconf import OmegaConf

from kit.algo import RocParams, allocate
from kit.analysis.code_behaviour import CodeUse
from kit.metrics import ROC_PREFIX

G, N2 = 4, 8  # keep G of 2G


@pytest.fixture(scope="module")
def hook():
    from kit.bridge import roc_hook

    return roc_hook


def _group_rows(uid, rewards, calls, fails, tags, turns, T=6):
    rows = []
    for s, (r, c, f, a, t) in enumerate(zip(rewards, calls, fails, tags, turns, strict=True)):
        scores = torch.zeros(T)
        scores[T - 1] = r
        rows.append(dict(uid=uid, session=s, score=scores, responses=torch.arange(T) + 10 * s,
                         extra={"tool_calls": c, "tool_errors": f, "infra_errors": 0, "answer_tags": a, "turns": t,
                                "tool_wall_s": 0.25 * c, "response_tokens": T, "truncated": False,
                                **CodeUse(calls=c, ok_calls=c - f, first_call_token=1 if c else None).fields()}))
    return rows


def _synthetic_batch():
    """3 prompts x 8 trajectories: mixed (3 correct), all correct, mixed (5 correct)."""
    rows = []
    # prompt A: correct rows 0,1,2 with p_total 0 (clean), 1.0 (1 of 2 calls failed + p_format .5), 1.5
    rows += _group_rows("A", [1, 1, 1, 0, 0, 0, 0, 0], [1, 2, 0, 1, 1, 2, 0, 3], [0, 1, 0, 1, 0, 2, 0, 1],
                        [1, 2, 0, 1, 0, 1, 0, 1], [2, 2, 1, 2, 2, 3, 1, 4])
    rows += _group_rows("B", [1] * 8, [1] * 8, [0] * 8, [1] * 8, [2] * 8)
    rows += _group_rows("C", [1, 0, 1, 0, 1, 0, 1, 1], [2] * 8, [0, 1, 1, 0, 2, 0, 0, 1], [1] * 8, [3] * 8)
    return rows


def _dataproto(rows, columns=True):
    from verl import DataProto

    B, T = len(rows), rows[0]["score"].numel()
    batch = {
        "token_level_scores": torch.stack([r["score"] for r in rows]),
        "responses": torch.stack([r["responses"] for r in rows]),
        "attention_mask": torch.ones(B, 4 + T, dtype=torch.long),
    }
    nt = {"uid": np.array([r["uid"] for r in rows], dtype=object)}
    if columns:
        for k in ("tool_calls", "tool_errors", "infra_errors", "answer_tags", "turns"):
            nt[k] = np.array([r["extra"][k] for r in rows])
    else:
        nt["tool_extra_fields"] = np.array([r["extra"] for r in rows], dtype=object)
    return DataProto.from_dict(tensors=batch, non_tensors=nt)


def test_apply_roc_on_dataproto_keeps_G_per_prompt_with_intended_composition(hook):
    rows = _synthetic_batch()
    data = _dataproto(rows)
    params = RocParams(group_size=G, mode="rank", drop_equal_reward_groups=True)
    kept, metrics = hook.apply_roc(data, params, seed=0)
    uids = list(kept.non_tensor_batch["uid"])
    assert uids.count("A") == G and uids.count("C") == G and "B" not in uids  # all-correct B dropped
    rew = kept.batch["token_level_scores"].sum(-1)
    a_rows = [i for i, u in enumerate(uids) if u == "A"]
    # A: 3 of 8 correct -> round(5 * 4 / 8 = 2.5) = 2 negatives, 2 positives = the two lowest p_total
    assert int((rew[a_rows] > 0).sum()) == allocate(3, 5, G)[0] == 2
    a_pos_sessions = sorted(int(kept.batch["responses"][i, 0]) // 10 for i in a_rows if rew[i] > 0)
    assert a_pos_sessions == [0, 1]  # p_total 0.0 and 1.0 beat row 2 (no tool, no answer: 1.5)
    c_rows = [i for i, u in enumerate(uids) if u == "C"]
    assert int((rew[c_rows] > 0).sum()) == allocate(5, 3, G)[0]
    assert hook.METRIC_PREFIX == ROC_PREFIX == "rstar2/roc/" and all(k.startswith(ROC_PREFIX) for k in metrics)
    assert metrics["rstar2/roc/kept"] == 2 * G and metrics["rstar2/roc/groups_dropped_equal_reward"] == 1
    # rows travel whole: each kept row's responses are those of an input row of the same uid
    orig = {(r["uid"], int(r["responses"][0])) for r in rows}
    assert all((u, int(kept.batch["responses"][i, 0])) in orig for i, u in enumerate(uids))


def test_apply_roc_reads_tool_extra_fields_and_reports_missing_counters(hook):
    rows = _synthetic_batch()
    params = RocParams(group_size=G, mode="sample", drop_equal_reward_groups=False)
    a, _ = hook.apply_roc(_dataproto(rows, columns=False), params, seed=3)
    b, _ = hook.apply_roc(_dataproto(rows, columns=True), params, seed=3)
    assert len(a) == 3 * G and torch.equal(a.batch["responses"], b.batch["responses"])
    broken = _dataproto(rows, columns=False)
    broken.non_tensor_batch["tool_extra_fields"][5] = {"tool_calls": 1}
    with pytest.raises(KeyError, match="trajectory 5 has no 'answer_tags'"):
        hook.apply_roc(broken, params)


@pytest.fixture()
def fake_tq(hook, monkeypatch):
    return FakeTQ().install(monkeypatch)


def _sampler_kwargs(**over):
    kw = dict(group_size=G, oversample=N2, train_batch_size=2, mode="rank", min_positive=2, min_negative=2,
              drop_equal_reward_groups=True, reading="counters", seed=0)
    kw.update(over)
    return OmegaConf.create(kw)


def test_v1_sampler_evicts_refills_and_keeps_G_of_2G(hook, fake_tq):
    rows = _synthetic_batch()
    fake_tq.add_group([r for r in rows if r["uid"] == "A"])
    fake_tq.add_group([r for r in rows if r["uid"] == "B"])  # all correct: evicted, refilled
    counter = iter(range(100))

    def refill(n):
        for _ in range(n):
            uid = f"R{next(counter)}"
            fake_tq.add_group([dict(r, uid=uid) for r in rows if r["uid"] == "C"], step=1)
        fake_tq.refills += n
        return n

    buf = hook.RocReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=8,
                               max_off_policy_strategy="drop", sampler_kwargs=_sampler_kwargs(), poll_interval=0.0,
                               refill_fn=refill)
    meta, metrics = buf.sample(global_steps=1, partition_id="train", batch_size=2)
    uids = [k.split("_")[0] for k in meta.keys]
    assert len(meta.keys) == 2 * G and len(meta.tags) == 2 * G
    assert uids.count("A") == G and "B" not in uids and fake_tq.refills >= 1
    assert metrics["training/filter_groups/evicted_samples"] == 1
    assert metrics["rstar2/roc/kept"] == 2 * G and metrics["rstar2/roc/sampled"] == 2 * N2
    # rejected trajectories and the evicted group are gone from the store; kept ones remain
    stored = set(fake_tq.values["train"])
    assert set(meta.keys) <= stored and not any(k.startswith("B_") for k in stored)
    assert len([k for k in stored if k.startswith("A_")]) == G


def test_v1_sampler_is_seeded_per_step_and_leaves_validation_alone(hook, fake_tq, monkeypatch):
    rows = _synthetic_batch()
    kw = _sampler_kwargs(mode="sample", drop_equal_reward_groups=False, train_batch_size=1)

    def run(step):
        store = FakeTQ().install(monkeypatch)
        store.add_group([r for r in rows if r["uid"] == "C"])
        buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw, poll_interval=0.0)
        return buf.sample(global_steps=step, partition_id="train", batch_size=1)[0].keys

    assert run(5) == run(5)
    assert len({tuple(run(s)) for s in range(6)}) > 1
    fake_tq.install(monkeypatch)
    fake_tq.add_group([r for r in rows if r["uid"] == "A"], partition="val")
    buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw, poll_interval=0.0)
    snapshot = {k: t for k, t in fake_tq.tags["val"].items() if not t.get("is_prompt")}  # as _sync_metadata builds it
    meta = buf._materialize_batch("val", ["A"], snapshot)
    assert len(meta.keys) == N2


def test_v1_sampler_selects_sessions_by_their_last_output(hook, fake_tq):
    rows = [r for r in _synthetic_batch() if r["uid"] == "A"]
    # each session also has an earlier output (index 0) whose counters would say "no answer";
    # the final output (index 1) carries the real reward and counters
    early = [dict(r, score=torch.zeros(6), extra={**r["extra"], "answer_tags": 0}) for r in rows]
    fake_tq.add_group(early + [dict(r, index=1) for r in rows])
    buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop",
                               _sampler_kwargs(train_batch_size=1, drop_equal_reward_groups=False), poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=0, partition_id="train", batch_size=1)
    sessions = {k.rsplit("_", 1)[0] for k in meta.keys}
    assert len(sessions) == G and len(meta.keys) == 2 * G  # both outputs of each kept session
    assert metrics["rstar2/roc/sampled"] == N2 and metrics["rstar2/roc/positives_kept"] == 2
    assert {"A_0", "A_1"} <= sessions  # the two lowest-p_total positives by their final outputs


def test_sampler_kwargs_errors_name_the_key(hook):
    with pytest.raises(KeyError, match="sampler_kwargs.oversample"):
        hook.roc_params_from_kwargs({"group_size": 4, "train_batch_size": 2})
    with pytest.raises(ValueError, match="trainer_mode=sync"):
        hook.RocReplayBuffer("separate_async", {}, 8, "drop", _sampler_kwargs())


def test_the_poll_interval_comes_from_sampler_kwargs(hook):
    # VERL's sync buffer sleeps poll_interval between checks for finished trajectories (2 s, no
    # config key); the CPU runtime sets sampler_kwargs.poll_interval_s so a ~1 s tiny generation
    # is not rounded up to 2 s
    kw = _sampler_kwargs(poll_interval_s=0.25, drop_equal_reward_groups=False)
    assert hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw).poll_interval == 0.25
    kw = _sampler_kwargs(drop_equal_reward_groups=False)
    assert hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw).poll_interval == 2.0
    for bad in (0, -1, float("nan"), "soon"):
        with pytest.raises(ValueError, match="sampler_kwargs.poll_interval_s"):
            hook.roc_params_from_kwargs({**_sampler_kwargs(), "poll_interval_s": bad})


def test_absent_sampler_kwargs_take_the_configs_defaults(hook):
    import dataclasses

    from kit.config import AlgorithmConfig

    params, extra = hook.roc_params_from_kwargs({"group_size": 4, "oversample": 8, "train_batch_size": 2})
    assert params == RocParams.from_config(dataclasses.replace(AlgorithmConfig(), group_size=4))
    assert extra["reading"] == AlgorithmConfig().roc_reading
    with pytest.raises(ValueError, match=r"min_positive \(3\) \+ min_negative \(2\) exceeds group_size \(4\)"):
        hook.roc_params_from_kwargs({"group_size": 4, "oversample": 8, "train_batch_size": 2, "min_positive": 3})


def test_oversampling_marks_training_prompts_only_and_survives_worker_chunking(hook):
    from tensordict import NonTensorData, NonTensorStack
    from verl.utils import tensordict_utils as tu

    def batch():
        return tu.get_tensordict({"raw_prompt": np.array([[{"role": "user", "content": str(i)}] for i in range(4)],
                                                         dtype=object),
                                  "uid": np.array([f"u{i}" for i in range(4)], dtype=object)})

    train = hook.with_oversampling(batch(), N2)
    for chunk in train.chunk(2):  # what AgentLoopManagerTQ.generate_sequences sends each worker
        for i in range(len(chunk)):  # AgentLoopWorkerTQ.generate_sequences' per-prompt extraction
            prompt = {}
            for k, v in chunk.items():
                if isinstance(v, torch.Tensor):
                    prompt[k] = v[i]
                elif isinstance(v, NonTensorStack):
                    prompt[k] = v[i].data
                elif isinstance(v, NonTensorData):
                    prompt[k] = v.data
            assert prompt.pop("__rollout_n__", None) == N2  # what _run_prompt pops as n
    val = batch()
    tu.assign_non_tensor_data(val, "validate", True)
    assert "__rollout_n__" not in hook.with_oversampling(val, N2).keys()


def test_verl_loads_both_classes_from_the_override_strings(hook):
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ
    from verl.utils.import_utils import load_class_from_fqn, load_extern_object

    from kit.bridge.overrides import ROC_MANAGER, ROC_SAMPLER

    assert load_extern_object(*ROC_SAMPLER) is hook.RocReplayBuffer
    assert issubclass(load_class_from_fqn(ROC_MANAGER, "AgentLoopManager"), AgentLoopManagerTQ)


def test_text_reading_option_decodes_responses_like_the_release(hook):
    """reading='text' scores from decoded responses; the counters here say the opposite."""
    from verl import DataProto

    from kit.models import train_tokenizer

    no_tool = "<reason>4</reason> <answer>\\boxed{4}</answer><|im_end|>"
    one_call = ("<tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>"
                "<|im_end|>\n<|im_start|>assistant\n<reason>ok</reason> <answer>\\boxed{4}</answer><|im_end|>")
    wrong = "<reason>5</reason> <answer>\\boxed{5}</answer><|im_end|>"
    tok = train_tokenizer([no_tool, one_call, wrong] * 10, 400)
    texts = [no_tool, one_call, wrong, wrong]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    T = max(map(len, ids))
    responses = torch.tensor([i + [0] * (T - len(i)) for i in ids])
    attn = torch.tensor([[1] * 3 + [1] * len(i) + [0] * (T - len(i)) for i in ids])
    scores = torch.zeros(4, T)
    scores[0, 0] = scores[1, 0] = 1.0
    # counters: row 0 (no tool in the text) claims a clean call; row 1 claims a failed one
    nt = {"uid": np.array(["q"] * 4, dtype=object), "tool_calls": np.array([1, 1, 0, 0]),
          "tool_errors": np.array([0, 1, 0, 0]), "infra_errors": np.zeros(4, dtype=int),
          "answer_tags": np.array([1, 1, 1, 1]), "turns": np.array([2, 2, 1, 1])}
    data = DataProto.from_dict(tensors={"token_level_scores": scores, "responses": responses, "attention_mask": attn},
                               non_tensors=nt)
    params = RocParams(group_size=2, mode="rank", min_positive=1, min_negative=1)
    by_counters, _ = hook.apply_roc(data, params)
    by_text, m = hook.apply_roc(data, params, tokenizer=tok)
    assert int(by_counters.batch["responses"][0, 0]) == ids[0][0]  # row 0 kept (p_total 0 vs 1.0)
    assert by_text.batch["responses"][0].tolist()[: len(ids[1])] == ids[1]  # row 1 kept (0.0 vs 1.5)
    assert m["rstar2/roc/p_total_correct_mean_before"] == pytest.approx((1.5 + 0.0) / 2)


def test_v1_sampler_draw_does_not_depend_on_arrival_order(hook, monkeypatch):
    """Trajectories reach TransferQueue in completion order; the same seed and step must keep the same ones."""
    rows = [r for r in _synthetic_batch() if r["uid"] in ("A", "C")]
    kw = _sampler_kwargs(mode="sample", drop_equal_reward_groups=False, train_batch_size=2)

    def run(order):
        store = FakeTQ().install(monkeypatch)
        for uid in ("A", "C"):
            group = [r for r in rows if r["uid"] == uid]
            store.add_group(group if order == "forward" else group[::-1])
        buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw, poll_interval=0.0)
        return sorted(buf.sample(global_steps=3, partition_id="train", batch_size=2)[0].keys)

    for step_seed in range(5):
        kw.seed = step_seed
        assert run("forward") == run("reversed")


def test_sampler_kwargs_flags_must_be_booleans(hook):
    """Review r17: ``bool("false")`` is True, so a quoted flag in a YAML or a ``=false`` string
    override silently turned the error-ratio penalty (or the equal-reward drop) on."""
    base = {"group_size": 4, "oversample": 8, "train_batch_size": 2}
    params, _ = hook.roc_params_from_kwargs({**base, "use_error_ratio": "false", "drop_equal_reward_groups": "False"})
    assert params.use_error_ratio is False and params.drop_equal_reward_groups is False
    params, _ = hook.roc_params_from_kwargs({**base, "use_answer_format": "TRUE", "use_error_ratio": False})
    assert params.use_answer_format is True and params.use_error_ratio is False
    with pytest.raises(ValueError, match=r"sampler_kwargs\.use_answer_format must be true or false, got 'no\?'"):
        hook.roc_params_from_kwargs({**base, "use_answer_format": "no?"})


def test_v1_sampler_writes_the_step_s_rollout_records_with_roc_s_decision(hook, fake_tq, tmp_path):
    """Issue #32: the RoC buffer records every session of the step (before RoC drops any) in kit.records' schema."""
    from kit.records import read_records

    rows = [dict(r, prompts=torch.tensor([1, 2, 3]), response_mask=torch.tensor([1, 1, 0, 0, 1, 1]),
                 rollout_log_probs=torch.full((6,), -0.5)) for r in _synthetic_batch() if r["uid"] in ("A", "C")]
    fake_tq.add_group([r for r in rows if r["uid"] == "A"], step=3)
    fake_tq.add_group([r for r in rows if r["uid"] == "C"], step=3)
    kw = _sampler_kwargs(drop_equal_reward_groups=False, records_dir=str(tmp_path), records_stage="stage2",
                         records_algorithm="grpo_roc", records_seed=0, records_step_offset=2, records_log_probs=True,
                         records_every=1, records_max_prompts=0)
    buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", kw, poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=3, partition_id="train", batch_size=2)
    recs = read_records(tmp_path, stage="stage2")
    assert len(recs) == 2 * N2 and {(r["runtime"], r["step"], r["global_step"]) for r in recs} == {("verl", 1, 3)}
    kept = {f"{r['group_id']}_{r['traj_index']}" for r in recs if r["kept"]}
    assert kept == {k.rsplit("_", 1)[0] for k in meta.keys} and sum(r["kept"] for r in recs) == metrics["rstar2/roc/kept"]
    by = {(r["group_id"], r["traj_index"]): r for r in recs}
    for src in rows:
        r = by[(src["uid"], src["session"])]
        assert r["reward"] == float(src["score"].sum()) and r["tool_calls"] == src["extra"]["tool_calls"]
        assert r["response_ids"] == src["responses"].tolist() and r["logprobs"] == [-0.5, -0.5, 0, 0, -0.5, -0.5]
        assert r["entropy"] is None  # VERL's rollout gives none: recorded as missing
    assert all(math.isnan(r["advantage"]) != r["kept"] for r in recs)
    # a step the recorder does not want reads no extra fields and writes nothing
    assert hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop", dict(kw, records_every=2),
                                poll_interval=0.0)._records.fields(4) == []


def _infra(rows, bad):
    """compute_score's reward_extra_info on each row; the rows of ``bad`` (uid, session) are the
    verifier's infra_error (score 0)."""
    out = []
    for r in rows:
        why = "infra_error" if (r["uid"], r["session"]) in bad else ("correct" if r["score"].sum() > 0 else "wrong")
        score = torch.zeros_like(r["score"]) if why == "infra_error" else r["score"]
        out.append(dict(r, score=score, extra={**r["extra"], "reward_extra_info": {"score": float(score.sum()),
                                                                                   "reason": why}}))
    return out


def test_roc_leaves_out_the_rows_the_verifier_could_not_grade(hook):
    """As kit.train.update.select: infra_error rows are never kept and RoC runs on the graded rows
    alone (same draw as on those rows by themselves); a group short of G graded rows is kept whole."""
    from kit.algo import counters, roc_step

    rows = _infra([r for r in _synthetic_batch() if r["uid"] in ("A", "C")],
                  {("A", 1), ("A", 3), ("C", 0), ("C", 2), ("C", 4), ("C", 6), ("C", 7)})
    uids = [r["uid"] for r in rows]
    scores = np.array([float(r["score"].sum()) for r in rows])
    extras = [r["extra"] for r in rows]
    params = RocParams(group_size=G, mode="rank", min_positive=2, min_negative=2, drop_equal_reward_groups=False)
    kept, metrics = hook.select_trajectories(uids, scores, extras, params, seed=3)
    graded = np.array([i for i, r in enumerate(rows) if r["extra"]["reward_extra_info"]["reason"] != "infra_error"])
    alone, _ = roc_step(scores[graded], [uids[i] for i in graded], counters([extras[i] for i in graded]), params, 3)
    assert kept.tolist() == graded[alone.kept].tolist()
    assert not {1, 3, 8, 10, 12, 14, 15} & set(kept.tolist())
    assert [uids[i] for i in kept].count("A") == G and [uids[i] for i in kept].count("C") == 3  # C: 3 graded rows
    assert metrics["rstar2/roc/sampled"] == len(graded)
    assert hook.select_trajectories(uids[:2], scores[:2], extras[:2], params, 0,
                                    reasons=["infra_error"] * 2)[0].tolist() == []
    # v0: VERL spreads reward_extra_info into non_tensor_batch columns; the reason column decides
    data = _dataproto(rows)
    data.non_tensor_batch["reason"] = np.array([e["reward_extra_info"]["reason"] for e in extras], dtype=object)
    out, _ = hook.apply_roc(data, params, seed=3)
    assert out.non_tensor_batch["uid"].tolist() == [uids[i] for i in kept] and len(out) == G + 3


def test_v1_roc_buffer_leaves_out_infra_error_sessions(hook, fake_tq):
    rows = _infra([r for r in _synthetic_batch() if r["uid"] == "A"], {("A", 0), ("A", 4)})
    fake_tq.add_group(rows)
    buf = hook.RocReplayBuffer("sync", OmegaConf.create({}), 8, "drop",
                               _sampler_kwargs(train_batch_size=1, drop_equal_reward_groups=False), poll_interval=0.0)
    meta, metrics = buf.sample(global_steps=0, partition_id="train", batch_size=1)
    assert len(meta.keys) == G and not {"A_0_0", "A_4_0"} & set(meta.keys)
    assert metrics["rstar2/roc/sampled"] == N2 - 2 and set(fake_tq.values["train"]) == set(meta.keys)
