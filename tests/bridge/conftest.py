"""Fixtures shared by the VERL-on-CPU tests (``verl_cpu``): one tiny SFT policy per test session."""

from __future__ import annotations

import pytest

from kit.config import load


@pytest.fixture(scope="session")
def tiny_verl_root(tmp_path_factory):
    """A folder with ``sft/policy`` (the kit's local SFT of the tiny model on 2 problems, so RL groups
    get mixed rewards: :data:`kit.bridge.verl_cpu.tiny_run.SFT`) and ``data/data/{curated,val}.parquet``
    (those problems as VERL rows). Trained once (minutes) for every ``verl_cpu`` test that asks."""
    from kit.bridge.verl_cpu import tiny_run  # needs verl: the modules asking for it skip without it
    root = tmp_path_factory.mktemp("verl_cpu_tiny")
    sft_cfg = load("smoke", run_dir=str(root / "sft"), overrides={**tiny_run.SFT, **tiny_run.sandbox_overrides()})
    tiny_run.tiny_sft_policy(sft_cfg, root / "sft")
    tiny_run.tiny_rl_data(sft_cfg, root / "data" / "data")
    return root
