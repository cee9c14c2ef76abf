"""The config's error type and the rules between keys that one key's type cannot say.

:func:`check` runs on every config :func:`kit.config.load` and :func:`kit.config.from_json`
build; :func:`check_minimums` is the one RoC minimum-count check (rStar2-Agent §2.2.3; the
release's ``min_non_zero_reward_trace_num + min_zero_reward_trace_num <= n``), applied by
:func:`check` and by the RoC code it guards. :mod:`kit.config` re-exports every name.
"""

from __future__ import annotations

from kit.config.schema import KitConfig


class ConfigError(ValueError):
    """An unknown key, a wrong type or a bad value in a profile or an override."""


def check_minimums(group_size: int, min_positive: int, min_negative: int) -> None:
    """The one check that G rows can hold both RoC minimum counts (release:
    ``min_non_zero_reward_trace_num + min_zero_reward_trace_num <= n``); :func:`check` applies it
    to ``[algorithm]``, ``kit.algo.roc.RocParams`` and ``kit.bridge.overrides`` to what
    they are given.

    Raises:
        ConfigError: ``min_positive + min_negative > group_size`` (names the three numbers).
    """
    if min_positive + min_negative > group_size:
        raise ConfigError(
            f"RoC: min_positive ({min_positive}) + min_negative ({min_negative}) exceeds group_size ({group_size})"
        )


def check(cfg: KitConfig) -> KitConfig:
    """Rules between keys that one key's type cannot say; returns ``cfg`` unchanged.

    Raises:
        ConfigError: ``data.source = "tasks"`` with ``runtime = "verl"`` (VERL reads the curated
            parquet, :mod:`kit.data.pool`); RoC minimums that do not fit in G (:func:`check_minimums`); a tracker listed twice in
            ``logging.backends``; an entry of ``sandbox.preimport`` that is not a dotted module
            name (``""``, ``"[]"``, ``"numpy scipy"``), caught here before a run; a well-formed
            name that does not import fails when the sandbox starts (:mod:`kit.sandbox.workers`).
    """
    if cfg.runtime == "verl" and cfg.data.source == "tasks":
        raise ConfigError("data.source: 'tasks' (the generated task family) is the local runtime's pool; VERL trains on "
                          "<01 run>/data/curated.parquet: set data.source='curated' (or 'auto'), or runtime='local'")
    a = cfg.algorithm
    try:
        check_minimums(a.group_size, a.min_positive, a.min_negative)
    except ConfigError as exc:  # the ablation runs a grpo_roc arm whatever algorithm.name says
        raise ConfigError(f"algorithm: {exc}") from None
    twice = sorted({b for b in cfg.logging.backends if cfg.logging.backends.count(b) > 1})
    if twice:
        raise ConfigError(f"logging.backends: {twice[0]!r} is listed twice in {list(cfg.logging.backends)}")
    for i, name in enumerate(cfg.sandbox.preimport):
        if not (isinstance(name, str) and all(part.isidentifier() for part in name.split("."))):
            raise ConfigError(f"sandbox.preimport[{i}]: {name!r} is not a module name (e.g. \"numpy\", \"scipy.special\"); "
                              "an empty list is written [] in a profile and sandbox.preimport= on a command line")
    return cfg
