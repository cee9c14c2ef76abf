"""GRPO-RoC inside VERL 0.9.1: oversample 2G per prompt, keep G after reward, before advantage.

Which hook, and why
-------------------
VERL 0.9.1 runs ``python -m verl.trainer.main_ppo`` on the **v1 trainer** by default
(``trainer.use_v1=true``; the legacy ``RayPPOTrainer`` path is logged as deprecated). In its
step (``verl/trainer/ppo/v1/trainer_base.py::PPOTrainer._step_once``) the replay buffer's
``sample()`` returns the finished trajectories of ``train_batch_size`` prompts, already scored
(rule rewards are computed per trajectory inside the agent-loop worker and stored as
``rm_scores``), and only then come ``_balance_batch``, old log-probs, ``_compute_advantage``
and the actor update. So a custom sampler (``trainer.v1.sampler.custom_sampler``) sits exactly
where the release put ``_down_sample_batch``: after reward, before advantage. Both pieces load
from Hydra overrides on the stock entry point (no forked ``main`` or TaskRunner):

* :class:`RocReplayBuffer` (``trainer.v1.sampler.custom_sampler.path=pkg://kit.bridge.roc_hook``,
  ``.name=RocReplayBuffer``, settings in ``trainer.v1.sampler.sampler_kwargs``): reads
  ``rm_scores`` and the agent loop's ``extra_fields`` counters of the 2G trajectories of each
  prompt from TransferQueue, runs :func:`kit.algo.roc.roc_step`, clears the rejected keys and
  returns the kept ones. It is a :class:`kit.bridge.sampler.KitReplayBuffer` (GRPO's buffer),
  so its step metrics carry the sampled-population metrics of all 2G sessions too
  (``rstar2/tool_calls_per_traj``, ``rstar2/time_tool_s``, ``rstar2/reward_mean``, ``rstar2/accuracy``,
  ``rstar2/response_len_mean``, ``rstar2/truncation_ratio``: ``kit.metrics``). Equal-reward groups are dropped through the base class's DAPO filter
  (evicted *and refilled*, so the batch keeps ``train_batch_size`` prompts; the release shrinks
  the batch instead).
* :class:`RocAgentLoopManager` (``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=
  kit.bridge.roc_hook.RocAgentLoopManager``): sets ``__rollout_n__ = 2G`` on training prompts,
  which ``AgentLoopWorkerTQ._run_prompt`` pops as the per-prompt sample count; validation
  prompts keep ``val_kwargs.n``.

This keeps ``actor_rollout_ref.rollout.n = G``, which avoids the sizing trap: every downstream
size (``_get_required_batch_multiple``, mini-batch = ``ppo_mini_batch_size * rollout.n``) uses
``rollout.n``, and the sampler hands over exactly G per prompt. With ``rollout.n = 2G`` the
batch would be padded with zero-loss rows or the mini-batch count would halve.

Not chosen: a ``RayPPOTrainer`` subclass on ``trainer.use_v1=false`` (what the release and the
DAPO recipe do) needs its own TaskRunner and entry script, copies ``fit()``, and targets a path
marked for removal. :func:`apply_roc` still offers the same selection on a v0 ``DataProto``
for anyone on that path (and it is how the tests drive the hook on a real ``DataProto``).

Limits, stated plainly: ``trainer.v1.trainer_mode=sync`` only (RoC is an on-policy step; the
async modes evict and refill stale groups with different bookkeeping). RoC picks sessions
(``{uid}_{session}``); when an agent loop emits several outputs per session, the last one's
reward and counters stand for the session (as in VERL's GRPO advantage) and all its outputs
are kept or dropped together. A prompt group that failed and holds at most G sessions is kept
whole. TransferQueue's default placement hangs on a 2-CPU Ray node
(verl issue #7656); this hook is for GPU clusters, the CPU tests drive it with an in-memory
stand-in for the TransferQueue calls it makes (``kv_batch_get``, ``kv_clear``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from transformers import AutoTokenizer
from verl import DataProto
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ
from verl.utils import tensordict_utils as tu

from kit.algo import RocParams, counters, release_p_err, release_p_format, roc_step
from kit.bridge.sampler import (
    KitReplayBuffer,
    graded_rows,
    keep_sessions,
    poll_interval_from_kwargs,
    verifier_reasons,
)
from kit.config import AlgorithmConfig

#: extra_fields keys the agent loop (kit.bridge.agent_loop) writes and RoC reads.
COUNTER_KEYS = ("tool_calls", "tool_errors", "infra_errors", "answer_tags", "answered", "turns")
#: Prefix of the metrics this hook adds to VERL's step metrics: under the kit's one prefix ``rstar2/``
#: (``kit.metrics.KIT_PREFIX``), so a dashboard tells the kit's numbers from VERL's own.
METRIC_PREFIX = "rstar2/roc/"
ROLLOUT_N_KEY = "__rollout_n__"


def roc_params_from_kwargs(kw: Mapping[str, Any]) -> tuple[RocParams, dict[str, Any]]:
    """Read ``trainer.v1.sampler.sampler_kwargs`` (written by ``kit.bridge.overrides``).

    Returns:
        ``(params, extra)`` where extra holds ``oversample``, ``seed``, ``reading``
        (``"counters"`` or ``"text"``), ``train_batch_size``, ``max_inflight_gen_batches``,
        ``poll_interval_s`` (seconds between the replay buffer's checks for finished
        trajectories; VERL's default 2.0, which the CPU runtime shortens: a tiny step's
        generation takes ~1 s, so a 2 s poll rounds it up to 2 s).
    Raises:
        KeyError: a required key is missing (the message names ``sampler_kwargs.<key>``).
        ValueError: ``reading`` is not one of the two readings, oversample < group_size,
            ``poll_interval_s`` is not a positive number, or a
            flag (``use_error_ratio``, ``use_answer_format``, ``drop_equal_reward_groups``) is
            neither a boolean nor the word true / false.
    """
    def need(key: str) -> Any:
        if key not in kw:
            raise KeyError(f"trainer.v1.sampler.sampler_kwargs.{key} is required by kit.bridge.roc_hook")
        return kw[key]

    def flag(key: str, default: bool) -> bool:  # bool("false") is True: read the words too
        v = kw.get(key, default)
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        if not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"sampler_kwargs.{key} must be true or false, got {v!r}")
        return bool(v)

    d = AlgorithmConfig()  # the defaults of every key that may be absent: the config's
    params = RocParams.from_config(dataclasses.replace(
        d,
        group_size=int(need("group_size")),
        roc_mode=str(kw.get("mode", d.roc_mode)),
        roc_use_error_ratio=flag("use_error_ratio", d.roc_use_error_ratio),
        roc_use_answer_format=flag("use_answer_format", d.roc_use_answer_format),
        min_positive=int(kw.get("min_positive", d.min_positive)),
        min_negative=int(kw.get("min_negative", d.min_negative)),
        drop_equal_reward_groups=flag("drop_equal_reward_groups", d.drop_equal_reward_groups),
        roc_negative_order=str(kw.get("negative_order", d.roc_negative_order)),
    ))
    extra = {
        "oversample": int(need("oversample")),
        "seed": int(kw.get("seed", 0)),
        "reading": str(kw.get("reading", d.roc_reading)),
        "train_batch_size": int(need("train_batch_size")),
        "max_inflight_gen_batches": int(kw.get("max_inflight_gen_batches", 1)),
        "tokenizer_path": kw.get("tokenizer_path"),
        "poll_interval_s": poll_interval_from_kwargs(kw),
    }
    if extra["reading"] not in ("counters", "text"):
        raise ValueError(f"sampler_kwargs.reading must be 'counters' or 'text', got {extra['reading']!r}")
    if extra["oversample"] < params.group_size:
        raise ValueError(f"sampler_kwargs.oversample ({extra['oversample']}) < group_size ({params.group_size})")
    return params, extra


def select_trajectories(
    uids: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    extra_fields: Sequence[Mapping[str, Any]],
    params: RocParams,
    seed: int | np.random.Generator,
    texts: Sequence[str] | None = None,
    reasons: Sequence[str | None] | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """RoC on one sampled batch as VERL stores it (shared by the v1 sampler and :func:`apply_roc`).

    Rows the verifier answered ``infra_error`` (:func:`kit.bridge.sampler.graded_rows`) are left
    out before RoC, as the local trainer does (:func:`kit.train.update.select`): never kept, they
    enter neither the selection, nor their group's advantage, nor the loss; a group short of rows
    is kept whole (:func:`kit.algo.roc_select`). If no row was graded nothing is kept.

    Args:
        uids: (N,) prompt uid of each trajectory.
        scores: (N,) summed reward of each trajectory (``rm_scores.sum()``).
        extra_fields: (N,) the agent loop's ``extra_fields`` dicts (counters in
            :data:`COUNTER_KEYS`).
        params: RoC settings.
        seed: int or Generator.
        texts: (N,) decoded responses with special tokens; given, p_err and p_format use the
            release's text reading instead of the counters.
        reasons: (N,) the verifier's reasons; default read from ``extra_fields``
            (:func:`kit.bridge.sampler.verifier_reasons`, ``reward_extra_info["reason"]``).
    Returns:
        ``(kept, metrics)``: ascending row indices and ``rstar2/roc/``-prefixed floats.
    Raises:
        KeyError: a trajectory lacks a counter (names the row and the key).
    """
    graded = graded_rows(verifier_reasons(extra_fields) if reasons is None else reasons)
    if graded.size == 0:
        return graded, {}
    if graded.size < len(uids):
        uids = [uids[i] for i in graded]
        scores = np.asarray(scores, dtype=np.float64)[graded]
        extra_fields = [extra_fields[i] for i in graded]
        texts = None if texts is None else [texts[i] for i in graded]
    counts = counters(extra_fields)
    penalties = None
    if texts is not None:
        penalties = (release_p_err(texts), release_p_format(texts))
    sel, metrics = roc_step(np.asarray(scores, dtype=np.float64), list(uids), counts, params, seed, penalties)
    return graded[sel.kept], {METRIC_PREFIX + k: v for k, v in metrics.items()}


def _decode(tokenizer: Any, responses: torch.Tensor, lengths: Sequence[int]) -> list[str]:
    return [tokenizer.decode(responses[i, : int(n)].tolist(), skip_special_tokens=False)
            for i, n in enumerate(lengths)]


def apply_roc(
    data: DataProto,
    params: RocParams,
    seed: int | np.random.Generator = 0,
    tokenizer: Any = None,
) -> tuple[DataProto, dict[str, float]]:
    """RoC on a legacy (v0) ``DataProto`` after reward: keep G rows per ``uid``.

    Reads ``non_tensor_batch["uid"]``, the reward from ``batch["token_level_scores"]`` (else
    ``rm_scores``) summed over tokens, and the counters either from per-key columns of
    ``non_tensor_batch`` (how v0 ``AgentLoopWorker`` spreads ``extra_fields``) or from a
    ``tool_extra_fields`` column of dicts; the verifier's ``reason`` column (VERL spreads
    ``reward_extra_info`` into ``non_tensor_batch``) leaves ``infra_error`` rows out
    (:func:`select_trajectories`). With ``tokenizer``, p_err/p_format use the release's
    text reading of ``batch["responses"]`` (decoded with special tokens, up to the attention
    mask's response length).

    Args:
        data: the scored batch, N = P * 2G rows.
        params: RoC settings.
        seed: int or Generator.
        tokenizer: optional, selects the text reading.
    Returns:
        ``(kept_data, metrics)``; ``kept_data`` is ``data`` indexed by the kept rows (ascending).
    Raises:
        KeyError: no ``uid`` column, no reward tensor, or a missing counter.
    """
    nt = data.non_tensor_batch
    if "uid" not in nt:
        raise KeyError("apply_roc: DataProto has no non_tensor_batch['uid'] (GRPO group ids)")
    key = "token_level_scores" if "token_level_scores" in data.batch.keys() else "rm_scores"
    if key not in data.batch.keys():
        raise KeyError("apply_roc: DataProto has neither batch['token_level_scores'] nor batch['rm_scores']")
    scores = data.batch[key].sum(-1).float().cpu().numpy()
    n = len(data)
    if all(k in nt for k in ("tool_calls", "answer_tags", "turns")):
        rows = [{k: nt[k][i] for k in COUNTER_KEYS if k in nt} for i in range(n)]
    elif "tool_extra_fields" in nt:
        rows = list(nt["tool_extra_fields"])
    else:
        raise KeyError(f"apply_roc: no RoC counters {COUNTER_KEYS} in non_tensor_batch (have {sorted(nt)})")
    texts = None
    if tokenizer is not None:
        responses = data.batch["responses"]
        lengths = data.batch["attention_mask"][:, -responses.shape[-1]:].sum(-1).tolist()
        texts = _decode(tokenizer, responses, lengths)
    reasons = [None if r is None else str(r) for r in nt["reason"]] if "reason" in nt else None
    kept, metrics = select_trajectories(list(nt["uid"]), scores, rows, params, seed, texts, reasons)
    return data[kept], metrics


class RocReplayBuffer(KitReplayBuffer):
    """VERL v1 replay buffer that applies GRPO-RoC to each sampled training batch.

    Constructed by ``PPOTrainer._build_replay_buffer`` with the keyword arguments every custom
    sampler gets; the RoC settings come from ``sampler_kwargs`` (see
    :func:`roc_params_from_kwargs`). Validation batches pass through untouched. Its step metrics
    are the base class's metrics over all 2G sessions per prompt
    (:func:`kit.bridge.sampler.tool_metrics`, :func:`kit.bridge.sampler.sampled_metrics`) plus RoC's
    ``rstar2/roc/...``.
    """

    def __init__(self, trainer_mode: str, trainer_config: Any, max_off_policy_threshold: int | None,
                 max_off_policy_strategy: str, sampler_kwargs: Mapping[str, Any], poll_interval: float = 2.0,
                 refill_fn: Any = None, **_: Any):
        self.roc_params, self.roc_extra = roc_params_from_kwargs(dict(sampler_kwargs or {}))
        super().__init__(trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                         sampler_kwargs, poll_interval=poll_interval, refill_fn=refill_fn)
        self._tokenizer = None

    def _buffer_kwargs(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        drop = self.roc_params.drop_equal_reward_groups
        return {"filter_groups_metric": "reward" if drop else None,
                "train_batch_size": self.roc_extra["train_batch_size"],
                "gen_batch_size": 1 if drop else None,
                "max_inflight_gen_batches": self.roc_extra["max_inflight_gen_batches"]}

    def _text_tokenizer(self) -> Any:
        if self._tokenizer is None:
            path = self.roc_extra.get("tokenizer_path")
            if not path:
                raise KeyError("sampler_kwargs.tokenizer_path is required when sampler_kwargs.reading=text")
            self._tokenizer = AutoTokenizer.from_pretrained(path)
        return self._tokenizer

    def _session_fields(self) -> list[str]:
        return ["rm_scores", "extra_fields"] + (["responses"] if self.roc_extra["reading"] == "text" else [])

    def _select_sessions(self, meta: KVBatchMeta, sessions: list[str], data: Any,
                         extras: list[Mapping[str, Any]]) -> KVBatchMeta:
        # RoC chooses sessions ({uid}_{session}, sorted by uid and session number: arrival order must not
        # change the draw, and rank-mode ties fall to the lower session id, rollout order as released);
        # a session's last output stands for it and all its outputs are kept or dropped together
        scores = [float(v.sum().item()) for v in data["rm_scores"]]
        texts = None
        if self.roc_extra["reading"] == "text":
            tok = self._text_tokenizer()
            texts = [tok.decode(list(map(int, r)), skip_special_tokens=False) for r in data["responses"]]
        uids = [s.rsplit("_", 1)[0] for s in sessions]
        rng = np.random.default_rng([self.roc_extra["seed"], self._global_steps])
        kept, metrics = select_trajectories(uids, scores, extras, self.roc_params, rng, texts)
        self._kept_sessions = kept  # the rollout records' RoC decision (kit.bridge.verl_records)
        self._step_metrics.update(metrics)
        return keep_sessions(meta, sessions, kept)


def with_oversampling(prompts: TensorDict, n: int) -> TensorDict:
    """Mark a training prompt batch to be sampled ``n`` (= 2G) times per prompt.

    Sets ``__rollout_n__`` (read by ``AgentLoopWorkerTQ._run_prompt``) unless the batch is a
    validation batch (it carries ``validate``) or already sets it. Returns the same TensorDict.
    """
    keys = set(prompts.keys())
    if "validate" not in keys and ROLLOUT_N_KEY not in keys:
        tu.assign_non_tensor_data(prompts, ROLLOUT_N_KEY, int(n))
    return prompts


class RocAgentLoopManager(AgentLoopManagerTQ):
    """``AgentLoopManagerTQ`` that oversamples training prompts to ``sampler_kwargs.oversample``."""

    def generate_sequences(self, prompts: TensorDict) -> None:
        n = int(self.config.trainer.v1.sampler.sampler_kwargs.oversample)
        return super().generate_sequences(with_oversampling(prompts, n))
