"""The local trainer logs through VERL's tracker with VERL's names (issue #20 item 1).

A real two-step GRPO-RoC stage on a randomly initialised tiny model (smoke sizes; the grader is
replaced by a test double rewarding responses of even length, so rewards are mixed and the
update is real), with the tensorboard and file backends; the event files are read back with
TensorBoard's own reader.
"""

import importlib.util
import json
from types import SimpleNamespace

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kit.config import load
from kit.data import tasks
from kit.metrics import RL_NAMES
from kit.models import build_tiny_model, save_policy, train_tokenizer
from kit.train import common, rl, rollouts


def _cfg(**over):
    base = {"data.task_train_size": 60, "data.task_heldout_size": 4, "model.torch_threads": 1,
            "sandbox.num_workers": 1, "rollout.batch_size": 16,
            "algorithm.prompts_per_step": 2, "algorithm.group_size": 4, "algorithm.oversample": 8,
            "algorithm.lr": 1e-3, "stages.stage1.max_response_tokens": 24, "stages.stage1.max_turns": 2,
            "stages.stage1.steps": 2, "logging.backends": ["file", "tensorboard"]}
    base.update(over)
    return load("smoke", overrides=base, write=False)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    d = tmp_path_factory.mktemp("tracking_policy")
    split = tasks.make_split(60, 4, 0)
    tok = train_tokenizer([p.question + " " + p.code for p in split.train] * 3, 400)
    return save_policy(build_tiny_model(_cfg().model, tok, seed=0), tok, d / "policy")


@pytest.fixture(scope="module")
def stage(policy, tmp_path_factory):
    d = tmp_path_factory.mktemp("tracking_local")
    mp = pytest.MonkeyPatch()

    graded = []  # every graded response, in order: the step's 2G sampled rollouts per prompt

    async def grade(pairs):
        graded.extend(text for _, text in pairs)
        return [SimpleNamespace(correct=len(text) % 2 == 0, reason="test-double") for _, text in pairs]

    mp.setattr(rollouts, "grade", grade)
    # the double decides every reward, a cut trajectory's too (the cut-off rule: tests/train/test_truncation.py)
    mp.setattr(rollouts, "cut_truncated", lambda verdicts, trajectories: list(verdicts))
    try:
        rl.run_stage(_cfg(), "stage1", policy, d / "run", evaluate=False)
    finally:
        mp.undo()
    (d / "run" / "graded.json").write_text(json.dumps(graded))
    return d / "run"


def test_local_rows_fill_the_claimed_keys_with_the_sampled_population(stage):
    """Issue #29: a claimed key means the population kit.metrics declares on both runtimes; locally
    ``accuracy`` is over all 2G sampled rollouts (16 a step here), not RoC's kept 8, whose accuracy
    the tracker logs apart (``rstar2/roc/accuracy_after``, VERL's ``critic/score/mean``)."""
    from kit.metrics import RL_KEYS

    rows = common.metric_rows(stage)
    graded = json.loads((stage / "graded.json").read_text())
    assert [r["sampled"] for r in rows] == [16, 16] and len(graded) == 32
    assert all(set(r) <= set(RL_KEYS) for r in rows), {k for r in rows for k in r} - set(RL_KEYS)  # all declared
    for i, row in enumerate(rows):
        correct = [len(t) % 2 == 0 for t in graded[16 * i: 16 * (i + 1)]]
        assert RL_KEYS["accuracy"].population == "sampled" and row["accuracy"] == pytest.approx(sum(correct) / 16)
    verl = [json.loads(ln)["data"] for ln in (stage / "tracking" / "verl_metrics.jsonl").read_text().splitlines()]
    for row, data in zip(rows, verl, strict=True):
        # the local tracker's name of each claimed key is the one the VERL runtime fills it from
        for key in ("accuracy", "response_len_mean", "tool_error_ratio_correct_before"):
            name = RL_KEYS[key].verl[0]
            if row[key] is None:  # undefined this step (no correct rollout called the tool): null in both files
                assert data.get(name) is None, (key, name)
            else:
                assert data[name] == pytest.approx(row[key]), (key, name)
        assert data["critic/score/mean"] == pytest.approx(data["rstar2/roc/accuracy_after"])  # the kept 8


def test_a_local_stage_writes_tensorboard_events_with_verl_s_names_and_the_kit_s(stage):
    acc = EventAccumulator(str(stage / "tracking" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "response_length/mean", "critic/score/mean",
            "num_turns/mean", "timing_s/gen"} <= tags
    # RoC as VERL's runtime logs it, and every kit metric under the one prefix; VERL's names unprefixed
    assert {"rstar2/roc/tool_error_ratio_correct_before", "rstar2/roc/kept", "rstar2/roc/accuracy_after"} <= tags
    verl_names = {n for names in RL_NAMES.values() for n in names}
    assert all(t in verl_names or t.startswith("rstar2/") for t in tags), sorted(tags - verl_names)
    assert {"rstar2/tool_calls_per_traj", "rstar2/tool_use_rate", "rstar2/bstar_balance"} <= tags  # tool metrics
    rows = common.metric_rows(stage)
    loss = acc.Scalars("actor/pg_loss")
    assert [e.step for e in loss] == [r["global_step"] for r in rows] == [1, 2]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in rows], rel=1e-6, abs=1e-9)
    assert [e.value for e in acc.Scalars("rstar2/roc/kept")] == [r["kept"] for r in rows] == [8, 8]


def test_the_kit_s_metrics_file_is_unchanged_and_verl_s_file_logger_line_matches(stage):
    rows = common.metric_rows(stage)
    assert not any("/" in k for r in rows for k in r)  # metrics.jsonl keeps the kit's own names
    verl = [json.loads(ln) for ln in (stage / "tracking" / "verl_metrics.jsonl").read_text().splitlines()]
    assert [v["step"] for v in verl] == [1, 2]
    assert verl[0]["data"]["actor/grad_norm"] == pytest.approx(rows[0]["grad_norm"])
    for v in verl:  # VERL's score statistics are over the rows it trains on: RoC's kept rows
        assert v["data"]["rstar2/roc/sampled"] == 16 and v["data"]["critic/score/mean"] == v["data"]["rstar2/roc/accuracy_after"]


def test_a_tracker_that_is_not_installed_stops_the_stage_before_any_step(policy, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ImportError, match=r"'mlflow' is not installed: pip install mlflow"):
        rl.run_stage(_cfg(**{"logging.backends": ["tensorboard", "mlflow"]}), "stage1", policy, tmp_path, evaluate=False)
    assert common.metric_rows(tmp_path) == [] and not (tmp_path / "samples.jsonl").exists()
