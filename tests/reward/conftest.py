import pytest

from kit.reward import Verifier


@pytest.fixture(scope="session")
def pool():
    """One warm 2-worker pool shared by the reward tests (start-up paid once)."""
    with Verifier(2, timeout_s=5.0) as v:
        assert v.wait_ready(60)
        yield v
