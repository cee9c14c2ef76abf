"""Agent-R's revision rows on VERL's SFT trainer, the loss mask carried (issue #34).

VERL 0.9.1's ``MultiTurnSFTDataset`` gives every assistant message loss, so a revision trajectory in
its ``messages`` schema would imitate the bad branch. The kit's parquet
(:mod:`kit.studies.agent_r.parquet`: ``input_ids``, ``loss_mask`` per row) is read instead by
:class:`TokenSFTDataset`, plugged in through VERL's own extension point ``data.custom_cls``
(``verl.trainer.sft_trainer.create_sft_dataset`` loads it by file path and class name); the rest
of the launch is :func:`kit.bridge.sft.sft_command` (``[sft]`` settings, one node, torchrun) with
the iteration's starting policy as ``model.path``.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from kit.bridge.sft import sft_command
from kit.train.sft import mix_fraction, pass_steps, warmup_length


class TokenSFTDataset(torch.utils.data.Dataset):
    """Rows of ids and loss mask, in the items VERL's SFT trainer takes from ``MultiTurnSFTDataset``.

    ``pad_mode = "no_padding"`` (VERL's default): ``{input_ids, position_ids, loss_mask}`` of the
    row's length; ``"right"``: padded to ``max_length`` with ``attention_mask``. Rows longer than
    ``max_length`` are cut on the right (``truncation = "right"``) or refused (``"error"``).

    Args:
        parquet_files: one path or a list (VERL passes ``data.train_files``).
        tokenizer: for ``pad_token_id``; config: VERL's ``data`` config (a mapping with ``get``).
    Raises:
        ValueError: a file lacks ``input_ids`` / ``loss_mask``, a row's lengths differ, or a row is
            longer than ``max_length`` under ``truncation = "error"`` (names the row).
    """

    def __init__(self, parquet_files, tokenizer, config=None, processor=None, max_samples: int = -1):
        config = config or {}
        files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else list(parquet_files)
        df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        for c in ("input_ids", "loss_mask"):
            if c not in df.columns:
                raise ValueError(f"{files}: no column {c!r} (write the rows with kit.studies.agent_r.parquet.write_rows)")
        if max_samples and max_samples > 0:
            df = df.iloc[:max_samples]
        self.ids = [list(map(int, x)) for x in df["input_ids"]]
        self.mask = [list(map(int, x)) for x in df["loss_mask"]]
        for i, (a, b) in enumerate(zip(self.ids, self.mask, strict=True)):
            if len(a) != len(b):
                raise ValueError(f"{files}: row {i} has {len(a)} ids but {len(b)} loss-mask values")
        self.pad_mode = config.get("pad_mode", "no_padding")
        self.max_length = int(config.get("max_length", 1024))
        self.truncation = config.get("truncation", "error")
        self.pad_id = getattr(tokenizer, "pad_token_id", None) or 0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids, mask = self.ids[i], self.mask[i]
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(f"row {i}: {len(ids)} tokens exceed data.max_length={self.max_length}")
            ids, mask = (ids[-self.max_length:], mask[-self.max_length:]) if self.truncation == "left" else \
                (ids[:self.max_length], mask[:self.max_length])
        t, m = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
        pos = torch.arange(len(ids), dtype=torch.long)
        if self.pad_mode == "no_padding":
            return {"input_ids": t, "position_ids": pos, "loss_mask": m}
        pad = self.max_length - len(ids)
        return {"input_ids": torch.cat([t, torch.full((pad,), self.pad_id, dtype=torch.long)]),
                "attention_mask": torch.cat([torch.ones(len(ids), dtype=torch.long), torch.zeros(pad, dtype=torch.long)]),
                "position_ids": torch.cat([pos, torch.zeros(pad, dtype=torch.long)]),
                "loss_mask": torch.cat([m, torch.zeros(pad, dtype=torch.long)])}


def revision_sft_command(cfg: Any, parquet: str | os.PathLike, run_dir: str | os.PathLike, *, model_path: str = "",
                         gpus_per_node: int = 8, python: str = "python3", section: str = "agent_r") -> list[str]:
    """argv of VERL's SFT trainer on the kit's revision parquet: :func:`kit.bridge.sft.sft_command`
    plus ``data.custom_cls`` = :class:`TokenSFTDataset` (this file), ``model.path = model_path`` (the
    iteration's starting policy; default ``cfg.model.name_or_path``) and the local loop's fine-tune recipe
    (``kit.studies.agent_r.iterate.train_iteration``) for the keys it writes: peak ``agent_r.lr``, the warm-up
    (``agent_r.warmup_ratio`` with the floor ``agent_r.warmup_steps``, computed here: VERL's
    ``optim.lr_warmup_steps`` overrides the ratio rather than bounding it), ``agent_r.schedule`` down to
    ``sft.min_lr_ratio``, ``agent_r.batch_size`` rows a step, and, once the parquet exists, the local loop's step
    count (``agent_r.passes`` over the own rows) with the epochs that reach it (VERL drops an epoch's last
    partial batch). ``optim.zero_indexed_step=false`` makes VERL's warm-up the local ``(s + 1) / W``; its cosine
    then runs one step ahead of the local one. VERL's AdamW betas and weight decay are its own (the local
    trainer's are the tiny model's, not keys of the profile).

    ``section``: the config section whose fine-tune it is: ``"agent_r"``, or ``"bstar"`` (B-STaR's iterations,
    issue #47: no general data, no warm-up ratio beyond its floor, a cosine decay; the other keys as above).

    Raises:
        ValueError: the parquet holds no own (revision or good) rows, or fewer rows than a batch (VERL would
            divide by zero steps an epoch); the message names the parquet and ``<section>.batch_size``.
    """
    a, s = getattr(cfg, section), cfg.sft
    eta, ratio, schedule = getattr(a, "eta", 0.0), getattr(a, "warmup_ratio", 0.0), getattr(a, "schedule", "cosine")
    batch = a.batch_size or s.batch_size
    recipe = {"optim.lr": repr(float(a.lr or s.lr)), "optim.lr_warmup_steps_ratio": repr(float(ratio)),
              "optim.lr_scheduler_type": schedule, "optim.min_lr_ratio": repr(float(s.min_lr_ratio)),
              "optim.zero_indexed_step": "false", "data.train_batch_size": str(batch),
              "trainer.total_epochs": str(math.ceil(a.passes) if a.passes else s.epochs)}
    if Path(parquet).exists():
        kinds = pd.read_parquet(parquet, columns=["kind"])["kind"]
        own, rows = int((kinds != "general").sum()), len(kinds)
        if own == 0 or rows < batch:
            raise ValueError(f"{parquet}: {own} own rows of {rows}; VERL's SFT needs own rows and at least one batch "
                             f"of {batch} rows ({section}.batch_size, else sft.batch_size)")
        steps = pass_steps(own, a.passes, batch, mix_fraction(eta), a.sft_steps)  # the local loop's
        recipe["trainer.total_epochs"] = str(math.ceil(steps / (rows // batch)))
        recipe["trainer.total_training_steps"] = str(steps)
        recipe["optim.lr_warmup_steps"] = str(warmup_length(steps, ratio, a.warmup_steps))
    if model_path:
        recipe["model.path"] = model_path
    cmd = [c for c in sft_command(cfg, str(parquet), run_dir, gpus_per_node=gpus_per_node, python=python)
           if not c.startswith("data.messages_key=") and c.split("=", 1)[0] not in recipe]
    return cmd + [f"{k}={v}" for k, v in recipe.items()] + [
        f"data.custom_cls.path={Path(__file__).resolve()}", "data.custom_cls.name=TokenSFTDataset"]


def dry_run_text(cfg: Any, parquet: str | os.PathLike, run_dir: str | os.PathLike, **kw: Any) -> str:
    """The launch as one printable shell line, with what it reads (nothing runs); where the parquet cannot be
    trained by VERL (:func:`revision_sft_command` raises), the line says why instead."""
    df = pd.read_parquet(parquet, columns=["kind", "loss_mask"]) if Path(parquet).exists() else None
    what = ("(parquet not written yet)" if df is None else
            f"{len(df)} rows ({', '.join(f'{k} {n}' for k, n in df['kind'].value_counts().items())}), "
            f"{int(sum(sum(m) for m in df['loss_mask']))} loss tokens")
    try:
        line = shlex.join(revision_sft_command(cfg, parquet, run_dir, **kw))
    except ValueError as exc:
        line = f"# not launchable as it stands: {exc}"
    return f"# VERL SFT on {parquet}: {what}\n" + line
