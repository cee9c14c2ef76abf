"""The one metrics schema and the one ``metrics.jsonl`` reader (both runtimes, every reader).

Every key a run writes to ``metrics.jsonl`` is declared here once: its unit, its **population**
and a one-line meaning, plus the VERL step metric the VERL runtime fills it from
(``kit.bridge.metric_map.METRIC_MAP`` is derived from :data:`RL_KEYS`). The populations:

=========  ===================================================================================
sampled    every rollout of the step's prompts, before RoC keeps G of 2G (GRPO: all of them)
kept       the rows the policy update trained on (RoC's G of 2G; GRPO: all of them)
step       one number for the whole step (a time, a learning rate, a count of rows)
n/a        identifiers of a row (``stage``, ``step``, ``seed``...): not a measurement
=========  ===================================================================================

A key has the same population on both runtimes. VERL's own data metrics (``response_length/*``,
``critic/score/*``, ``num_turns/*``) are over the rows it trains on, so they fill only ``kept``
keys; the kit's replay buffers (``kit.bridge.sampler``, ``kit.bridge.roc_hook``) log the sampled
ones under ``rstar2/<key>``, the names the local tracker gives the same row keys. A key VERL
cannot fill with the declared population has ``verl=None`` and says why: VERL rows leave it out.

One difference of "sampled" remains on VERL: with ``drop_equal_reward_groups`` VERL's buffer
evicts and refills equal-reward groups before the kit sees the batch, so those groups count in no
VERL key, while the local rows count every group sampled.

Also here: the metric-name table of the trackers (:data:`RL_NAMES`, :data:`SFT_NAMES`: kit key to
the name VERL's trainer logs for the same quantity) and the reader :func:`read_rows`.
Imports nothing beyond the standard library.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POPULATIONS = ("sampled", "kept", "step", "n/a")
#: Every kit-specific tracker metric goes under this prefix on both runtimes; VERL's names stay unprefixed.
KIT_PREFIX = "rstar2/"
ROC_PREFIX = KIT_PREFIX + "roc/"  # RoC's selection metrics (kit.bridge.roc_hook.METRIC_PREFIX)


@dataclass(frozen=True)
class Metric:
    """One declared key.

    Attributes:
        unit: ``tokens``, ``seconds``, ``ratio`` (0..1), ``count``, ``reward``, ``calls``, ...
        population: one of :data:`POPULATIONS`.
        meaning: one line.
        verl: VERL step-metric names that fill it on the VERL runtime, first present wins
            (``rstar2/...``: the kit's replay buffers); None: VERL rows lack the key.
        why: why ``verl`` is None (or what the VERL source is), in words.
    """

    unit: str
    population: str
    meaning: str
    verl: tuple[str, ...] | None = None
    why: str = ""


def _roc(key: str) -> tuple[str, str]:
    """RoC's names in VERL's log: ``rstar2/roc/<key>``, then ``roc/<key>`` (before the one prefix)."""
    return f"{ROC_PREFIX}{key}", f"roc/{key}"


_LOCAL = "local trainer only"
_NO_ROC = "GRPO rows lack it (no selection)"
#: Keys of a metrics row that identify it rather than measure something.
IDENTIFIERS = frozenset({"stage", "step", "global_step", "algorithm", "seed", "engine"})

#: Keys of an RL ``metrics.jsonl`` row (local trainer, ``kit.train.rl``; VERL rows: ``kit.bridge.stages``).
RL_KEYS: dict[str, Metric] = {
    "stage": Metric("name", "n/a", "the RL stage (stage1, stage2, ...)", None, "written by the converter"),
    "step": Metric("count", "n/a", "step within the stage, from 1", None, "written by the converter"),
    "global_step": Metric("count", "n/a", "RL step over all stages", None, "written by the converter"),
    "algorithm": Metric("name", "n/a", "grpo, grpo_roc, or ppo / ppo_roc (adv_estimator gae, kit.train.critic)", None,
                        "written by the converter"),
    "seed": Metric("count", "n/a", "the run's seed", None, "written by the converter"),
    "engine": Metric("name", "n/a", "\"verl\" on VERL rows (absent locally)", None, "written by the converter"),
    "reward_mean": Metric("reward", "sampled", "mean outcome reward", (
        KIT_PREFIX + "reward_mean", *_roc("accuracy_before")), "the kit buffer's (the 0/1 reward: RoC's accuracy_before "
        "is the same number); VERL's critic/score/mean is over kept rows"),
    "accuracy": Metric("ratio", "sampled", "share of rollouts with a correct answer", (
        KIT_PREFIX + "accuracy", *_roc("accuracy_before")), "the kit buffer's"),
    "response_len_mean": Metric("tokens", "sampled", "mean response length, tool feedback included", (
        KIT_PREFIX + "response_len_mean",), "the kit buffer's; VERL's response_length/mean is over kept rows "
        "(the tracker's trained_response_len_mean)"),
    "model_tokens_mean": Metric("tokens", "sampled", "mean model-written tokens (response mask 1)", None, _LOCAL),
    "truncation_ratio": Metric("ratio", "sampled", "share of rollouts whose token or turn budget ran out", (
        KIT_PREFIX + "truncation_ratio",), "the kit buffer's; VERL's response_length/clip_ratio is over kept rows"),
    "tool_calls_per_traj": Metric("calls", "sampled", "answered tool calls per rollout (infra failures excluded)",
                                  (KIT_PREFIX + "tool_calls_per_traj",), "the kit buffer's"),
    "tool_use_rate": Metric("ratio", "sampled", "share of rollouts with at least one call", None, _LOCAL),
    "tool_error_ratio_correct": Metric("ratio", "sampled", "failed / answered calls over correct rollouts (NaN: none)",
                                       None, _LOCAL + "; VERL rows have tool_error_ratio_correct_before"),
    "correct_with_error_frac": Metric("ratio", "sampled", "share of correct rollouts with a failed call", None, _LOCAL),
    "tool_error_ratio_correct_before": Metric("ratio", "sampled", "failed / calls over correct rollouts before "
                                              "selection (NaN: none)", _roc("tool_error_ratio_correct_before"), _NO_ROC),
    "tool_error_ratio_correct_after": Metric("ratio", "kept", "the same over the kept rows",
                                             _roc("tool_error_ratio_correct_after"), _NO_ROC),
    "p_format_mean": Metric("ratio", "kept", "RoC's format penalty, mean over kept rows", _roc("p_format_mean"), _NO_ROC),
    "p_format_mean_before": Metric("ratio", "sampled", "RoC's format penalty, mean over sampled rows",
                                   _roc("p_format_mean_before"), _NO_ROC),
    "bstar_balance": Metric("score", "sampled", "B-STaR exploration/exploitation balance (monitoring)", None,
                            _LOCAL + " (needs every response's text)"),
    "kept": Metric("count", "step", "rows the update trained on", _roc("kept"), _NO_ROC),
    "sampled": Metric("count", "step", "rows sampled", _roc("sampled"), _NO_ROC),
    "turns_mean": Metric("turns", "kept", "VERL's num_turns (user + assistant turns + 1) over the trained rows",
                         ("num_turns/mean",), "VERL rows only"),
    "tool_calls_total": Metric("calls", "sampled", "every call of the step, failed ones included", None, _LOCAL),
    # ReTool §3.3's code-interpreter behaviour (kit.analysis.code_behaviour: one definition, both runtimes)
    "code_ratio": Metric("ratio", "sampled", "share of rollouts with at least one interpreter call (ReTool §3.3)",
                         (KIT_PREFIX + "code_ratio",), "the kit buffer's"),
    "code_lines_per_call": Metric("lines", "sampled", "non-blank code lines per call that carried code (NaN: none)",
                                  (KIT_PREFIX + "code_lines_per_call",), "the kit buffer's"),
    "code_pass_rate": Metric("ratio", "sampled", "calls without error / calls (NaN: no call)",
                             (KIT_PREFIX + "code_pass_rate",), "the kit buffer's"),
    "code_pass_rate_correct": Metric("ratio", "sampled", "the same over correct rollouts (NaN: none called)",
                                     (KIT_PREFIX + "code_pass_rate_correct",), "the kit buffer's"),
    "self_corrections": Metric("count", "sampled", "failed calls followed by a successful call in the same rollout",
                               (KIT_PREFIX + "self_corrections",), "the kit buffer's"),
    "self_correction_rate_correct": Metric("ratio", "sampled", "share of correct rollouts with a self-correction "
                                           "(NaN: none correct)", (KIT_PREFIX + "self_correction_rate_correct",),
                                           "the kit buffer's"),
    "first_call_position": Metric("ratio", "sampled", "tokens before the first call / response tokens, mean over "
                                  "rollouts with a call (ReTool's code invocation timing; NaN: none)",
                                  (KIT_PREFIX + "first_call_position",), "the kit buffer's"),
    "time_generate_s": Metric("seconds", "step", "wall seconds of generation (tools and grading inside)",
                              ("timing_s/gen",)),
    "time_tool_s": Metric("seconds", "sampled", "sandbox seconds of every call, summed (concurrent work)",
                          (KIT_PREFIX + "time_tool_s",), "the kit buffer's"),
    "time_verify_s": Metric("seconds", "step", "wall seconds of answer grading", None,
                            "VERL grades inside its reward-loop workers during generation (in timing_s/gen)"),
    "time_update_s": Metric("seconds", "step", "wall seconds of the policy update", ("timing_s/update_actor",)),
    "time_step_s": Metric("seconds", "step", "wall seconds of the whole step", ("timing_s/step",), "VERL rows only"),
    "time_cpu_generate_s": Metric("seconds", "step", "CPU seconds of the process during generation", None, _LOCAL),
    "time_cpu_update_s": Metric("seconds", "step", "CPU seconds of the process during the update", None, _LOCAL),
    "perf_decode_steps": Metric("count", "step", "decode steps of the engine", None, _LOCAL),
    "perf_decoded_tokens": Metric("tokens", "step", "tokens decoded by the engine", None, _LOCAL),
    "perf_row_steps": Metric("count", "step", "row-steps of the engine (rows x steps)", None, _LOCAL),
    "perf_threads": Metric("count", "step", "torch threads", None, _LOCAL),
    "loss": Metric("nats", "kept", "clipped policy-gradient loss (token mean)", None,
                   "the tracker logs it as actor/pg_loss; the converter leaves it out"),
    "grad_norm": Metric("norm", "kept", "gradient norm before clipping", None, "as loss (actor/grad_norm)"),
    "clipfrac": Metric("ratio", "kept", "share of clipped tokens", None, "as loss (actor/pg_clipfrac)"),
    "neg_logp": Metric("nats", "kept", "-mean log p of the trained tokens", None, "as loss (actor/entropy)"),
    "update_tokens": Metric("tokens", "kept", "tokens the update trained on", None, _LOCAL),
    "update_rows_skipped": Metric("count", "kept", "kept rows skipped by the update (too long)", None, _LOCAL),
    # PPO's critic (algorithm.adv_estimator = "gae"; kit.train.critic, VERL's critic worker); absent on GRPO rows
    "value_loss": Metric("reward^2", "kept", "PPO: clipped value loss, half the token-mean squared error (kit.algo.gae)",
                         ("critic/vf_loss",), "VERL's critic worker (workers/utils/losses.py value_loss)"),
    "vf_clipfrac": Metric("ratio", "kept", "PPO: share of model tokens where the value clip won", ("critic/vf_clipfrac",),
                          "VERL's critic worker"),
    "vf_explained_var": Metric("ratio", "kept", "PPO: 1 - Var(returns - values) / Var(returns) over model tokens, "
                               "the rollout's values (before the critic's update)", ("critic/vf_explained_var",),
                               "VERL's data metrics (metric_utils.compute_data_metrics)"),
    "values_mean": Metric("reward", "kept", "PPO: mean critic value over model tokens (before the update)",
                          ("critic/values/mean",), "VERL's data metrics"),
    "critic_grad_norm": Metric("norm", "kept", "PPO: critic gradient norm before clipping", ("critic/grad_norm",),
                               "VERL's critic worker"),
}

#: Keys of an SFT ``metrics.jsonl`` row (``kit.train.sft``).
SFT_KEYS: dict[str, Metric] = {
    "stage": Metric("name", "n/a", "\"sft\""),
    "step": Metric("count", "n/a", "optimizer step, from 1"),
    "global_step": Metric("count", "n/a", "the same"),
    "seed": Metric("count", "n/a", "the run's seed"),
    "loss": Metric("nats", "step", "token-mean cross-entropy of the batch"),
    "lr": Metric("1", "step", "learning rate"),
    "tokens": Metric("tokens", "step", "trained (mask 1) tokens of the batch"),
    "grad_norm": Metric("norm", "step", "gradient norm before clipping"),
    "time_s": Metric("seconds", "step", "wall seconds of the step"),
    "threads": Metric("count", "step", "torch threads"),
}

#: Keys of an RL stage's ``summary.json`` that claims read (``kit.train.sft`` / ``kit.train.rl``).
SUMMARY_KEYS: dict[str, Metric] = {
    "heldout_sampled_reward": Metric("ratio", "sampled", "held-out accuracy of one T=1 sample per problem"),
    "heldout_n": Metric("count", "step", "held-out problems scored"),
    "heldout_problems": Metric("ids", "n/a", "the held-out problems' ids, in order (a list)"),
    "heldout_sampled_correct": Metric("0/1", "sampled", "per held-out problem, in order: its T=1 sample correct (a list)"),
}

#: The population of each VERL step-metric name a key may be filled from (and of VERL's own data
#: metrics, which no sampled key may read): a key's sources must all have its population
#: (``tests/test_metrics_schema.py``; the VERL CPU chain checks its rows against them).
VERL_POPULATION: dict[str, str] = {
    **{KIT_PREFIX + k: "sampled" for k in ("reward_mean", "accuracy", "response_len_mean", "truncation_ratio",
                                            "tool_calls_per_traj", "time_tool_s")},
    **{KIT_PREFIX + k: "sampled" for k in ("code_ratio", "code_lines_per_call", "code_pass_rate", "code_pass_rate_correct",
                                            "self_corrections", "self_correction_rate_correct", "first_call_position")},
    **{p + k: "sampled" for p in (ROC_PREFIX, "roc/")
       for k in ("accuracy_before", "tool_error_ratio_correct_before", "p_format_mean_before")},
    **{p + k: "kept" for p in (ROC_PREFIX, "roc/") for k in ("tool_error_ratio_correct_after", "p_format_mean")},
    **{p + k: "step" for p in (ROC_PREFIX, "roc/") for k in ("kept", "sampled")},
    # VERL's data metrics: over the batch it trains on (after RoC, the kept rows)
    **{n: "kept" for n in ("critic/score/mean", "critic/rewards/mean", "response_length/mean",
                           "response_length/clip_ratio", "num_turns/mean", "prompt_length/mean")},
    **{n: "step" for n in ("timing_s/gen", "timing_s/update_actor", "timing_s/step")},
    # PPO's critic (adv_estimator = "gae"): over the batch it trains on
    **{n: "kept" for n in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vf_explained_var", "critic/values/mean",
                           "critic/grad_norm")},
}

#: Every declared key (what ``kit/reference/claims.yaml`` may name).
DECLARED: frozenset[str] = frozenset(RL_KEYS) | frozenset(SFT_KEYS) | frozenset(SUMMARY_KEYS)

#: Kit RL names -> the names VERL 0.9.1's PPO trainer logs for the same quantity, for the trackers
#: (checked against a real VERL run, ``tests/bridge/golden/verl_step_metrics.txt``). Keys: a local RL
#: row's and :func:`kit.train.tracking.trained_stats`' (``trained_*``: the kept rows, as VERL's data
#: metrics are). Every other number of a row is logged as ``rstar2/<key>``.
RL_NAMES: dict[str, tuple[str, ...]] = {
    "loss": ("actor/pg_loss",),  # the clipped policy-gradient loss (no KL, no entropy term)
    "grad_norm": ("actor/grad_norm",),  # before clipping, as VERL logs it
    "clipfrac": ("actor/pg_clipfrac",),
    # -mean log p of the trained tokens: the sampled-token estimate of the entropy, unbiased at
    # the recipe's rollout temperature 1.0 (VERL averages the exact per-token entropy)
    "neg_logp": ("actor/entropy",),
    "time_generate_s": ("timing_s/gen",),
    "time_update_s": ("timing_s/update_actor",),
    # VERL's data metrics are over the batch it trains on: after RoC, the kept rows
    "trained_score_mean": ("critic/score/mean", "critic/rewards/mean"),  # no KL: score = reward
    "trained_score_max": ("critic/score/max", "critic/rewards/max"),
    "trained_score_min": ("critic/score/min", "critic/rewards/min"),
    "trained_response_len_mean": ("response_length/mean",),  # tokens, tool feedback included
    "trained_response_len_max": ("response_length/max",),
    "trained_response_len_min": ("response_length/min",),
    "trained_truncation_ratio": ("response_length/clip_ratio",),  # the budget ran out
    "trained_prompt_len_mean": ("prompt_length/mean",),
    "trained_num_turns_mean": ("num_turns/mean",),  # VERL's count: user + assistant turns + 1
    "trained_num_turns_max": ("num_turns/max",),
    "trained_num_turns_min": ("num_turns/min",),
    # PPO's critic (adv_estimator = "gae"; the golden list's PPO names)
    "value_loss": ("critic/vf_loss",),
    "vf_clipfrac": ("critic/vf_clipfrac",),
    "vf_explained_var": ("critic/vf_explained_var",),
    "values_mean": ("critic/values/mean",),
    "critic_grad_norm": ("critic/grad_norm",),
}
#: Kit SFT row -> VERL's SFT trainer (``verl.trainer.sft_trainer`` logs ``train/<k>``).
SFT_NAMES: dict[str, tuple[str, ...]] = {
    "loss": ("train/loss",),
    "grad_norm": ("train/grad_norm",),
    "lr": ("train/lr",),
}


# --------------------------------------------------------------------------- reading


class MetricsError(ValueError):
    """A metrics file is missing, malformed, or lacks a key a figure or table needs."""


def read_rows(path: str | os.PathLike, *, missing_ok: bool = False, partial_ok: bool = False) -> list[dict[str, Any]]:
    """The rows of one ``metrics.jsonl`` (one JSON object per line), as written: JSON ``null``
    (an undefined value, e.g. a ratio at a step without a correct rollout) is None.

    Args:
        path: the file. Blank lines are ignored.
        missing_ok: an absent file gives ``[]`` (a run that logged nothing yet) instead of an error.
        partial_ok: a line that is not JSON is skipped (the partial last line of a killed run; the
            trainers' resume reads this way) instead of an error.
    Returns:
        (R,) dicts, in file order.
    Raises:
        MetricsError (a ValueError): the file is missing (unless ``missing_ok``), not UTF-8 text,
            or a line is not a JSON object (unless ``partial_ok``); names the file and the line.
    """
    path = Path(path)
    if not path.exists():
        if missing_ok:
            return []
        raise MetricsError(f"metrics file not found: {path}")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise MetricsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if partial_ok:
                continue
            raise MetricsError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            if partial_ok:
                continue
            raise MetricsError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows
