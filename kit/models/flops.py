"""Model FLOPs of the tiny Qwen3 counted from its shapes (issue #35: how far a step is from the machine's limit).

The convention is the usual one for model FLOPs utilisation (Kaplan et al. 2020, nanoGPT's ``estimate_mfu``):
every multiply-add of a matmul is 2 FLOPs; a token's forward through the decoder is ``2 N`` for the ``N``
weights of its linear layers plus attention's two matmuls, ``4 T d`` per layer for a context of ``T``
keys and ``d = heads x head_dim`` (scores and the weighted sum over the full ``T x T`` matrix, as
``torch.utils.flop_counter`` counts SDPA); the LM head is ``2 H V`` per position it runs on; backward
is twice the forward. Norms, RoPE, SiLU, softmax and the optimizer are left out (a few percent at this
size). Only real tokens count: padding a micro-batch is work the step does but the model does not need.
``tests/foundation/test_flops.py`` checks these counts against ``torch.utils.flop_counter.FlopCounterMode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shapes:
    """The sizes the FLOP count reads (from a transformers ``Qwen3Config``: :meth:`of`).

    Attributes:
        hidden: H; layers: decoder layers; heads, kv_heads, head_dim: attention sizes;
        intermediate: the MLP's width; vocab: V (the LM head's rows).
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config: Any) -> Shapes:
        """Shapes of a ``Qwen3Config`` (or a model: its ``.config``)."""
        c = getattr(config, "config", config)
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return cls(c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, head_dim,
                   c.intermediate_size, c.vocab_size)

    @property
    def linear_params(self) -> int:
        """Weights of the decoder's linear layers (q, k, v, o and the three MLP matrices), all layers;
        embeddings and the LM head are counted apart."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate
        return self.layers * per_layer


def forward_flops(shapes: Shapes, seq_lens: Sequence[int], head_positions: int | None = None) -> float:
    """FLOPs of one forward over whole sequences (prefill or training), without padding.

    Args:
        shapes: the model's sizes.
        seq_lens: (B,) real tokens of each sequence; each attends over its own length.
        head_positions: positions the LM head runs on (the kit's trainers run it on loss-mask positions
            only); default every token.
    Returns:
        FLOPs: ``2 N sum(T) + 4 d L sum(T^2) + 2 H V head_positions``.
    Raises:
        ValueError: a negative length or head count.
    """
    if any(t < 0 for t in seq_lens) or (head_positions is not None and head_positions < 0):
        raise ValueError("forward_flops: sequence lengths and head positions must be >= 0")
    tokens = sum(seq_lens)
    head = tokens if head_positions is None else head_positions
    d = shapes.heads * shapes.head_dim
    return (2.0 * shapes.linear_params * tokens + 4.0 * d * shapes.layers * sum(t * t for t in seq_lens)
            + 2.0 * shapes.hidden * shapes.vocab * head)


def train_flops(shapes: Shapes, seq_lens: Sequence[int], head_positions: int | None = None) -> float:
    """FLOPs of forward and backward over ``seq_lens`` (3 x :func:`forward_flops`: the "6 x params x
    tokens plus attention" of a training step)."""
    return 3.0 * forward_flops(shapes, seq_lens, head_positions)


def decode_flops(shapes: Shapes, contexts: Sequence[int]) -> float:
    """FLOPs of decoding one token per row after a KV cache: ``2 N + 4 d L c + 2 H V`` for a row whose
    new token attends over ``c`` keys (the cached ones and itself), summed over ``contexts``."""
    d = shapes.heads * shapes.head_dim
    n = len(contexts)
    return (2.0 * shapes.linear_params * n + 4.0 * d * shapes.layers * sum(contexts)
            + 2.0 * shapes.hidden * shapes.vocab * n)
