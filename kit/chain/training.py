"""Training for the notebooks: the runtime of ``cfg.runtime`` (:mod:`kit.runtime`), picked once per
call and called the same way. ``local`` trains with the CPU engine (``kit.train``); ``verl`` runs
VERL through ``kit.bridge``. Also the data the RL notebooks read and a trainer's summary as a
Markdown table.

Every function takes the upstream *run* folders (``init_dir``, ``data_dir``) as the notebooks
name them; stage 3's hard subset is built here, before the stage, for both runtimes. Each shows a
progress bar over its steps (:class:`kit.progress.StepBar`, drawn before any work) and passes every
metrics row on to ``progress``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from IPython.display import Markdown

from kit import runtime
from kit.chain.display import learning_note
from kit.config import KitConfig, load
from kit.data.curate import CurationResult
from kit.plan import ablation_arms
from kit.progress import StepBar


def prepare_rl_data(cfg: KitConfig, curation: CurationResult, run_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the curated pools (``kit.data.curate.write_curated``) under ``run_dir/data/``, and on the
    ``verl`` runtime VERL's train/val parquet files too (:func:`kit.runtime.verl.prepare_data`)."""
    return runtime.get(cfg).prepare_data(cfg, curation, run_dir=run_dir)


def cold_start(cfg: KitConfig, run_dir: str | os.PathLike, progress=None, *, sft_checkpoint: str = "",
               sft_data: str = "") -> dict[str, Any]:
    """Cold-start SFT into ``run_dir`` (``run_sft`` of the runtime): the local engine trains
    :func:`kit.train.sft.run_sft`; on ``verl``, ``sft_checkpoint`` (a Hugging Face model folder
    you trained) is linked as ``run_dir/policy``, else ``sft_data`` (a parquet in VERL's
    multi-turn SFT schema) is trained with VERL's SFT trainer (:mod:`kit.bridge.sft`). Both write
    ``run_dir/summary.json``. ``KIT_SFT_CHECKPOINT`` / ``KIT_SFT_DATA`` stand in for the
    parameters on ``verl`` (``kit reproduce``).

    Raises:
        RuntimeError: ``verl`` with neither.
        FileNotFoundError: ``sft_checkpoint`` or ``sft_data`` does not exist.
        ValueError: ``local`` with either (it trains its own cold start).
    """
    with StepBar(cfg.sft.steps or None, "cold-start SFT", progress, keys=("loss",)) as bar:
        return runtime.get(cfg).run_sft(cfg, run_dir=run_dir, init_dir=None, data_dir=None, progress=bar,
                                        sft_checkpoint=sft_checkpoint, sft_data=sft_data)


def train_stage(cfg: KitConfig, stage: str, run_dir, init_dir, data_dir, progress=None, *,
                hard_counts: str = "", sampler_url: str = "") -> dict[str, Any]:
    """One RL stage from the upstream run folder ``init_dir`` (``run_stage`` of the runtime).

    A stage whose ``problems`` is ``"hard"`` (stage 3) first builds its pool with the runtime's
    ``prepare_hard_subset`` from ``init_dir``'s policy: locally by sampling it
    (``run_dir/hard_subset.json``); on ``verl`` ``run_dir/data/hard.parquet`` from
    ``hard_counts`` (a solve-count JSON) or by sampling the policy served at ``sampler_url``
    (``KIT_HARD_COUNTS`` / ``KIT_SAMPLER_URL`` stand in for them). A stage with 0 steps builds
    nothing.
    """
    rt = runtime.get(cfg)
    st = cfg.stages[stage]
    with StepBar(st.steps, f"RL {stage}", progress, keys=("accuracy",)) as bar:
        if st.problems == "hard" and st.steps > 0:
            bar.bar.set_description(f"RL {stage} (hard subset)")
            rt.prepare_hard_subset(cfg, stage, run_dir=run_dir, init_dir=init_dir, data_dir=data_dir,
                                   hard_counts=hard_counts, sampler_url=sampler_url)
            bar.bar.set_description(f"RL {stage}")
        return rt.run_stage(cfg, stage, run_dir=run_dir, init_dir=init_dir, data_dir=data_dir, progress=bar)


def ablation_config(profile: str, overrides: Mapping[str, Any] | None, run_dir, seed: int, steps: int = 0) -> KitConfig:
    """Notebook 06's config: ``profile`` with ``overrides`` (``ablation.steps`` among them sets the arms'
    steps) and, when ``steps`` is non-zero, ``ablation.steps = steps``; writes ``run_dir/config.json``. The notebook and the pipeline's
    background job (:mod:`kit.chain.ablation_job`) both build it here, so they train the same arms.

    Raises:
        kit.config.ConfigError: an unknown key or a value of the wrong type.
    """
    over = {**(overrides or {}), **({"ablation.steps": steps} if steps else {})}
    return load(profile, over, run_dir=run_dir, seed=seed)


def train_ablation(cfg: KitConfig, run_dir, init_dir, data_dir, progress=None,
                   reuse: Sequence[str | os.PathLike] = ()) -> dict[str, Any]:
    """The RoC ablation from the upstream run folder ``init_dir`` (``run_ablation`` of the
    runtime): one first-stage run per arm of :func:`kit.plan.ablation_arms` (algorithm, seed, steps,
    budget) in ``run_dir/<algorithm>_seed<s>/``, each with
    ``metrics.jsonl``, ``policy/`` and ``summary.json``, and ``run_dir/ablation.json``.

    ``reuse``: finished stage run folders that may already be one of the arms (the stage-1 run is
    the ``grpo_roc`` arm of the main seed when the steps agree); used by the local runtime."""
    arms = len(ablation_arms(cfg))
    with StepBar(cfg.ablation.steps * arms, f"RoC ablation ({arms} runs)", progress, count_rows=True) as bar:
        return runtime.get(cfg).run_ablation(cfg, run_dir=run_dir, init_dir=init_dir, data_dir=data_dir,
                                             progress=bar, reuse=reuse)


def summary_markdown(summary: Mapping[str, Any], cfg: KitConfig | None = None, digits: int = 4):
    """A trainer's summary dict as a two-column Markdown table (scalars only; nested values are
    left out), which renders as a table in JupyterLab and in the PDF alike; with ``cfg``, a profile
    too small to learn says so in one italic line under it (:func:`kit.chain.display.learning_note`)."""
    rows = ["| key | value |", "|---|---|"]
    for k, v in summary.items():
        if isinstance(v, Mapping | list | tuple):
            continue
        text = f"{v:.{digits}g}" if isinstance(v, float) else str(v)
        rows.append(f"| {k} | {text.replace('|', '/')} |")
    note = learning_note(cfg) if cfg is not None else ""
    return Markdown("\n".join(rows) + (f"\n\n*{note}*" if note else ""))
