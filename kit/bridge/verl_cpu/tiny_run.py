"""A two-step GRPO-RoC run through VERL on CPU from a tiny SFT policy (tests and the benchmark).

:data:`SFT` are ``smoke``-profile overrides under which the kit's local SFT (``kit.train.sft``)
trains the tiny model on a handful of problems until it solves them sometimes at temperature 1,
so an RL group has mixed rewards (non-zero advantages, a real policy-gradient step);
:func:`tiny_rl_data` writes those problems as VERL parquet rows. :data:`TWO_STEP` are the
overrides for two RoC steps of P = 2 prompts x 2G = 8 rollouts -> G = 4 kept, 256 response
tokens, 2 sandbox workers; :data:`SMOKE_CHAIN` the notebook chain's overrides. Callers resolve
the config (``kit.config.load("smoke", overrides=...)``) or pass them as ``--set`` to ``kit reproduce``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: local SFT settings: the 2 problems' demos memorised in 80 steps of 4 rows (final loss 0.016;
#: 370 s on the shared, loaded 2-core machine; 4 problems x 40 steps of 8 reached loss 1.0 and reward 0)
SFT = {"data.task_train_size": 2, "data.task_heldout_size": 2, "sft.steps": 80, "sft.batch_size": 4, "sft.lr": 3e-3,
       "sft.task_demo_fraction": 1.0, "sft.function_calling_sets": ["xlam"], "sft.max_seq_tokens": 256,
       "sft.warmup_ratio": 0.0, "sft.checkpoint_every": 1000, "model.torch_threads": 2, "sandbox.num_workers": 1}

#: RL: two GRPO-RoC steps, P = 2, 2G = 8 -> G = 4, lr high enough that two Adam steps move bf16 weights
TWO_STEP = {"algorithm.prompts_per_step": 2, "algorithm.group_size": 4, "algorithm.oversample": 8,
            "algorithm.min_positive": 1, "algorithm.min_negative": 1, "algorithm.lr": 1e-3,
            "algorithm.drop_equal_reward_groups": False, "stages.stage1.max_response_tokens": 256,
            "stages.stage1.steps": 2, "sandbox.num_workers": 2}


#: the smoke chain through VERL (``kit reproduce --profile smoke --set runtime=verl``, 00-20): one
#: GRPO-RoC step per stage (stage 3 on its hard subset) and per ablation arm (grpo, grpo_roc; seed 0),
#: each of :data:`TWO_STEP`'s size; the rest is the smoke profile. The RL pool is the one training
#: pool with 2 curated problems (``openmathreasoning`` in the data directory): stage 3's hard subset
#: samples every curated problem ``hard_filter_samples`` = 8 times from the served stage-2 policy,
#: 16 rollouts here instead of ~188,000 for the 23,470 problems of all five pools
SMOKE_CHAIN = {**TWO_STEP, "stages.stage1.steps": 1, "stages.stage2.steps": 1, "stages.stage3.steps": 1,
               "stages.stage2.max_response_tokens": 256, "stages.stage3.max_response_tokens": 256,
               "ablation.steps": 1, "ablation.seeds": [0], "data.train_pools": ["openmathreasoning"],
               # ReTool's emergence arm is the ReTool arms' run_stage from another cold start (the local smoke chain
               # runs it); here it would cost another VERL launch
               "retool.emergence_seeds": 0,
               # the ablation's arms run at rollout's budget on both runtimes (kit.plan.ablation_arms): 256 as the stages
               "rollout.max_response_tokens": 256}


def sandbox_overrides() -> dict[str, Any]:
    """``sandbox.isolation`` from ``KIT_SANDBOX_ISOLATION`` when set (a worktree whose editable
    install points at another checkout cannot start bwrap workers); else the profile's."""
    iso = os.environ.get("KIT_SANDBOX_ISOLATION")
    return {"sandbox.isolation": iso} if iso else {}


def tiny_sft_policy(sft_cfg: Any, run_dir: str | os.PathLike) -> Path:
    """Train (or reuse a finished) local SFT run of ``sft_cfg`` in ``run_dir``; returns its ``policy/``."""
    from kit.train import sft

    return Path(sft.run_sft(sft_cfg, run_dir, evaluate=False)["policy_dir"])


def tiny_rl_data(sft_cfg: Any, data_dir: str | os.PathLike) -> dict[str, Path]:
    """The SFT problems (train split of ``sft_cfg``) as VERL rows: ``{"train": curated.parquet, "val": val.parquet}``."""
    import pandas as pd

    from kit.bridge.launch import _task_rows
    from kit.data.tasks import task_split

    split = task_split(sft_cfg)
    d = Path(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    out = {"train": d / "curated.parquet", "val": d / "val.parquet"}
    pd.DataFrame(_task_rows(split.train, "tasks")).to_parquet(out["train"], index=False)
    pd.DataFrame(_task_rows(split.heldout, "tasks_heldout")).to_parquet(out["val"], index=False)
    return out


def read_verl_metrics(path: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """VERL's file-logger JSON lines as ``{step: metrics}`` (training steps only)."""
    import json

    rows: dict[int, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            rows.setdefault(int(rec["step"]), {}).update(rec.get("data", {}))
    return rows
