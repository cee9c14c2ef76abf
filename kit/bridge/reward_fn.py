"""VERL's ``reward.custom_reward_function`` entry: the binary outcome reward from ``kit.reward``.

Set by ``kit.bridge.overrides`` as ``reward.custom_reward_function.path=pkg://kit.bridge.reward_fn``
and ``.name=compute_score``. VERL 0.9.1's reward loop (``NaiveRewardManager.run_single``) calls
it once per finished trajectory as ``await compute_score(data_source=, solution_str=,
ground_truth=, extra_info=)``, with ``solution_str`` the whole response decoded with
``skip_special_tokens=True`` (tool feedback included; ``<tool_response>`` and ``<answer>`` are
ordinary added tokens in Qwen and kit tokenizers, so they survive the decode) and
``extra_info`` holding the dataset row's ``extra_info`` merged with the agent loop's
``extra_fields``. Any ``reward.custom_reward_function.reward_kwargs`` (``timeout_s``,
``fallback``) arrive as keyword arguments.

The score is 1.0 when ``kit.reward`` finds the final answer in the model's own text and it
matches ``ground_truth``, else 0.0 (rStar2-Agent §2.2.1: no format, tool or length term).
The returned dict's other keys (``acc``, ``reason``, ``extracted``, ``verify_s``) become
VERL's ``reward_extra_info``, which VERL stores in the final output's
``extra_fields["reward_extra_info"]``: a ``reason`` of ``infra_error`` (the verifier failed twice,
never the model's fault) scores 0 here, and the kit's replay buffers leave that session out of the
batch the trainer gets (:func:`kit.bridge.sampler.graded_rows`), as the local trainer does. It is a coroutine, so VERL awaits it on its event loop instead of
a thread, and verification runs in ``kit.reward``'s guarded worker processes.
"""

from __future__ import annotations

from typing import Any

from kit.reward import acompute_score


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                        **kwargs: Any) -> dict[str, Any]:
    """Binary reward of one trajectory (see module docstring).

    Args:
        data_source: dataset name (every source is graded the same way).
        solution_str: decoded response text (tokens, not characters, were generated).
        ground_truth: reference answer (``str`` or ``int``), from ``reward_model.ground_truth``.
        extra_info: row info; unused by the grade.
        **kwargs: ``timeout_s`` (seconds per verification, default 5.0), ``fallback``
            (accept an answer outside ``\\boxed{}``, default False); others are ignored.
    Returns:
        ``{"score": 0.0 | 1.0, "acc": same, "reason": str, "extracted": str, "verify_s": float}``.
    Raises:
        TypeError: ``solution_str`` not a string or ``ground_truth`` of an unsupported type.
    """
    if hasattr(ground_truth, "item") and not isinstance(ground_truth, str):  # numpy scalar from parquet
        ground_truth = ground_truth.item()
    if not isinstance(solution_str, str):
        raise TypeError(f"compute_score: solution_str must be str, got {type(solution_str).__name__}")
    return await acompute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
