"""Where the kit finds data and writes runs.

One setting decides where third-party data is read from: the environment variable
``KIT_DATA_DIR``, else ``../shared/data`` beside the checkout when that folder exists. Nothing
found there is ever copied into the repository; loaders read it at run time and raise
:class:`DataFileMissing` naming the file and how to obtain it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


class DataFileMissing(FileNotFoundError):
    """A data file the kit needs is not in the data directory."""


def data_dir(override: str | os.PathLike | None = None) -> Path:
    """Return the data directory.

    Args:
        override: an explicit directory (e.g. ``config.data.data_dir``); empty or None means
            "use ``KIT_DATA_DIR``, else ``../shared/data`` beside the checkout".
    Returns:
        The directory as an absolute Path (it may not exist; :func:`data_file` checks files).
    """
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("KIT_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return DEFAULT_SHARED_DATA


def data_file(relative: str, *, override: str | os.PathLike | None = None, how_to_get: str = "") -> Path:
    """Resolve ``relative`` inside the data directory and check that it exists.

    Args:
        relative: path inside the data directory, e.g. ``"benchmarks/aime2024.json"``.
        override: see :func:`data_dir`.
        how_to_get: a sentence telling the user where the file comes from.
    Returns:
        The absolute path of an existing file.
    Raises:
        DataFileMissing: the file is absent; the message names the full path, the setting that
            chose the directory and ``how_to_get``.
    """
    base = data_dir(override)
    path = base / relative
    if not path.exists():
        source = (
            "the explicit data_dir setting" if override else
            "KIT_DATA_DIR" if os.environ.get("KIT_DATA_DIR") else
            "the default ../shared/data beside the checkout"
        )
        hint = f" {how_to_get}" if how_to_get else " SOURCES.md in the data directory says where each file comes from."
        raise DataFileMissing(
            f"data file not found: {path} (data directory from {source}; set KIT_DATA_DIR to "
            f"the folder that holds '{relative}').{hint}"
        )
    return path
