"""The kit's agent loop as a VERL 0.9.x ``AgentLoopBase`` (registered as ``rstar2_kit``).

VERL's ``AgentLoopWorker`` instantiates it once per trajectory with hydra and awaits
``run(sampling_params, **row)``. It does not re-implement the loop: it wraps VERL's server
client (``LLMServerClient.generate -> TokenOutput``, SGLang or vLLM replicas) as a
:class:`kit.rollout.backends.Backend` and calls :func:`kit.rollout.loop.run_trajectory`, so the
parser, the feedback text, the token budget shared across turns, the masks and the counters are
the same code the CPU tests and the tiny profile run (rStar2-Agent §2.1; the release's
``RStar2AgentLoop``).

Use it with ``actor_rollout_ref.rollout.agent.default_agent_loop=rstar2_kit`` (or a dataset
column ``agent_name``) after importing this module in the worker (``kit.bridge`` import in the
recipe), or with an ``agent_loop_config_path`` YAML entry::

    - name: rstar2_kit
      _target_: kit.bridge.agent_loop.KitAgentLoop
      sandbox: {timeout_s: 10, num_workers: 64}        # kit.config.SandboxConfig fields
      max_calls_per_turn: 4
      tool_response_max_tokens: 1024

Settings read from VERL's config: ``rollout.response_length`` (the shared budget, tokens),
``rollout.prompt_length``, ``rollout.multi_turn.max_assistant_turns`` (max turns; unset: the
kit's default). Sampling (``temperature``, ``top_p``) comes from ``sampling_params``, so VERL's
``val_kwargs`` apply at validation. The dataset row's ``raw_prompt`` holds the raw problem as the
last user message (the template adds the instruction prefix).

Outputs: ``AgentLoopOutput`` with ``response_mask`` 1 for sampled tokens and 0 for feedback,
``response_logprobs`` when the server returned log-probs, and in ``extra_fields`` (per
trajectory, visible to the reward function and the RoC selection): ``tool_calls``,
``tool_error_<kind>`` for each kind, ``tool_errors`` (their sum), ``infra_errors``,
``answer_tags``, ``answered`` (an extractable final answer: RoC's ``p_format``), ``truncated``,
``finish_reason``, ``turns``, ``tool_wall_s`` (seconds: every
call's sandbox wall time summed, what the local trainer's ``time_tool_s`` sums; read by
``kit.bridge.sampler.tool_metrics``), and VERL's ``min_global_steps`` /
``max_global_steps`` (the weight versions the turns were sampled with; VERL's v1 trainer needs them).

Tools: one sandbox executor per worker process and event loop (``kit.sandbox.SandboxPool``,
created once by the first trajectory; concurrent ones wait for it) unless an ``executor`` is passed (tests). VERL's own tool list (``tools=``) is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from kit.analysis import code_behaviour
from kit.bridge.kv_router import is_dead_engine_error, router_of
from kit.bridge.per_loop import once_per_loop
from kit.config import RolloutConfig, SandboxConfig
from kit.rollout import protocol
from kit.rollout.backends import Generation
from kit.rollout.loop import Trajectory, run_trajectory
from kit.sandbox import SandboxPool

AGENT_NAME = "rstar2_kit"
log = logging.getLogger("kit.bridge.agent_loop")


class VerlServerBackend:
    """A VERL ``LLMServerClient`` (``async generate(request_id=, prompt_ids=, sampling_params=)``
    returning ``TokenOutput``) seen as a kit :class:`~kit.rollout.backends.Backend`.

    All turns of one trajectory share ``request_id``, so VERL keeps them on the same server
    (prefix cache). ``max_new_tokens`` and ``stop_token_ids`` are set per turn; other sampling
    keys (``logprobs``, ``top_k``, ``repetition_penalty``) pass through from VERL.

    A turn whose server dies under it (:func:`kit.bridge.kv_router.is_dead_engine_error`) is
    reported to the kit's router (``KvCacheRouter.engine_failed``, which marks that engine down)
    and sent once more, to another engine; with VERL's own balancer, or on a second failure, the
    error is raised as before (issue #19, bad input).
    """

    def __init__(self, server_manager: Any, request_id: str, sampling_params: dict[str, Any]):
        self.server = server_manager
        self.request_id = request_id
        self.base = dict(sampling_params)
        self.steps = GlobalSteps()
        self.router = router_of(server_manager)
        self.resent = 0  # turns re-sent after their engine died

    async def _generate_once_more_on_death(self, prompt_ids: list[int], params: dict[str, Any]) -> Any:
        """``server.generate``; on a dead engine, tell the router and send the turn once more.

        Raises:
            the server's error: not a dead engine, no kit router behind VERL's client, or the
            re-sent turn failed too (reported to the router as not re-sent).
        """
        try:
            return await self._generate(prompt_ids, params)
        except Exception as exc:
            if self.router is None or not is_dead_engine_error(exc):
                raise
            await self.router.engine_failed.remote(self.request_id, f"{type(exc).__name__}: {exc}", True)
            log.warning("agent loop: the engine of request %s died (%s: %s); re-sending the turn",
                        self.request_id, type(exc).__name__, exc)
            self.resent += 1
        try:
            return await self._generate(prompt_ids, params)
        except Exception as exc:
            if is_dead_engine_error(exc):
                await self.router.engine_failed.remote(self.request_id, f"{type(exc).__name__}: {exc}", False)
            raise

    async def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> Any:
        return await self.server.generate(request_id=self.request_id, prompt_ids=prompt_ids, sampling_params=params)

    async def generate(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids: Sequence[int]) -> Generation:
        if max_new_tokens <= 0:
            return Generation([], [], "length")
        params = {**self.base, "temperature": temperature, "top_p": top_p, "max_new_tokens": int(max_new_tokens),
                  "stop_token_ids": list(stop_ids)}
        out = await self._generate_once_more_on_death(list(prompt_ids), params)
        self.steps.see(dict(out.extra_fields or {}))
        ids = list(out.token_ids)[:max_new_tokens]
        # an empty reply (SGLang: max_new_tokens clamped to 0, or an abort) has log_probs == []: keep it a
        # list, or the whole trajectory loses its log-probs and VERL cannot concatenate the batch's
        lps = list(out.log_probs)[: len(ids)] if out.log_probs is not None else None
        stop = set(stop_ids)
        for i, t in enumerate(ids):  # a server may run past a stop id it was not told about
            if t in stop:
                ids, lps = ids[: i + 1], (lps[: i + 1] if lps is not None else None)
                break
        if lps is not None and len(lps) != len(ids):
            lps = None
        return Generation(ids, lps, "stop" if ids and ids[-1] in stop else "length")


_POOLS: dict[int, asyncio.Task] = {}  # event loop id -> task entering its SandboxPool (one per loop)


async def _shared_pool(sandbox_cfg: dict[str, Any] | None) -> Any:
    """The worker's one entered ``SandboxPool`` for this event loop (lives as long as the process)."""

    async def make() -> Any:
        return await SandboxPool(SandboxConfig(**(sandbox_cfg or {}))).__aenter__()

    return await once_per_loop(_POOLS, make)


class GlobalSteps:
    """Weight versions a trajectory was generated with: ``min``/``max`` of VERL's per-turn
    ``extra_fields["global_steps"]`` (its own loops keep the same two keys, ``llm_server.py``).

    VERL 0.9.1's v1 trainer reads ``min_global_steps`` and ``max_global_steps`` of every
    trajectory (``trainer/ppo/v1/trainer_base.py:1897``); without them it fails after step 1.
    """

    def __init__(self) -> None:
        self.min: int | None = None
        self.max: int | None = None

    def see(self, extra: dict[str, Any]) -> None:
        lo = extra.get("min_global_steps", extra.get("global_steps"))
        hi = extra.get("max_global_steps", extra.get("global_steps"))
        if lo is not None:
            self.min = int(lo) if self.min is None else min(self.min, int(lo))
        if hi is not None:
            self.max = int(hi) if self.max is None else max(self.max, int(hi))

    def fields(self) -> dict[str, int | None]:
        return {"min_global_steps": self.min, "max_global_steps": self.max}


def trajectory_to_output(tr: Trajectory, response_length: int, steps: GlobalSteps | None = None,
                         call_open_id: int | None = None) -> AgentLoopOutput:
    """Convert a kit :class:`Trajectory` to VERL's ``AgentLoopOutput`` (see module docstring).

    ``num_turns`` follows VERL's convention: user turns + assistant turns + 1.
    ``steps``: the weight versions seen while generating; ``extra_fields`` always carries
    ``min_global_steps``/``max_global_steps`` (None when no turn reported one), and the
    trajectory's code-interpreter summary (:meth:`kit.analysis.code_behaviour.CodeUse.fields`;
    ``call_open_id``: the tokenizer's id of ``<tool_call>``, for the first call's position).
    """
    extra: dict[str, Any] = {
        "tool_calls": tr.tool_calls,
        "tool_errors": tr.n_tool_errors,
        "infra_errors": tr.infra_errors,
        "answer_tags": tr.answer_tags,
        "answered": tr.answered,
        "truncated": tr.truncated,
        # the stored response's tokens (feedback included): the sampled-population length (kit.bridge.sampler)
        "response_tokens": min(len(tr.response_ids), int(response_length)),
        "finish_reason": tr.finish_reason,
        "turns": tr.turns,
        "tool_wall_s": float(sum(c.wall_s for c in tr.calls)),
        **(steps or GlobalSteps()).fields(),
        **code_behaviour.code_use(tr, call_open_id).fields(),  # ReTool §3.3's metrics (kit.bridge.sampler)
    }
    extra.update({f"tool_error_{k}": tr.tool_errors[k] for k in protocol.ERROR_KINDS})
    return AgentLoopOutput(
        prompt_ids=tr.prompt_ids,
        response_ids=tr.response_ids[:response_length],
        response_mask=tr.response_mask[:response_length],
        response_logprobs=tr.logprobs[:response_length] if tr.logprobs is not None else None,
        num_turns=tr.turns + len(tr.feedback_texts) + 1,
        metrics=AgentLoopMetrics(generate_sequences=tr.time_generate_s, tool_calls=tr.time_tool_s),
        extra_fields=extra,
    )


@register(AGENT_NAME)
class KitAgentLoop(AgentLoopBase):
    """rStar2-Agent multi-turn rollout on VERL's agent-loop API (see module docstring).

    Args (beyond ``AgentLoopBase``'s):
        executor: runs tool calls (``async run_batch(calls)``); default a per-process
            ``kit.sandbox.SandboxPool`` built from ``sandbox``.
        sandbox: ``kit.config.SandboxConfig`` fields for that pool.
        max_calls_per_turn, tool_response_max_tokens, tool_name: ``kit.config.RolloutConfig``
            fields (defaults from there).
        tools: VERL's tool list; ignored (the kit's one tool is the sandbox).
    """

    def __init__(self, *args: Any, executor: Any = None, sandbox: dict[str, Any] | None = None,
                 max_calls_per_turn: int | None = None, tool_response_max_tokens: int | None = None,
                 tool_name: str | None = None, tools: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.executor = executor
        self.sandbox_cfg = dict(sandbox) if sandbox else None
        rc = self.rollout_config
        mt = rc.get("multi_turn", {}) or {}
        defaults = RolloutConfig()
        self.kit_cfg = RolloutConfig(
            max_prompt_tokens=int(rc.get("prompt_length", defaults.max_prompt_tokens)),
            max_response_tokens=int(rc.get("response_length", defaults.max_response_tokens)),
            max_turns=int(mt.get("max_assistant_turns") or defaults.max_turns),
            max_calls_per_turn=max_calls_per_turn or defaults.max_calls_per_turn,
            tool_response_max_tokens=(defaults.tool_response_max_tokens if tool_response_max_tokens is None
                                      else tool_response_max_tokens),
            tool_name=tool_name or defaults.tool_name,
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Roll out the row's problem; ``kwargs`` is one dataset row (``raw_prompt``, ...).

        Raises:
            ValueError: ``raw_prompt`` has no user message, or the prompt is too long.
        """
        messages = list(kwargs.get("raw_prompt") or [])
        users = [m for m in messages if m.get("role") == "user"]
        if not users:
            raise ValueError(f"{AGENT_NAME}: dataset row has no user message in raw_prompt: {messages!r:.200}")
        content = users[-1]["content"]
        problem = content if isinstance(content, str) else "".join(
            c.get("text", "") for c in content if isinstance(c, dict))
        executor = self.executor if self.executor is not None else await _shared_pool(self.sandbox_cfg)

        params = {k: v for k, v in sampling_params.items() if k not in ("temperature", "top_p")}
        backend = VerlServerBackend(self.server_manager, uuid4().hex, params)
        tr = await run_trajectory(
            backend, self.tokenizer, problem, executor, self.kit_cfg,
            temperature=float(sampling_params.get("temperature", self.kit_cfg.temperature)),
            top_p=float(sampling_params.get("top_p", self.kit_cfg.top_p)),
        )
        return trajectory_to_output(tr, self.kit_cfg.max_response_tokens, backend.steps,
                                    code_behaviour.call_open_id(self.tokenizer))
