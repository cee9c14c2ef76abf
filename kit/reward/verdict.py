"""The verdict record and the in-process part of grading one response (no sympy here)."""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kit.reward.extract import extract_final_answer
from kit.reward.rules import quick_grade

#: Exit status of a verifier worker that hit its memory cap (kit.reward.worker).
EXIT_MEMORY = 3

#: Every reason a verdict can carry; only ``correct`` scores 1. ``infra_error``: the verifier
#: itself failed twice on the item (kit.reward.pool); the local trainer drops such items from the update.
REASONS = ("correct", "wrong", "no_answer", "timeout", "parse_error", "infra_error")


@dataclass(frozen=True)
class Verdict:
    """The grade of one response.

    Attributes:
        correct: True only when ``reason == "correct"``.
        reason: one of :data:`REASONS`. ``timeout`` means the verifier gave up within its
            limits (time or memory) and scores 0; ``parse_error`` means the gold or the answer
            could not be read as math (and their texts differ); ``infra_error`` means the
            verifier could not grade the item (a worker killed or starved twice; never the
            model's fault: score 0, and the local trainer leaves the item out of the update).
        extracted: the answer text taken from the response (None for ``no_answer``).
        seconds: wall seconds spent on this item: extraction and rules in the caller, plus the
            worker's time from dispatch to reply (queue waiting in a batch is not counted).
        detail: the rule that decided (e.g. ``exact_number``, ``math_verify``, ``too_large``,
            ``hard_kill``); for logs and tests, not a contract.
    """

    correct: bool
    reason: str
    extracted: str | None
    seconds: float
    detail: str = ""

    @property
    def score(self) -> float:
        """The binary reward: 1.0 when correct, else 0.0 (rStar2-Agent §2.2.1)."""
        return 1.0 if self.correct else 0.0


def cut_off(v: Verdict) -> Verdict:
    """The verdict of a trajectory the length budget cut (``finish_reason`` ``length`` or ``budget``):
    ``no_answer``, score 0, whatever it had boxed before the cut (detail ``truncated``).

    rStar2-Agent §4.3 trains without overlong filtering: a truncated trajectory stays in the
    batch as a failure. The release grades it like any other (research note
    ``rstar2_agent_release.md`` §5: "no overlong filtering. Truncated responses usually score 0"),
    so a box written before the cut could earn 1 there; the kit scores every cut trajectory 0, so
    the rule does not depend on where the budget ran out.
    """
    return Verdict(False, "no_answer", None, float(getattr(v, "seconds", 0.0)), "truncated")


def count_reasons(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """How many verdicts carry each reason; every key of :data:`REASONS` is present."""
    counts = dict.fromkeys(REASONS, 0)
    for v in verdicts:
        counts[v.reason] += 1
    return counts


def check_pair(gold: object, response: object, where: str = "") -> tuple[str, str]:
    """Validate one ``(gold, response)`` pair; integers (numpy's too) are accepted as golds.

    Raises:
        TypeError: naming ``where`` (e.g. ``pairs[3]``) and the offending type.
    """
    if isinstance(gold, bool) or not isinstance(gold, (str, numbers.Integral)):
        raise TypeError(f"{where or 'gold'}: gold must be str or int, got {type(gold).__name__}")
    if not isinstance(response, str):
        raise TypeError(f"{where or 'response'}: response must be str, got {type(response).__name__}")
    return (gold if isinstance(gold, str) else str(int(gold))), response


def prepare(gold: str, response: str, fallback: bool = False) -> tuple[Verdict | None, str, str, str | None, float]:
    """Extraction and the exact rules, run in the caller's process.

    Returns:
        ``(verdict, gold_norm, answer_norm, extracted, seconds)``: ``verdict`` is final when the
        rules decided (or there is no answer); None means "send the normalized pair to a
        worker".
    """
    t0 = time.perf_counter()
    extracted = extract_final_answer(response, fallback=fallback)
    if extracted is None:
        return Verdict(False, "no_answer", None, time.perf_counter() - t0, "no_box"), "", "", None, 0.0
    reason, detail, g, a = quick_grade(gold, extracted)
    dt = time.perf_counter() - t0
    if reason is not None:
        return Verdict(reason == "correct", reason, extracted, dt, detail), g, a, extracted, dt
    return None, g, a, extracted, dt
