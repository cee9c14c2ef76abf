"""Cold-start SFT data (rStar2-Agent §4.1): function-calling chats and task demonstrations.

The report starts RL from a *non-reasoning* SFT that teaches instruction following and the
tool-call format. This module converts the public function-calling sets in
``<data_dir>/sft`` (Glaive, ToolACE, xLAM, reason_tool_use; see ``<data_dir>/SOURCES.md``) into
the kit's chat format (:mod:`kit.prompts`), adds tool-use demonstrations of the tiny task family
(:mod:`kit.data.tasks`), and tokenizes every conversation with a loss mask that is 1 on the
assistant's own tokens only (not the system prompt, user turns, tool responses or the
``<reason>`` prefill of each assistant turn).

Conversion rules (every source):
    * system: :data:`kit.prompts.SYSTEM_PREAMBLE` plus the Hermes ``# Tools`` block built from the
      row's own tool schemas (the source's system text is dropped);
    * user: the text as is (the chat template adds the user prefix, as released);
    * assistant with tool calls: ``<reason>`` + reasoning (if the source has one) + one
      ``<tool_call>`` block per call (JSON ``{"name", "arguments"}``);
    * assistant with text: ``<reason>`` + reasoning + ``</reason>`` + ``<answer>`` text ``</answer>``;
    * tool results (Glaive ``observation``, reason_tool_use ``tool``): ``tool`` messages.

Task demonstrations run their code through the real sandbox (:func:`kit.sandbox.run_sync`) and
render the results with the agent loop's feedback renderer (:func:`kit.rollout.protocol.render_result`,
truncated by tokens as in rollouts), so SFT demos and RL rollouts share one format.

For the paper profile the same loaders take the full sets from any path with the same schema.
Not done: no instruction-following data with responses is available offline (IFEval rows here
have prompts only), so none is mixed in.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import prompts
from kit.config import paths
from kit.data.tasks import Demo, tool_call_text
from kit.rollout.protocol import render_result, truncate_tokens
from kit.sandbox import ToolCall, run_sync

SFT_FILES = {
    "glaive": "sft/glaive_toolcall_en_demo.json",
    "toolace": "sft/toolace_sample.json",
    "xlam": "sft/xlam_fc_sample.jsonl",
    "reason_tool_use": "sft/reason_tool_use_demo_50.jsonl",
}


@dataclass(frozen=True)
class Conversation:
    """One SFT conversation in the kit's chat format.

    Attributes:
        source: ``glaive``, ``toolace``, ``xlam``, ``reason_tool_use`` or ``task:<kind>``.
        id: ``<source>:<row index or problem id>``.
        messages: ``{"role", "content"}`` dicts, the first one the system message; assistant
            contents start with the ``<reason>`` prefill.
    """

    source: str
    id: str
    messages: tuple[dict[str, str], ...]

    def text(self) -> str:
        """The rendered conversation (:func:`kit.prompts.render_conversation`)."""
        return prompts.render_conversation(self.messages)


class SFTDataError(ValueError):
    """A row of an SFT file that cannot be converted; the message names the file and row."""


# --------------------------------------------------------------------------- conversion helpers


def _schema(tool: dict) -> dict:
    """A tool description as an OpenAI-style ``{"type": "function", "function": {...}}`` schema."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool
    fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": "function", "function": fn}


def system_message(tools: Sequence[dict]) -> dict[str, str]:
    """The system message for a row with ``tools`` (its schemas in the Hermes tools block)."""
    return {"role": "system", "content": prompts.SYSTEM_PREAMBLE + prompts.tools_block([_schema(t) for t in tools])}


def call_block(name: str, arguments: Any) -> str:
    """One ``<tool_call>`` block (JSON on its own line, as in the system prompt's example)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{prompts.TOOL_CALL_OPEN}\n{payload}\n{prompts.TOOL_CALL_CLOSE}"


def assistant_calls(calls: Sequence[tuple[str, Any]], reasoning: str = "") -> dict[str, str]:
    """An assistant turn that makes ``calls`` (``(name, arguments)`` pairs)."""
    lead = f"{reasoning.strip()}\n" if reasoning.strip() else ""
    body = "\n".join(call_block(n, a) for n, a in calls)
    return {"role": "assistant", "content": prompts.ASSISTANT_PREFILL + lead + body}


def assistant_answer(text: str, reasoning: str = "") -> dict[str, str]:
    """An assistant turn that closes the reasoning and answers with ``text``."""
    lead = f"{reasoning.strip()}\n" if reasoning.strip() else ""
    return {"role": "assistant", "content": (f"{prompts.ASSISTANT_PREFILL}{lead}{prompts.REASON_CLOSE}\n"
                                             f"{prompts.ANSWER_OPEN}\n{text.strip()}\n{prompts.ANSWER_CLOSE}")}


def _read_json(path: Path) -> list:
    try:
        if path.suffix == ".jsonl":
            rows = []
            for i, line in enumerate(path.read_text().splitlines()):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise SFTDataError(f"{path}: line {i + 1} is not JSON ({exc})") from exc
            return rows
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SFTDataError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, list):
        raise SFTDataError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    return data


def _parse_calls(value: str, where: str) -> list[tuple[str, Any]]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SFTDataError(f"{where}: function call is not JSON ({exc})") from exc
    objs = obj if isinstance(obj, list) else [obj]
    out = []
    for o in objs:
        if not isinstance(o, dict) or "name" not in o:
            raise SFTDataError(f"{where}: function call without a 'name': {value[:120]!r}")
        out.append((o["name"], o.get("arguments", {})))
    return out


def _sharegpt(path: Path, i: int, conversations: list, tools: list[dict], source: str,
              fix_name: Callable[[str], str] = lambda n: n) -> Conversation:
    """Glaive/ToolACE rows: ``conversations`` of ``{from: human/gpt/function_call/observation}``."""
    where = f"{path} row {i}"
    msgs: list[dict[str, str]] = [system_message(tools)]
    for j, turn in enumerate(conversations):
        role, value = turn.get("from"), turn.get("value")
        if not isinstance(value, str):
            raise SFTDataError(f"{where} turn {j}: 'value' must be a string")
        if role == "human":
            msgs.append({"role": "user", "content": value})
        elif role == "gpt":
            msgs.append(assistant_answer(value))
        elif role == "function_call":
            calls = [(fix_name(n), a) for n, a in _parse_calls(value, f"{where} turn {j}")]
            msgs.append(assistant_calls(calls))
        elif role == "observation":
            msgs.append({"role": "tool", "content": value})
        else:
            raise SFTDataError(f"{where} turn {j}: unknown 'from' {role!r} (expected human/gpt/function_call/observation)")
    return Conversation(source, f"{source}:{i}", tuple(msgs))


# --------------------------------------------------------------------------- loaders


def load_glaive(path: str | Path) -> list[Conversation]:
    """Glaive function-calling v2 (LLaMA-Factory sharegpt layout) -> conversations.

    Args:
        path: JSON list of ``{"conversations": [...], "tools": "<JSON list of schemas>"}``.
    Raises:
        SFTDataError: a row without conversations, bad tools JSON, or an unknown turn role;
            the message names the file and row.
    """
    path = Path(path)
    out = []
    for i, row in enumerate(_read_json(path)):
        if not isinstance(row, dict) or not isinstance(row.get("conversations"), list):
            raise SFTDataError(f"{path} row {i}: missing 'conversations' list")
        try:
            tools = json.loads(row.get("tools") or "[]")
        except json.JSONDecodeError as exc:
            raise SFTDataError(f"{path} row {i}: 'tools' is not JSON ({exc})") from exc
        out.append(_sharegpt(path, i, row["conversations"], tools, "glaive"))
    return out


def _toolace_tools(system: str) -> list[dict]:
    """The JSON list of function schemas embedded in a ToolACE system prompt ([] if none)."""
    start = system.find("[{")
    if start < 0:
        return []
    try:
        tools, _ = json.JSONDecoder().raw_decode(system[start:])
    except json.JSONDecodeError:
        return []
    return [t for t in tools if isinstance(t, dict) and "name" in t]


def load_toolace(path: str | Path) -> list[Conversation]:
    """ToolACE (sharegpt layout, tools listed in the system text) -> conversations.

    The source's converter cut multi-word function names to their last word ("Market Trends
    API" became "API"); a call name that is not a tool name is mapped back to the unique tool
    whose last word it is (left as is when ambiguous).

    Raises:
        SFTDataError: as :func:`load_glaive`.
    """
    path = Path(path)
    out = []
    for i, row in enumerate(_read_json(path)):
        if not isinstance(row, dict) or not isinstance(row.get("conversations"), list):
            raise SFTDataError(f"{path} row {i}: missing 'conversations' list")
        tools = _toolace_tools(row.get("system", ""))
        names = [t["name"] for t in tools]

        def fix(name: str, names=names) -> str:
            if name in names:
                return name
            cands = [n for n in names if n.split()[-1:] == [name]]
            return cands[0] if len(cands) == 1 else name

        out.append(_sharegpt(path, i, row["conversations"], tools, "toolace", fix))
    return out


def load_xlam(path: str | Path) -> list[Conversation]:
    """xLAM / APIGen single-turn rows (NeMo-Gym layout) -> user question + one calling turn.

    Args:
        path: JSONL of ``{"responses_create_params": {"input": [...], "tools": [...]},
            "expected_answers": [{"name", "arguments"}, ...]}``.
    Raises:
        SFTDataError: missing keys; the message names the file and row.
    """
    path = Path(path)
    out = []
    for i, row in enumerate(_read_json(path)):
        try:
            params = row["responses_create_params"]
            users = [m["content"] for m in params["input"] if m["role"] == "user"]
            calls = [(c["name"], c.get("arguments", {})) for c in row["expected_answers"]]
            tools = params.get("tools", [])
        except (KeyError, TypeError) as exc:
            raise SFTDataError(f"{path} row {i}: missing key {exc}") from exc
        if not users or not calls:
            raise SFTDataError(f"{path} row {i}: needs a user message and at least one expected call")
        msgs = [system_message(tools), {"role": "user", "content": users[-1]}, assistant_calls(calls)]
        out.append(Conversation("xlam", f"xlam:{i}", tuple(msgs)))
    return out


def load_reason_tool_use(path: str | Path) -> list[Conversation]:
    """reason_tool_use (LLaMA-Factory) rows with typed content parts -> conversations.

    Assistant parts: ``reasoning`` goes inside ``<reason>``, ``tool_call`` parts become call
    blocks, ``text`` becomes the ``<answer>``. Tool messages become ``tool`` messages.

    Raises:
        SFTDataError: an unknown role or part type; the message names the file and row.
    """
    path = Path(path)
    out = []
    for i, row in enumerate(_read_json(path)):
        where = f"{path} row {i}"
        try:
            tools = json.loads(row.get("tools") or "[]") if isinstance(row.get("tools"), str) else row.get("tools", [])
            messages = row["messages"]
        except (KeyError, json.JSONDecodeError, AttributeError) as exc:
            raise SFTDataError(f"{where}: bad 'messages'/'tools' ({exc})") from exc
        msgs: list[dict[str, str]] = [system_message(tools)]
        for j, m in enumerate(messages):
            parts = m.get("content", [])
            by_type: dict[str, list[str]] = {"text": [], "reasoning": [], "tool_call": []}
            for p in parts:
                if p.get("type") not in by_type:
                    raise SFTDataError(f"{where} message {j}: unknown content type {p.get('type')!r}")
                by_type[p["type"]].append(p.get("value", ""))
            role = m.get("role")
            if role == "system":
                continue
            if role == "user":
                msgs.append({"role": "user", "content": "\n".join(by_type["text"])})
            elif role == "tool":
                msgs.append({"role": "tool", "content": "\n".join(by_type["text"])})
            elif role == "assistant":
                reasoning = "\n".join(by_type["reasoning"])
                if by_type["tool_call"]:
                    calls = [c for v in by_type["tool_call"] for c in _parse_calls(v, f"{where} message {j}")]
                    msgs.append(assistant_calls(calls, reasoning))
                else:
                    msgs.append(assistant_answer("\n".join(by_type["text"]), reasoning))
            else:
                raise SFTDataError(f"{where} message {j}: unknown role {role!r}")
        out.append(Conversation("reason_tool_use", f"reason_tool_use:{i}", tuple(msgs)))
    return out


LOADERS: dict[str, Callable[[Path], list[Conversation]]] = {
    "glaive": load_glaive, "toolace": load_toolace, "xlam": load_xlam, "reason_tool_use": load_reason_tool_use,
}


def load_function_calling(names: Iterable[str], data_dir: str = "") -> list[Conversation]:
    """Load the function-calling sets ``names`` (``cfg.sft.function_calling_sets``) from the data dir.

    Raises:
        ValueError: an unknown set name.
        kit.config.paths.DataFileMissing: a file is not in the data directory.
    """
    out = []
    for name in names:
        if name not in LOADERS:
            raise ValueError(f"unknown SFT set {name!r} (config sft.function_calling_sets); known: {', '.join(LOADERS)}")
        out.extend(LOADERS[name](paths.data_file(SFT_FILES[name], override=data_dir or None)))
    return out


# --------------------------------------------------------------------------- task demonstrations


def demo_conversation(demo: Demo, feedback: Sequence[str]) -> Conversation:
    """Messages of one task demo, given the rendered feedback text of each of its tool calls.

    Raises:
        ValueError: ``len(feedback)`` differs from the demo's number of calls.
    """
    if len(feedback) != len(demo.turns):
        raise ValueError(f"demo {demo.problem.id}: {len(demo.turns)} calls but {len(feedback)} feedback texts")
    msgs: list[dict[str, str]] = [{"role": "system", "content": prompts.SYSTEM_PROMPT},
                                  {"role": "user", "content": demo.problem.question}]
    for (text, call), fb in zip(demo.turns, feedback, strict=True):
        msgs.append({"role": "assistant", "content": f"{prompts.ASSISTANT_PREFILL}{text}\n{tool_call_text(call)}"})
        msgs.append({"role": "tool", "content": fb})
    msgs.append({"role": "assistant", "content": prompts.ASSISTANT_PREFILL + demo.final})
    return Conversation(f"task:{demo.kind}", f"task:{demo.problem.id}", tuple(msgs))


def run_demo_calls(demos: Sequence[Demo], sandbox_cfg) -> list[list]:
    """Run every tool call of ``demos`` in the sandbox (one batch); results grouped per demo.

    Returns:
        ``results[i][k]`` is the ``kit.sandbox.ToolResult`` of call ``k`` of demo ``i``.
    """
    calls = [ToolCall(code=c.code, input=c.input) for d in demos for _, c in d.turns]
    flat = run_sync(calls, sandbox_cfg) if calls else []
    out, k = [], 0
    for d in demos:
        out.append(list(flat[k:k + len(d.turns)]))
        k += len(d.turns)
    return out


def render_feedback(results: Sequence[Sequence], tokenizer=None, max_tokens: int = 0,
                    timeout_s: float | None = None) -> list[list[str]]:
    """Feedback texts of the demo calls, as the agent loop renders them (truncated by tokens).

    Args:
        results: ``results[i][k]`` sandbox results (from :func:`run_demo_calls`).
        tokenizer: used for the token truncation; None = no truncation (tokenizer corpus).
        max_tokens: ``cfg.rollout.tool_response_max_tokens``.
        timeout_s: the sandbox timeout, for timeout messages.
    """
    out = []
    for per_demo in results:
        texts = []
        for r in per_demo:
            t = render_result(r, timeout_s)
            if tokenizer is not None:
                t, _ = truncate_tokens(t, tokenizer, max_tokens)
            texts.append(t)
        out.append(texts)
    return out


# --------------------------------------------------------------------------- tokenization


def encode_conversation(tokenizer, messages: Sequence[dict[str, str]], max_tokens: int = 0) -> tuple[list[int], list[int]]:
    """Token ids of a rendered conversation and its loss mask.

    The text is :func:`kit.prompts.render_conversation` of ``messages``; it is tokenized piece by
    piece at the assistant boundaries (the ``<reason>`` prefill and ``<|im_end|>`` are added
    tokens, so the pieces' ids concatenate to the ids of the whole text; a test checks this).

    Args:
        tokenizer: the policy tokenizer.
        messages: chat messages (system first or the default system prompt is used).
        max_tokens: keep the first ``max_tokens`` tokens (0 = all).
    Returns:
        ``(ids, mask)``, both of length T; ``mask[t] = 1`` for tokens the assistant wrote (its
        text after the ``<reason>`` prefill, and its closing ``<|im_end|>``), else 0.
    """
    text = prompts.render_conversation(messages)
    ids: list[int] = []
    mask: list[int] = []

    def flush(piece_text: str, m: int) -> None:
        if piece_text:
            piece = tokenizer.encode(piece_text, add_special_tokens=False)
            ids.extend(piece)
            mask.extend([m] * len(piece))

    cursor = 0
    for j, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        content = msg["content"]
        prefill = prompts.ASSISTANT_PREFILL if content.startswith(prompts.ASSISTANT_PREFILL) else ""
        block = f"{prompts.IM_START}assistant\n{content}{prompts.IM_END}"
        at = text.find(block, cursor)
        if at < 0:  # cannot happen for text rendered from these messages
            raise ValueError(f"message {j}: assistant turn not found in the rendered conversation")
        own_start = at + len(f"{prompts.IM_START}assistant\n") + len(prefill)
        flush(text[cursor:own_start], 0)
        flush(text[own_start:at + len(block)], 1)
        cursor = at + len(block)
    flush(text[cursor:], 0)
    if max_tokens and len(ids) > max_tokens:
        ids, mask = ids[:max_tokens], mask[:max_tokens]
    return ids, mask


def tokenizer_corpus(conversations: Iterable[Conversation], seed: int = 0) -> list[str]:
    """Texts to train the tiny tokenizer on (rendered conversations, shuffled with ``seed``)."""
    texts = [c.text() for c in conversations]
    random.Random(seed).shuffle(texts)
    return texts
