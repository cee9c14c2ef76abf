"""The exact prompt strings of rStar2-Agent, in one place (report §2; released chat template).

Every renderer of a conversation, the tiny tokenizer's Jinja chat template, the paper-scale
template given to VERL, and the agent loop that builds token ids turn by turn, takes its text
from here, so that all of them produce byte-identical conversations.

Layout of one rendered conversation (``{...}`` are filled in)::

    <|im_start|>system
    {SYSTEM_PROMPT}<|im_end|>
    <|im_start|>user
    {USER_PREFIX}{problem}<|im_end|>
    <|im_start|>assistant
    <reason>{model text ... <tool_call>{json}</tool_call>}<|im_end|>
    <|im_start|>user
    <tool_response>
    {tool feedback}
    </tool_response><|im_end|>
    <|im_start|>assistant
    <reason>{model text ... </reason> <answer> ... \\boxed{42} </answer>}<|im_end|>

Every assistant turn is prefilled with ``<reason>`` (the generation prompt ends with it), so
the model's own tokens start right after it. The newline after the model's ``<|im_end|>`` is
template text: the agent loop appends it as part of the masked feedback block, so the token
ids built turn by turn equal the tokenization of the rendered conversation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
PAD = "<|pad|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
REASON_OPEN, REASON_CLOSE = "<reason>", "</reason>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

#: Tool name of the report and the released model card.
TOOL_NAME = "execute_python_code_with_standard_io"
#: Name used by the released training code (microsoft/rStar python_tool_config.yaml); accepted.
TOOL_NAME_ALIASES = ("python_code_with_standard_io",)

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run a Python 3 program and return what it prints. The program may read the given "
            "input from standard input with input(). If nothing is printed, the value of the last "
            "expression is returned; if the program raises, the traceback is returned instead."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python source code to run."},
                "input": {"type": "string", "description": "Text given to the program on standard input."},
            },
            "required": ["code", "input"],
        },
    },
}

#: The released system prompt (the chat template of the rStar2-Agent release), with the
#: Hermes-style tools block appended. Kept verbatim: the released checkpoint expects it.
SYSTEM_PREAMBLE = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant "
    "solves it. The Assistant first thinks about the reasoning process in the mind and then "
    "provides the User with the answer. The reasoning process is enclosed within <reason> "
    "</reason> and answer is enclosed within <answer> </answer> tags, respectively, i.e., "
    "<reason> reasoning process here </reason> <answer> answer here </answer>."
)


def tools_block(tools: Sequence[Mapping[str, Any]] = (TOOL_SCHEMA,)) -> str:
    """The Hermes-style ``# Tools`` section of the system prompt for ``tools`` (JSON schemas)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


#: The full system prompt with the kit's one tool.
SYSTEM_PROMPT = SYSTEM_PREAMBLE + tools_block()

#: Prefixed to every user message holding a problem.
USER_PREFIX = (
    "You must put your answer inside <answer> </answer> tags, i.e., <answer> answer here "
    "</answer>. And your final answer will be extracted automatically by the \\boxed{} tag.\n"
    "This is the problem:\n"
)

#: What the generation prompt ends with: every assistant turn is prefilled with <reason>.
ASSISTANT_PREFILL = REASON_OPEN


def render_system(system_prompt: str = SYSTEM_PROMPT) -> str:
    return f"{IM_START}system\n{system_prompt}{IM_END}\n"


def render_user(problem: str) -> str:
    return f"{IM_START}user\n{USER_PREFIX}{problem}{IM_END}\n"


def generation_prompt() -> str:
    """Text that opens an assistant turn, ending with the ``<reason>`` prefill."""
    return f"{IM_START}assistant\n{ASSISTANT_PREFILL}"


def render_prompt(problem: str, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The full prompt for one problem: system, user, and the prefilled assistant opening."""
    return render_system(system_prompt) + render_user(problem) + generation_prompt()


def render_tool_responses(texts: Sequence[str]) -> str:
    """The user turn that carries one or more tool results (consecutive results merged)."""
    body = "".join(f"\n{TOOL_RESPONSE_OPEN}\n{t}\n{TOOL_RESPONSE_CLOSE}" for t in texts)
    return f"{IM_START}user{body}{IM_END}\n"


def feedback_block(texts: Sequence[str]) -> str:
    """Masked text appended after a model turn that ended with ``<|im_end|>``.

    It is the newline that closes the assistant turn in the template, the tool-response user
    turn, and the next assistant opening with its ``<reason>`` prefill.
    """
    return "\n" + render_tool_responses(texts) + generation_prompt()


def render_conversation(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False) -> str:
    """Render chat messages exactly as the chat template does.

    Args:
        messages: dicts with ``role`` in {system, user, assistant, tool} and ``content``. A
            missing system message means the default :data:`SYSTEM_PROMPT`. Assistant content
            is the raw model text including its leading ``<reason>`` prefill.
        add_generation_prompt: end with the prefilled assistant opening.
    Returns:
        The conversation text.
    Raises:
        ValueError: on an unknown role.
    """
    out = []
    msgs = list(messages)
    if not msgs or msgs[0]["role"] != "system":
        out.append(render_system())
    for i, m in enumerate(msgs):
        role, content = m["role"], m["content"]
        if role == "system":
            out.append(render_system(content))
        elif role == "user":
            out.append(render_user(content))
        elif role == "assistant":
            out.append(f"{IM_START}assistant\n{content}{IM_END}\n")
        elif role == "tool":
            if i == 0 or msgs[i - 1]["role"] != "tool":
                out.append(f"{IM_START}user")
            out.append(f"\n{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}")
            if i == len(msgs) - 1 or msgs[i + 1]["role"] != "tool":
                out.append(f"{IM_END}\n")
        else:
            raise ValueError(f"message {i}: unknown role {role!r}")
    if add_generation_prompt:
        out.append(generation_prompt())
    return "".join(out)


def _jinja_str(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid Jinja string literal


#: Jinja chat template (HF ``apply_chat_template``) that renders like render_conversation().
CHAT_TEMPLATE = (
    "{%- if not messages or messages[0].role != 'system' -%}"
    "{{- " + _jinja_str(render_system()) + " -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{{- '" + IM_START + "system\\n' + m.content + '" + IM_END + "\\n' -}}"
    "{%- elif m.role == 'user' -%}"
    "{{- '" + IM_START + "user\\n' + " + _jinja_str(USER_PREFIX) + " + m.content + '" + IM_END + "\\n' -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{{- '" + IM_START + "assistant\\n' + m.content + '" + IM_END + "\\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '" + IM_START + "user' -}}{%- endif -%}"
    "{{- '\\n" + TOOL_RESPONSE_OPEN + "\\n' + m.content + '\\n" + TOOL_RESPONSE_CLOSE + "' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '" + IM_END + "\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- " + _jinja_str(generation_prompt()) + " -}}{%- endif -%}"
)


_JSON = json.JSONDecoder()


def json_call_end(text: str, body_start: int) -> int | None:
    """Where a ``<tool_call>`` body that starts at ``body_start`` ends, decided by JSON.

    When the body is one complete JSON object followed (after whitespace) by
    :data:`TOOL_CALL_CLOSE`, the index just past the object; else None, and the caller ends
    the call at the first closing tag. The JSON decoder, not a text search, finds the end, so
    a tag inside a JSON string (``"code": "s = '</tool_call>'"``) belongs to the call. Used by
    the tool-call parser (``kit.rollout.protocol``) and the answer extractor
    (``kit.reward.extract``) so both cut a call at the same place. Never raises.
    """
    i, n = body_start, len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    if not text.startswith("{", i):
        return None
    try:
        _, end = _JSON.raw_decode(text, i)
    except (ValueError, RecursionError):  # bad or unterminated JSON, a >4300-digit number, deep nesting
        return None
    j = end
    while j < n and text[j] in " \t\r\n":
        j += 1
    return end if text.startswith(TOOL_CALL_CLOSE, j) else None
