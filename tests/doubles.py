"""Test doubles shared across test folders: tool-call text, a tiny tokenizer corpus, a fake sandbox
(importable from every test module: tests/conftest.py puts this folder on the path)."""

from __future__ import annotations

import importlib.util
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kit import prompts

TOOL = prompts.TOOL_NAME


def call(code: str, stdin: str = "", name: str = TOOL) -> str:
    """A well-formed tool call as the model writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"code": code, "input": stdin}}) + "\n</tool_call>"


def corpus():
    out = []
    for a in range(40):
        out.append(prompts.render_prompt(f"What is {a} * {a + 7}?") + " compute it " + call(f"print({a}*{a + 7})")
                   + prompts.IM_END + prompts.feedback_block([str(a * (a + 7)), "Traceback (most recent call last):"])
                   + f"so</reason> <answer> \\boxed{{{a * (a + 7)}}} </answer>" + prompts.IM_END)
    return out


@dataclass
class Res:
    """Stand-in for kit.sandbox.ToolResult (same fields)."""

    status: str
    stdout: str = ""
    stderr: str = ""
    value: str = ""
    exit_code: int | None = 0
    wall_s: float = 0.01


class FakeExecutor:
    """Answers calls by a function of (code, input); records every batch."""

    def __init__(self, fn=None):
        self.fn = fn or (lambda code, stdin: Res("ok", stdout="42\n"))
        self.batches: list[list[tuple[str, str]]] = []

    async def run_batch(self, calls):
        calls = [(c.code, c.input) if hasattr(c, "code") else (c[0], c[1]) for c in calls]  # ToolCall or pair
        self.batches.append(calls)
        return [self.fn(code, stdin) for code, stdin in calls]


def pair(code, stdin):
    return (code, stdin)


def port_refused(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port`` any more (a stopped server's port)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the benchmarks folder is not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
