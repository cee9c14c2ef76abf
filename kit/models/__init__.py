"""Policy models: the tiny from-scratch Qwen3 and real checkpoints, behind one loader."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from kit import prompts
from kit.models.tiny import build_tiny_model, tiny_qwen3_config
from kit.models.tokenizer import stop_token_ids, train_tokenizer

__all__ = ["build_tiny_model", "tiny_qwen3_config", "train_tokenizer", "stop_token_ids", "load_policy", "save_policy",
           "quiet_hub_bars"]


@contextlib.contextmanager
def quiet_hub_bars() -> Iterator[None]:
    """Turn off the progress bars of transformers and huggingface_hub (``Writing model shards``,
    ``Loading weights``, downloads) for the duration, then restore the previous setting.

    A notebook saves a checkpoint every few hundred steps and loads policies often: each added a
    third-party bar to the cell (issue #20). The kit's own bars (:mod:`kit.progress`) are separate.
    """
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # also huggingface_hub's (downloads)
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def save_policy(model, tokenizer, path: str | os.PathLike) -> Path:
    """Save model and tokenizer with ``save_pretrained`` into ``path`` (created), without
    transformers' progress bar (:func:`quiet_hub_bars`)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_hub_bars():
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path


def load_policy(name_or_path: str | os.PathLike, *, dtype: str = "float32", device: str = "cpu", allow_download: bool = False):
    """Load ``(model, tokenizer)`` from a local directory or a hub id.

    Args:
        name_or_path: a directory written by :func:`save_policy` (the tiny path) or a hub id
            such as ``Qwen/Qwen3-14B-Base``.
        dtype: torch dtype name.
        device: where to put the model.
        allow_download: a hub id is fetched only when True; the tiny path never downloads.
    Returns:
        The model (eval mode) and tokenizer. A tokenizer without a chat template gets the kit's. Loading
        (and a download) shows no third-party progress bar (:func:`quiet_hub_bars`).
    Raises:
        FileNotFoundError: a local-looking path that does not exist, or a hub id with
            ``allow_download=False`` that is not in the local cache.
    """
    p = Path(name_or_path)
    local = p.exists()
    if not local and (str(name_or_path).startswith((".", "/", "~")) or os.sep in str(name_or_path) and str(name_or_path).count("/") > 1):
        raise FileNotFoundError(f"model path not found: {name_or_path}")
    kwargs = {"local_files_only": local or not allow_download}
    try:
        with quiet_hub_bars():
            tok = AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)
            model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=getattr(torch, dtype), **kwargs)
    except OSError as exc:
        raise FileNotFoundError(
            f"could not load model {name_or_path!r} ({'local directory' if local else 'hub id, downloads off'}): {exc}"
        ) from exc
    if not getattr(tok, "chat_template", None):
        tok.chat_template = prompts.CHAT_TEMPLATE
    return model.to(device).eval(), tok
