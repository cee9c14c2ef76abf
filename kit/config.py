"""Every knob of the kit, in frozen dataclasses, with the paper's values as defaults.

Config flows one way: the defaults below (rStar2-Agent report, arXiv 2508.20722, section cited
beside each group), then a named profile file from ``kit/profiles/<name>.toml``, then overrides
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
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


class ConfigError(ValueError):
    """An unknown key, a wrong type or a bad value in a profile or an override."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model (report §4.1: Qwen3-14B-Base; Table 6: Qwen2.5-32B-Instruct).

    ``name_or_path = "tiny"`` builds a Qwen3ForCausalLM from scratch with the sizes below and a
    locally trained tokenizer; anything else is a local path or a hub id loaded with
    ``from_pretrained`` (the tiny path never downloads).
    """

    name_or_path: str = "Qwen/Qwen3-14B-Base"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 2048
    tokenizer_vocab_size: int = 1024  # tiny tokenizer target; the trained vocab may be smaller
    tie_word_embeddings: bool = True
    dtype: str = "bfloat16"  # tiny: float32 (CPU)
    torch_threads: int = 0  # 0 = torch default; n > 0 fixed; -n adaptive up to n (kit.train.common.set_threads)


@dataclass(frozen=True)
class DataConfig:
    """Data directory, curation filters and the tiny task family (report §4.2)."""

    data_dir: str = ""  # empty: KIT_DATA_DIR, else ../shared/data beside the checkout
    train_pools: tuple[str, ...] = ("dapo", "openmathreasoning", "project_euler", "aime_history", "gsm8k")
    max_answer_digits: int = 18  # report §4.2 drops answers too large for the verifier (6.5e27330467)
    decontam_ngram: int = 8  # drop training problems sharing an 8-gram with a benchmark
    decontam_benchmarks: tuple[str, ...] = ("aime24", "aime25", "math500", "hmmt25")
    consistency_samples: int = 16  # report §4.2: keep when >= 2 of 16 answers match the label
    consistency_min_matches: int = 2
    # tiny task family (kit.data.tasks): generated integer-answer problems that need the tool
    task_train_size: int = 4000
    task_heldout_size: int = 128
    task_families: tuple[str, ...] = ("product", "digit_sum_factorial", "divisor_count", "mod_pow",
                                      "gcd_lcm", "prime_count", "range_sum")
    demo_error_fraction: float = 0.25  # SFT demos whose first tool call fails and is then fixed
    demo_direct_fraction: float = 0.2  # SFT demos that answer without the tool (a guess RL can fix)


@dataclass(frozen=True)
class SandboxConfig:
    """The code execution service (report §3.1)."""

    isolation: Literal["bwrap", "none"] = "bwrap"  # "none" only when asked for explicitly
    timeout_s: float = 10.0  # wall clock per call
    cpu_s: float = 10.0  # RLIMIT_CPU per call
    memory_mb: int = 1024  # RLIMIT_AS per call (256 MB hangs scipy imports)
    max_output_chars: int = 8192  # stdout/stderr cap per call, with a visible marker
    max_procs: int = 64  # processes per call (PID namespace / pids cgroup; NPROC ignores root)
    num_workers: int = 0  # warm workers; 0 = one per core
    recycle_after: int = 500  # calls before a worker is replaced
    batch_size: int = 64  # calls per send-worker batch (report §3.1)
    send_workers: int = 32  # report §3.1
    backend: Literal["local", "ray"] = "local"


@dataclass(frozen=True)
class RolloutConfig:
    """Multi-turn agent rollout (report §2, §2.1)."""

    engine: Literal["hf", "sglang"] = "sglang"
    max_prompt_tokens: int = 2048
    # the training budget shared across turns (tool tokens included) and the turn limit: the one
    # source of every RL stage that does not set its own (stages.<s>.max_response_tokens /
    # max_turns override it explicitly); evaluation always uses eval.max_tokens / max_turns
    max_response_tokens: int = 8192
    max_turns: int = 10
    temperature: float = 1.0  # report §4.3: training temperature 1.0
    top_p: float = 1.0
    max_calls_per_turn: int = 4
    tool_response_max_tokens: int = 1024  # truncation of tool feedback, by tokens, with a marker
    tool_name: str = "execute_python_code_with_standard_io"
    batch_size: int = 64  # tiny engine: concurrent rows (continuous batching slots)
    scheduler: Literal["dynamic", "static"] = "dynamic"  # report §3.2 load balancing
    # VERL runtime (report §3.2): which balancer routes rollout requests across inference engines.
    # "kv_cache": the kit's KV-cache-aware balancer (kit.sched.KvCacheBalancer through
    # kit.bridge.kv_router: most free KV first, a trajectory stays on the engine holding its prefix
    # unless that engine is overloaded); "verl": VERL 0.9.1's own (sticky + fewest in-flight)
    balancer: Literal["kv_cache", "verl"] = "kv_cache"


@dataclass(frozen=True)
class AlgorithmConfig:
    """GRPO-RoC (report §2.2) and the optimizer (report §4.3)."""

    name: Literal["grpo_roc", "grpo"] = "grpo_roc"
    group_size: int = 16  # G, trajectories kept per prompt
    oversample: int = 32  # 2G trajectories sampled per prompt when RoC is on
    prompts_per_step: int = 512  # P
    roc_mode: Literal["sample", "rank"] = "sample"  # report: sample by 1/p_total; release: rank
    roc_use_error_ratio: bool = True
    roc_use_answer_format: bool = True
    roc_reading: Literal["counters", "text"] = "counters"  # text: the release's decoded-text p_err/p_format
    roc_negative_order: Literal["random", "rollout"] = "random"  # release (PR #50): first k negatives in rollout order
    min_positive: int = 2  # release: min_non_zero_reward_trace_num
    min_negative: int = 2  # release: min_zero_reward_trace_num
    drop_equal_reward_groups: bool = True  # DAPO-style, as released
    adv_eps: float = 1e-6
    clip_ratio_low: float = 0.2  # Clip-Higher (report §2.2.1)
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0  # VERL's dual clip on negative advantages (kept on by default)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_coef: float = 0.0  # no KL term (report §2.2.1)
    entropy_coef: float = 0.0  # no entropy term
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    warmup_steps: int = 20
    ppo_epochs: int = 1


@dataclass(frozen=True)
class SFTConfig:
    """Non-reasoning cold-start SFT (report §4.1)."""

    lr: float = 5e-6
    batch_size: int = 128
    steps: int = 0  # 0: derive from epochs
    epochs: int = 3
    warmup_ratio: float = 0.04
    schedule: Literal["cosine", "constant"] = "cosine"
    max_seq_tokens: int = 8192
    function_calling_sets: tuple[str, ...] = ("glaive", "toolace", "xlam", "reason_tool_use")
    task_demo_fraction: float = 0.8  # share of SFT rows that are task tool-use demonstrations
    min_lr_ratio: float = 0.1
    checkpoint_every: int = 100  # steps between checkpoints (0 = only the final policy)


@dataclass(frozen=True)
class StageConfig:
    """One RL stage (report §4.3). A budget or turn limit of 0 takes ``rollout``'s (resolved when
    the :class:`KitConfig` is built, so a loaded config holds the number)."""

    max_response_tokens: int = 0  # 0: rollout.max_response_tokens
    max_turns: int = 0  # 0: rollout.max_turns
    steps: int = 300
    problems: Literal["all", "hard"] = "all"
    difficulty: int = 1  # tiny task level for this stage
    reset_optimizer: bool = False
    hard_filter_samples: int = 8  # stage 3: drop problems solved 8/8 by the latest policy
    checkpoint_every: int = 10  # steps between checkpoints (0 = none); resume starts at the last one


@dataclass(frozen=True)
class StagesConfig:
    """The three RL stages of the recipe (report §4.3; 300 + 85 + 125 = 510 steps; budgets 8K
    (``rollout``'s), 12K, 12K tokens; 10, 10, 15 turns)."""

    stage1: StageConfig = field(default_factory=lambda: StageConfig(0, 0, 300, "all", 1, False))
    stage2: StageConfig = field(default_factory=lambda: StageConfig(12288, 0, 85, "all", 2, False))
    stage3: StageConfig = field(default_factory=lambda: StageConfig(12288, 15, 125, "hard", 3, True))


@dataclass(frozen=True)
class AblationConfig:
    """The RoC ablation (report §5.3, Figure 9): GRPO against GRPO-RoC, same seed and steps."""

    steps: int = 300
    seeds: tuple[int, ...] = (0,)
    # local engine: arms trained at once in separate processes, each with
    # model.torch_threads // workers threads (a step is latency-bound, so 2 on 2 cores ~1.5x)
    workers: int = 1


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol (report §5: avg@16, temperature 0.6, up to 30K tokens and 30 turns)."""

    benchmarks: tuple[str, ...] = ("aime24", "aime25", "math500", "hmmt25")
    n_samples: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 30000
    max_turns: int = 30
    max_problems: int = 0  # 0 = all problems of each benchmark
    gpqa_path: str = ""  # GPQA-Diamond is user-supplied (its licence forbids redistribution)
    bootstrap_samples: int = 1000
    # report §4.2 consistency filter (keep a problem when >= data.consistency_min_matches of
    # data.consistency_samples answers match its label), run in 08_evaluation with the profile's
    # policy on a sample of the curated pool; 0 = the whole pool, as the report (~42K problems x 16
    # rollouts: a cluster job, set a sample size when the policy is served for a quick check)
    consistency_problems: int = 0
    # pass@k boundary curves, base (cold-start SFT) vs RL on the same problems (Yue et al. 2025):
    # problems (0 = all of the source: the first benchmark on paper profiles, held-out tasks on CPU
    # ones) and samples per problem (k = 1..passk_n; the report's n = 16)
    passk_problems: int = 0
    passk_n: int = 16


#: Experiment trackers the kit passes to VERL's ``verl.utils.tracking.Tracking`` (VERL 0.9.1 also knows
#: swanlab, clearml, vemlp_wandb and rl_insight; they are left out because they log to a server by
#: default). ``tests/bridge/test_tracking.py`` checks each name against VERL's ``supported_backend``.
LogBackend = Literal["console", "file", "tensorboard", "wandb", "mlflow", "trackio"]
LOG_BACKENDS: tuple[str, ...] = typing.get_args(LogBackend)


@dataclass(frozen=True)
class LoggingConfig:
    """Experiment tracking through VERL's tracker, on both runtimes (``kit.bridge.tracking``).

    ``backends`` becomes VERL's ``trainer.logger`` on the VERL runtime; the local trainer logs
    the same metric names through the same tracker class. Every backend writes under the run
    folder (``run_dir/tracking/``) and nothing reaches the network unless asked for here:
    wandb runs with ``WANDB_MODE=wandb_mode`` (offline by default), mlflow uses a local file store
    unless ``mlflow_tracking_uri`` names a server. ``metrics.jsonl`` is written whatever this says.
    """

    backends: tuple[LogBackend, ...] = ("console", "file", "tensorboard")
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"  # "online" syncs to your W&B account
    mlflow_tracking_uri: str = ""  # empty: file:<run_dir>/tracking/mlruns; a server URI sends metrics there


@dataclass(frozen=True)
class KitConfig:
    """The whole resolved configuration of one run.

    Cross-field rules (checked by :func:`load` and :func:`from_json`, see :func:`check`):
    ``runtime = "local"`` samples with the kit's own engine, so it needs ``rollout.engine = "hf"``.
    """

    profile: str = "paper-14b"
    run_dir: str = ""
    seed: int = 0
    device: str = "cuda"
    # who trains (kit.runtime): "local" = the CPU engine of kit.train in this process (tiny,
    # smoke); "verl" = VERL through kit.bridge (paper profiles). The one switch between them.
    runtime: Literal["local", "verl"] = "verl"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        # stages without their own budget or turn limit take rollout's (the one source)
        r, resolved = self.rollout, {}
        for name in ("stage1", "stage2", "stage3"):
            st = getattr(self.stages, name)
            if st.max_response_tokens == 0 or st.max_turns == 0:
                resolved[name] = dataclasses.replace(st, max_response_tokens=st.max_response_tokens or r.max_response_tokens,
                                                     max_turns=st.max_turns or r.max_turns)
        if resolved:
            object.__setattr__(self, "stages", dataclasses.replace(self.stages, **resolved))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples become lists), as written to ``config.json``."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


# --------------------------------------------------------------------------- loading


def available_profiles() -> list[str]:
    """Names of the profile files shipped in ``kit/profiles``."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def _read_profile(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ConfigError(f"unknown profile {name!r}; available: {', '.join(available_profiles())}")
    if name in seen:
        raise ConfigError(f"profile inheritance cycle: {' -> '.join((*seen, name))}")
    with path.open("rb") as fh:
        try:
            raw = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    parent = raw.pop("inherit", None)
    base = _read_profile(parent, (*seen, name)) if parent else {}
    return _deep_merge(base, raw)


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Turn ``{"a.b": 1, "a__c": 2, "d": {...}}`` into nested dicts."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.replace("__", ".").split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r} conflicts with another override of {part!r}")
        if isinstance(value, Mapping):
            node[parts[-1]] = _deep_merge(node.get(parts[-1], {}), _nest(value))
        else:
            node[parts[-1]] = value
    return out


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; strings from a CLI are parsed."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (tuple, Sequence) or tp is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        (item_tp, *_rest) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} does not match {tp}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected bool, got {type(value).__name__} {value!r}")
        return value
    if tp is int:
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{key}: expected int, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected int, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected float, got {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected float, got {type(value).__name__} {value!r}")
        else:
            number = float(value)
        if not math.isfinite(number):  # config.json is strict JSON: no NaN or Infinity in it
            raise ConfigError(f"{key}: expected a finite float, got {value!r}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected str, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp}")


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        where = f" in [{prefix.rstrip('.')}]" if prefix else ""
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}'{where}; known keys: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    default = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            sub = values.get(f.name, {})
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{key}: is a section; set its keys as {key}.<name>")
            # start from the parent's default for this section (e.g. StagesConfig's stage2), as
            # declared (KitConfig() has already filled its stages' budgets from rollout's)
            declared = f.default_factory() if f.default_factory is not dataclasses.MISSING else getattr(default, f.name)
            base = dataclasses.asdict(declared)
            kwargs[f.name] = _build(tp, _deep_merge(_flatten_one(base, tp), sub), f"{key}.")
        elif f.name in values:
            kwargs[f.name] = _coerce(values[f.name], tp, key)
    return cls(**kwargs)


def _flatten_one(base: dict[str, Any], tp: type) -> dict[str, Any]:
    """asdict() output restricted to what ``_build`` accepts (it re-checks every value)."""
    return {k: v for k, v in base.items() if k in {f.name for f in dataclasses.fields(tp)}}


def load(
    profile: str = "tiny",
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    write: bool = True,
    **kwargs: Any,
) -> KitConfig:
    """Resolve a profile plus overrides into a :class:`KitConfig`.

    Args:
        profile: name of a file in ``kit/profiles`` (``tiny``, ``smoke``, ``paper-14b``,
            ``paper-32b``).
        overrides: a mapping with dotted keys (``{"algorithm.lr": 1e-4}``) or nested dicts, or
            ``["algorithm.lr=1e-4", ...]`` strings from a command line.
        write: write ``run_dir/config.json`` when ``run_dir`` is set.
        **kwargs: more overrides; papermill parameters pass straight through (``seed=3``,
            ``run_dir="runs/x"``); ``algorithm__lr=1e-4`` is the same as ``algorithm.lr``.
    Returns:
        The frozen, type-checked config.
    Raises:
        ConfigError: an unknown profile, an unknown key or a value of the wrong type; the
            message names the dotted key.
    """
    values = _read_profile(profile)
    values["profile"] = profile
    if overrides is not None and not isinstance(overrides, Mapping):
        parsed: dict[str, Any] = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value")
            k, v = item.split("=", 1)
            parsed[k.strip()] = v.strip()
        overrides = parsed
    merged = _deep_merge(values, _nest(dict(overrides or {})))
    merged = _deep_merge(merged, _nest(kwargs))
    cfg = check(_build(KitConfig, merged, ""))
    if write and cfg.run_dir:
        save(cfg, cfg.run_dir)
    return cfg


def save(cfg: KitConfig, run_dir: str | os.PathLike) -> Path:
    """Write ``cfg`` as ``run_dir/config.json`` and return the path."""
    path = Path(run_dir) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    return path


def from_json(path: str | os.PathLike) -> KitConfig:
    """Read a ``config.json`` written by :func:`save` back into a :class:`KitConfig`.

    Raises:
        ConfigError: the file holds unknown keys or wrong types (e.g. written by another
            version of the kit); the message names the file and the key.
    """
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "runtime" not in data:  # written before ``runtime`` existed
        data["runtime"] = "verl" if data.get("rollout", {}).get("engine") == "sglang" else "local"
    try:
        return check(_build(KitConfig, data, ""))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def check_minimums(group_size: int, min_positive: int, min_negative: int) -> None:
    """The one check that G rows can hold both RoC minimum counts (release:
    ``min_non_zero_reward_trace_num + min_zero_reward_trace_num <= n``); :func:`check` applies it
    to ``[algorithm]``, ``kit.algo.roc`` (which re-exports it) and ``kit.bridge.overrides`` to what
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
        ConfigError: ``runtime = "local"`` with a rollout engine other than ``"hf"`` (the local
            runtime samples with the tiny engine of ``kit.train``; SGLang runs under VERL);
            RoC minimums that do not fit in G (:func:`check_minimums`); a tracker listed twice in
            ``logging.backends``.
    """
    if cfg.runtime == "local" and cfg.rollout.engine != "hf":
        raise ConfigError(f"runtime: 'local' trains with the kit's own engine and needs rollout.engine='hf', "
                          f"got rollout.engine={cfg.rollout.engine!r}; set runtime='verl' to train in VERL")
    a = cfg.algorithm
    try:
        check_minimums(a.group_size, a.min_positive, a.min_negative)
    except ConfigError as exc:  # the ablation runs a grpo_roc arm whatever algorithm.name says
        raise ConfigError(f"algorithm: {exc}") from None
    twice = sorted({b for b in cfg.logging.backends if cfg.logging.backends.count(b) > 1})
    if twice:
        raise ConfigError(f"logging.backends: {twice[0]!r} is listed twice in {list(cfg.logging.backends)}")
    return cfg
