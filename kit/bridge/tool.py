"""The kit's Python tool as a VERL 0.9.1 ``BaseTool``: runs the model's code in ``kit.sandbox``.

For agent loops that take VERL tools (``actor_rollout_ref.rollout.multi_turn.tool_config_path``,
e.g. VERL's built-in ``tool_agent``), declared in the tool YAML as::

    tools:
      - class_name: kit.bridge.tool.KitSandboxTool
        config: {type: native, timeout_s: 10, memory_mb: 1024, num_workers: 64}  # SandboxConfig fields
        # tool_schema optional: default kit.prompts.TOOL_SCHEMA (execute_python_code_with_standard_io)

``execute(instance_id, {"code", "input"}, agent_data=...)`` sends one call to a
``kit.sandbox.SandboxPool`` shared by the worker process (one per event loop, started by the
first call; calls arriving meanwhile wait for that start instead of starting their own), renders the result with ``kit.rollout.protocol.render_result`` (the same feedback text
the kit's own agent loop shows) and returns ``(ToolResponse(text), 0.0, metrics)``. It adds
the structured counters RoC reads to ``agent_data.extra_fields`` (``tool_calls``,
``tool_errors``, ``tool_error_<kind>``, ``infra_errors``), the same keys the kit agent loop
writes.

Tool-call parsing in VERL's ``tool_agent`` loop: set ``actor_rollout_ref.rollout.multi_turn.format=kit_hermes``
to parse calls with the kit's own parser (:class:`KitHermesToolParser`, registered on import of
this module; the same :func:`kit.rollout.protocol.parse_tool_calls` the kit agent loop uses), so
a ``</tool_call>`` inside a JSON string does not cut a call and a malformed call reaches this tool
and is answered and counted as ``malformed``. VERL's own ``hermes`` parser ends a call at the first
closing tag and silently drops malformed JSON.

What it does not do: the recipe's default agent loop (``kit.bridge.agent_loop``, ``rstar2_kit``)
runs the sandbox itself and never calls this tool; VERL's ``tool_agent`` loop does not record
``answer_tags`` or ``turns``, so RoC's ``p_format`` needs the kit agent loop. Arguments
other than ``code`` (string) and ``input`` (string, default empty) are rejected as a malformed
call. VERL truncates the returned text by characters (``multi_turn.max_tool_response_length``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from kit import prompts
from kit.bridge.per_loop import once_per_loop
from kit.config import SandboxConfig
from kit.reward.extract import strip_blocks
from kit.rollout.protocol import STATUS_KIND, parse_tool_calls, render_malformed, render_result
from kit.sandbox import SandboxPool, ToolCall

_SANDBOX_FIELDS = {f.name for f in dataclasses.fields(SandboxConfig)}
#: Argument key that carries a malformed call's parser message from KitHermesToolParser to the tool.
MALFORMED_KEY = "__kit_malformed__"
_NON_SANDBOX_KEYS = {"type"}  # VERL's tool-type key in the YAML config


def sandbox_config_from_tool_config(config: dict[str, Any]) -> SandboxConfig:
    """``SandboxConfig`` from the tool YAML's ``config`` mapping.

    Raises:
        ValueError: a key that is neither a ``SandboxConfig`` field nor ``type`` (names it).
    """
    unknown = sorted(set(config) - _SANDBOX_FIELDS - _NON_SANDBOX_KEYS)
    if unknown:
        raise ValueError(f"KitSandboxTool config: unknown key {unknown[0]!r}; allowed: {sorted(_SANDBOX_FIELDS)}")
    return SandboxConfig(**{k: v for k, v in config.items() if k in _SANDBOX_FIELDS})


def count_into(extra_fields: dict[str, Any], status: str | None) -> None:
    """Add one call with sandbox ``status`` (None = malformed call) to the RoC counters."""
    kind = "malformed" if status is None else STATUS_KIND[status]
    extra_fields["tool_calls"] = int(extra_fields.get("tool_calls", 0)) + 1
    if kind == "infra":
        extra_fields["infra_errors"] = int(extra_fields.get("infra_errors", 0)) + 1
    elif kind is not None:
        extra_fields["tool_errors"] = int(extra_fields.get("tool_errors", 0)) + 1
        key = f"tool_error_{kind}"
        extra_fields[key] = int(extra_fields.get(key, 0)) + 1


class KitSandboxTool(BaseTool):
    """``execute_python_code_with_standard_io(code, input)`` on the kit sandbox (see module docstring).

    Args:
        config: the tool YAML's ``config`` (``SandboxConfig`` fields plus ``type``).
        tool_schema: OpenAI function schema; default :data:`kit.prompts.TOOL_SCHEMA`.
        executor: tests only: an object with ``async run(ToolCall) -> ToolResult`` used instead
            of a sandbox pool.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None,
                 executor: Any = None):
        self.sandbox_cfg = sandbox_config_from_tool_config(dict(config or {}))
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(prompts.TOOL_SCHEMA)
        super().__init__(dict(config or {}), schema)
        self._executor = executor
        self._pools: dict[int, asyncio.Task] = {}  # event loop id -> task starting its pool

    async def _pool(self) -> Any:
        """This loop's pool, started once: concurrent first calls all await the same start."""
        if self._executor is not None:
            return self._executor

        async def make() -> Any:
            return await SandboxPool(self.sandbox_cfg).start()

        return await once_per_loop(self._pools, make)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        """Run one call. ``kwargs["agent_data"]`` (VERL's ``AgentData``) receives the counters.

        Returns:
            ``(ToolResponse(text=feedback), 0.0, {"status": str, "wall_s": float})``; status
            ``"malformed"`` for bad arguments (no sandbox call made).
        """
        agent_data = kwargs.get("agent_data")
        extra = agent_data.extra_fields if agent_data is not None else {}
        if isinstance(parameters, dict) and isinstance(parameters.get(MALFORMED_KEY), str):
            count_into(extra, None)  # the parser's message (KitHermesToolParser), shown as is
            return ToolResponse(text=render_malformed(parameters[MALFORMED_KEY])), 0.0, {"status": "malformed", "wall_s": 0.0}
        code, stdin = parameters.get("code") if isinstance(parameters, dict) else None, ""
        if isinstance(parameters, dict):
            stdin = parameters.get("input", "")
        bad = set(parameters) - {"code", "input"} if isinstance(parameters, dict) else set()
        if not isinstance(code, str) or not isinstance(stdin, str) or bad:
            why = (f"unexpected argument {sorted(bad)[0]!r}" if bad else
                   "'code' must be a string" if not isinstance(code, str) else "'input' must be a string")
            count_into(extra, None)
            return ToolResponse(text=render_malformed(why)), 0.0, {"status": "malformed", "wall_s": 0.0}

        pool = await self._pool()
        result = await pool.run(ToolCall(code=code, input=stdin))
        count_into(extra, result.status)
        text = render_result(result, timeout_s=self.sandbox_cfg.timeout_s)
        return ToolResponse(text=text), 0.0, {"status": result.status, "wall_s": float(result.wall_s or 0.0)}

    async def close(self) -> None:
        """Stop the pools this tool started (VERL never calls it; tests and scripts may)."""
        tasks, self._pools = list(self._pools.values()), {}
        for task in tasks:
            if task.get_loop() is asyncio.get_running_loop():
                pool = await asyncio.gather(task, return_exceptions=True)
                if not isinstance(pool[0], BaseException):
                    await pool[0].close()


@ToolParser.register("kit_hermes")
class KitHermesToolParser(ToolParser):
    """VERL ``ToolParser`` on :func:`kit.rollout.protocol.parse_tool_calls` (``multi_turn.format=kit_hermes``).

    Every ``<tool_call>`` becomes one ``FunctionCall`` to the kit tool, in order: a well-formed
    call with ``{"code", "input"}``; a malformed one (bad JSON, unknown tool, unclosed tag...) with
    ``{MALFORMED_KEY: message}``, which :meth:`KitSandboxTool.execute` answers with the kit's
    malformed-call feedback. The returned content is the text without the call spans.
    """

    async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None) -> tuple[str, list[FunctionCall]]:
        """Decode ``responses_ids`` (one assistant turn) and parse its calls.

        Returns:
            ``(content, calls)``: the turn's text with the call blocks removed, and the calls.
        """
        text = self.tokenizer.decode(responses_ids)
        calls = []
        for c in parse_tool_calls(text):
            args = {MALFORMED_KEY: c.error} if c.error is not None else {"code": c.code, "input": c.input}
            calls.append(FunctionCall(name=prompts.TOOL_NAME, arguments=json.dumps(args, ensure_ascii=False)))

        content = strip_blocks(text, prompts.TOOL_CALL_OPEN, prompts.TOOL_CALL_CLOSE, prompts.json_call_end)
        return (content if calls else text), calls
