"""Every change the kit's CPU runtime makes to VERL 0.9.1 internals, in one place.

VERL's public extension points (``verl.plugins`` entry point, ``PlatformRegistry``,
``RolloutReplicaRegistry``, ``VERL_ENGINE_DEVICE``) carry most of the CPU runtime. Three things
have no public hook; each is patched here, named, applied only by :func:`apply` (called by the
plugin when ``VERL_PLATFORM=cpu``), and checked by :func:`check` (and by
``tests/bridge/test_verl_cpu_runtime.py``) so that a VERL upgrade that moves them fails loudly
instead of silently training with CUDA assumptions:

1. ``process_group_backend``: ``verl.utils.distributed.initialize_global_process_group_ray``
   builds ``f"cpu:gloo,{device}:{backend}"``, which on the CPU platform is ``"cpu:gloo,cpu:gloo"``
   and torch rejects ("Duplicate device type cpu"). The patch passes plain ``"gloo"`` when no
   backend is given; ``verl.workers.engine_workers`` imported the function by name, so it is
   replaced there too.
2. ``rollout_registry``: the trainer-side rollout class is looked up in the private dict
   ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (no register function in 0.9.1); the patch adds
   ``("kit_cpu", "async")``.
3. ``valuehead_attention`` (PPO's critic, ``algorithm.adv_estimator = "gae"``):
   ``verl.utils.model.load_valuehead_model`` loads the critic with ``attn_implementation=
   "flash_attention_2"`` written into the call, whatever the model config's
   ``override_config.attn_implementation`` says, and FlashAttention does not exist on a CPU. The
   patch loads the same ``AutoModelForTokenClassification`` with ``sdpa`` (the actor's attention on
   the CPU runtime); the FSDP engine imports the function inside ``_build_module``, so replacing the
   module attribute is enough.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from transformers import AutoModelForTokenClassification  # the class VERL loads its critic with

#: The VERL release these patches were written and tested against (pyproject pins it).
VERL_VERSION = "0.9.1"
ROLLOUT_KEY = ("kit_cpu", "async")
ROLLOUT_ADAPTER = "kit.bridge.verl_cpu.rollout.KitCpuRolloutAdapter"
_DUPLICATED_BACKEND = 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"'
_FLASH_VALUEHEAD = 'attn_implementation="flash_attention_2"'


class VerlPatchError(RuntimeError):
    """A patched VERL internal is not where this kit expects it (VERL upgraded?)."""


def _fail(what: str, detail: str) -> VerlPatchError:
    import verl  # VERL: only for its version in the message

    return VerlPatchError(f"kit CPU runtime: VERL internal {what!r} moved ({detail}); this kit's CPU patches are "
                          f"written for verl=={VERL_VERSION}, installed {verl.__version__}. Reinstall verl=={VERL_VERSION} "
                          f"or update kit/bridge/verl_cpu/patches.py")


def _gloo_backend(original: Any) -> Any:
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.__kit_patched__ = original  # type: ignore[attr-defined]
    initialize_global_process_group_ray.__doc__ = "kit CPU patch: plain gloo instead of 'cpu:gloo,cpu:gloo'."
    return initialize_global_process_group_ray


def _sdpa_valuehead(original: Any) -> Any:
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
            attn_implementation="sdpa", trust_remote_code=trust_remote_code)

    load_valuehead_model.__kit_patched__ = original  # type: ignore[attr-defined]
    load_valuehead_model.__doc__ = "kit CPU patch: the critic with sdpa attention instead of flash_attention_2."
    return load_valuehead_model


def _source(module: str) -> str:
    """Source text of a VERL module without importing it (the plugin runs inside ``import verl``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise _fail(module, "module not found")
    return Path(spec.origin).read_text()


def check() -> list[str]:
    """Check that every patched internal is where 0.9.1 has it.

    Returns:
        The names of the patch points checked.
    Raises:
        VerlPatchError: one moved (names it and what to do).
    """
    dist = importlib.import_module("verl.utils.distributed")
    fn = getattr(dist, "initialize_global_process_group_ray", None)
    if fn is None:
        raise _fail("verl.utils.distributed.initialize_global_process_group_ray", "function not found")
    fn = getattr(fn, "__kit_patched__", fn)
    src = inspect.getsource(fn)
    if _DUPLICATED_BACKEND not in src or "backend = backend or" not in src:
        raise _fail("verl.utils.distributed.initialize_global_process_group_ray",
                    "its default backend string is no longer f\"cpu:gloo,{device}:{backend}\"")
    ew_src = _source("verl.workers.engine_workers")
    if "from verl.utils.distributed import initialize_global_process_group_ray" not in ew_src \
            or "initialize_global_process_group_ray(timeout_second=None)" not in ew_src:
        raise _fail("verl.workers.engine_workers.initialize_global_process_group_ray", "import or call changed")
    base_src = _source("verl.workers.rollout.base")
    if "_ROLLOUT_REGISTRY = {" not in base_src or '("vllm", "async"):' not in base_src:
        raise _fail("verl.workers.rollout.base._ROLLOUT_REGISTRY", "not a dict keyed by (name, mode)")
    if "fqdn = _ROLLOUT_REGISTRY[(rollout_name, mode)]" not in base_src:
        raise _fail("verl.workers.rollout.base.get_rollout_class", "no longer reads _ROLLOUT_REGISTRY")
    model_src = _source("verl.utils.model")
    start = model_src.find("def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):")
    body = model_src[start:model_src.find("\ndef ", start + 1)] if start >= 0 else ""
    if _FLASH_VALUEHEAD not in body or "AutoModelForTokenClassification.from_pretrained(" not in body:
        raise _fail("verl.utils.model.load_valuehead_model", "it no longer loads AutoModelForTokenClassification with "
                    "flash_attention_2 written in")
    if "from verl.utils.model import load_valuehead_model" not in _source("verl.workers.engine.fsdp.transformer_impl"):
        raise _fail("verl.workers.engine.fsdp.transformer_impl.load_valuehead_model", "no longer imported at call time")
    return ["process_group_backend", "rollout_registry", "valuehead_attention"]


def apply() -> list[str]:
    """Apply the three patches (idempotent) after :func:`check`.

    Returns:
        The names of the patches applied.
    Raises:
        VerlPatchError: see :func:`check`.
    """
    names = check()
    dist = importlib.import_module("verl.utils.distributed")
    if not hasattr(dist.initialize_global_process_group_ray, "__kit_patched__"):
        dist.initialize_global_process_group_ray = _gloo_backend(dist.initialize_global_process_group_ray)
    ew = sys.modules.get("verl.workers.engine_workers")  # not yet imported: it will import the patched name
    if ew is not None:
        ew.initialize_global_process_group_ray = dist.initialize_global_process_group_ray
    base = importlib.import_module("verl.workers.rollout.base")
    base._ROLLOUT_REGISTRY[ROLLOUT_KEY] = ROLLOUT_ADAPTER
    vmodel = importlib.import_module("verl.utils.model")
    if not hasattr(vmodel.load_valuehead_model, "__kit_patched__"):
        vmodel.load_valuehead_model = _sdpa_valuehead(vmodel.load_valuehead_model)
    return names


def applied() -> dict[str, bool]:
    """Which patches are in effect in this process (for tests and error reports)."""
    dist = importlib.import_module("verl.utils.distributed")
    ew = importlib.import_module("verl.workers.engine_workers")
    base = importlib.import_module("verl.workers.rollout.base")
    vmodel = importlib.import_module("verl.utils.model")
    return {
        "process_group_backend": hasattr(dist.initialize_global_process_group_ray, "__kit_patched__")
        and hasattr(ew.initialize_global_process_group_ray, "__kit_patched__"),
        "rollout_registry": base._ROLLOUT_REGISTRY.get(ROLLOUT_KEY) == ROLLOUT_ADAPTER,
        "valuehead_attention": hasattr(vmodel.load_valuehead_model, "__kit_patched__"),
    }
