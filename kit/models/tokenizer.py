"""A byte-level BPE tokenizer trained locally for the tiny profile (no downloads).

Design, for a model of 0.5M parameters that must copy numbers exactly:
    * every digit is its own token (``Digits(individual_digits=True)``), so copying an operand
      into code, or a tool result into ``\\boxed{}``, is token-aligned;
    * chat and tool tags (``<|im_start|>``, ``<tool_call>``, ``<answer>``, ...) are single ids,
      so ``<|im_end|>`` can be a stop id;
    * the fixed prompt texts of :mod:`kit.prompts` (the system prompt with its tools block, and
      the user instruction prefix) are single added tokens. The rendered text is byte-identical
      to the paper-scale template; the tiny model just does not spend hundreds of positions on
      a constant preamble. Decoding gives the exact strings back.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from kit import prompts

SPECIAL_TOKENS = [prompts.PAD, prompts.ENDOFTEXT, prompts.IM_START, prompts.IM_END]
TAG_TOKENS = [
    prompts.TOOL_CALL_OPEN, prompts.TOOL_CALL_CLOSE,
    prompts.TOOL_RESPONSE_OPEN, prompts.TOOL_RESPONSE_CLOSE,
    prompts.REASON_OPEN, prompts.REASON_CLOSE,
    prompts.ANSWER_OPEN, prompts.ANSWER_CLOSE,
]
PROMPT_TOKENS = [prompts.SYSTEM_PROMPT, prompts.USER_PREFIX]


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """Train the tiny tokenizer on ``corpus``.

    Args:
        corpus: texts to learn merges from (rendered trajectories, problems, SFT chats).
        vocab_size: target size including special and added tokens; the learned vocabulary
            may be smaller when the corpus is small.
        min_frequency: minimum pair count for a merge.
    Returns:
        A ``PreTrainedTokenizerFast`` with pad/eos set and :data:`kit.prompts.CHAT_TEMPLATE`
        as its chat template. ``eos_token`` is ``<|im_end|>`` (end of an assistant turn).
    Raises:
        ValueError: if ``vocab_size`` is smaller than the byte alphabet plus the added tokens.
    """
    floor = 256 + len(SPECIAL_TOKENS) + len(TAG_TOKENS) + len(PROMPT_TOKENS)
    if vocab_size < floor:
        raise ValueError(f"vocab_size {vocab_size} is below the minimum {floor} (bytes + added tokens)")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS) - len(PROMPT_TOKENS),
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS + PROMPT_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=prompts.PAD,
        eos_token=prompts.IM_END,
        bos_token=None,
        unk_token=None,
        model_max_length=1 << 20,
        padding_side="left",
    )
    fast.chat_template = prompts.CHAT_TEMPLATE
    return fast


def stop_token_ids(tokenizer) -> list[int]:
    """Ids that end an assistant turn: ``<|im_end|>`` and ``<|endoftext|>`` when present."""
    ids = []
    for t in (prompts.IM_END, prompts.ENDOFTEXT):
        i = tokenizer.convert_tokens_to_ids(t)
        if i is not None and i != tokenizer.unk_token_id and i not in ids:
            ids.append(i)
    return ids
