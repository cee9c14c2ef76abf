"""Fixtures of the rollout-record tests: a tiny tokenizer and one scripted step (tests/doubles.py)."""

from __future__ import annotations

import pytest
from doubles import corpus, scripted_step

from kit.models import train_tokenizer
from kit.rollout import run_coroutine


@pytest.fixture(scope="session")
def tok():
    return train_tokenizer(corpus(), vocab_size=700)


@pytest.fixture(scope="session")
def step(tok):
    return run_coroutine(scripted_step(tok))
