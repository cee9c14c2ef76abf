"""Issue #44 part 9: the rollout counts are checked at load, the error naming the key (a negative
``rollout.max_calls_per_turn`` told the model "at most -1 tool calls are run per turn")."""

import pytest

from kit.config import load
from kit.config.checks import ConfigError


@pytest.mark.parametrize("key,value", [
    ("rollout.max_calls_per_turn", -1), ("rollout.max_calls_per_turn", 0), ("rollout.max_prompt_tokens", -5),
    ("rollout.tool_response_max_tokens", 0), ("rollout.batch_size", -2), ("rollout.tool_delay_steps", -1),
    ("rollout.max_turns", -3), ("rollout.max_response_tokens", -1),
])
def test_a_count_out_of_range_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: must be an integer >= [01], got {value}"):
        load("tiny", {key: value}, write=False)


@pytest.mark.parametrize("key,value", [
    ("rollout.max_calls_per_turn", 1), ("rollout.tool_delay_steps", 0), ("rollout.batch_size", 1),
])
def test_the_smallest_sensible_counts_load(key, value):
    assert getattr(load("tiny", {key: value}, write=False).rollout, key.split(".")[1]) == value


@pytest.mark.parametrize("key,value,least", [
    # rollouts per candidate of stage 3's hard-subset filter (review of issue #44 part 9: -1 and 0 loaded)
    ("stages.stage3.hard_filter_samples", -1, 1), ("stages.stage1.hard_filter_samples", 0, 1),
    ("eval.passk_n", 0, 1), ("eval.passk_problems", -1, 0), ("eval.consistency_problems", -2, 0),
    ("eval.bootstrap_samples", 0, 1), ("data.consistency_samples", 0, 1), ("data.consistency_min_matches", -1, 0),
    ("data.task_train_size", 0, 1), ("data.task_heldout_size", -4, 1), ("data.decontam_ngram", 0, 1),
    ("ablation.workers", 0, 1), ("algorithm.update_micro_tokens", 0, 1), ("algorithm.min_positive", -1, 0),
    ("algorithm.min_negative", -2, 0), ("sft.max_seq_tokens", -1, 1), ("sft.checkpoint_every", -1, 0),
])
def test_a_stage_eval_or_data_count_out_of_range_is_refused_naming_the_key(key, value, least):
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: must be an integer >= {least}\b.*, got {value}$"):
        load("tiny", {key: value}, write=False)


def test_more_consistency_matches_than_answers_is_refused():
    with pytest.raises(ConfigError, match=r"^data[.]consistency_min_matches: must be <= data[.]consistency_samples \(4\)"):
        load("tiny", {"data.consistency_samples": 4, "data.consistency_min_matches": 5}, write=False)


@pytest.mark.parametrize("key,value", [
    ("stages.stage3.hard_filter_samples", 1), ("eval.passk_n", 1), ("eval.passk_problems", 0),
    ("eval.consistency_problems", 0), ("data.consistency_min_matches", 0), ("sft.checkpoint_every", 0),
])
def test_the_smallest_sensible_stage_and_eval_counts_load(key, value):
    cfg = load("tiny", {key: value}, write=False)
    *path, name = key.split(".")
    section = cfg.stages[path[1]] if path[0] == "stages" else getattr(cfg, path[0])
    assert getattr(section, name) == value
