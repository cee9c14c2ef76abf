"""Rollout records: every recorded step's trajectories, one schema on both runtimes (issue #32).

``schema`` declares the columns (:data:`SCHEMA`), ``build`` fills them from a local step's
``Trajectory`` objects or a VERL step's rows, ``store`` writes one parquet file per step and
reads a run folder (also while it is still being written). ``kit.explore`` shows them::

    rec = RolloutRecorder(run_dir, every=1, max_prompts=None, tokenizer_dir=policy_dir)
    rec.record_step(batch.flat(), rewards, group_ids, stage="stage1", step=step, algorithm="grpo_roc",
                    kept=sel, advantages=adv, problem_ids=..., verdicts=..., roc=params)
    rows = read_records(run_dir, stage="stage1")
"""

from kit.records.build import assemble, records_from_trajectories, records_from_verl, trajectory_row
from kit.records.schema import COLUMNS, SCHEMA, SCHEMA_VERSION, SUMMARY_COLUMNS, check_record
from kit.records.store import (
    RecordIndex,
    RolloutRecorder,
    RunKey,
    StepFile,
    read_records,
    read_step,
    scan,
    step_path,
    write_records,
)

__all__ = [
    "COLUMNS", "SCHEMA", "SCHEMA_VERSION", "SUMMARY_COLUMNS", "RecordIndex", "RolloutRecorder", "RunKey", "StepFile", "assemble",
    "check_record", "read_records", "read_step", "records_from_trajectories", "records_from_verl", "scan", "step_path",
    "trajectory_row", "write_records",
]
