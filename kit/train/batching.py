"""Padding and micro-batching for the local trainers (SFT and the RL update share them).

Rows are ``(ids, mask)`` pairs of token ids and a 0/1 loss mask of the same length (mask 1 =
a token that carries loss). A micro-batch is a group of rows of similar length whose padded
size (rows x longest row, in tokens) stays within a budget; gradients of the micro-batches of
one step are summed, so the budget changes memory and speed, not the update.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Row = tuple[Sequence[int], Sequence[int]]


def pad_rows(rows: Sequence[Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad ``rows`` to the longest one.

    Returns:
        ``(ids, attention, mask)``: (B, T) long token ids (``pad_id`` after each row), (B, T)
        long attention mask (1 on real tokens), (B, T) float32 loss mask (0 on padding).
    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("pad_rows: no rows")
    T = max(len(i) for i, _ in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), T), dtype=torch.long)
    msk = torch.zeros((len(rows), T), dtype=torch.float32)
    for b, (i, m) in enumerate(rows):
        ids[b, : len(i)] = torch.tensor(list(i))
        att[b, : len(i)] = 1
        msk[b, : len(m)] = torch.tensor(list(m), dtype=torch.float32)
    return ids, att, msk


def micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group row indices by length into micro-batches of at most ``max_tokens`` padded tokens.

    Rows are taken shortest first (a stable sort, so equal lengths keep their order) and a row
    joins the current group while ``(len(group) + 1) * its length <= max_tokens``; a row longer
    than the budget is a group of its own.

    Args:
        lengths: (B,) row lengths in tokens.
        max_tokens: padded-token budget of one micro-batch.
    Returns:
        Lists of indices into ``lengths``; every index once.
    """
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda k: lengths[k]):
        if groups and (len(groups[-1]) + 1) * lengths[i] <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def place_response(per_token: torch.Tensor, prompt_lens: Sequence[int], width: int) -> torch.Tensor:
    """Response-aligned values in the layout of :func:`pad_rows`' rows of prompt + response.

    Args:
        per_token: (b, T) one value per response token of each row (row ``k``'s response token ``t`` at
            ``[k, t]``; columns past a row's response are ignored).
        prompt_lens: (b,) prompt lengths: row ``k``'s response starts at column ``prompt_lens[k]``.
        width: the padded rows' length ``L``.
    Returns:
        (b, L) float32: ``out[k, prompt_lens[k] + t] = per_token[k, t]`` where that column exists, 0 elsewhere.
    """
    out = torch.zeros(per_token.shape[0], width, dtype=torch.float32)
    for k, p in enumerate(prompt_lens):
        n = min(per_token.shape[1], width - p)
        out[k, p:p + n] = per_token[k, :n]
    return out
