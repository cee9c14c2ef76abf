"""benchmarks/verl_cpu_step.py run twice with the same ``--root``: the local trainer's steps are timed
again, not skipped (a finished local run in the folder returned its summary without stepping, so the
second run had no local step to compare and stopped with an IndexError before its last line). Fast: the
trainer is faked."""

import json
from pathlib import Path
from types import SimpleNamespace

from doubles import load_benchmark

from kit.data import tasks
from kit.train import rl


def _bench():
    return load_benchmark("verl_cpu_step")


def test_local_steps_are_timed_again_in_a_folder_a_previous_run_finished(monkeypatch, tmp_path):
    def resumable_run_stage(cfg, stage, policy, run_dir, *, progress, evaluate):
        steps = cfg.stages[stage].steps
        summary = Path(run_dir) / "summary.json"
        if summary.exists():  # what kit.train.rl.run_stage does with a finished run in run_dir
            progress({"summary": json.loads(summary.read_text())})
            return
        for step in range(1, steps + 1):
            progress({"step": step})
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps({"steps": steps}))
        progress({"summary": {"steps": steps}})

    monkeypatch.setattr(rl, "run_stage", resumable_run_stage)
    monkeypatch.setattr(tasks, "task_split", lambda cfg: SimpleNamespace(train=[SimpleNamespace(level=2)]))
    bench = _bench()
    first = bench.local_steps(None, tmp_path / "sft" / "policy", tmp_path / "local")
    second = bench.local_steps(None, tmp_path / "sft" / "policy", tmp_path / "local")
    assert len(first) == 2 and len(second) == 2
    assert all(s >= 0 for s in first + second)
