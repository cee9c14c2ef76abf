"""Rollout records on the VERL runtime (issue #32): the kit's replay buffers write them.

The one place VERL 0.9.1's v1 trainer hands a step's sampled trajectories to kit code is the
replay buffer's ``sample()`` (:class:`kit.bridge.sampler.KitReplayBuffer`, and for GRPO-RoC
:class:`kit.bridge.roc_hook.RocReplayBuffer`, which also selects). There, for a step the recorder
wants, the buffer reads the final output of every session of the step's P prompts from
TransferQueue (:data:`RECORD_FIELDS`, plus ``rollout_log_probs`` when the rollout computes them)
before RoC drops any, and :class:`VerlRecords` writes them with
:func:`kit.records.records_from_verl`, so both runtimes' files are one schema and one reader.

What VERL's rows cannot give, and the records leave null rather than make up: per-token
entropy (VERL's servers return ids and log-probs only), per-call lists (the agent loop stores
counts per kind), the verifier's reason and the problem id. The advantage is the kit's GRPO
advantage over the kept rows (:func:`kit.algo.group_advantage`, VERL's formula), computed
here: VERL computes its own after the buffer returns (for GRPO the same numbers). With
``algorithm.adv_estimator = "gae"`` (PPO) VERL's advantage comes from its critic after the buffer,
so the records' ``advantage`` is then the GRPO one, not the one VERL trained with (a known gap).

Settings: ``trainer.v1.sampler.sampler_kwargs.records_*``, written by
:func:`kit.bridge.overrides.to_hydra_overrides` from ``[logging]`` (``records_dir`` = the stage's run
folder; ``records_log_probs`` by the CPU runtime, which turns on ``calculate_log_probs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.records import RolloutRecorder, records_from_verl

#: TransferQueue fields of each session's final output a record reads, besides ``rm_scores`` and
#: ``extra_fields`` (which every kit buffer reads anyway)
RECORD_FIELDS = ("prompts", "responses", "response_mask")
LOG_PROBS = "rollout_log_probs"
_BOOL_WORDS = {"true": True, "false": False}


def _flag(v: Any) -> bool:
    if isinstance(v, str) and v.strip().lower() in _BOOL_WORDS:
        return _BOOL_WORDS[v.strip().lower()]
    return bool(v)


@dataclass
class VerlRecords:
    """The recorder of one VERL stage run and what its records are labelled with.

    Attributes:
        recorder: writes ``<records_dir>/rollouts/<stage>/<algorithm>/step_<n>.parquet``.
        stage, algorithm, seed: the records' labels (``kit.records.schema``).
        step_offset: global steps before this stage (a record's ``step`` is ``global_steps - step_offset``,
            as ``metrics.jsonl`` counts it).
        log_probs: read ``rollout_log_probs`` (only when the rollout computes them).
    """

    recorder: RolloutRecorder
    stage: str
    algorithm: str
    seed: int | None
    step_offset: int
    log_probs: bool

    @classmethod
    def from_kwargs(cls, kw: Mapping[str, Any]) -> VerlRecords | None:
        """From ``sampler_kwargs``; None without ``records_dir`` or with ``records_every = 0``.

        Raises:
            KeyError: ``records_dir`` is given without ``records_stage`` / ``records_algorithm`` (named).
            ValueError: a negative ``records_every`` / ``records_max_prompts`` (named).
        """
        if not kw.get("records_dir"):
            return None
        every, most = int(kw.get("records_every", 1)), int(kw.get("records_max_prompts", 0))
        for key, v in (("records_every", every), ("records_max_prompts", most)):
            if v < 0:
                raise ValueError(f"sampler_kwargs.{key} must be >= 0, got {v}")
        if every == 0:
            return None
        for key in ("records_stage", "records_algorithm"):
            if key not in kw:
                raise KeyError(f"trainer.v1.sampler.sampler_kwargs.{key} is required with records_dir")
        seed = kw.get("records_seed")
        return cls(RolloutRecorder(Path(str(kw["records_dir"])), every=every, max_prompts=most or None,
                                   tokenizer_dir=kw.get("records_tokenizer") or None),
                   str(kw["records_stage"]), str(kw["records_algorithm"]), None if seed is None else int(seed),
                   int(kw.get("records_step_offset", 0)), _flag(kw.get("records_log_probs", False)))

    def step(self, global_steps: int) -> int:
        """The stage's 1-based step of VERL's ``global_steps``."""
        return int(global_steps) - self.step_offset

    def fields(self, global_steps: int) -> list[str]:
        """The extra TransferQueue fields to read at this step ([] when it is not recorded)."""
        if not self.recorder.wants(self.step(global_steps)):
            return []
        return [*RECORD_FIELDS, *([LOG_PROBS] if self.log_probs else [])]

    def write(self, global_steps: int, sessions: Sequence[str], data: Any, extras: Sequence[Mapping[str, Any]],
              kept: Any = None, roc: Any = None) -> Path | None:
        """Write the step's records (when it is recorded).

        Args:
            global_steps: VERL's global step.
            sessions: (S,) ``{uid}_{session}`` names (``kit.bridge.sampler.final_outputs``).
            data: the sessions' final outputs from TransferQueue (``rm_scores`` and :meth:`fields`), S rows.
            extras: (S,) their ``extra_fields`` dicts.
            kept: (K,) indices into ``sessions`` RoC kept, or None (GRPO: all).
            roc: the run's ``kit.algo.RocParams`` (p_total's switches), or None.
        Returns:
            The file written, or None.
        """
        step = self.step(global_steps)
        if not self.recorder.wants(step):
            return None
        batch = {"uid": [s.rsplit("_", 1)[0] for s in sessions], "rm_scores": list(data["rm_scores"]),
                 "extra_fields": list(extras), **{k: list(data[k]) for k in RECORD_FIELDS}}
        if self.log_probs:
            batch[LOG_PROBS] = list(data[LOG_PROBS])
        recs = records_from_verl(batch, stage=self.stage, step=step, algorithm=self.algorithm, kept=kept, roc=roc,
                                 seed=self.seed, global_step=int(global_steps))
        return self.recorder.write(recs)
