"""kit.bridge.checkpoints on a fake VERL checkpoint layout (no VERL run, no GPU)."""

import json
import os
import time
from pathlib import Path

import pytest

from kit.bridge import checkpoints as ck

GOLDEN = Path(__file__).parent / "golden"


def fake_checkpoint(root: Path, step: int, world: int = 2, subdir: str = "actor", tracker: bool = True) -> Path:
    """What FSDPCheckpointManager leaves: shards, fsdp_config.json, huggingface/config.json."""
    d = root / f"global_step_{step}" / subdir if subdir else root / f"global_step_{step}"
    (d / "huggingface").mkdir(parents=True)
    (d / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    (d / "huggingface" / "config.json").write_text("{}")
    for r in range(world):
        (d / f"model_world_size_{world}_rank_{r}.pt").write_bytes(b"x")
    if tracker:
        (root / ck.TRACKER).write_text(str(step))
    return d


def fake_merger(calls):
    def run(argv):
        calls.append(list(argv))
        target = Path(argv[argv.index("--target_dir") + 1])
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        return 0
    return run


def test_tracker_names_the_latest_step(tmp_path):
    fake_checkpoint(tmp_path, 50)
    fake_checkpoint(tmp_path, 100)
    (tmp_path / ck.TRACKER).write_text("50\n")  # VERL resumes from the tracker, not the highest folder
    c = ck.latest_verl_checkpoint(tmp_path)
    assert c.step == 50 and c.model_dir == tmp_path / "global_step_50" / "actor"


def test_without_tracker_the_highest_folder_wins(tmp_path):
    fake_checkpoint(tmp_path, 9, tracker=False)
    fake_checkpoint(tmp_path, 10, tracker=False)
    assert ck.latest_verl_checkpoint(tmp_path).step == 10 and ck.saved_steps(tmp_path) == [9, 10]


def test_missing_and_bad_checkpoints_name_the_path(tmp_path):
    with pytest.raises(ck.CheckpointError, match=f"no VERL checkpoint under {tmp_path}"):
        ck.latest_verl_checkpoint(tmp_path)
    (tmp_path / ck.TRACKER).write_text("abc")
    with pytest.raises(ck.CheckpointError, match="latest_checkpointed_iteration.txt: expected the step number"):
        ck.latest_verl_checkpoint(tmp_path)
    (tmp_path / ck.TRACKER).write_text("7")
    with pytest.raises(ck.CheckpointError, match="global_step_7/actor does not exist"):
        ck.latest_verl_checkpoint(tmp_path)


def test_incomplete_checkpoint_lists_what_is_missing(tmp_path):
    d = fake_checkpoint(tmp_path, 5, world=4)
    assert ck.check_complete(d) == 4
    (d / "model_world_size_4_rank_3.pt").unlink()
    (d / "huggingface" / "config.json").unlink()
    with pytest.raises(ck.CheckpointError, match=r"missing model_world_size_4_rank_3.pt, huggingface/config.json"):
        ck.check_complete(d)
    (d / "fsdp_config.json").unlink()
    with pytest.raises(ck.CheckpointError, match="fsdp_config.json is missing"):
        ck.check_complete(d)


def test_merge_command_matches_golden_file():
    cmd = ck.merge_command("/RUN/checkpoints/global_step_300/actor", "/RUN/policy.partial", python="python3")
    text = " ".join(cmd) + "\n"
    path = GOLDEN / "merge_fsdp.txt"
    if os.environ.get("KIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_merge_command_is_what_verls_merger_parses(monkeypatch):
    from verl.model_merger.base_model_merger import parse_args

    cmd = ck.merge_command("/c/global_step_3/actor", "/r/policy")
    monkeypatch.setattr("sys.argv", ["merger", *cmd[3:]])
    a = parse_args()
    assert (a.operation, a.backend, a.local_dir, a.target_dir) == ("merge", "fsdp", "/c/global_step_3/actor", "/r/policy")


def test_merge_writes_policy_then_skips_while_it_is_newer(tmp_path):
    fake_checkpoint(tmp_path / "checkpoints", 300)
    calls = []
    out = ck.merge_to_policy(tmp_path / "checkpoints", tmp_path / "policy", run=fake_merger(calls))
    assert out["merged"] and out["step"] == 300 and (tmp_path / "policy" / "config.json").exists()
    assert calls[0][-1] == str(tmp_path / "policy.partial") and not (tmp_path / "policy.partial").exists()
    again = ck.merge_to_policy(tmp_path / "checkpoints", tmp_path / "policy", run=fake_merger(calls))
    assert not again["merged"] and len(calls) == 1
    time.sleep(0.01)
    fake_checkpoint(tmp_path / "checkpoints", 310)  # a newer checkpoint: merged again
    assert ck.merge_to_policy(tmp_path / "checkpoints", tmp_path / "policy", run=fake_merger(calls))["step"] == 310
    assert len(calls) == 2


def test_failed_merge_keeps_the_old_policy_and_says_so(tmp_path):
    fake_checkpoint(tmp_path / "ck", 1, subdir="")  # SFT layout: no actor/ level
    with pytest.raises(RuntimeError, match="merger exited with status 3"):
        ck.merge_to_policy(tmp_path / "ck", tmp_path / "policy", subdir="", run=lambda argv: 3)
    assert not (tmp_path / "policy").exists()
