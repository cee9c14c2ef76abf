"""VERL checkpoints between notebook stages: find the latest one, check it, merge it into ``policy/``.

VERL 0.9.1's trainers save into ``trainer.default_local_dir`` (the kit's ``<run_dir>/checkpoints``):

* ``global_step_<N>/actor/`` (PPO, ``verl/trainer/ppo/v1/trainer_base.py::_save_checkpoint``) or
  ``global_step_<N>/`` itself (SFT, ``verl/utils/checkpoint/checkpoint_handler.py``), holding the
  FSDP shards ``model_world_size_<W>_rank_<r>.pt`` (r = 0..W-1), ``fsdp_config.json`` (with
  ``world_size``) and ``huggingface/`` (config and tokenizer; the weights only when
  ``checkpoint.save_contents`` has ``hf_model``), as
  ``verl/utils/checkpoint/fsdp_checkpoint_manager.py`` writes them;
* ``latest_checkpointed_iteration.txt``: the step of the last complete save (not written with
  ``checkpoint.async_save``).

The next stage, the evaluation and the analysis notebooks read a Hugging Face model in
``<run_dir>/policy/`` (as the tiny engine writes it). :func:`merge_to_policy` produces it with
VERL's merger (``python -m verl.model_merger merge --backend fsdp --local_dir .. --target_dir ..``),
run as a subprocess into ``policy.partial/`` and renamed when it succeeded; a ``policy/`` newer
than the checkpoint is kept (resumable).

This module imports nothing from VERL: it reads the file layout and builds commands, so it is
tested on a CPU with a fake checkpoint layout. What it does not do: merge Megatron checkpoints, or
check that the shards load (the merger does that).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(FileNotFoundError):
    """A checkpoint is missing or incomplete; the message names the path and what is wrong."""


@dataclass(frozen=True)
class Checkpoint:
    """One saved step: ``root/global_step_<step>/<subdir>`` (the folder the merger reads)."""

    root: Path
    step: int
    subdir: str = "actor"

    @property
    def step_dir(self) -> Path:
        """``global_step_<step>``: what ``trainer.resume_from_path`` names."""
        return self.root / f"global_step_{self.step}"

    @property
    def model_dir(self) -> Path:
        return self.step_dir / self.subdir if self.subdir else self.step_dir


def read_tracker(root: str | os.PathLike) -> int | None:
    """The step in ``root/latest_checkpointed_iteration.txt``; None when the file is absent.

    Raises:
        CheckpointError: the file exists but does not hold one non-negative integer.
    """
    path = Path(root) / TRACKER
    if not path.exists():
        return None
    text = path.read_text().strip()
    if not text.isdigit():
        raise CheckpointError(f"{path}: expected the step number VERL writes there, got {text[:40]!r}")
    return int(text)


def saved_steps(root: str | os.PathLike) -> list[int]:
    """Steps of the ``global_step_<N>`` folders under ``root``, ascending (empty when none)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name)))


def latest_verl_checkpoint(root: str | os.PathLike, subdir: str = "actor") -> Checkpoint:
    """The checkpoint VERL would resume from: the tracker's step, else the highest folder
    (not :func:`kit.train.common.latest_checkpoint`, the kit engine's own ``step_<N>`` folders).

    Args:
        root: ``trainer.default_local_dir`` (``<run_dir>/checkpoints``).
        subdir: ``"actor"`` for PPO checkpoints, ``""`` for VERL's SFT trainer.
    Raises:
        CheckpointError: no checkpoint under ``root``, or the tracker names a folder that is absent.
    """
    root = Path(root)
    step = read_tracker(root)
    if step is None:
        steps = saved_steps(root)
        if not steps:
            raise CheckpointError(f"no VERL checkpoint under {root} (neither {TRACKER} nor global_step_* folders); "
                                  "did the training run finish its first save?")
        step = steps[-1]
    ckpt = Checkpoint(root, step, subdir)
    if not ckpt.model_dir.is_dir():
        raise CheckpointError(f"{root / TRACKER} names step {step}, but {ckpt.model_dir} does not exist")
    return ckpt


def check_complete(model_dir: str | os.PathLike) -> int:
    """Check an FSDP checkpoint folder has what the merger reads; returns its world size.

    Raises:
        CheckpointError: ``fsdp_config.json`` is missing or has no ``world_size``, a rank's model
            shard is missing, or ``huggingface/config.json`` is missing (names each).
    """
    d = Path(model_dir)
    cfg = d / "fsdp_config.json"
    if not cfg.exists():
        raise CheckpointError(f"incomplete checkpoint {d}: {cfg.name} is missing (the save was interrupted?)")
    try:
        world = int(json.loads(cfg.read_text())["world_size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{cfg}: no integer world_size ({exc})") from exc
    missing = [f"model_world_size_{world}_rank_{r}.pt" for r in range(world)
               if not (d / f"model_world_size_{world}_rank_{r}.pt").exists()]
    if not (d / "huggingface" / "config.json").exists():
        missing.append("huggingface/config.json")
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise CheckpointError(f"incomplete checkpoint {d}: missing {shown}")
    return world


def merge_command(model_dir: str | os.PathLike, target_dir: str | os.PathLike, python: str = sys.executable) -> list[str]:
    """argv of VERL's FSDP-to-Hugging-Face merge (``verl/model_merger/__main__.py``)."""
    return [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(model_dir), "--target_dir", str(target_dir)]


def _newest_mtime(path: Path) -> float:
    times = [path.stat().st_mtime]
    for dirpath, _, files in os.walk(path):
        times += [os.stat(os.path.join(dirpath, f)).st_mtime for f in files]
    return max(times)


def policy_is_current(policy_dir: str | os.PathLike, ckpt: Checkpoint) -> bool:
    """True when ``policy_dir`` holds a merged model (``config.json``) newer than every file of ``ckpt``."""
    p = Path(policy_dir)
    return (p / "config.json").exists() and _newest_mtime(p) >= _newest_mtime(ckpt.model_dir)


def merge_to_policy(
    checkpoints: str | os.PathLike,
    policy_dir: str | os.PathLike,
    *,
    subdir: str = "actor",
    python: str = sys.executable,
    dry_run: bool = False,
    run: Callable[[Sequence[str]], int] | None = None,
) -> dict[str, object]:
    """Merge the latest checkpoint under ``checkpoints`` into ``policy_dir`` (a Hugging Face model).

    Args:
        checkpoints: ``trainer.default_local_dir`` of the run.
        policy_dir: where the merged model goes (``<run_dir>/policy``).
        subdir: ``"actor"`` (PPO) or ``""`` (SFT).
        python: interpreter of the merge subprocess (one with VERL installed).
        dry_run: build and return the command without checking files or running it.
        run: runs an argv and returns its exit status (default ``subprocess.run``; tests pass a fake).
    Returns:
        ``{"step", "checkpoint", "policy_dir", "command", "merged"}``; ``merged`` is False when
        ``policy_dir`` was already newer than the checkpoint (nothing ran) or on a dry run.
    Raises:
        CheckpointError: no checkpoint, or an incomplete one (names the path).
        RuntimeError: the merger failed (names its exit status and command).
    """
    policy = Path(policy_dir)
    if dry_run:
        cmd = merge_command(Path(checkpoints) / "global_step_<latest>" / subdir, policy, python)
        return {"step": None, "checkpoint": None, "policy_dir": str(policy), "command": cmd, "merged": False}
    ckpt = latest_verl_checkpoint(checkpoints, subdir)
    out = {"step": ckpt.step, "checkpoint": str(ckpt.step_dir), "policy_dir": str(policy)}
    partial = policy.with_name(policy.name + ".partial")
    cmd = merge_command(ckpt.model_dir, partial, python)
    out["command"] = cmd
    if policy_is_current(policy, ckpt):
        return {**out, "merged": False}
    check_complete(ckpt.model_dir)
    if partial.exists():
        shutil.rmtree(partial)
    print("kit.bridge.checkpoints: " + " ".join(cmd), flush=True)
    code = (run or (lambda argv: subprocess.run(list(argv), check=False).returncode))(cmd)
    if code != 0 or not (partial / "config.json").exists():
        raise RuntimeError(f"VERL model merger exited with status {code} and left no {partial / 'config.json'}: "
                           + " ".join(cmd))
    if policy.is_symlink() or policy.is_file():
        policy.unlink()
    elif policy.exists():
        shutil.rmtree(policy)
    partial.rename(policy)
    return {**out, "merged": True}
