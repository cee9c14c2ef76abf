"""Cold start for the paper profiles: link your SFT checkpoint, or run VERL's SFT trainer.

The report (§4.1) starts RL from a non-reasoning SFT of the base model (instruction following and
the tool-call format). Its data is not released, so the kit cannot build it; two ways in:

* ``sft_checkpoint``: a Hugging Face model folder you trained; linked as ``run_dir/policy``.
* ``sft_data``: a parquet in VERL's multi-turn SFT schema (a ``messages`` column of
  ``[{role, content}, ...]`` rendered in the kit's format, ``kit.prompts``), trained with
  ``torchrun -m verl.trainer.sft_trainer`` (VERL 0.9.1, config ``sft_trainer_engine``) into
  ``run_dir/checkpoints/global_step_<N>/`` and merged into ``run_dir/policy``
  (:mod:`kit.bridge.checkpoints`; SFT checkpoints have no ``actor/`` level).

Settings from ``[sft]`` of the profile: lr, batch size, epochs, warmup ratio, schedule, max
sequence tokens. ``torchrun`` runs one node; for several nodes add your rendezvous arguments.
What it does not do: convert the kit's SFT loaders (``kit.data.sft``) to VERL's schema.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit import jsonio
from kit.bridge.checkpoints import merge_to_policy, saved_steps
from kit.train.tracking import tracking_env


def sft_command(cfg: Any, train_files: str, run_dir: str | os.PathLike, *, gpus_per_node: int = 8,
                python: str = "python3") -> list[str]:
    """argv of VERL's SFT trainer on one node for the profile's ``[sft]`` settings, meaning what the local
    trainer (:mod:`kit.train.sft`) means by them (``sft.min_lr_ratio`` too: VERL's cosine floor defaults to 0)."""
    s = cfg.sft
    run = Path(run_dir).resolve()
    overrides = [
        f"data.train_files={train_files if train_files.startswith('<') else Path(train_files).resolve()}",
        "data.messages_key=messages",
        f"data.train_batch_size={s.batch_size}",
        f"data.max_length={s.max_seq_tokens}",
        "data.truncation=right",
        f"model.path={cfg.model.name_or_path}",
        f"optim.lr={float(s.lr)!r}",
        f"optim.lr_warmup_steps_ratio={float(s.warmup_ratio)!r}",
        f"optim.lr_scheduler_type={s.schedule}",
        f"optim.min_lr_ratio={float(s.min_lr_ratio)!r}",  # the local trainer's cosine floor (VERL's default: 0.0)
        f"trainer.total_epochs={s.epochs}",
        *([f"trainer.total_training_steps={s.steps}"] if s.steps else []),
        f"trainer.default_local_dir={run / 'checkpoints'}",
        "trainer.project_name=rstar2-kit",
        f"trainer.experiment_name={cfg.tracker_name('sft')}",
        f"trainer.logger=[{','.join(dict.fromkeys((*cfg.logging.backends, 'file')))}]",  # file: verl/metrics.jsonl
        f"trainer.seed={cfg.seed}",
    ]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus_per_node}",
            "-m", "verl.trainer.sft_trainer", *overrides]


def link_checkpoint(sft_checkpoint: str | os.PathLike, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Link ``sft_checkpoint`` as ``run_dir/policy`` and write ``run_dir/summary.json``.

    Raises:
        FileNotFoundError: the checkpoint folder or its ``config.json`` is missing.
    """
    src = Path(sft_checkpoint).resolve()
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"sft_checkpoint {src} is not a Hugging Face model folder (no config.json)")
    link = Path(run_dir) / "policy"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(src, target_is_directory=True)
    summary = {"stage": "sft", "engine": "linked", "policy_dir": str(link), "sft_checkpoint": str(src)}
    jsonio.write_json(Path(run_dir) / "summary.json", summary)
    return summary


def run_sft(cfg: Any, run_dir: str | os.PathLike, sft_data: str, *, gpus_per_node: int = 8, python: str = "python3",
            runner: Callable[[Sequence[str]], int] | None = None,
            merge_runner: Callable[[Sequence[str]], int] | None = None) -> dict[str, Any]:
    """Train the cold start with VERL's SFT trainer (skipped when a checkpoint exists), merge it
    into ``run_dir/policy`` and write ``run_dir/summary.json``.

    Raises:
        FileNotFoundError: ``sft_data`` does not exist.
        RuntimeError: the trainer or the merger failed.
    """
    run = Path(run_dir).resolve()
    if not Path(sft_data).exists():
        raise FileNotFoundError(f"sft_data not found: {sft_data} (a parquet with a `messages` column)")
    cmd = sft_command(cfg, sft_data, run, gpus_per_node=gpus_per_node, python=python)
    launched = not saved_steps(run / "checkpoints")
    if launched:
        print("kit.bridge.sft: " + " ".join(cmd), flush=True)
        env = {**os.environ, **tracking_env(cfg.logging, run, str(run / "verl" / "metrics.jsonl"))}  # trackers stay local
        (run / "verl").mkdir(parents=True, exist_ok=True)
        code = (runner or (lambda a: subprocess.run(list(a), env=env, check=False).returncode))(cmd)
        if code != 0:
            raise RuntimeError(f"VERL SFT exited with status {code}: {' '.join(cmd)}")
    merged = merge_to_policy(run / "checkpoints", run / "policy", subdir="", python=python, run=merge_runner)
    summary = {"stage": "sft", "engine": "verl", "policy_dir": merged["policy_dir"], "checkpoint": merged["checkpoint"],
               "global_step": merged["step"], "sft_data": str(Path(sft_data).resolve()), "launched": launched,
               "merged": merged["merged"], "launch_command": cmd, "merge_command": merged["command"],
               "verl_metrics_file": str(run / "verl" / "metrics.jsonl")}
    jsonio.write_json(run / "summary.json", summary)
    return summary
