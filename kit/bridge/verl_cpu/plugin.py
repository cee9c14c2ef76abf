"""The kit's ``verl.plugins`` entry point: VERL imports it in every process at ``import verl``.

Declared in ``pyproject.toml``::

    [project.entry-points."verl.plugins"]
    kit_cpu = "kit.bridge.verl_cpu.plugin"

(the editable install must be refreshed, ``pip install -e .``, for the entry point to exist).
It always registers the ``cpu`` platform (:class:`~kit.bridge.verl_cpu.platform.PlatformCPU`;
never auto-detected). Only when ``VERL_PLATFORM=cpu`` (set by the kit for ``runtime=verl`` on a
machine without CUDA) does it also register the ``kit_cpu`` rollout replica and apply the named
patches of :mod:`kit.bridge.verl_cpu.patches`.

VERL swallows plugin import errors at DEBUG level (``verl/__init__.py:72-76``), after which a CPU
run fails later with a confusing "Unknown platform 'cpu'". This module therefore prints its own
failure to stderr with the traceback and what to do, and keeps it in :data:`ERROR`.
"""

from __future__ import annotations

import os
import sys
import traceback

ERROR: str | None = None
REGISTERED: list[str] = []


def cpu_selected() -> bool:
    """True when this process runs VERL on the kit's CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"


def _register() -> None:
    # VERL / kit.bridge: the plugin runs at every `import verl`, so it imports lazily
    from verl.plugin.platform.platform_manager import PlatformRegistry

    # VERL / kit.bridge: the plugin runs at every `import verl`, so it imports lazily
    from kit.bridge.verl_cpu.platform import PLATFORM_NAME, PlatformCPU

    PlatformRegistry.register(PLATFORM_NAME)(PlatformCPU)
    REGISTERED.append("platform:cpu")
    if not cpu_selected():
        return
    # VERL / kit.bridge: the plugin runs at every `import verl`, so it imports lazily
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    # VERL / kit.bridge: the plugin runs at every `import verl`, so it imports lazily
    from kit.bridge.verl_cpu import patches

    def load_replica():
        # VERL / kit.bridge: the plugin runs at every `import verl`, so it imports lazily
        from kit.bridge.verl_cpu.rollout import KitCpuReplica

        return KitCpuReplica

    RolloutReplicaRegistry.register("kit_cpu", load_replica)
    REGISTERED.append("rollout:kit_cpu")
    REGISTERED.extend(f"patch:{name}" for name in patches.apply())


try:
    _register()
except Exception as exc:  # VERL would swallow it: report it loudly, then let VERL see it too
    ERROR = f"{type(exc).__name__}: {exc}"
    print(f"kit.bridge.verl_cpu.plugin: FAILED to register the kit's CPU runtime for VERL ({ERROR}).\n"
          f"  VERL_PLATFORM=cpu runs will fail with \"Unknown platform 'cpu'\" or use a GPU rollout.\n"
          f"  Check that `import kit` finds this checkout in every Ray worker (PYTHONPATH) and that verl==0.9.1 "
          f"is installed.\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    raise
