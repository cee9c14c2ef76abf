"""Every knob of the kit, in frozen dataclasses, with the paper's values as defaults.

Config flows one way: the dataclass defaults (:mod:`kit.config.schema`; rStar2-Agent report,
arXiv 2508.20722, section cited beside each group), then a named profile file from ``kit/profiles/<name>.toml``, then overrides
from a notebook's ``parameters`` cell or the command line. :func:`load` rejects unknown keys and
wrong types with a message naming the key, and writes the resolved config to
``run_dir/config.json`` so every result sits next to the settings that produced it.

Profiles:
    ``tiny``      CPU, a 0.5M-parameter Qwen3 built from scratch; the embedded default.
    ``smoke``     ``tiny`` with the fewest steps, for tests.
    ``paper-14b`` Qwen3-14B-Base on VERL + SGLang, the report's recipe.
    ``paper-32b`` Qwen2.5-32B-Instruct, stages 1-2 (report Table 6).

Example:
    >>> cfg = load("tiny", seed=3, overrides={"algorithm.lr": 1e-4})
    >>> cfg.algorithm.lr
    0.0001

Modules: :mod:`kit.config.schema` (the frozen dataclasses and their defaults),
:mod:`kit.config.loading` (profiles, overrides, type checks: :func:`load`, :func:`save`,
:func:`from_json`), :mod:`kit.config.checks` (:class:`ConfigError`, :func:`check`,
:func:`check_minimums`). Import every name from ``kit.config``.
"""

from kit.config.checks import (
    POSITIVE_LIMITS,
    RANGES,
    ConfigError,
    check,
    check_agent_r,
    check_bstar,
    check_limits,
    check_minimums,
    check_ranges,
)
from kit.config.loading import PROFILE_DIR, available_profiles, from_json, load, save
from kit.config.schema import (
    LOG_BACKENDS,
    AblationConfig,
    AgentRConfig,
    AlgorithmConfig,
    BStarConfig,
    CriticConfig,
    DataConfig,
    EvalConfig,
    KitConfig,
    LogBackend,
    LoggingConfig,
    ModelConfig,
    RetoolConfig,
    RolloutConfig,
    SandboxConfig,
    SFTConfig,
    StageConfig,
    StagesConfig,
)

__all__ = [
    "LOG_BACKENDS", "POSITIVE_LIMITS", "PROFILE_DIR", "AblationConfig", "AgentRConfig", "BStarConfig", "AlgorithmConfig", "ConfigError", "CriticConfig",
    "DataConfig", "EvalConfig", "KitConfig", "LogBackend", "LoggingConfig", "ModelConfig", "RetoolConfig", "RolloutConfig", "SFTConfig", "SandboxConfig",
    "StageConfig", "StagesConfig", "available_profiles", "check", "check_agent_r", "check_bstar", "check_limits", "check_minimums", "check_ranges",
    "RANGES", "from_json", "load", "save",
]
