"""Token-drift and mask-span audit of a trajectory.

Multi-turn RL trains on the ids the loop built turn by turn. If those differ from what the chat
template and tokenizer would produce for the same conversation (a dropped newline at a turn
join, a re-tokenized tool block, a token merged across a join), training and inference see
different sequences, and the error grows with every turn (verl issues #6921, #2165, #3960).

:func:`audit_trajectory` rebuilds the conversation from the trajectory's texts, renders it with
the kit's chat template (``kit.prompts.CHAT_TEMPLATE`` through the tokenizer's Jinja renderer, whatever
template the tokenizer itself carries; :func:`kit.prompts.render_conversation` for an object without
``apply_chat_template``), independently of the loop's :func:`kit.prompts.feedback_block`,
and checks:

    ``text_ok``   decode(prompt_ids + response_ids) equals the rendered text (must always hold);
    ``ids_ok``    prompt_ids + response_ids equal the tokenization of the rendered text (holds
                  when the model's samples are canonical tokenizations of their text; a random
                  or weakly trained model can sample non-canonical splits: those turns are listed
                  in ``noncanonical_turns`` and are not loop bugs);
    ``masked_ok`` every mask-0 span decodes to exactly the template + tool-response text between
                  a model turn's ``<|im_end|>`` and the next turn's first sampled token, and every
                  mask-1 span to exactly that turn's sampled text.
``drift_at`` is the first differing id position (None when ``ids_ok``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kit import prompts
from kit.rollout.loop import Trajectory


@dataclass
class AuditReport:
    """Result of :func:`audit_trajectory`; the fields are described in the module docstring."""

    text_ok: bool
    ids_ok: bool
    masked_ok: bool
    drift_at: int | None = None
    noncanonical_turns: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No loop bug: text, ids (modulo non-canonical model samples) and masks agree."""
        return self.text_ok and self.masked_ok and (self.ids_ok or bool(self.noncanonical_turns))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


def _render(tokenizer: Any, messages: list[dict[str, str]], gen: bool) -> str:
    # always the kit's template: the loop renders from kit.prompts whatever template the tokenizer
    # carries (a hub tokenizer such as Qwen3-14B-Base keeps its own, which the rollout never uses)
    if hasattr(tokenizer, "apply_chat_template"):
        return tokenizer.apply_chat_template(messages, chat_template=prompts.CHAT_TEMPLATE, tokenize=False,
                                             add_generation_prompt=gen)
    return prompts.render_conversation(messages, add_generation_prompt=gen)


def conversation_messages(tr: Trajectory) -> list[dict[str, str]]:
    """The chat messages of a trajectory's completed turns (each assistant turn with its
    ``<reason>`` prefill, without the final turn's text, which :func:`rendered_text` appends raw)."""
    msgs = [{"role": "user", "content": tr.problem}]
    for k, fb in enumerate(tr.feedback_texts):
        own = tr.model_texts[k]
        if own.endswith(prompts.IM_END):
            own = own[: -len(prompts.IM_END)]
        msgs.append({"role": "assistant", "content": prompts.ASSISTANT_PREFILL + own})
        msgs += [{"role": "tool", "content": t} for t in fb]
    return msgs


def rendered_text(tr: Trajectory, tokenizer: Any) -> str:
    """The conversation as the chat template renders it, up to the last sampled token."""
    last = tr.model_texts[-1] if len(tr.model_texts) > len(tr.feedback_texts) else ""
    return _render(tokenizer, conversation_messages(tr), True) + last


def audit_trajectory(tr: Trajectory, tokenizer: Any) -> AuditReport:
    """Check a trajectory's ids and masks against an independent rendering (see module doc).

    Args:
        tr: a trajectory from :func:`kit.rollout.loop.run_trajectory`.
        tokenizer: the tokenizer it was built with.
    Returns:
        An :class:`AuditReport`; ``problems`` says what differed, with positions and texts.
    """
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    dec = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    problems: list[str] = []
    text = rendered_text(tr, tokenizer)
    ids = tr.prompt_ids + tr.response_ids
    got_text = dec(ids)
    text_ok = got_text == text
    if not text_ok:
        at = next((i for i, (a, b) in enumerate(zip(got_text, text, strict=False)) if a != b), min(len(got_text), len(text)))
        problems.append(f"text differs at char {at}: built {got_text[at:at + 40]!r} vs rendered {text[at:at + 40]!r}")
    want = enc(text)
    ids_ok = want == ids
    drift_at = None
    if not ids_ok:
        drift_at = next((i for i, (a, b) in enumerate(zip(ids, want, strict=False)) if a != b), min(len(ids), len(want)))
        problems.append(f"ids differ at position {drift_at} (prompt has {len(tr.prompt_ids)}): built "
                        f"{ids[drift_at:drift_at + 5]} vs tokenized {want[drift_at:drift_at + 5]}")

    # mask spans against the template text between turns
    msgs = conversation_messages(tr)
    spans = tr.spans()
    model_spans = [(s, e) for m, s, e in spans if m == 1]
    tool_spans = [(s, e) for m, s, e in spans if m == 0]
    masked_ok = True
    if len(model_spans) != len(tr.model_texts) or len(tool_spans) != len(tr.feedback_texts):
        masked_ok = False
        problems.append(f"{len(model_spans)} model spans / {len(tool_spans)} masked spans for "
                        f"{len(tr.model_texts)} turns / {len(tr.feedback_texts)} feedback blocks")
    noncanon: list[int] = []
    for k, (s, e) in enumerate(model_spans[: len(tr.model_texts)]):
        if dec(tr.response_ids[s:e]) != tr.model_texts[k]:
            masked_ok = False
            problems.append(f"turn {k}: model span decodes to a different text")
        if enc(tr.model_texts[k]) != tr.response_ids[s:e]:
            noncanon.append(k)
    n_msgs = 1
    for k, (s, e) in enumerate(tool_spans[: len(tr.feedback_texts)]):
        n_msgs += 1  # the assistant message of turn k
        before = _render(tokenizer, msgs[:n_msgs], False)
        if before.endswith("\n"):  # the template's newline after <|im_end|> is not generated
            before = before[:-1]
        n_msgs += len(tr.feedback_texts[k])
        after = _render(tokenizer, msgs[:n_msgs], True)
        expected = after[len(before):]
        got = dec(tr.response_ids[s:e])
        if got != expected:
            masked_ok = False
            problems.append(f"feedback {k}: masked span {got[:60]!r}... differs from template {expected[:60]!r}...")
    if not ids_ok and not noncanon:
        problems.append("token drift with canonical model samples: a join between turns re-tokenizes differently")
    return AuditReport(text_ok, ids_ok, masked_ok, drift_at, noncanon, problems)
