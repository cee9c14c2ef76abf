"""Agent-R's forced-error probes (issue #46): the same failing call and its real error in every policy's context."""

from __future__ import annotations

import asyncio
import random

from doubles import FakeExecutor, Res, pair

from kit.config import RolloutConfig, load
from kit.data import tasks
from kit.rollout import ScriptedBackend, rollout_batch
from kit.studies.agent_r import probes

CFG = RolloutConfig(max_prompt_tokens=256, max_response_tokens=400, max_turns=4, max_calls_per_turn=4,
                    tool_response_max_tokens=64)
ANSWER = "so</reason> <answer> \\boxed{42} </answer>"


def _problems(n: int = 6) -> list[tasks.TaskProblem]:
    return list(tasks.make_split(n, 2, seed=5).train)


def test_probe_turns_fail_like_the_demos_and_depend_on_the_seed_and_problem_only():
    ps = _problems()
    turns = probes.probe_turns(ps, seed=3)
    assert turns == probes.probe_turns(ps, seed=3) and turns != probes.probe_turns(ps, seed=4)
    assert probes.probe_turns(ps[2:4], seed=3) == turns[2:4]  # a problem's probe does not depend on the others
    for p, t in zip(ps, turns, strict=True):
        assert "<tool_call>" in t and p.code not in t  # a broken variant of the problem's own program
    broken = tasks.failing_call(ps[0], random.Random(0))
    assert broken.input == ps[0].input and broken.code != ps[0].code


def test_every_policy_continues_from_the_same_forced_turn_and_its_real_error(tok):
    ps = _problems(2)
    turns = probes.probe_turns(ps, seed=0)
    ex = FakeExecutor(lambda code, stdin: Res("error", stderr="NameError: name 'pritn' is not defined"))

    async def run(script):
        be = ScriptedBackend(tok, script)
        groups = await rollout_batch(be, tok, [p.question for p in ps], ex, 2, CFG, call_factory=pair,
                                     forced_turns=turns)
        return be, groups

    be_a, a = asyncio.run(run(lambda ctx: ANSWER))  # two "policies": one answers at once,
    be_b, b = asyncio.run(run(lambda ctx: "still wrong"))  # the other never answers
    for groups in (a, b):
        for turn, group in zip(turns, groups, strict=True):
            for tr in group:
                first = tr.model_texts[0]
                assert first.startswith(turn)  # the forced text, then <|im_end|>
                n = len(tok.encode(turn, add_special_tokens=False)) + 1
                assert tr.response_mask[:n] == [0] * n and tr.logprobs is None  # written, not sampled
                assert tr.tool_calls >= 1 and "NameError" in tr.feedback_texts[0][0]  # the call ran and failed
    # the policies' first sampled request saw exactly the same context: prompt, forced turn and its feedback
    first_requests = lambda be: sorted(tuple(c["prompt_ids"]) for c in be.calls[:4])  # noqa: E731
    assert first_requests(be_a) == first_requests(be_b)
    assert all(tr.finish_reason == "answer" for g in a for tr in g)


def test_probe_samples_is_checked():
    assert load("tiny", write=False).agent_r.probe_samples >= 1
    try:
        load("tiny", {"agent_r.probe_samples": -1}, write=False)
    except Exception as exc:  # ConfigError names the key
        assert "agent_r.probe_samples" in str(exc)
    else:
        raise AssertionError("a negative probe_samples was accepted")
