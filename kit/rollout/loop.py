"""The multi-turn agent loop, engine-agnostic: model turn, tool calls, feedback, repeat.

rStar2-Agent §2 / §2.1 and the released ``RStar2AgentLoop`` (microsoft/rStar ``rstar2_agent``): the
prompt ends with the prefilled
``<|im_start|>assistant\\n<reason>``; each model turn is sampled until ``<|im_end|>`` with a token
budget **shared by all turns** (model and tool tokens alike); the turn's ``<tool_call>`` blocks
are parsed and sent to the sandbox asynchronously (other trajectories keep generating); the
results come back as one masked feedback block (:func:`kit.prompts.feedback_block`), and the loop
goes on until a turn without a tool call, ``<|endoftext|>``, the budget, or ``max_turns``.

Token ids are built turn by turn and never re-tokenized: the model's sampled ids are kept as
they are (mask 1), the feedback block is tokenized on its own (mask 0); both joins sit on special
tokens (``<|im_end|>`` before, the ``<reason>`` prefill after), so the ids equal the tokenization
of the rendered conversation whenever the model's own samples are canonical
(:func:`kit.rollout.audit.audit_trajectory` checks it). The newline after the model's
``<|im_end|>`` is masked template text at the start of each feedback block. The release (and
VERL's generic Continuous Token builder) leave it out, so its training ids differ from the
rendered conversation at every turn join; VERL 0.9's Qwen3 builder puts it in and lays out
exactly the kit's ids and mask (``tests/rollout/test_verl_agent_loop.py``).

Termination (``finish_reason``):
    ``answer``    a turn ended with ``<|im_end|>`` and holds no tool call;
    ``eos``       a turn ended with ``<|endoftext|>`` (or another stop id that is not ``<|im_end|>``);
    ``length``    the budget ran out inside a model turn (``truncated``);
    ``budget``    the feedback of a turn's tool calls does not fit the remaining budget with room
                  for one more model token; the loop never ends on a tool turn, so the block is
                  not appended (``truncated``; those calls are recorded with ``shown=False``);
    ``max_turns`` the last allowed turn asked for a tool; the calls are not run. Not
                  ``truncated``: graded from its box (``kit.train.rollouts.cut_truncated``).

Does not: retry infra errors, re-run a trajectory, or cap the prompt (a prompt longer than
``max_prompt_tokens`` raises).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kit import prompts
from kit.config import RolloutConfig
from kit.models import stop_token_ids
from kit.reward import extract_final_answer
from kit.rollout import protocol
from kit.rollout.backends import Backend, Generation
from kit.rollout.cohort import gather_trajectories
from kit.sandbox import ToolCall


class Executor(Protocol):
    """Anything that runs tool calls: ``kit.sandbox.SandboxPool`` or a test double."""

    async def run_batch(self, calls: list[Any]) -> list[Any]: ...


def mask_spans(response_mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """Runs of equal value in a (T,) response mask: ``[(mask, start, end), ...]`` (token indices,
    end exclusive); 1 = model-sampled, 0 = tool feedback. The trajectory view and the rollout
    explorer (``kit.explore``) draw these spans."""
    out: list[tuple[int, int, int]] = []
    for t, m in enumerate(response_mask):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], t + 1)
        else:
            out.append((m, t, t + 1))
    return out


@dataclass
class CallRecord:
    """One answered ``<tool_call>``: where it was, what ran, what the model was told."""

    turn: int
    index: int
    status: str  # a sandbox status, or "malformed" / "skipped"
    error_kind: str | None  # exception / timeout / memory / malformed / infra / None
    feedback: str
    name: str | None = None
    code: str | None = None
    input: str | None = None
    wall_s: float = 0.0
    cut_tokens: int = 0  # tokens removed by the feedback truncation
    shown: bool = True  # False when the feedback did not fit the budget (finish_reason "budget")
    detail: str = ""  # malformed reason or infra exception text
    cached: bool = False  # answered from an identical call of the same step (kit.sandbox.step_cache), not run


@dataclass
class Trajectory:
    """One rollout. Shapes: ``response_ids``, ``response_mask`` and ``logprobs`` have length T
    (tokens after the prompt, model and feedback tokens, at most ``max_response_tokens``).

    ``response_mask[t] = 1`` for model-sampled tokens, 0 for feedback/template tokens.
    ``logprobs[t]`` is the sampling log-prob for mask-1 tokens and 0.0 elsewhere, or the whole
    list is ``None`` when the backend gave none; ``entropy[t]`` likewise the entropy (nats) of the
    distribution token ``t`` was sampled from (:attr:`kit.rollout.backends.Generation.entropy`).
    ``tool_errors`` has every kind of
    :data:`kit.rollout.protocol.ERROR_KINDS`; ``infra_errors`` counts sandbox failures (not the
    model's fault). ``answer_tags`` counts ``<answer>`` in the model's own text; ``answered`` says
    whether the response has an extractable final answer (strict :func:`kit.reward.extract_final_answer`:
    a final box that is unclosed, empty or cut off is none), which RoC's ``p_format`` reads.
    ``response_text`` decodes the response with special tokens (feedback included), like the
    release's ``response_text``.
    """

    problem: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    entropy: list[float] | None = field(default_factory=list)  # (T,) nats, 0.0 on feedback; None: the backend gave none
    turns: int = 0
    tool_calls: int = 0
    calls: list[CallRecord] = field(default_factory=list)
    tool_errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(protocol.ERROR_KINDS, 0))
    infra_errors: int = 0
    answer_tags: int = 0
    answered: bool | None = None  # an extractable final answer (kit.reward); None: not known
    truncated: bool = False
    finish_reason: str = ""
    response_text: str = ""
    model_texts: list[str] = field(default_factory=list)  # per turn, decoded sampled ids (stop id included)
    feedback_texts: list[list[str]] = field(default_factory=list)  # per appended feedback block
    time_generate_s: float = 0.0
    time_tool_s: float = 0.0

    @property
    def call_statuses(self) -> list[str]:
        """Status of every answered call, in order."""
        return [c.status for c in self.calls]

    @property
    def n_tool_errors(self) -> int:
        """Tool errors that are the model's fault (all kinds; infra errors excluded)."""
        return sum(self.tool_errors.values())

    def spans(self) -> list[tuple[int, int, int]]:
        """Runs of equal mask over the response (:func:`mask_spans`)."""
        return mask_spans(self.response_mask)

    def to_record(self) -> dict[str, Any]:
        """JSON-able dict for ``samples.jsonl`` (ids, mask spans, counters, calls, texts)."""
        d = asdict(self)
        d["spans"] = self.spans()
        d["call_statuses"] = self.call_statuses
        return d


def _tokenize(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _default_call_factory(code: str, stdin: str) -> Any:
    return ToolCall(code=code, input=stdin)


async def run_trajectory(
    backend: Backend,
    tokenizer: Any,
    problem: str,
    executor: Executor,
    cfg: RolloutConfig | None = None,
    *,
    max_response_tokens: int | None = None,
    max_turns: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    stop_ids: Sequence[int] | None = None,
    timeout_s: float | None = None,
    call_factory: Callable[[str, str], Any] = _default_call_factory,
    system_prompt: str = prompts.SYSTEM_PROMPT,
    forced_turn: str | None = None,
) -> Trajectory:
    """Roll out one problem to the end (rStar2-Agent §2.1; release ``RStar2AgentLoop.run``).

    Args:
        backend: a :class:`~kit.rollout.backends.Backend`.
        tokenizer: the policy's tokenizer.
        problem: the raw problem text (the user prefix is added by the prompt).
        executor: runs tool calls (``async run_batch(calls) -> results``), e.g. a
            ``kit.sandbox.SandboxPool``.
        cfg: rollout settings; the keyword arguments override its fields (``max_response_tokens``
            in tokens, shared by all turns; ``max_turns`` model turns; sampling; the stage or
            evaluation settings go here). ``cfg.max_calls_per_turn``,
            ``cfg.tool_response_max_tokens`` and ``cfg.max_prompt_tokens`` are read from ``cfg``.
        stop_ids: ids that end a turn; default ``<|im_end|>`` and ``<|endoftext|>``.
        timeout_s: the sandbox's wall-clock limit, quoted in timeout feedback.
        call_factory: builds the executor's call object from ``(code, input)``; default
            ``kit.sandbox.ToolCall``.
        system_prompt: the system text (default: the release's with the tools block).
        forced_turn: the first model turn's text (after the prefilled ``<reason>``, without ``<|im_end|>``),
            written into the context instead of sampled: its tokens carry response mask 0, its tool calls
            run as the model's would, and the policy continues from their feedback (Agent-R's forced-error
            probes, issue #46: the same failure in every policy's context). The trajectory then has no
            log-probs or entropy (``None``).
    Returns:
        The :class:`Trajectory`.
    Raises:
        ValueError: the prompt is longer than ``cfg.max_prompt_tokens``, or the backend returned
            more tokens than asked for.
    """
    cfg = cfg or RolloutConfig()
    budget = cfg.max_response_tokens if max_response_tokens is None else max_response_tokens
    max_turns = cfg.max_turns if max_turns is None else max_turns
    temperature = cfg.temperature if temperature is None else temperature
    top_p = cfg.top_p if top_p is None else top_p
    if budget <= 0 or max_turns <= 0:
        raise ValueError(f"run_trajectory: need max_response_tokens > 0 and max_turns > 0, got {budget}, {max_turns}")
    im_end = tokenizer.convert_tokens_to_ids(prompts.IM_END)
    if stop_ids is None:
        stop_ids = stop_token_ids(tokenizer)
    stop = set(stop_ids)
    names = (cfg.tool_name, *[n for n in (prompts.TOOL_NAME, *prompts.TOOL_NAME_ALIASES) if n != cfg.tool_name])

    prompt_ids = _tokenize(tokenizer, prompts.render_prompt(problem, system_prompt))
    if len(prompt_ids) > cfg.max_prompt_tokens:
        raise ValueError(f"prompt of {len(prompt_ids)} tokens exceeds rollout.max_prompt_tokens="
                         f"{cfg.max_prompt_tokens}: {problem[:80]!r}")
    tr = Trajectory(problem=problem, prompt_ids=prompt_ids)
    lps: list[float] | None = []
    ents: list[float] | None = []
    for turn in range(max_turns):
        left = budget - len(tr.response_ids)
        t0 = time.perf_counter()
        forced = turn == 0 and forced_turn is not None
        if forced:  # written, not sampled: the same tokens in every policy's context
            gen = Generation(_tokenize(tokenizer, forced_turn) + [im_end], None, "stop")
            if len(gen.token_ids) > left:
                raise ValueError(f"forced_turn of {len(gen.token_ids)} tokens exceeds the budget of {left}")
        else:
            gen = await backend.generate(prompt_ids + tr.response_ids, left, temperature, top_p, list(stop_ids))
        tr.time_generate_s += time.perf_counter() - t0
        if len(gen.token_ids) > left:
            raise ValueError(f"backend returned {len(gen.token_ids)} tokens for a budget of {left}")
        tr.turns += 1
        tr.response_ids += gen.token_ids
        tr.response_mask += [0 if forced else 1] * len(gen.token_ids)
        if lps is not None and gen.logprobs is not None:
            lps += gen.logprobs
        else:
            lps = None
        ents = ents + gen.entropy if ents is not None and gen.entropy is not None else None
        text = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        tr.model_texts.append(text)
        ended = bool(gen.token_ids) and gen.token_ids[-1] in stop
        own = tokenizer.decode(gen.token_ids[:-1] if ended else gen.token_ids, skip_special_tokens=False)
        tr.answer_tags += own.count(prompts.ANSWER_OPEN)
        if not ended:
            tr.finish_reason, tr.truncated = "length", True
            break
        if gen.token_ids[-1] != im_end:
            tr.finish_reason = "eos"
            break
        parsed = protocol.parse_tool_calls(own, names)
        if not parsed:
            tr.finish_reason = "answer"
            break
        if turn == max_turns - 1:
            tr.finish_reason = "max_turns"
            break
        t0 = time.perf_counter()
        records = await _run_calls(parsed, turn, executor, cfg, call_factory, timeout_s, tokenizer)
        tr.time_tool_s += time.perf_counter() - t0
        texts = [r.feedback for r in records]
        fb_ids = _tokenize(tokenizer, prompts.feedback_block(texts))
        _count(tr, records)
        if len(tr.response_ids) + len(fb_ids) >= budget:
            for r in records:
                r.shown = False
            tr.finish_reason, tr.truncated = "budget", True
            break
        tr.feedback_texts.append(texts)
        tr.response_ids += fb_ids
        tr.response_mask += [0] * len(fb_ids)
        if lps is not None:
            lps += [0.0] * len(fb_ids)
        if ents is not None:
            ents += [0.0] * len(fb_ids)
    tr.logprobs, tr.entropy = lps, ents
    tr.response_text = tokenizer.decode(tr.response_ids, skip_special_tokens=False)
    tr.answered = extract_final_answer(tr.response_text) is not None  # RoC's p_format: no answer is a format failure
    return tr


async def _run_calls(parsed, turn, executor, cfg, call_factory, timeout_s, tokenizer) -> list[CallRecord]:
    """Run the well-formed calls (up to the per-turn limit) in one batch; answer every call.

    Program output is cut to ``cfg.tool_response_max_tokens``; the kit's own short messages
    (malformed, skipped, infra) are never cut.
    """
    limit = cfg.max_calls_per_turn
    run_idx = [i for i, c in enumerate(parsed) if c.error is None and i < limit]
    results: list[Any] = []
    infra_detail = ""
    if run_idx:
        calls = [call_factory(parsed[i].code, parsed[i].input) for i in run_idx]
        try:
            results = list(await executor.run_batch(calls))
            if len(results) != len(calls):
                raise RuntimeError(f"executor returned {len(results)} results for {len(calls)} calls")
        except Exception as exc:  # the service failed: not the model's fault, keep the rollout going
            infra_detail = f"{type(exc).__name__}: {exc}"
            results = [None] * len(calls)
    by_idx = dict(zip(run_idx, results, strict=True))
    records: list[CallRecord] = []
    for i, c in enumerate(parsed):
        if c.error is not None:
            rec = CallRecord(turn, i, "malformed", "malformed", protocol.render_malformed(c.error), name=c.name,
                             detail=c.error)
        elif i >= limit:
            rec = CallRecord(turn, i, "skipped", None, protocol.render_skipped(limit), name=c.name, code=c.code,
                             input=c.input)
        else:
            res = by_idx[i]
            if res is None:
                rec = CallRecord(turn, i, "infra_error", "infra", protocol.render_result(_Infra()), name=c.name,
                                 code=c.code, input=c.input, detail=infra_detail)
            else:
                text, cut = protocol.truncate_tokens(protocol.render_result(res, timeout_s), tokenizer,
                                                     cfg.tool_response_max_tokens)
                rec = CallRecord(turn, i, res.status, protocol.STATUS_KIND[res.status], text, name=c.name,
                                 code=c.code, input=c.input, wall_s=float(getattr(res, "wall_s", 0.0) or 0.0),
                                 cut_tokens=cut, cached=bool(getattr(res, "cached", False)))
        records.append(rec)
    return records


class _Infra:
    status, stdout, stderr = "infra_error", "", ""


def _count(tr: Trajectory, records: list[CallRecord]) -> None:
    for r in records:
        tr.calls.append(r)
        tr.tool_calls += 1
        if r.error_kind == "infra":
            tr.infra_errors += 1
        elif r.error_kind is not None:
            tr.tool_errors[r.error_kind] += 1


# --------------------------------------------------------------------------- many trajectories


async def run_group(backend, tokenizer, problem: str, executor, n: int, cfg: RolloutConfig | None = None,
                    **kwargs) -> list[Trajectory]:
    """``n`` concurrent rollouts of one problem (one GRPO group, G or 2G trajectories).

    Same arguments as :func:`run_trajectory`; returns the ``n`` trajectories in start order. They
    run as one cohort of the backend (:func:`kit.rollout.cohort.gather_trajectories`).
    """
    return await gather_trajectories(backend, [
        lambda: run_trajectory(backend, tokenizer, problem, executor, cfg, **kwargs) for _ in range(n)])


async def rollout_batch(backend, tokenizer, problems: Sequence[str], executor, n: int,
                        cfg: RolloutConfig | None = None, *, max_concurrency: int | None = None,
                        forced_turns: Sequence[str | None] | None = None, **kwargs) -> list[list[Trajectory]]:
    """Roll out ``P`` problems x ``n`` samples concurrently; return them grouped, (P, n).

    Args:
        problems: P problem texts.
        n: samples per problem (G, or 2G with RoC oversampling).
        max_concurrency: the most trajectories alive at once (None: all P*n), in fixed lanes
            (:func:`kit.rollout.cohort.gather_trajectories`).
        forced_turns: per problem, :func:`run_trajectory`'s ``forced_turn`` for each of its samples (None: none).
        **kwargs: passed to :func:`run_trajectory` (``max_response_tokens``, ``max_turns``, ...).
    Returns:
        ``out[p][g]`` is sample ``g`` of problem ``p``, in problem order.
    Raises:
        ValueError: ``forced_turns`` is not one per problem.

    The ``P x n`` trajectories run as one cohort of the backend
    (:func:`kit.rollout.cohort.gather_trajectories`): a local backend batches them by its logical
    clock, so the samples do not depend on tool latency or machine load.
    """
    forced = [None] * len(problems) if forced_turns is None else list(forced_turns)
    if len(forced) != len(problems):
        raise ValueError(f"rollout_batch: {len(forced)} forced turns for {len(problems)} problems")
    flat = await gather_trajectories(backend, [
        (lambda p=p, f=f: run_trajectory(backend, tokenizer, p, executor, cfg, forced_turn=f, **kwargs))
        for p, f in zip(problems, forced, strict=True) for _ in range(n)], max_concurrency=max_concurrency)
    return [list(flat[i * n:(i + 1) * n]) for i in range(len(problems))]


def run_coroutine(coro) -> Any:
    """Run a coroutine to completion from sync code, also inside Jupyter's running event loop
    (then in a helper thread with its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target():
        try:
            box["v"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["e"] = exc

    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "e" in box:
        raise box["e"]
    return box["v"]
