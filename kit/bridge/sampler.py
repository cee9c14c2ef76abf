"""The kit's VERL v1 replay buffer: every training step's tool metrics, on GRPO and GRPO-RoC alike.

VERL 0.9.1's v1 trainer logs nothing about tools, and its agent-loop timings
(``AgentLoopMetrics``) do not reach the step metrics. The kit's agent loop
(:mod:`kit.bridge.agent_loop`) writes per-trajectory counters into ``extra_fields``; the one place
the stock trainer hands the sampled trajectories of a step to kit code, on the stock entry point,
is the replay buffer's ``sample()`` (``trainer.v1.sampler.custom_sampler``). So both algorithms
run a kit buffer: :class:`KitReplayBuffer` (GRPO; otherwise VERL's ``ReplayBuffer`` as the
trainer builds it for the kit's settings: no group filter, ``gen_batch_size = train_batch_size``)
and its subclass :class:`kit.bridge.roc_hook.RocReplayBuffer` (GRPO-RoC, which also selects).

Both add to VERL's step metrics (:func:`tool_metrics`, :func:`sampled_metrics`), under the names
the local trainer's tracker gives the same row keys (``kit.train.tracking.tracker_metrics``:
``rstar2/<key>``), so a dashboard shows one curve per quantity for both runtimes, and
``kit.bridge.metric_map.METRIC_MAP`` turns them back into the kit keys ``tool_calls_per_traj``,
``time_tool_s``, ``reward_mean``, ``accuracy``, ``response_len_mean``, ``truncation_ratio`` and
ReTool's code-interpreter behaviour (:func:`behaviour_metrics`, ``code_ratio`` ...):
the keys :mod:`kit.metrics` declares over the sampled population, which VERL's own data metrics
(over the rows it trains on: RoC's kept G) cannot fill.

Both leave out the sessions the verifier could not grade (``reward_extra_info["reason"] ==
"infra_error"``, :func:`graded_rows`), as the local trainer does (``kit.train.update.select``):
they enter neither their group's advantage, nor RoC's selection, nor the loss (a group left with
one graded session gets GRPO's group-of-one advantage, its score, on both runtimes).

Both also write the step's rollout records (:mod:`kit.bridge.verl_records`, ``sampler_kwargs.records_*``):
every session's final output before RoC selects, with RoC's decision.

Which trajectories count: the final output of every session of the P prompts the step trains on,
before RoC keeps G of 2G (as the local trainer's ``kit.train.rollouts.batch_stats`` counts every
sampled rollout). One difference remains, from VERL's refill: groups the equal-reward (DAPO)
filter evicts and replaces are not in the sampled batch, so they are counted neither here nor in
``rstar2/roc/accuracy_before``, while the local trainer counts every group it sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from kit.analysis import code_behaviour
from kit.bridge.verl_records import VerlRecords
from kit.metrics import KIT_PREFIX
from kit.reward.pool import INFRA_ERROR

#: extra_fields keys (written by ``kit.bridge.agent_loop.trajectory_to_output``) the tool metrics read.
TOOL_KEYS = ("tool_calls", "infra_errors", "tool_wall_s")
#: extra_fields keys :func:`sampled_metrics` reads (``response_tokens``: the response's token count,
#: tool feedback included, as VERL stores it; ``truncated``: the token or turn budget ran out).
SAMPLED_KEYS = ("response_tokens", "truncated")


def tool_metrics(extra_fields: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The step's tool metrics from its N sampled trajectories' ``extra_fields``.

    The same quantities as the local trainer's row (``kit.train.rollouts.batch_stats`` and
    ``kit.train.rollouts.collect``):

    * ``rstar2/tool_calls_per_traj``: mean over the N trajectories of the answered tool calls
      (``tool_calls`` - ``infra_errors``: malformed and over-the-limit calls count, calls the
      sandbox service failed do not); calls per trajectory.
    * ``rstar2/time_tool_s``: sum over the N trajectories of every call's sandbox wall seconds
      (``tool_wall_s``, :attr:`kit.rollout.loop.CallRecord.wall_s` summed). Calls run concurrently
      with each other and with generation, so this is tool work, not added step time.

    Args:
        extra_fields: (N,) dicts holding :data:`TOOL_KEYS`.
    Returns:
        The two floats; ``{}`` when N = 0.
    Raises:
        KeyError: a trajectory lacks a key (names the row and the key: an agent loop other than
            the kit's ``rstar2_kit`` wrote it).
        ValueError: a value is not a finite number >= 0 (names the row and the key).
    """
    calls, wall = 0.0, 0.0
    for i, extra in enumerate(extra_fields):
        values = {}
        for key in TOOL_KEYS:
            if key not in extra:
                raise KeyError(f"trajectory {i} has no {key!r} in extra_fields (have {sorted(extra)}); "
                               "the kit's agent loop (rstar2_kit) writes it")
            try:
                values[key] = float(extra[key])
            except (TypeError, ValueError):
                values[key] = float("nan")
            if not (math.isfinite(values[key]) and values[key] >= 0):
                raise ValueError(f"trajectory {i}: extra_fields[{key!r}] = {extra[key]!r} is not a number >= 0")
        calls += values["tool_calls"] - values["infra_errors"]
        wall += values["tool_wall_s"]
    n = len(extra_fields)
    if n == 0:
        return {}
    return {KIT_PREFIX + "tool_calls_per_traj": calls / n, KIT_PREFIX + "time_tool_s": wall}


def sampled_metrics(extra_fields: Sequence[Mapping[str, Any]], scores: Sequence[float]) -> dict[str, float]:
    """The step's sampled-population means from its N sampled trajectories (before RoC selects).

    The same quantities as the local row's ``kit.train.rollouts.batch_stats`` (``kit.metrics``
    declares them ``sampled``): ``rstar2/reward_mean`` (mean reward), ``rstar2/accuracy`` (share
    with reward > 0), ``rstar2/response_len_mean`` (tokens per trajectory, tool feedback included)
    and ``rstar2/truncation_ratio`` (share whose budget ran out).

    Args:
        extra_fields: (N,) dicts holding :data:`SAMPLED_KEYS` (the kit's agent loop writes them).
        scores: (N,) each trajectory's summed reward (``rm_scores.sum()``).
    Returns:
        The four floats; ``{}`` when N = 0.
    Raises:
        KeyError: a trajectory lacks a key (names the row and the key).
        ValueError: N differs between the two arguments, or a length is not a number >= 0 (names the row).
    """
    n = len(extra_fields)
    if len(scores) != n:
        raise ValueError(f"sampled_metrics: {n} trajectories but {len(scores)} scores")
    if n == 0:
        return {}
    lengths, truncated = [], []
    for i, extra in enumerate(extra_fields):
        for key in SAMPLED_KEYS:
            if key not in extra:
                raise KeyError(f"trajectory {i} has no {key!r} in extra_fields (have {sorted(extra)}); "
                               "the kit's agent loop (rstar2_kit) writes it")
        try:
            length = float(extra["response_tokens"])
        except (TypeError, ValueError):
            length = float("nan")
        if not (math.isfinite(length) and length >= 0):
            raise ValueError(f"trajectory {i}: extra_fields['response_tokens'] = {extra['response_tokens']!r} "
                             "is not a number >= 0")
        lengths.append(length)
        truncated.append(bool(extra["truncated"]))
    r = [float(x) for x in scores]
    return {KIT_PREFIX + "reward_mean": sum(r) / n, KIT_PREFIX + "accuracy": sum(x > 0 for x in r) / n,
            KIT_PREFIX + "response_len_mean": sum(lengths) / n, KIT_PREFIX + "truncation_ratio": sum(truncated) / n}


def behaviour_metrics(extra_fields: Sequence[Mapping[str, Any]], scores: Sequence[float]) -> dict[str, float]:
    """ReTool §3.3's code-interpreter behaviour of the step's N sampled trajectories (before RoC
    selects): :func:`kit.analysis.code_behaviour.step_metrics` over the summaries the kit's agent
    loop wrote (:meth:`kit.analysis.code_behaviour.CodeUse.fields`), correct = score > 0, under
    ``rstar2/<key>``, the local row's keys. Undefined ratios (NaN: no call, no correct trajectory)
    are left out, so VERL's trackers get no NaN.

    Raises:
        KeyError: a trajectory lacks a summary key (names the row and the key).
        ValueError: N differs between the two arguments.
    """
    if len(scores) != len(extra_fields):
        raise ValueError(f"behaviour_metrics: {len(extra_fields)} trajectories but {len(scores)} scores")
    if not extra_fields:
        return {}
    uses = [code_behaviour.CodeUse.from_fields(e, int(e.get("response_tokens", 0)), f"trajectory {i}")
            for i, e in enumerate(extra_fields)]
    m = code_behaviour.step_metrics(uses, [float(x) > 0 for x in scores])
    return {KIT_PREFIX + k: v for k, v in m.items() if math.isfinite(v)}


def verifier_reasons(extra_fields: Sequence[Any]) -> list[str | None]:
    """(N,) the verifier's reason of each trajectory, as VERL 0.9.1 stores it.

    :func:`kit.bridge.reward_fn.compute_score` returns ``reason`` beside ``score``; VERL's reward
    loop keeps every key of that dict as ``reward_extra_info``, which the agent-loop worker puts
    in the final output's ``extra_fields["reward_extra_info"]`` (v1, TransferQueue; the v0
    ``DataProto`` also spreads it into a ``reason`` column of ``non_tensor_batch``).

    Args:
        extra_fields: (N,) ``extra_fields`` dicts (or VERL's ``NonTensorData`` around them).
    Returns:
        (N,) the reason, or None where a row carries none (a reward function without it).
    """
    out: list[str | None] = []
    for extra in extra_fields:
        extra = getattr(extra, "data", extra)
        info = extra.get("reward_extra_info") if isinstance(extra, Mapping) else None
        info = getattr(info, "data", info)
        reason = info.get("reason") if isinstance(info, Mapping) else None
        out.append(None if reason is None else str(getattr(reason, "data", reason)))
    return out


def graded_rows(reasons: Sequence[str | None]) -> np.ndarray:
    """Ascending indices of the rows the verifier graded: every row but those it answered
    ``infra_error`` (a verifier worker killed or starved twice, :mod:`kit.reward.pool`; never the
    model's fault). The local trainer leaves such rows out of the update
    (:func:`kit.train.update.select`); the VERL buffers do the same with these indices, so the rows
    enter neither their group's advantage nor RoC's selection nor the loss (issue #44 item 5).

    Returns:
        (K,) int64 indices, K <= N.
    """
    return np.asarray([i for i, r in enumerate(reasons) if r != INFRA_ERROR], dtype=np.int64)


def keep_sessions(meta: KVBatchMeta, sessions: Sequence[str], kept: Sequence[int]) -> KVBatchMeta:
    """The sampled batch cut to the sessions ``kept`` (indices into ``sessions``): every output of
    a kept session, in ``meta``'s order; the other sessions' outputs are cleared from TransferQueue
    (they will not be trained on, and the trainer clears only what it is handed)."""
    kept_names = {sessions[int(i)] for i in kept}
    keep = [i for i, key in enumerate(meta.keys) if key.rsplit("_", 1)[0] in kept_names]
    rejected = [key for key in meta.keys if key.rsplit("_", 1)[0] not in kept_names]
    if rejected:
        tq.kv_clear(keys=rejected, partition_id=meta.partition_id)
    return KVBatchMeta(partition_id=meta.partition_id, keys=[meta.keys[i] for i in keep],
                       tags=[meta.tags[i] for i in keep])


def final_outputs(keys: Sequence[str]) -> tuple[list[str], list[int]]:
    """Sessions of a sampled batch and the row of each one's last output.

    TransferQueue keys are ``{uid}_{session}_{index}``; an agent loop may emit several outputs per
    session, and the last one stands for the session (its reward and counters, as in VERL's GRPO
    advantage, ``compute_advantage_for_multi_trajectories``).

    Returns:
        ``(sessions, rows)``: the ``{uid}_{session}`` names sorted by (uid, session number), so the
        order never depends on arrival order (TransferQueue lists keys as they finish), and the
        index into ``keys`` of each session's highest ``index``.
    """
    final: dict[str, tuple[int, int]] = {}
    for i, key in enumerate(keys):
        uid, session, index = key.rsplit("_", 2)
        name = f"{uid}_{session}"
        if name not in final or final[name][0] < int(index):
            final[name] = (int(index), i)
    sessions = sorted(final, key=lambda s: (s.rsplit("_", 1)[0], int(s.rsplit("_", 1)[1])))
    return sessions, [final[s][1] for s in sessions]


def poll_interval_from_kwargs(kw: Mapping[str, Any], default: float = 2.0) -> float:
    """``sampler_kwargs.poll_interval_s``: seconds between the buffer's checks for finished
    trajectories (VERL's default 2.0; the CPU runtime shortens it, ``kit.bridge.verl_cpu.runner``).

    Raises:
        ValueError: not a positive finite number (names the key).
    """
    raw = kw.get("poll_interval_s", default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"sampler_kwargs.poll_interval_s must be a positive number of seconds, got {raw!r}")
    return value


class KitReplayBuffer(ReplayBuffer):
    """VERL's sync v1 replay buffer plus the step's tool metrics (see the module docstring).

    Constructed by ``PPOTrainer._build_replay_buffer`` with the keyword arguments every custom
    sampler gets; reads ``sampler_kwargs.train_batch_size`` (P, required) and
    ``sampler_kwargs.poll_interval_s`` (optional). Validation batches pass through untouched.
    Subclasses change what reaches the trainer through :meth:`_buffer_kwargs`,
    :meth:`_session_fields` and :meth:`_select_sessions`, and add step metrics to
    ``self._step_metrics``.

    Raises:
        ValueError: ``trainer_mode`` is not ``sync``, or a bad ``poll_interval_s``.
        KeyError: ``sampler_kwargs.train_batch_size`` is missing.
    """

    def __init__(self, trainer_mode: str, trainer_config: Any, max_off_policy_threshold: int | None,
                 max_off_policy_strategy: str, sampler_kwargs: Mapping[str, Any], poll_interval: float = 2.0,
                 refill_fn: Any = None, **_: Any):
        if trainer_mode != "sync":
            raise ValueError(f"{type(self).__name__} supports trainer.v1.trainer_mode=sync only, got {trainer_mode!r}")
        kw = dict(sampler_kwargs or {})
        if "train_batch_size" not in kw:
            raise KeyError(f"trainer.v1.sampler.sampler_kwargs.train_batch_size is required by {type(self).__name__}")
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs,
            poll_interval=poll_interval_from_kwargs(kw) if "poll_interval_s" in kw else poll_interval,
            refill_fn=refill_fn,
            **self._buffer_kwargs(kw),
        )
        self._global_steps = 0
        self._step_metrics: dict[str, float] = {}
        self._records = VerlRecords.from_kwargs(kw)  # rollout records (sampler_kwargs.records_*), issue #32
        self._kept_sessions: Any = None  # a selecting subclass's kept session indices of the last batch

    def _buffer_kwargs(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        """``ReplayBuffer`` settings: those the trainer gives its own buffer for the kit's GRPO."""
        p = int(kw["train_batch_size"])
        return {"filter_groups_metric": None, "train_batch_size": p, "gen_batch_size": p,
                "max_inflight_gen_batches": 1}

    def _session_fields(self) -> list[str]:
        """TransferQueue fields read for each session's final output."""
        return ["rm_scores", "extra_fields"]

    def _select_sessions(self, meta: KVBatchMeta, sessions: list[str], data: Any,
                         extras: list[Mapping[str, Any]]) -> KVBatchMeta:
        """The batch the trainer gets, from the sampled one: every session the verifier graded
        (:func:`graded_rows`); a session it answered ``infra_error`` is left out, so it enters
        neither its group's GRPO advantage nor the loss (as :func:`kit.train.update.select`).

        Args:
            meta: the sampled batch (every output of every session).
            sessions: (S,) ``{uid}_{session}`` names (:func:`final_outputs`).
            data: the :meth:`_session_fields` of each session's final output, in ``sessions`` order.
            extras: (S,) their ``extra_fields`` dicts.
        """
        kept = graded_rows(verifier_reasons(extras))
        if kept.size == len(sessions):
            return meta
        self._kept_sessions = kept  # the rollout records' decision (kit.bridge.verl_records)
        return keep_sessions(meta, sessions, kept)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """As ``ReplayBuffer.sample``, plus this step's kit metrics (:func:`tool_metrics`,
        :func:`sampled_metrics`, and a subclass's)."""
        self._global_steps = int(global_steps)
        self._step_metrics = {}
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        metrics = dict(metrics)
        metrics.update(self._step_metrics)
        return batch, metrics

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str],
                           partition_snapshot: dict[str, dict]) -> KVBatchMeta:
        meta = super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)
        if partition_id == "val" or not meta.keys:
            return meta
        sessions, rows = final_outputs(meta.keys)
        wanted = self._session_fields()
        if self._records is not None:  # read before RoC clears the dropped sessions
            wanted += [f for f in self._records.fields(self._global_steps) if f not in wanted]
        data = tq.kv_batch_get(keys=[meta.keys[i] for i in rows], partition_id=partition_id, select_fields=wanted)
        extras = [getattr(v, "data", v) for v in data["extra_fields"]]
        self._step_metrics.update(tool_metrics(extras))
        scores = [float(v.sum().item()) for v in data["rm_scores"]]
        self._step_metrics.update(sampled_metrics(extras, scores))
        self._step_metrics.update(behaviour_metrics(extras, scores))
        self._kept_sessions = None
        out = self._select_sessions(meta, sessions, data, extras)
        if self._records is not None:
            self._records.write(self._global_steps, sessions, data, extras, self._kept_sessions,
                                getattr(self, "roc_params", None))
        return out
