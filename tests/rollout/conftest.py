"""Fixtures of the rollout tests."""

from __future__ import annotations

import pytest
import torch
from doubles import corpus

from kit import prompts
from kit.config import load
from kit.models import build_tiny_model, train_tokenizer


@pytest.fixture(scope="session")
def tok():
    return train_tokenizer(corpus(), vocab_size=700)


@pytest.fixture(scope="session")
def product_tok():
    """A tokenizer for "What is a * (a + 7)?" prompts (the engine tests' own corpus)."""
    text = [prompts.render_prompt(f"What is {a} * {a + 7}?") + f" ok </reason> <answer> {a * (a + 7)} </answer>"
            for a in range(100, 260)]
    return train_tokenizer(text, 500)


@pytest.fixture(scope="session")
def product_model(product_tok):
    """The tiny profile's untrained model over :func:`product_tok` (eval mode, seed 0)."""
    return build_tiny_model(load("tiny", write=False).model, product_tok, seed=0).eval()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (tiny matmuls: as fast, and no stall on shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
