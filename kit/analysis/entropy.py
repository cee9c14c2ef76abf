"""Per-token entropy of the policy over a trajectory and its HTML view (rStar2-Agent §5.4).

The report studies the top 20% highest-entropy tokens of agent trajectories: "forking" tokens
in the reasoning before tool calls and "reflection" tokens right after tool responses
(:mod:`kit.analysis.tokens` classifies them). Tool-response tokens (response mask 0) are part
of the context but were not sampled by the policy: they are shown, never scored or ranked.

Symbols: ``T`` response tokens, ``V`` vocabulary; entropies in nats.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def entropy_from_logits(logits: Any) -> np.ndarray:
    """Entropy H = -sum_v p_v log p_v of softmax(logits) along the last axis, in nats.

    Args:
        logits: (..., V) float array or torch tensor (temperature already applied).
    Returns:
        (...,) float64 numpy array.
    Example:
        >>> float(entropy_from_logits(np.zeros(4)).round(6)) == round(float(np.log(4)), 6)
        True
    """
    x = logits.detach().float().cpu().numpy() if hasattr(logits, "detach") else np.asarray(logits, dtype=np.float64)
    x = x.astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    logp = z - logz
    p = np.exp(logp)
    return -(p * np.where(p > 0, logp, 0.0)).sum(axis=-1)


def trajectory_entropy(model: Any, prompt_ids: Sequence[int], response_ids: Sequence[int],
                       temperature: float = 1.0) -> np.ndarray:
    """Policy entropy at every response position: entropy of p(. | prompt, response[:t]).

    Args:
        model: a causal LM returning ``.logits`` of shape (1, L, V) (``transformers`` style).
        prompt_ids: the prompt's token ids.
        response_ids: (T,) the response's ids, tool-response tokens included (they condition
            later tokens; mask them out downstream).
        temperature: sampling temperature the entropy refers to (training: 1.0).
    Returns:
        (T,) float64 entropies in nats. The whole sequence is one forward pass (memory grows
        as L x V floats; fine for the tiny model, use short trajectories on big ones).
    Raises:
        ValueError: empty prompt or temperature <= 0.
    """
    if not prompt_ids:
        raise ValueError("trajectory_entropy: empty prompt_ids")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]  # (L, V)
    p = len(prompt_ids)
    # the logits at position i predict token i+1
    return entropy_from_logits(logits[p - 1: p - 1 + len(response_ids)] / temperature)


def high_entropy_mask(entropy: Sequence[float], response_mask: Sequence[int] | None = None,
                      top_frac: float = 0.2) -> np.ndarray:
    """Mark the top ``top_frac`` highest-entropy policy tokens (report §5.4: top 20%).

    Args:
        entropy: (T,) entropies.
        response_mask: (T,) 1 = model-sampled (ranked), 0 = tool response (never marked);
            None = all tokens are model tokens.
        top_frac: share of model tokens marked; at least one when any model token exists and
            top_frac > 0. Ties at the threshold are all marked.
    Returns:
        (T,) bool array.
    Raises:
        ValueError: lengths differ or top_frac outside [0, 1].
    """
    e = np.asarray(entropy, dtype=float)
    m = np.ones_like(e, dtype=bool) if response_mask is None else np.asarray(response_mask).astype(bool)
    if e.shape != m.shape:
        raise ValueError(f"entropy has shape {e.shape} but response_mask {m.shape}")
    if not 0 <= top_frac <= 1:
        raise ValueError(f"top_frac must be in [0, 1], got {top_frac}")
    out = np.zeros_like(m)
    scored = e[m]
    if scored.size == 0 or top_frac == 0:
        return out
    k = max(1, int(round(top_frac * scored.size)))
    threshold = np.sort(scored)[::-1][k - 1]
    out[m] = scored >= threshold
    return out


def entropy_html(pieces: Sequence[str], entropy: Sequence[float], response_mask: Sequence[int] | None = None,
                 top_frac: float = 0.2, title: str = "") -> str:
    """HTML rendering of a trajectory: top-``top_frac`` entropy tokens highlighted (shade grows
    with entropy), tool-response tokens in grey italics and unscored; hover shows each entropy.

    Args:
        pieces: (T,) decoded text of each token (``"".join(pieces)`` is the response text).
        entropy: (T,) entropies in nats.
        response_mask: (T,) 1 = model token, 0 = tool response.
    Returns:
        An HTML string (use ``IPython.display.HTML``).
    Raises:
        ValueError: lengths differ.
    """
    e = np.asarray(entropy, dtype=float)
    if len(pieces) != len(e):
        raise ValueError(f"{len(pieces)} token pieces but {len(e)} entropies")
    m = np.ones(len(e), dtype=int) if response_mask is None else np.asarray(response_mask, dtype=int)
    hi = high_entropy_mask(e, m, top_frac)
    emax = float(e[hi].max()) if hi.any() else 1.0
    parts = ["<div style='font-family:monospace;white-space:pre-wrap;line-height:1.5'>"]
    if title:
        parts.append(f"<b>{html.escape(title)}</b><br>")
    for piece, ent, mask, h in zip(pieces, e, m, hi, strict=True):
        text = html.escape(piece)
        if not mask:
            parts.append(f"<span style='color:#888;font-style:italic' title='tool response (not scored)'>{text}</span>")
        elif h:
            alpha = 0.25 + 0.75 * (ent / emax if emax > 0 else 1.0)
            parts.append(f"<span style='background:rgba(255,120,0,{alpha:.2f})' title='H={ent:.3f}'>{text}</span>")
        else:
            parts.append(f"<span title='H={ent:.3f}'>{text}</span>")
    parts.append(f"</div><div style='font-size:small;color:#555'>highlighted: top {top_frac:.0%} of "
                 f"{int(m.sum())} model tokens by entropy; grey: tool responses (not scored)</div>")
    return "".join(parts)
