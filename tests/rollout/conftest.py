"""Fixtures of the rollout tests."""

from __future__ import annotations

import pytest
from doubles import corpus

from kit.models import train_tokenizer


@pytest.fixture(scope="session")
def tok():
    return train_tokenizer(corpus(), vocab_size=700)
