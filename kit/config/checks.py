"""The config's error type and the rules between keys that one key's type cannot say.

:func:`check` runs on every config :func:`kit.config.load` and :func:`kit.config.from_json`
build; :func:`check_minimums` is the one RoC minimum-count check (rStar2-Agent §2.2.3; the
release's ``min_non_zero_reward_trace_num + min_zero_reward_trace_num <= n``), applied by
:func:`check` and by the RoC code it guards. :mod:`kit.config` re-exports every name.
"""

from __future__ import annotations

import math

from kit.config.schema import KitConfig, SandboxConfig

#: Limits that must be finite and > 0 (issue #30: ``sandbox.timeout_s = 0`` turned every tool call
#: into a timeout counted against the model). ``sandbox.num_workers`` may be 0 (one per core).
POSITIVE_LIMITS: tuple[str, ...] = (
    "sandbox.timeout_s", "sandbox.cpu_s", "sandbox.memory_mb", "sandbox.max_output_chars", "sandbox.max_procs",
    "sandbox.recycle_after", "sandbox.batch_size", "sandbox.send_workers",
    "data.max_answer_digits",  # the verifier's size limit on curated answers (report §4.2)
)

#: Training and sampling keys whose nonsense values a run would otherwise accept and train on
#: (a negative step count trains nothing, ``lr = -1`` ascends the loss, ``n_samples = 0`` divides
#: avg@n by zero at the end of an evaluation). Each entry: key -> (rule, test). Checked by :func:`check`.
RANGES: dict[str, tuple[str, object]] = {
    "algorithm.lr": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "algorithm.group_size": ("an integer >= 1", lambda v: v >= 1),
    "algorithm.oversample": ("an integer >= 1", lambda v: v >= 1),
    "algorithm.prompts_per_step": ("an integer >= 1", lambda v: v >= 1),
    "algorithm.ppo_epochs": ("an integer >= 1", lambda v: v >= 1),
    "algorithm.warmup_steps": ("an integer >= 0", lambda v: v >= 0),
    "algorithm.grad_clip": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "algorithm.clip_ratio_low": ("a number in [0, 1)", lambda v: 0 <= v < 1),
    "algorithm.clip_ratio_high": ("a finite number >= 0", lambda v: math.isfinite(v) and v >= 0),
    "algorithm.gamma": ("a number in [0, 1]", lambda v: 0 <= v <= 1),
    "algorithm.lam": ("a number in [0, 1]", lambda v: 0 <= v <= 1),
    "critic.lr": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "critic.weight_decay": ("a finite number >= 0", lambda v: math.isfinite(v) and v >= 0),
    "critic.cliprange_value": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "critic.ppo_epochs": ("an integer >= 1", lambda v: v >= 1),
    "critic.grad_clip": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "sft.lr": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "sft.batch_size": ("an integer >= 1", lambda v: v >= 1),
    "sft.steps": ("an integer >= 0 (0: derive from sft.epochs)", lambda v: v >= 0),
    "sft.epochs": ("a finite number > 0", lambda v: math.isfinite(v) and v > 0),
    "rollout.temperature": ("a finite number >= 0 (0: greedy)", lambda v: math.isfinite(v) and v >= 0),
    "rollout.top_p": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "rollout.max_response_tokens": ("an integer >= 1", lambda v: v >= 1),
    "rollout.max_turns": ("an integer >= 1", lambda v: v >= 1),
    # the other rollout counts (issue #44 part 9: a negative max_calls_per_turn told the model
    # "at most -1 tool calls are run per turn")
    "rollout.max_prompt_tokens": ("an integer >= 1", lambda v: v >= 1),
    "rollout.max_calls_per_turn": ("an integer >= 1", lambda v: v >= 1),
    "rollout.tool_response_max_tokens": ("an integer >= 1", lambda v: v >= 1),
    "rollout.batch_size": ("an integer >= 1", lambda v: v >= 1),
    "rollout.tool_delay_steps": ("an integer >= 0", lambda v: v >= 0),
    "ablation.steps": ("an integer >= 0", lambda v: v >= 0),
    # the other counts (review of issue #44 part 9: a count < 1 sampled, split or resampled nothing,
    # and a result computed from nothing is NaN or an empty table, found at the end of a run)
    "algorithm.min_positive": ("an integer >= 0", lambda v: v >= 0),
    "algorithm.min_negative": ("an integer >= 0", lambda v: v >= 0),
    "algorithm.update_micro_tokens": ("an integer >= 1", lambda v: v >= 1),
    "sft.max_seq_tokens": ("an integer >= 1", lambda v: v >= 1),
    "sft.checkpoint_every": ("an integer >= 0 (0: only the final policy)", lambda v: v >= 0),
    "data.decontam_ngram": ("an integer >= 1", lambda v: v >= 1),
    "data.consistency_samples": ("an integer >= 1", lambda v: v >= 1),
    "data.consistency_min_matches": ("an integer >= 0", lambda v: v >= 0),
    "data.task_train_size": ("an integer >= 1", lambda v: v >= 1),
    "data.task_heldout_size": ("an integer >= 1", lambda v: v >= 1),
    "data.demo_preamble_max": ("an integer in [0, 6] (kit.data.tasks has six preamble sentences)", lambda v: 0 <= v <= 6),
    "retool.emergence_seeds": ("an integer >= 0 (0: no emergence arm)", lambda v: v >= 0),
    "retool.clean_preamble_max": ("an integer in [0, 6] (kit.data.tasks has six preamble sentences)", lambda v: 0 <= v <= 6),
    "retool.clean_sft_steps": ("an integer >= 0 (0: the run's sft.steps)", lambda v: v >= 0),
    "retool.eval_problems": ("an integer >= 0 (0: all held-out tasks)", lambda v: v >= 0),
    "retool.eval_samples": ("an integer >= 1", lambda v: v >= 1),
    "ablation.workers": ("an integer >= 1", lambda v: v >= 1),
    "eval.bootstrap_samples": ("an integer >= 1", lambda v: v >= 1),
    "eval.consistency_problems": ("an integer >= 0 (0: the whole pool)", lambda v: v >= 0),
    "eval.passk_problems": ("an integer >= 0 (0: all of the source)", lambda v: v >= 0),
    "eval.passk_n": ("an integer >= 1", lambda v: v >= 1),
    "eval.passk_hard_problems": ("an integer >= 0 (0: off)", lambda v: v >= 0),
    "eval.passk_hard_pool": ("an integer >= 0 (0: all of the source)", lambda v: v >= 0),
    "eval.passk_hard_select_n": ("an integer >= 1", lambda v: v >= 1),
    "eval.passk_hard_max_correct": ("an integer >= 0", lambda v: v >= 0),
    "eval.passk_hard_n": ("an integer >= 1", lambda v: v >= 1),
    "eval.n_samples": ("an integer >= 1", lambda v: v >= 1),
    "eval.temperature": ("a finite number >= 0 (0: greedy)", lambda v: math.isfinite(v) and v >= 0),
    "eval.top_p": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "eval.max_tokens": ("an integer >= 1", lambda v: v >= 1),
    "eval.max_turns": ("an integer >= 1", lambda v: v >= 1),
    "eval.max_problems": ("an integer >= 0 (0: all)", lambda v: v >= 0),
}
#: per-stage keys (``stages.<name>.<key>``) held to the same rule
STAGE_RANGES: dict[str, tuple[str, object]] = {
    "steps": ("an integer >= 0", lambda v: v >= 0),
    "max_response_tokens": ("an integer >= 0 (0: rollout.max_response_tokens)", lambda v: v >= 0),
    "max_turns": ("an integer >= 0 (0: rollout.max_turns)", lambda v: v >= 0),
    "checkpoint_every": ("an integer >= 0 (0: none)", lambda v: v >= 0),
    # rollouts per candidate of a "hard" stage's filter (review of issue #44 part 9: -1 and 0 loaded)
    "hard_filter_samples": ("an integer >= 1", lambda v: v >= 1),
}


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


def check_limits(cfg: KitConfig | SandboxConfig) -> None:
    """Every limit of :data:`POSITIVE_LIMITS` is a finite number > 0 and ``sandbox.num_workers >= 0``.

    Takes the whole config (:func:`check` applies it) or a bare :class:`SandboxConfig`
    (``kit.sandbox.SandboxPool`` applies it to what it is given, so a config built in code is
    held to the same rule).

    Raises:
        ConfigError: naming the first bad key and its value, e.g. ``sandbox.timeout_s: must be a
            finite number > 0, got 0.0``.
    """
    sections = {"sandbox": cfg} if isinstance(cfg, SandboxConfig) else {"sandbox": cfg.sandbox, "data": cfg.data}
    for key in POSITIVE_LIMITS:
        section, name = key.split(".")
        if section not in sections:
            continue
        value = getattr(sections[section], name)
        if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{key}: must be a finite number > 0, got {value!r}")
    workers = sections["sandbox"].num_workers
    if workers < 0:
        raise ConfigError(f"sandbox.num_workers: must be >= 0 (0 = one per core), got {workers!r}")


def check_ranges(cfg: KitConfig) -> None:
    """Every key of :data:`RANGES` and, for each stage, of :data:`STAGE_RANGES` holds a value of its
    range, ``data.consistency_min_matches <= data.consistency_samples``, and ``ablation.seeds``
    names each seed once (a repeated seed trained the same arm twice
    and counted it twice in the ablation's interval).

    Raises:
        ConfigError: naming the first bad key and its value, e.g. ``algorithm.lr: must be a finite
            number > 0, got -1.0``, or ``stages.stage2.steps: must be an integer >= 0, got -3``.
    """
    def bad(key: str, rule: str, value: object) -> ConfigError:
        return ConfigError(f"{key}: must be {rule}, got {value!r}")

    for key, (rule, ok) in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if isinstance(value, bool) or not ok(value):
            raise bad(key, rule, value)
    for stage in cfg.stages.items:
        for name, (rule, ok) in STAGE_RANGES.items():
            value = getattr(stage, name)
            if isinstance(value, bool) or not ok(value):
                raise bad(f"stages.{stage.name}.{name}", rule, value)
    d = cfg.data
    if d.consistency_min_matches > d.consistency_samples:
        raise ConfigError(f"data.consistency_min_matches: must be <= data.consistency_samples ({d.consistency_samples}); "
                          f"more matches than answers keeps no problem, got {d.consistency_min_matches}")
    seeds = list(cfg.ablation.seeds)
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ConfigError(f"ablation.seeds: seed {twice[0]} is listed twice in {seeds}; each seed trains one "
                          "GRPO and one GRPO-RoC arm")


def check_agent_r(cfg: KitConfig) -> None:
    """The ``[agent_r]`` values (issue #34): thresholds in [0, 1] with ``beta <= alpha`` of every
    iteration (``r(bad) < beta < r(good)``, ``alpha <= r(good)``), ``eta >= 0``, ``c_uct >= 0``,
    counts >= 1 (``tasks``, ``eval_samples``, ``max_pairs``, ``simulations >= width``) or >= 0,
    a known transition rule, as many alphas as iterations or fewer (the last repeats).

    Raises:
        ConfigError: naming the key and its value.
    """
    a = cfg.agent_r
    if a.iterations < 1:
        raise ConfigError(f"agent_r.iterations: must be >= 1, got {a.iterations}")
    if not a.alphas or any(not 0.0 <= x <= 1.0 for x in a.alphas):
        raise ConfigError(f"agent_r.alphas: need one or more values in [0, 1], got {list(a.alphas)}")
    if not 0.0 <= a.beta <= min(a.alphas):
        raise ConfigError(f"agent_r.beta: must lie in [0, min(alphas)] (r(bad) < beta < r(good), alpha <= r(good)), "
                          f"got beta={a.beta} with alphas {list(a.alphas)}")
    for key in ("eta", "c_uct", "lr", "temperature", "passes"):
        if not (math.isfinite(getattr(a, key)) and getattr(a, key) >= 0):
            raise ConfigError(f"agent_r.{key}: must be a finite number >= 0, got {getattr(a, key)!r}")
    for key in ("width", "tasks", "max_pairs", "eval_samples", "sft_steps"):
        if getattr(a, key) < 1:
            raise ConfigError(f"agent_r.{key}: must be >= 1, got {getattr(a, key)}")
    if a.simulations < a.width:
        raise ConfigError(f"agent_r.simulations: must be >= agent_r.width ({a.width}), got {a.simulations}")
    for key in ("max_response_tokens", "max_turns", "batch_size", "eval_problems", "probe_samples"):
        if getattr(a, key) < 0:
            raise ConfigError(f"agent_r.{key}: must be >= 0 (0 = the default it names), got {getattr(a, key)}")
    if not 0.0 <= a.warmup_ratio < 1.0:
        raise ConfigError(f"agent_r.warmup_ratio: must lie in [0, 1), got {a.warmup_ratio!r}")
    if a.warmup_steps < 0:
        raise ConfigError(f"agent_r.warmup_steps: must be >= 0, got {a.warmup_steps!r}")
    if a.schedule not in ("cosine", "constant"):
        raise ConfigError(f"agent_r.schedule: 'cosine' or 'constant', got {a.schedule!r}")
    if a.train_from not in ("previous", "cold_start"):
        raise ConfigError(f"agent_r.train_from: 'previous' or 'cold_start', got {a.train_from!r}")
    if a.transition not in ("first_failed_call", "value_drop"):
        raise ConfigError(f"agent_r.transition: 'first_failed_call' or 'value_drop', got {a.transition!r}")


def check_bstar(cfg: KitConfig) -> None:
    """The ``[bstar]`` values (issue #47): counts >= 1, temperatures > 0 and thresholds in [0, 1) (a vote
    share above 1 selects nothing), each list non-empty and without repeats, the fixed pair inside those
    ranges, a finite learning rate >= 0 (0: sft.lr) and passes >= 0 (a dev subset as large
    as the training split is refused where the loop runs, :func:`kit.studies.bstar.chain.run_bstar`).

    Raises:
        ConfigError: naming the key and its value.
    """
    b = cfg.bstar
    for key in ("iterations", "tasks", "samples", "dev_problems", "n_star", "sft_steps", "eval_samples"):
        if getattr(b, key) < 1:
            raise ConfigError(f"bstar.{key}: must be >= 1, got {getattr(b, key)}")
    for key in ("batch_size", "eval_problems", "warmup_steps"):
        if getattr(b, key) < 0:
            raise ConfigError(f"bstar.{key}: must be >= 0 (0 = the default it names), got {getattr(b, key)}")
    if not b.temperatures or len(set(b.temperatures)) < len(b.temperatures) or any(
            not (math.isfinite(t) and t > 0) for t in b.temperatures):
        raise ConfigError(f"bstar.temperatures: distinct finite numbers > 0, got {list(b.temperatures)}")
    if not b.thresholds or len(set(b.thresholds)) < len(b.thresholds) or any(not 0 <= t < 1 for t in b.thresholds):
        raise ConfigError(f"bstar.thresholds: distinct vote shares in [0, 1), got {list(b.thresholds)}")
    if not (math.isfinite(b.fixed_temperature) and b.fixed_temperature > 0):
        raise ConfigError(f"bstar.fixed_temperature: a finite number > 0, got {b.fixed_temperature!r}")
    if not 0 <= b.fixed_threshold < 1:
        raise ConfigError(f"bstar.fixed_threshold: a vote share in [0, 1), got {b.fixed_threshold!r}")
    if not (math.isfinite(b.lr) and b.lr >= 0):
        raise ConfigError(f"bstar.lr: must be a finite number >= 0 (0 = sft.lr), got {b.lr!r}")
    if not (math.isfinite(b.passes) and b.passes >= 0):
        raise ConfigError(f"bstar.passes: must be a finite number >= 0 (0 = bstar.sft_steps), got {b.passes!r}")



def check(cfg: KitConfig) -> KitConfig:
    """Rules between keys that one key's type cannot say; returns ``cfg`` unchanged.

    Raises:
        ConfigError: ``data.source = "tasks"`` with ``runtime = "verl"`` (VERL reads the curated
            parquet, :mod:`kit.data.pool`); RoC minimums that do not fit in G (:func:`check_minimums`); a tracker listed twice in
            ``logging.backends``; an entry of ``sandbox.preimport`` that is not a dotted module
            name (``""``, ``"[]"``, ``"numpy scipy"``), caught here before a run; a well-formed
            name that does not import fails when the sandbox starts (:mod:`kit.sandbox.workers`);
            a limit of :data:`POSITIVE_LIMITS` that is not a finite number > 0, or a negative
            ``sandbox.num_workers``, or a ``logging.records_every`` / ``records_max_prompts``
            that is not a whole number >= 0 (the message names the key and the value); a training
            or sampling key outside its range, or a repeated ablation seed (:func:`check_ranges`);
            a bad ``[agent_r]`` value (:func:`check_agent_r`); a bad ``[bstar]`` value (:func:`check_bstar`).
    """
    check_limits(cfg)
    check_ranges(cfg)
    check_agent_r(cfg)
    check_bstar(cfg)
    if cfg.runtime == "verl" and cfg.data.source == "tasks":
        raise ConfigError("data.source: 'tasks' (the generated task family) is the local runtime's pool; VERL trains on "
                          "<01 run>/data/curated.parquet: set data.source='curated' (or 'auto'), or runtime='local'")
    a = cfg.algorithm
    try:
        check_minimums(a.group_size, a.min_positive, a.min_negative)
    except ConfigError as exc:  # the ablation runs a RoC arm whatever algorithm.selection says
        raise ConfigError(f"algorithm: {exc}") from None
    twice = sorted({b for b in cfg.logging.backends if cfg.logging.backends.count(b) > 1})
    if twice:
        raise ConfigError(f"logging.backends: {twice[0]!r} is listed twice in {list(cfg.logging.backends)}")
    for key in ("records_every", "records_max_prompts"):
        value = getattr(cfg.logging, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"logging.{key}: must be a whole number >= 0 (0 = "
                              f"{'no records' if key == 'records_every' else 'every prompt'}), got {value!r}")
    for i, name in enumerate(cfg.sandbox.preimport):
        if not (isinstance(name, str) and all(part.isidentifier() for part in name.split("."))):
            raise ConfigError(f"sandbox.preimport[{i}]: {name!r} is not a module name (e.g. \"numpy\", \"scipy.special\"); "
                              "an empty list is written [] in a profile and sandbox.preimport= on a command line")
    return cfg
