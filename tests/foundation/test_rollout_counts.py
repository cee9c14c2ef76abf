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
