"""Test doubles of the Agent-R tests: a scripted two-way policy, a fake sandbox and verifier, a task."""

from __future__ import annotations

from dataclasses import dataclass

from doubles import FakeExecutor, Res, call

from kit import prompts

GOOD_CALL = "compute it " + call("print(6*7)")
BAD_CALL = "compute it " + call("pritn(6*7)")


class TwoWay:
    """A scripted policy: the first turn alternates a good and a broken call; after an error it
    answers wrong, after a result it answers right (a callable script for ScriptedBackend)."""

    def __init__(self):
        self.n = 0

    def __call__(self, context: str) -> str:
        if "<tool_response>" not in context:
            self.n += 1
            return GOOD_CALL if self.n % 2 else BAD_CALL
        if "NameError" in context.split("<tool_response>")[-1]:
            return "so</reason> <answer> \\boxed{1} </answer>" + prompts.IM_END
        return "so</reason> <answer> \\boxed{42} </answer>" + prompts.IM_END


def sandbox():
    return FakeExecutor(lambda code, stdin: Res("ok", stdout="42\n") if code.startswith("print")
                        else Res("error", stderr="NameError: name 'pritn' is not defined", exit_code=1))


@dataclass
class V:
    correct: bool


async def fake_grade(pairs):
    return [V(f"\\boxed{{{gold}}}" in text) for gold, text in pairs]


@dataclass
class Task:
    id: str
    question: str
    answer: str
