"""Forking vs reflection high-entropy tokens (rStar2-Agent §5.4).

The report finds two kinds among the top-20% entropy tokens of agent trajectories:

- **forking** tokens, in the model's own reasoning where it decides what to do next: just
  before it writes a tool call, or where it changes approach ("wait", "alternatively",
  "instead", "double-check", ...);
- **reflection** tokens, in the text right after a tool response, where the model reads the
  output or error and decides how to react.

:func:`classify_tokens` applies these positional rules to one trajectory; every other
high-entropy token is ``other``. The windows are in tokens and are heuristics, not values from
the report (it describes the categories with examples, not with a rule); change them to test
how sensitive the counts are.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kit import prompts
from kit.analysis.entropy import high_entropy_mask, trajectory_entropy

LABELS = ("forking", "reflection", "other")
#: Words that start a change of approach or a check of one's own work.
CUE_WORDS = ("wait", "alternatively", "instead", "however", "but", "hmm", "actually", "double",
             "recheck", "verify", "check", "maybe", "perhaps", "mistake", "rerun", "retry")
_CUE = re.compile(r"\b(" + "|".join(CUE_WORDS) + r")\b", re.I)


def classify_tokens(pieces: Sequence[str], response_mask: Sequence[int], high: Sequence[bool], *,
                    reflection_window: int = 24, forking_window: int = 24, cue_window: int = 4) -> list[str | None]:
    """Label every high-entropy model token ``forking``, ``reflection`` or ``other``.

    Rules, in order: a high token within ``reflection_window`` model tokens after the end of a
    feedback block (a mask 0 -> 1 boundary: every mask-0 run of a response is tool feedback) is
    ``reflection``; one
    within ``forking_window`` tokens before a ``<tool_call>`` opening of the same model turn,
    or within ``cue_window`` tokens after the start of a cue word (:data:`CUE_WORDS`), is
    ``forking``; else ``other``.

    Args:
        pieces: (T,) decoded text of each response token.
        response_mask: (T,) 1 = model token, 0 = tool response / template.
        high: (T,) bool, e.g. :func:`kit.analysis.entropy.high_entropy_mask`.
    Returns:
        (T,) list: a label for high model tokens, None elsewhere.
    Raises:
        ValueError: the three sequences differ in length.
    """
    T = len(pieces)
    if len(response_mask) != T or len(high) != T:
        raise ValueError(f"lengths differ: {T} pieces, {len(response_mask)} mask, {len(high)} high")
    mask = [int(m) for m in response_mask]
    starts = np.cumsum([0] + [len(p) for p in pieces])  # char offset of each token
    text = "".join(pieces)

    def token_at(char: int) -> int:
        return int(np.searchsorted(starts, char, side="right") - 1)

    # every mask-0 run inside a response is a feedback block (tool responses and their template)
    after_tool = np.full(T, 10**9)  # model tokens since the last feedback block ended
    since = 10**9
    for t in range(T):
        if mask[t] == 0:
            since = 0
        else:
            after_tool[t] = since
            since += 1

    before_call = np.zeros(T, dtype=bool)
    for m in re.finditer(re.escape(prompts.TOOL_CALL_OPEN), text):
        t_call = token_at(m.start())
        lo, t = t_call, t_call
        while t > 0 and lo > t_call - forking_window and mask[t - 1] == 1:
            t -= 1
            lo = t
        before_call[lo:t_call + 1] = True
    near_cue = np.zeros(T, dtype=bool)
    for m in _CUE.finditer(text):
        t0 = token_at(m.start())
        near_cue[t0: t0 + cue_window] = True

    labels: list[str | None] = []
    for t in range(T):
        if not (mask[t] and high[t]):
            labels.append(None)
        elif after_tool[t] < reflection_window:
            labels.append("reflection")
        elif before_call[t] or near_cue[t]:
            labels.append("forking")
        else:
            labels.append("other")
    return labels


def post_feedback_tokens(response_mask: Sequence[int], reflection_window: int = 24) -> int:
    """Model tokens inside the post-feedback windows: the first ``reflection_window`` model tokens after
    each feedback block (a mask-0 run) ends, the tokens where :func:`classify_tokens` calls a
    high-entropy token ``reflection``. The denominator of a reflection rate conditioned on there being a
    tool response (issue #45): more tool responses give more window tokens, not a higher rate."""
    since, n = 10**9, 0
    for m in response_mask:
        if not int(m):
            since = 0
        else:
            n += since < reflection_window
            since += 1
    return n


def count_labels(labels: Iterable[str | None]) -> dict[str, int]:
    """``{forking, reflection, other, high}`` counts of one trajectory's labels."""
    c = Counter(lab for lab in labels if lab is not None)
    out = {lab: c.get(lab, 0) for lab in LABELS}
    out["high"] = sum(out.values())
    return out


def counts_by_checkpoint(rows: Iterable[Mapping[str, Any]]):
    """Aggregate per-trajectory counts into one row per checkpoint.

    Args:
        rows: dicts with ``checkpoint`` plus the keys of :func:`count_labels`.
    Returns:
        DataFrame indexed by checkpoint: trajectories, summed counts, and the shares
        ``forking_share``/``reflection_share`` of high-entropy tokens.
    """
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    g = df.groupby("checkpoint", sort=False)
    out = g[[*LABELS, "high"]].sum()
    out.insert(0, "trajectories", g.size())
    for lab in ("forking", "reflection"):
        out[f"{lab}_share"] = out[lab] / out["high"].where(out["high"] > 0)
    return out


def analyze_trajectory(model: Any, tokenizer: Any, trajectory: Any, *, top_frac: float = 0.2,
                       temperature: float = 1.0, **windows: int) -> dict[str, Any]:
    """Entropy, top-``top_frac`` marks and forking/reflection labels of one trajectory.

    Args:
        model: the policy (``transformers`` causal LM) whose entropy is measured.
        tokenizer: its tokenizer (each response id is decoded alone for display).
        trajectory: a ``kit.rollout.Trajectory`` (or dict) with ``prompt_ids``, ``response_ids``,
            ``response_mask``.
        top_frac: share of model tokens marked high-entropy (report §5.4: 0.2).
        temperature: the entropy's temperature (training: 1.0).
        **windows: ``reflection_window``, ``forking_window``, ``cue_window`` of :func:`classify_tokens`.
    Returns:
        ``{"pieces", "entropy" (T,), "mask" (T,), "high" (T,), "labels" (T,), "counts"}``; feed
        ``pieces, entropy, mask`` to :func:`kit.analysis.entropy.entropy_html`.
    """
    get = (lambda k: trajectory[k]) if isinstance(trajectory, Mapping) else (lambda k: getattr(trajectory, k))
    ids, mask = list(get("response_ids")), list(get("response_mask"))
    ent = trajectory_entropy(model, list(get("prompt_ids")), ids, temperature)
    high = high_entropy_mask(ent, mask, top_frac)
    pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in ids]
    labels = classify_tokens(pieces, mask, high, **windows)
    return {"pieces": pieces, "entropy": ent, "mask": np.asarray(mask), "high": high, "labels": labels,
            "counts": count_labels(labels)}
