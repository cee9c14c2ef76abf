"""The ``verl`` runtime: training in VERL through ``kit.bridge`` (paper profiles).

The same contract as :mod:`kit.runtime.local` (see :mod:`kit.runtime`): ``init_dir`` is the
upstream run folder, whose ``policy/`` (config, tokenizer) and ``checkpoints/global_step_<N>``
(weights, optimizer) a stage starts from. Cold start :mod:`kit.bridge.sft` (link your
checkpoint, or VERL's SFT trainer); stages :func:`kit.bridge.stages.run_stage` (launch, merge
the last checkpoint into ``run_dir/policy``, convert the metrics); stage 3's pool
:func:`kit.bridge.hard_subset.prepare_stage3_data`; the ablation
:func:`kit.bridge.stages.run_ablation`.

``kit.bridge`` is imported inside each function: it holds the only modules that import VERL,
Ray or SGLang, and a CPU profile that never trains here must not load them.

Environment stand-ins for the notebook parameters (``kit reproduce``): ``KIT_SFT_CHECKPOINT``,
``KIT_SFT_DATA``, ``KIT_HARD_COUNTS``, ``KIT_SAMPLER_URL``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.config import KitConfig
from kit.data.curate import CurationResult, write_curated
from kit.metrics import read_rows
from kit.runtime.folders import upstream_run

Progress = Callable[[dict], None] | None
PathLike = str | os.PathLike


def _rows(run_dir: PathLike) -> list[dict[str, Any]]:
    """Rows of ``run_dir/metrics.jsonl`` (none when VERL logged nothing)."""
    return read_rows(Path(run_dir) / "metrics.jsonl", missing_ok=True)


def _replay(run_dir: PathLike, stage: str, summary: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Send the stage's converted ``metrics.jsonl`` rows, then its summary, to ``progress``."""
    if progress is not None:
        for row in _rows(run_dir):
            progress(row)
        progress({"stage": stage, "summary": summary})
    return summary


def prepare_data(cfg: KitConfig, curation: CurationResult, *, run_dir: PathLike) -> dict[str, Path]:
    """Write the curated pools and VERL's train/val parquet files under ``run_dir/data/``.

    Returns:
        ``{"parquet", "funnel", "removed", "train", "val"}`` paths.
    """
    from kit.bridge import launch  # VERL side (see the module docstring)

    paths = write_curated(run_dir, curation)
    paths.update(launch.prepare_data(dataclasses.replace(cfg, run_dir=str(run_dir)), curated=curation))
    return paths


def run_sft(cfg: KitConfig, *, run_dir: PathLike, init_dir: PathLike | None = None,
            data_dir: PathLike | None = None, progress: Progress = None, sft_checkpoint: str = "",
            sft_data: str = "") -> dict[str, Any]:
    """Cold start: ``sft_checkpoint`` (a Hugging Face model folder) is linked as ``run_dir/policy``;
    else ``sft_data`` (a VERL multi-turn SFT parquet) is trained with VERL's SFT trainer and merged
    into ``run_dir/policy`` (:mod:`kit.bridge.sft`). Both write ``run_dir/summary.json``.

    Raises:
        ValueError: ``init_dir`` given (the cold start starts from ``cfg.model``).
        RuntimeError: neither ``sft_checkpoint`` nor ``sft_data`` (the report's SFT data is not released).
        FileNotFoundError: ``sft_checkpoint`` or ``sft_data`` does not exist.
    """
    from kit.bridge import sft  # VERL side (see the module docstring)
    from kit.bridge.stages import Cluster

    if init_dir is not None:
        raise ValueError(f"run_sft: the cold start starts from cfg.model ({cfg.model.name_or_path}) or "
                         f"sft_checkpoint; got init_dir={init_dir}")
    sft_checkpoint = sft_checkpoint or os.environ.get("KIT_SFT_CHECKPOINT", "")
    sft_data = sft_data or os.environ.get("KIT_SFT_DATA", "")
    if sft_checkpoint:
        summary = sft.link_checkpoint(sft_checkpoint, run_dir)
    elif sft_data:
        c = Cluster.from_env()
        summary = sft.run_sft(cfg, run_dir, sft_data, gpus_per_node=c.gpus_per_node, python=c.python)
    else:
        raise RuntimeError(f"profile {cfg.profile}: the report's SFT data is not released; pass your cold-start "
                           "model as the `sft_checkpoint` parameter of 02_cold_start_sft (KIT_SFT_CHECKPOINT=DIR "
                           "with `kit reproduce`), or a VERL multi-turn SFT parquet as `sft_data` (KIT_SFT_DATA; "
                           "kit.bridge.sft)")
    return _replay(run_dir, "sft", summary, progress)


def run_stage(cfg: KitConfig, stage: str, *, run_dir: PathLike, init_dir: PathLike, data_dir: PathLike | None = None,
              progress: Progress = None) -> dict[str, Any]:
    """One RL stage in VERL (:func:`kit.bridge.stages.run_stage`): resume from ``init_dir``'s last
    checkpoint, train, merge into ``run_dir/policy``, convert the metrics, write the summary. A
    stage with 0 steps in the profile (paper-32b's stage 3) launches nothing and links
    ``init_dir/policy`` (:func:`kit.bridge.stages.skip_stage`).

    Raises:
        ValueError: no ``data_dir`` (the stage reads ``data_dir/data/{curated,val}.parquet``), or
            ``init_dir`` None or a policy folder.
        FileNotFoundError: ``init_dir`` or its ``policy/`` does not exist.
    """
    from kit.bridge import stages  # VERL side (see the module docstring)

    if cfg.stages[stage].steps == 0:
        init_dir = upstream_run(init_dir, "run_stage")
        return _replay(run_dir, stage, stages.skip_stage(cfg, stage, run_dir, init_dir), progress)
    if data_dir is None:
        raise ValueError(f"{stage}: the verl runtime needs data_dir (the 01_data_curation run folder)")
    init_dir = upstream_run(init_dir, "run_stage")
    return _replay(run_dir, stage, stages.run_stage(cfg, stage, run_dir, init_dir, data_dir), progress)


def prepare_hard_subset(cfg: KitConfig, stage: str, *, run_dir: PathLike, init_dir: PathLike,
                      data_dir: PathLike | None = None, hard_counts: str = "", sampler_url: str = "") -> dict[str, Any]:
    """Stage 3's training file ``run_dir/data/hard.parquet``: ``data_dir``'s curated pool minus the
    problems ``init_dir/policy`` solves every time (report §4.3), from ``hard_counts`` (a solve-count
    JSON), or by sampling the policy served at ``sampler_url``, or, on the VERL CPU runtime
    (``KIT_VERL_DEVICE=cpu``) with neither given, by serving ``init_dir/policy`` on loopback with
    the kit's engine for the sampling (:func:`kit.bridge.hard_subset.prepare_stage3_data`,
    ``serve_locally``; kept when it exists; ``run_dir/hard_subset.json`` records the route).

    Raises:
        ValueError: no ``data_dir``; ``init_dir`` None or a policy folder.
        FileNotFoundError: ``init_dir`` or its ``policy/`` does not exist (not checked with ``hard_counts``).
        RuntimeError: neither ``hard_counts`` nor ``sampler_url`` on a GPU runtime (says how to get one).
        kit.bridge.verl_cpu.runner.VerlCpuError: ``KIT_VERL_DEVICE=cpu`` on a machine with a CUDA GPU.
    """
    from kit.bridge.hard_subset import prepare_stage3_data  # VERL side (see the module docstring)
    from kit.bridge.verl_cpu import runner  # VERL side: which runtime trains (KIT_VERL_DEVICE)

    if data_dir is None:
        raise ValueError(f"{stage}: the verl runtime needs data_dir (the 01_data_curation run folder)")
    hard_counts = hard_counts or os.environ.get("KIT_HARD_COUNTS", "")
    sampler_url = sampler_url or os.environ.get("KIT_SAMPLER_URL", "")
    init_dir = upstream_run(init_dir, "prepare_hard_subset", need_policy=not hard_counts)
    on_cpu = os.environ.get(runner.DEVICE_ENV, "").strip().lower() == "cpu"
    if on_cpu and not (hard_counts or sampler_url):
        runner.require_cpu_machine()
    return prepare_stage3_data(cfg, run_dir, data_dir, init_dir, hard_counts=hard_counts, sampler_url=sampler_url,
                               serve_locally=on_cpu, serve_threads=abs(int(cfg.model.torch_threads or 0)), stage=stage)


def run_ablation(cfg: KitConfig, *, run_dir: PathLike, init_dir: PathLike, data_dir: PathLike | None = None,
                 progress: Progress = None, reuse: Sequence[PathLike] = ()) -> dict[str, Any]:
    """One stage-1 VERL run per (algorithm, seed) from ``init_dir`` (the SFT run folder), in
    ``run_dir/<algorithm>_seed<s>/`` (:func:`kit.bridge.stages.run_ablation`). ``reuse`` is
    accepted for the common call and not used: every VERL arm is trained.

    Raises:
        ValueError: no ``data_dir``; ``init_dir`` None or a policy folder.
        FileNotFoundError: ``init_dir`` or its ``policy/`` does not exist.
    """
    from kit.bridge import stages  # VERL side (see the module docstring)

    if data_dir is None:
        raise ValueError("run_ablation: the verl runtime needs data_dir (the 01_data_curation run folder)")
    summary = stages.run_ablation(cfg, run_dir, upstream_run(init_dir, "run_ablation"), data_dir)
    if progress is not None:
        for name in summary["runs"]:
            for row in _rows(Path(run_dir) / name):
                progress(row)
        progress({"stage": "ablation", "summary": summary})
    return summary
