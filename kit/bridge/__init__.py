"""The only package that imports verl, ray or sglang: adapters between the kit and VERL 0.9.x.

Importing any ``kit.bridge`` module registers the ``"ray"`` sandbox executor with
:mod:`kit.sandbox.pool` (``sandbox.backend = "ray"``), so a VERL worker that loads only the agent
loop or the tool finds it; Ray itself is imported when a pool first uses it.
"""

from __future__ import annotations

from typing import Any

from kit.config import SandboxConfig
from kit.sandbox.pool import EXECUTORS, register_executor


def ray_executor(cfg: SandboxConfig, preload: tuple[str, ...] = ()) -> Any:
    """``kit.bridge.ray_sandbox.RayExecutor(cfg, preload=preload)``, imported on first use."""
    # Ray is a heavy optional dependency: imported only when a pool uses this backend
    from kit.bridge.ray_sandbox import RayExecutor

    return RayExecutor(cfg, preload=preload)


if "ray" not in EXECUTORS:  # kit.bridge.ray_sandbox, once imported, registers its class itself
    register_executor("ray", ray_executor)
