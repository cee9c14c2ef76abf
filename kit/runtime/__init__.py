"""Who trains: one keyword-only contract, two runtimes (``cfg.runtime``).

``local`` (:mod:`kit.runtime.local`) trains in this process with the CPU engine of ``kit.train``
(tiny, smoke); ``verl`` (:mod:`kit.runtime.verl`) trains in VERL through ``kit.bridge`` (paper
profiles). Both modules define the same functions with the same signatures (a test compares
them), and ``kit.chain`` picks one with :func:`get` and calls it the same way::

    rt = runtime.get(cfg)
    rt.prepare_data(cfg, curation, run_dir=data)                      # 01: RL data files
    rt.run_sft(cfg, run_dir=sft, init_dir=None, data_dir=data, progress=cb)
    rt.run_stage(cfg, "stage1", run_dir=s1, init_dir=sft, data_dir=data, progress=cb)
    rt.prepare_hard_subset(cfg, "stage3", run_dir=s3, init_dir=s2, data_dir=data)  # before stage 3
    rt.run_ablation(cfg, run_dir=abl, init_dir=sft, data_dir=data, progress=cb)

Arguments, the same for both runtimes:

- ``run_dir``: the run folder this step writes (``summary.json``, ``metrics.jsonl``,
  ``policy/``, ...; docs/contracts.md "Run directories").
- ``init_dir``: always the upstream *run folder* (its ``policy/`` is the starting policy, and on
  VERL its ``checkpoints/`` the state to resume); never a policy folder. ``None`` for the cold
  start, which starts from ``cfg.model``.
- ``data_dir``: the run folder of ``01_data_curation`` (``data/curated.parquet``, ...).
- ``progress``: called with every ``metrics.jsonl`` row and finally ``{"stage", "summary"}``
  (VERL: after the stage, from its converted metrics); ``prepare_hard_subset`` takes none.

Each returns the summary dict it also writes to ``run_dir/summary.json`` (``ablation.json``
for the ablation). Runtime-specific inputs are keyword options both accept: ``sft_checkpoint``,
``sft_data`` (cold start on VERL), ``hard_counts``, ``sampler_url`` (stage-3 solve counts on
VERL), ``reuse`` (finished runs that may be an ablation arm, local). A runtime given an option
it cannot honour raises ``ValueError`` naming it.
"""

from __future__ import annotations

from types import ModuleType

from kit.config import KitConfig
from kit.runtime import local, verl

#: ``cfg.runtime`` -> module (the names are ``KitConfig.runtime``'s values; a test keeps them equal)
RUNTIMES: dict[str, ModuleType] = {"local": local, "verl": verl}
#: the functions every runtime module defines, with equal signatures
CONTRACT = ("prepare_data", "run_sft", "run_stage", "prepare_hard_subset", "run_ablation")


def get(cfg: KitConfig) -> ModuleType:
    """The runtime module named by ``cfg.runtime`` (:mod:`kit.runtime.local` or :mod:`kit.runtime.verl`).

    Raises:
        ValueError: an unknown runtime name (``load`` rejects one already).
    """
    try:
        return RUNTIMES[cfg.runtime]
    except KeyError:
        raise ValueError(f"unknown runtime {cfg.runtime!r}; expected one of {sorted(RUNTIMES)}") from None


__all__ = ["CONTRACT", "RUNTIMES", "get", "local", "verl"]
