"""Manifests: what produced a number (model, backend, sampling, seed, code and data versions).

Every evaluation file under ``run_dir/eval/`` embeds one manifest, so a reported avg@16 can be
traced to the checkpoint, the sampling settings (the release evaluates greedily unless
``val_kwargs`` are set) and the exact
benchmark file (sha256).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import platform
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kit
from kit.config.paths import REPO_ROOT


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes.

    Raises:
        FileNotFoundError: the file does not exist.
    """
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def git_commit(root: Path = REPO_ROOT) -> str:
    """The checkout's HEAD commit plus ``-dirty`` when files changed; ``"unknown"`` without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def build_manifest(*, model: str, backend: str, sampling: Mapping[str, Any], seed: int | None,
                   data_files: Iterable[str | Path] = (), extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-able manifest.

    Args:
        model: checkpoint path or hub id (``ModelConfig.name_or_path`` or ``checkpoints/step_n``).
        backend: backend description (class name and endpoint, e.g. ``"HFBackend(cpu)"``).
        sampling: ``n``, ``temperature``, ``top_p``, ``max_tokens`` (tokens), ``max_turns``...
        seed: the sampling seed (None when the backend is not seeded, e.g. a remote server).
        data_files: files whose sha256 is recorded (benchmark files, curated parquet).
        extra: anything else worth keeping (profile name, stage, step).
    Raises:
        FileNotFoundError: a data file is missing.
    """
    return {
        "model": model,
        "backend": backend,
        "sampling": dict(sampling),
        "seed": seed,
        "kit_version": kit.__version__,
        "git_commit": git_commit(),
        "data_files": {str(p): sha256_file(p) for p in data_files},
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "host": platform.node(),
        **(dict(extra) if extra else {}),
    }
