"""Shared fixtures: one warm, isolated pool per test module (workers take ~1 s to start)."""

import os
from dataclasses import replace

import pytest

from kit.config import SandboxConfig
from kit.sandbox import SyncSandboxPool, isolation

SECRET = "KIT_TEST_SECRET_hunter2"


def sandbox_cfg(**kw) -> SandboxConfig:
    base = SandboxConfig(isolation="bwrap", timeout_s=2.0, cpu_s=2.0, memory_mb=768, max_output_chars=2000,
                         max_procs=32, num_workers=2, recycle_after=500, batch_size=16, send_workers=4)
    return replace(base, **kw)


needs_bwrap = pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")


@pytest.fixture
def make_cfg():
    """``make_cfg(**overrides)`` -> the tests' SandboxConfig."""
    return sandbox_cfg


@pytest.fixture
def secret():
    return SECRET


@pytest.fixture(scope="module")
def pool():
    if isolation.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed (make setup installs it)")
    os.environ[SECRET] = "hunter2"  # must not be visible inside
    p = SyncSandboxPool(sandbox_cfg())
    yield p
    p.close()
