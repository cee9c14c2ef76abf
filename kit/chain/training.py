"""Training dispatch for the notebooks, local or on a cluster: CPU profiles train with the local
engine (``kit.train.sft``, ``kit.train.rl``); the paper profiles (SGLang rollouts) run VERL through
``kit.bridge`` and ``kit.recipe``. Also the data the RL notebooks read and a trainer's summary as
a Markdown table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.config import KitConfig


def uses_cluster(cfg: KitConfig) -> bool:
    """True for the paper profiles (SGLang rollouts): training runs in VERL through :mod:`kit.recipe`."""
    return cfg.rollout.engine == "sglang"


def prepare_rl_data(cfg: KitConfig, curation: Any, run_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the curated pools (``kit.data.curate.write_curated``) and, for the paper profiles, the
    VERL train/val parquet files (``kit.recipe.prepare_data``) under ``run_dir/data/``."""
    import dataclasses

    from kit.data.curate import write_curated

    paths = write_curated(run_dir, curation)
    if uses_cluster(cfg):
        from kit import recipe

        paths.update(recipe.prepare_data(dataclasses.replace(cfg, run_dir=str(run_dir)), curated=curation))
    return paths


def cold_start(cfg: KitConfig, run_dir: str | os.PathLike, progress=None, *, sft_checkpoint: str = "",
               sft_data: str = "") -> dict[str, Any]:
    """Cold-start SFT: the local engine (:func:`kit.train.sft.run_sft`) for CPU profiles.

    Paper profiles (:mod:`kit.bridge.sft`): ``sft_checkpoint`` (a Hugging Face model folder you
    trained) is linked as ``run_dir/policy``; else ``sft_data`` (a parquet in VERL's multi-turn
    SFT schema) is trained with VERL's SFT trainer and merged into ``run_dir/policy``. Both write
    ``run_dir/summary.json``.

    ``KIT_SFT_CHECKPOINT`` / ``KIT_SFT_DATA`` stand in for the parameters (``kit reproduce``).

    Raises:
        RuntimeError: a paper profile with neither.
        FileNotFoundError: ``sft_checkpoint`` or ``sft_data`` does not exist.
    """
    if not uses_cluster(cfg):
        from kit.train.sft import run_sft

        return run_sft(cfg, run_dir, progress=progress)
    from kit.bridge import sft
    from kit.bridge.stages import Cluster

    sft_checkpoint = sft_checkpoint or os.environ.get("KIT_SFT_CHECKPOINT", "")
    sft_data = sft_data or os.environ.get("KIT_SFT_DATA", "")
    if sft_checkpoint:
        return sft.link_checkpoint(sft_checkpoint, run_dir)
    if sft_data:
        c = Cluster.from_env()
        return sft.run_sft(cfg, run_dir, sft_data, gpus_per_node=c.gpus_per_node, python=c.python)
    raise RuntimeError(f"profile {cfg.profile}: the report's SFT data is not released; pass your cold-start model "
                       "as the `sft_checkpoint` parameter of 02_cold_start_sft, or a VERL multi-turn SFT parquet "
                       "as `sft_data` (kit.bridge.sft)")


def train_stage(cfg: KitConfig, stage: str, run_dir, init_dir, data_dir, progress=None, *,
                hard_counts: str = "", sampler_url: str = "") -> dict[str, Any]:
    """One RL stage from ``init_dir/policy``: the local engine (:func:`kit.train.rl.run_stage`), or,
    on the paper profiles, VERL on the Ray cluster (:func:`kit.bridge.stages.run_stage`): resume
    from the upstream stage's last checkpoint, train, merge the last checkpoint into
    ``run_dir/policy``, convert VERL's metrics to ``run_dir/metrics.jsonl`` and write
    ``run_dir/summary.json``. Stage 3 on a cluster first builds ``run_dir/data/hard.parquet``
    from ``hard_counts`` (a solve-count JSON) or by sampling the stage-2 policy served at
    ``sampler_url`` (:func:`kit.bridge.hard_subset.prepare_stage3_data`; ``KIT_HARD_COUNTS`` /
    ``KIT_SAMPLER_URL`` stand in for them under ``kit reproduce``)."""
    if uses_cluster(cfg):
        from kit.bridge import stages

        if getattr(cfg.stages, stage).steps == 0:  # e.g. paper-32b: stages 1-2 only
            return stages.skip_stage(cfg, stage, run_dir, init_dir)
        if stage == "stage3":
            from kit.bridge.hard_subset import prepare_stage3_data

            prepare_stage3_data(cfg, run_dir, data_dir, init_dir,
                                hard_counts=hard_counts or os.environ.get("KIT_HARD_COUNTS", ""),
                                sampler_url=sampler_url or os.environ.get("KIT_SAMPLER_URL", ""))
        return stages.run_stage(cfg, stage, run_dir, init_dir, data_dir)
    from kit.train.rl import run_stage

    return run_stage(cfg, stage, Path(init_dir) / "policy", run_dir, progress)


def train_ablation(cfg: KitConfig, run_dir, init_dir, data_dir, progress=None, reuse=()) -> dict[str, Any]:
    """The RoC ablation from ``init_dir/policy``: :func:`kit.train.rl.run_ablation` locally, or one
    VERL stage-1 run per (algorithm, seed) on the paper profiles (:func:`kit.bridge.stages.run_ablation`,
    same subfolders, each with ``metrics.jsonl``, ``policy/`` and ``summary.json``).

    ``reuse``: finished local stage run dirs that may already be one of the arms (the stage-1
    run is the ``grpo_roc`` arm of the main seed when the steps agree); local engine only."""
    if not uses_cluster(cfg):
        from kit.train.rl import run_ablation

        return run_ablation(cfg, Path(init_dir) / "policy", run_dir, progress=progress, reuse=list(reuse))
    from kit.bridge import stages

    return stages.run_ablation(cfg, run_dir, init_dir, data_dir)


def summary_markdown(summary: Mapping[str, Any], digits: int = 4):
    """A trainer's summary dict as a two-column Markdown table (scalars only; nested values are
    left out), which renders as a table in JupyterLab and in the PDF alike."""
    from IPython.display import Markdown

    rows = ["| key | value |", "|---|---|"]
    for k, v in summary.items():
        if isinstance(v, Mapping | list | tuple):
            continue
        text = f"{v:.{digits}g}" if isinstance(v, float) else str(v)
        rows.append(f"| {k} | {text.replace('|', '/')} |")
    return Markdown("\n".join(rows))
