"""The rollout record: one row per sampled trajectory of an RL step, the same on both runtimes.

Declared here once, as a ``pyarrow`` schema (:data:`SCHEMA`); the local trainer and the VERL
replay buffer fill it (:mod:`kit.records.build`), :mod:`kit.records.store` writes and reads it,
``kit.explore`` shows it. Per trajectory (``N = P * n`` rows a step, ``n = 2G`` with RoC's
oversampling, ``G`` for plain GRPO; rStar2-Agent §2.2):

=====================  =============================  ================================================
column                 type                           meaning
=====================  =============================  ================================================
schema_version         int16                          :data:`SCHEMA_VERSION`
runtime                string                         ``local`` or ``verl`` (who trained)
stage                  string                         ``stage1`` .. ``stage3``
arm                    string                         the run's label (ablation arm; default algorithm)
algorithm              string                         ``grpo_roc`` or ``grpo``
seed                   int32                          the run's seed (null when unknown)
step, global_step      int32                          the ``metrics.jsonl`` step (1-based) and global
prompt_index           int32                          the prompt's position among the step's P
prompt_id              string                         the problem's id (null when unknown)
group_id               string                         the GRPO group (VERL's ``uid``)
traj_index             int16                          position within the group's n rollouts
group_n                int16                          n, rollouts sampled for the group
prompt_ids             list<int32>                    (Tp,) prompt token ids
response_ids           list<int32>                    (T,) response ids, tool feedback included
response_mask          list<int8>                     (T,) 1 = model-sampled, 0 = tool feedback
logprobs               list<float32>, nullable        (T,) rollout log-probs (0 on mask 0); null when
                                                      the backend gave none
entropy                list<float32>, nullable        (T,) entropy (nats) of the tempered distribution
                                                      each token was sampled from, 0 on mask 0; local
                                                      runtime only. **null on VERL**: VERL 0.9.1's
                                                      servers return ids and log-probs, no entropy
reward, correct        float32, bool                  outcome reward, ``reward > 0``
verdict                string, nullable               the verifier's reason (local only)
tool_calls             int16                          calls made (every attempt)
tool_errors            struct of int16                failed calls per kind (:data:`ERROR_KINDS`)
infra_errors           int16                          calls the execution service failed
call_turn, call_status list<int16>, list<string>      per call, in order (null on VERL: only counts);
call_error_kind,       list<string>, list<bool>       status ``ok``/``error``/``timeout``/... /
call_shown                                            ``malformed``/``skipped``; shown = its feedback
                                                      is in the ids (False at ``finish_reason=budget``)
answer_tags, turns     int16                          RoC's counters
p_err, p_format,       float32                        RoC penalties (§2.2.3) from the counters;
p_total                                               p_total with the run's switches
kept                   bool                           RoC kept it (always True for GRPO)
advantage              float32                        the advantage used; NaN when dropped. PPO (gae): the
                                                      mean of the per-token GAE over model tokens. VERL:
                                                      kit.bridge.verl_records says what it is
group_reward_std       float32                        population std of the group's n rewards
group_zero_spread      bool                           all n rewards equal (no GRPO signal)
truncated              bool                           the budget cut it
finish_reason          string                         ``answer/eos/length/budget/max_turns`` (or VERL's)
=====================  =============================  ================================================
"""

from __future__ import annotations

import pyarrow as pa

from kit.rollout.protocol import ERROR_KINDS

SCHEMA_VERSION = 1
RUNTIMES = ("local", "verl")

_ids = pa.list_(pa.int32())
SCHEMA = pa.schema([
    ("schema_version", pa.int16()),
    ("runtime", pa.string()),
    ("stage", pa.string()),
    ("arm", pa.string()),
    ("algorithm", pa.string()),
    ("seed", pa.int32()),
    ("step", pa.int32()),
    ("global_step", pa.int32()),
    ("prompt_index", pa.int32()),
    ("prompt_id", pa.string()),
    ("group_id", pa.string()),
    ("traj_index", pa.int16()),
    ("group_n", pa.int16()),
    ("prompt_ids", _ids),
    ("response_ids", _ids),
    ("response_mask", pa.list_(pa.int8())),
    ("logprobs", pa.list_(pa.float32())),
    ("entropy", pa.list_(pa.float32())),
    ("reward", pa.float32()),
    ("correct", pa.bool_()),
    ("verdict", pa.string()),
    ("tool_calls", pa.int16()),
    ("tool_errors", pa.struct([(k, pa.int16()) for k in ERROR_KINDS])),
    ("infra_errors", pa.int16()),
    ("call_turn", pa.list_(pa.int16())),
    ("call_status", pa.list_(pa.string())),
    ("call_error_kind", pa.list_(pa.string())),
    ("call_shown", pa.list_(pa.bool_())),
    ("answer_tags", pa.int16()),
    ("turns", pa.int16()),
    ("p_err", pa.float32()),
    ("p_format", pa.float32()),
    ("p_total", pa.float32()),
    ("kept", pa.bool_()),
    ("advantage", pa.float32()),
    ("group_reward_std", pa.float32()),
    ("group_zero_spread", pa.bool_()),
    ("truncated", pa.bool_()),
    ("finish_reason", pa.string()),
])
#: every column name, in order
COLUMNS = tuple(SCHEMA.names)
#: the columns a table view reads (no token lists): cheap to load for a whole run
SUMMARY_COLUMNS = tuple(c for c in COLUMNS if c not in ("prompt_ids", "response_ids", "response_mask", "logprobs",
                                                        "entropy"))
#: columns that may be null in every row of a runtime (see the table above)
NULLABLE = ("seed", "prompt_id", "logprobs", "entropy", "verdict", "call_turn", "call_status", "call_error_kind",
            "call_shown")


def check_record(rec: dict, where: str = "record") -> None:
    """Raise if ``rec`` lacks a column, carries an unknown one, or its token lists differ in length.

    Raises:
        KeyError: a missing or unknown column (names both).
        ValueError: ``response_ids``/``response_mask``/``logprobs``/``entropy`` of different lengths,
            a mask value other than 0/1, or an unknown runtime.
    """
    missing = [c for c in COLUMNS if c not in rec]
    extra = [c for c in rec if c not in COLUMNS]
    if missing or extra:
        raise KeyError(f"{where}: missing columns {missing}, unknown columns {extra}")
    t = len(rec["response_ids"])
    for key in ("response_mask", "logprobs", "entropy"):
        if rec[key] is not None and len(rec[key]) != t:
            raise ValueError(f"{where}: {key} has {len(rec[key])} entries for {t} response tokens")
    if any(m not in (0, 1) for m in rec["response_mask"]):
        raise ValueError(f"{where}: response_mask holds values other than 0 and 1")
    if rec["runtime"] not in RUNTIMES:
        raise ValueError(f"{where}: runtime {rec['runtime']!r} is not one of {RUNTIMES}")
