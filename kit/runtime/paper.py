"""The paper-scale launch: ``python -m kit launch --profile paper-14b --stage stage1`` and
``python -m kit prepare-data --profile paper-14b`` (:mod:`kit.cli` declares their options).

The one module besides the notebooks that resolves a profile (:func:`kit.config.load`); the
launch logic it calls lives in :mod:`kit.bridge.launch` and takes the resolved ``KitConfig``.

Commands::

    python -m kit prepare-data --profile paper-14b [--run-dir runs/paper-14b]
    python -m kit launch --profile paper-14b --stage stage1 [--model-path SFT_DIR] \\
        [--n-gpus-per-node 8 --nnodes 8 --rollout-tp 4] [--dry-run] [--allow-local-ray] [-- extra.hydra=overrides]
    python -m kit launch --smoke [--run-dir runs/gpu-smoke] [--n-gpus-per-node 1] [--dry-run]

:func:`launch` writes ``run_dir/config.json`` and the agent-loop YAML, checks the stage's parquet
files, prints the VERL command and runs it on the Ray cluster it finds (:func:`kit.bridge.launch.launch`).
:func:`prepare_data` writes ``run_dir/data/{curated,val}.parquet``. :func:`smoke` runs two GRPO-RoC
steps of the tiny model with SGLang on this machine's GPUs (``scripts/gpu_smoke.sh``).

What it does not do: install SGLang (see README), or start or size a Ray cluster. Chaining the
stages across the notebooks' run directories is :mod:`kit.bridge.stages` (``kit.runtime.verl``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.bridge import launch as bridge_launch
from kit.config import ConfigError, KitConfig, load

#: kit config overrides of the GPU smoke run: the ``smoke`` profile (P = 8 prompts, 16 rollouts ->
#: 8 kept, 256-token responses) trained by VERL, with equal-reward dropping off (a random model
#: scores 0 everywhere, and dropping every group would refill forever)
SMOKE_CONFIG = {"runtime": "verl", "algorithm.drop_equal_reward_groups": False}

#: the GPU smoke run's folder unless ``--run-dir`` names another
SMOKE_RUN_DIR = "runs/gpu-smoke"


def smoke_config(run_dir: str = SMOKE_RUN_DIR) -> KitConfig:
    """The resolved config of the GPU smoke run in ``run_dir``."""
    return load("smoke", {**SMOKE_CONFIG, "run_dir": run_dir}, write=False)


def smoke(run_dir: str = SMOKE_RUN_DIR, n_gpus: int = 1, dry_run: bool = False, python: str = sys.executable) -> int:
    """Two GRPO-RoC steps of the tiny model with SGLang on this machine's GPUs: offline inputs
    (:func:`kit.bridge.launch.prepare_smoke`) and one stage-1 launch with
    :data:`kit.bridge.launch.SMOKE_OVERRIDES`. Returns the VERL exit status."""
    cfg = smoke_config(run_dir)
    paths = bridge_launch.prepare_smoke(cfg)
    return bridge_launch.launch(cfg, cfg.stages[0].name, model_path=str(paths["model"].resolve()), train_files=str(paths["train"]),
                                val_files=str(paths["val"]), n_gpus_per_node=n_gpus, rollout_tp=1,
                                extra_overrides=bridge_launch.SMOKE_OVERRIDES, dry_run=dry_run, allow_local_ray=True,
                                python=python)


def prepare_data(profile: str = "paper-14b", run_dir: str | None = None) -> dict[str, Path]:
    """Resolve ``profile`` (``run_dir`` replacing its own; ``run_dir/config.json`` is written) and
    write its training and validation parquet files (:func:`kit.bridge.launch.prepare_data`, report
    §4.2). Returns name -> path. Raises :class:`kit.config.ConfigError` on an unknown profile."""
    cfg = load(profile, {"run_dir": run_dir} if run_dir else {}, write=True)
    return bridge_launch.prepare_data(cfg)


def launch(profile: str = "paper-14b", stage: str = "stage1", *, run_dir: str | None = None,
           extra_overrides: Sequence[str] = (), **kwargs: Any) -> int:
    """Resolve ``profile`` and launch one RL ``stage`` on VERL (:func:`kit.bridge.launch.launch`,
    which takes ``model_path``, ``train_files``, ``val_files``, ``n_gpus_per_node``, ``nnodes``,
    ``rollout_tp``, ``dry_run``, ``allow_local_ray`` as ``kwargs``; ``extra_overrides`` are Hydra
    overrides passed to VERL as they are). ``run_dir/config.json`` is written when it runs, not on a
    dry run. Returns the VERL exit status; 2 when a file or the cluster is missing (the message
    says which). Raises :class:`kit.config.ConfigError` on an unknown profile or stage."""
    cfg = load(profile, {"run_dir": run_dir} if run_dir else {}, write=False)
    if stage not in cfg.stages.names:
        raise ConfigError(f"--stage {stage!r}: profile {profile} has the stages {', '.join(cfg.stages.names)}")
    try:
        return bridge_launch.launch(cfg, stage, extra_overrides=list(extra_overrides), **kwargs)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"kit launch: {exc}", file=sys.stderr)
        return 2
