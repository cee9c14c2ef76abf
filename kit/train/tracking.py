"""The local trainer's door to experiment tracking (``[logging] backends``, README "Profiles and data").

:func:`open_tracker` returns VERL's tracker wrapped by :class:`kit.bridge.tracking.LocalTracker`
when the config lists a backend, else a tracker that does nothing (and VERL is not imported).
``kit.train`` calls ``log_rl`` / ``log_sft`` right after it writes a ``metrics.jsonl`` row and
``finish`` at the end of a run; the renaming to VERL's metric names lives in the bridge.
"""

from __future__ import annotations

import os
from typing import Any

from kit.config import KitConfig


class NullTracker:
    """No backend configured: every call does nothing."""

    backends: tuple[str, ...] = ()

    def log_rl(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        return {}

    def log_sft(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        return {}

    def finish(self) -> None:
        pass


def experiment_name(cfg: KitConfig, stage: str, algorithm: str | None = None, seed: int | None = None) -> str:
    """``<profile>-<stage>`` as the VERL runtime names its runs, plus ``-<algorithm>-seed<s>`` for a
    run whose algorithm or seed differs from the config's (the ablation's arms)."""
    name = f"{cfg.profile}-{stage}"
    if (algorithm or cfg.algorithm.name) != cfg.algorithm.name or (cfg.seed if seed is None else seed) != cfg.seed:
        name += f"-{algorithm or cfg.algorithm.name}-seed{cfg.seed if seed is None else seed}"
    return name


def open_tracker(cfg: KitConfig, run_dir: str | os.PathLike, stage: str, *, algorithm: str | None = None,
                 seed: int | None = None) -> Any:
    """The tracker of one local run (SFT or an RL stage) in ``run_dir``.

    Returns:
        :class:`kit.bridge.tracking.LocalTracker` over ``cfg.logging.backends``, or
        :class:`NullTracker` when the list is empty.
    Raises:
        ImportError: a backend's package is missing (names it; raised before any training).
    """
    if not cfg.logging.backends:
        return NullTracker()
    # kit.bridge.tracking wraps VERL's tracker (its file, ~0.1 s; VERL and Ray too under console): only when a backend is configured
    from kit.bridge.tracking import LocalTracker

    return LocalTracker(cfg.logging, run_dir, experiment_name(cfg, stage, algorithm, seed), cfg.to_dict())
