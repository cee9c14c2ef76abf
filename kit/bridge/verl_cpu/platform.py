"""VERL's platform interface on a CPU: device ``cpu``, backend ``gloo``, fake GPUs for Ray.

VERL 0.9.1 picks a platform class from ``PlatformRegistry`` (``verl/plugin/platform/
platform_manager.py``): ``VERL_PLATFORM`` names it, else it probes and falls back to
``nvidia``. It has no CPU platform, so :class:`PlatformCPU` is registered as ``cpu`` by the
kit's ``verl.plugins`` entry point (:mod:`kit.bridge.verl_cpu.plugin`) and chosen with
``VERL_PLATFORM=cpu``, which the kit sets only for ``runtime=verl`` on a machine without CUDA.

Ray placement: VERL asks Ray for ``GPU`` resources for its trainer workers; the kit starts Ray
with a fake ``--num-gpus`` (:mod:`kit.bridge.verl_cpu.ray_local`) so those resources exist.

The device module VERL calls (``get_torch_device()``, 19 distinct methods, e.g. in
``verl/workers/engine_workers.py`` and ``verl/utils/memory_utils.py``) is :class:`CpuDeviceModule`:
``torch.cpu`` plus no-op cache and allocator calls, zero device-memory counters, ``mem_get_info``
from psutil (bytes), RNG state from ``torch``'s CPU generator.

What it does not do: profiling (no-ops), IPC weight sharing (``is_ipc_supported`` False: the
CPU rollout takes its weights as plain tensors, :mod:`kit.bridge.verl_cpu.rollout`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import psutil
import torch
from verl.plugin.platform.platform_base import PlatformBase

PLATFORM_NAME = "cpu"


class CpuDeviceModule:
    """``torch.cpu`` with the CUDA-module calls VERL makes (see the module docstring).

    Attributes missing here fall through to ``torch.cpu`` (``synchronize``, ``Stream``,
    ``current_stream``, ``stream``, ``Event``, ``set_device``, ``current_device``).
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    # availability and identity
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    # caches and allocator: nothing to release on a CPU
    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    def memory_reserved(self, device: Any = None) -> int:
        return 0

    def max_memory_allocated(self, device: Any = None) -> int:
        return 0

    def max_memory_reserved(self, device: Any = None) -> int:
        return 0

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {}

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """``(free, total)`` host memory in bytes (psutil), as ``torch.cuda.mem_get_info`` returns."""
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    # RNG: the CPU generator
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)


DEVICE_MODULE = CpuDeviceModule()


class PlatformCPU(PlatformBase):
    """VERL platform ``cpu`` (registered by :mod:`kit.bridge.verl_cpu.plugin`)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # never auto-detected: only an explicit VERL_PLATFORM=cpu selects it
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> Any:
        # a string, not 0: VERL builds devices as f"{device_name}:{id}" or torch.device(id),
        # and an int would mean cuda:0
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray sets it for the fake GPUs; nothing reads it on a CPU

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
