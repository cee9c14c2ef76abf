"""Fixtures of the Agent-R tests (the doubles are in ar_doubles.py: a bare ``from conftest import``
finds another folder's conftest when the suite runs together)."""

from __future__ import annotations

import pytest
from doubles import corpus

from kit.models import train_tokenizer


@pytest.fixture(scope="session")
def tok():
    return train_tokenizer(corpus(), vocab_size=700)
