"""Local SFT trainer: it learns, writes its run files, and resumes exactly after a kill."""

import math
import random
import shutil

import pytest
import torch

from kit.config import load
from kit.train import common, sft
from kit.train.batching import micro_batches, pad_rows
from kit.train.common import metric_rows


def _cfg(run_dir, **over):
    base = {"data.task_train_size": 48, "data.task_heldout_size": 4, "sft.steps": 6, "sft.batch_size": 12,
            "sft.checkpoint_every": 2, "sft.function_calling_sets": ["xlam"], "sft.max_seq_tokens": 256,
            "sft.warmup_ratio": 0.0, "model.torch_threads": 1, "sandbox.num_workers": 1}
    base.update(over)
    return load("smoke", run_dir=str(run_dir), overrides=base)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Demos run through the sandbox once, tokenizer trained once; copied into each run dir."""
    d = tmp_path_factory.mktemp("sft_base")
    sft.build_tokenizer_and_model(_cfg(d), d)
    return d


def _fresh(base, path):
    path.mkdir(parents=True)
    shutil.copy(base / sft.SFT_DATA_FILE, path / sft.SFT_DATA_FILE)
    shutil.copytree(base / "init", path / "init")
    return path


def test_demos_ran_in_the_sandbox(base):
    import json

    data = json.loads((base / sft.SFT_DATA_FILE).read_text())
    kinds = [d["kind"] for d in data["demos"]]
    # every tool-error demo got a real traceback back; every clean call printed the answer
    for d in data["demos"]:
        if d["kind"] == "tool_error":
            assert "Error" in d["feedback"][0]
        if d["kind"] in ("tool", "tool_error"):
            assert d["feedback"][-1].strip() == d["problem"]["answer"]
    assert data["statuses"]["error"] == kinds.count("tool_error")


def test_sft_learns_and_writes_run_files(base, tmp_path):
    rd = _fresh(base, tmp_path / "run")
    seen = []
    s = sft.run_sft(_cfg(rd, **{"sft.steps": 16}), rd, progress=seen.append, evaluate=False)
    rows = [r for r in metric_rows(rd) if r["stage"] == "sft"]
    assert [r["step"] for r in rows] == list(range(1, 17))
    assert len(seen) == 17  # 16 rows + the summary
    first, last = sum(r["loss"] for r in rows[:3]) / 3, sum(r["loss"] for r in rows[-3:]) / 3
    assert last < first - 0.5, (first, last)
    assert (rd / "policy" / "config.json").exists() and (rd / "summary.json").exists()
    assert common.latest_checkpoint(rd).name == "step_14"  # keep_last=2 of 2,4,...,14
    assert s["rows"]["task_rows"] == 48 and s["rows"]["fc_rows"] + s["rows"]["fc_dropped"] == 5  # xlam has 5 rows


def test_kill_and_resume_gives_the_same_run(base, tmp_path):
    a = _fresh(base, tmp_path / "a")
    sft.run_sft(_cfg(a), a, evaluate=False)

    b = _fresh(base, tmp_path / "b")

    class Killed(Exception):
        pass

    def die(row):
        if row.get("step") == 5:
            raise Killed  # the process dies after writing step 5; the last checkpoint is step 4

    with pytest.raises(Killed):
        sft.run_sft(_cfg(b), b, progress=die, evaluate=False)
    assert common.latest_checkpoint(b).name == "step_4"
    sft.run_sft(_cfg(b), b, evaluate=False)

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]

    assert strip(metric_rows(a)) == strip(metric_rows(b))
    from kit.models import load_policy

    ma, _ = load_policy(a / "policy")
    mb, _ = load_policy(b / "policy")
    for (n, pa), (_, pb) in zip(ma.named_parameters(), mb.named_parameters(), strict=True):
        assert torch.equal(pa, pb), n


def test_rerun_after_a_kill_before_any_checkpoint_does_not_duplicate_rows(base, tmp_path):
    rd = _fresh(base, tmp_path / "early")

    class Killed(Exception):
        pass

    def die(row):
        if row.get("step") == 1:
            raise Killed  # dies before the first checkpoint (step 2)

    with pytest.raises(Killed):
        sft.run_sft(_cfg(rd), rd, progress=die, evaluate=False)
    assert common.latest_checkpoint(rd) is None and len(metric_rows(rd)) == 1
    sft.run_sft(_cfg(rd), rd, evaluate=False)
    assert [r["step"] for r in metric_rows(rd)] == list(range(1, 7))


def test_loss_counts_only_masked_tokens(base):
    from kit.models import load_policy

    model, tok = load_policy(base / "init")
    ids = [5, 6, 7, 8, 9, 10]
    full, n_full = sft.sft_loss_sum(model, [(ids, [0, 0, 1, 1, 1, 0])], tok.pad_token_id)
    logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    lp = torch.log_softmax(logits, -1)
    want = -(lp[1, 7] + lp[2, 8] + lp[3, 9])  # targets at positions 2, 3, 4
    assert n_full == 3 and torch.allclose(full, want, atol=1e-5)
    zero, n_zero = sft.sft_loss_sum(model, [(ids, [0] * 6)], tok.pad_token_id)
    assert n_zero == 0 and float(zero) == 0.0


def test_lr_schedule():
    assert common.lr_at(0, 1.0, 10, 100) == pytest.approx(0.1)
    assert common.lr_at(9, 1.0, 10, 100) == pytest.approx(1.0)
    assert common.lr_at(100, 1.0, 10, 100, min_ratio=0.1) == pytest.approx(0.1)
    assert common.lr_at(55, 1.0, 10, 100, min_ratio=0.0) == pytest.approx(0.5)
    assert common.lr_at(50, 1.0, 0, 100, "constant") == 1.0
    with pytest.raises(ValueError, match="schedule"):
        common.lr_at(50, 1.0, 0, 100, "linear")


def test_pad_rows_right_pads_ids_attention_and_mask():
    ids, att, msk = pad_rows([([5, 6, 7], [0, 1, 1]), ([8], [1])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and att.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert msk.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]] and msk.dtype == torch.float32
    # shortest first, stable among equal lengths; a row over the budget stands alone
    assert micro_batches([4, 2, 9, 2, 4], max_tokens=8) == [[1, 3], [0, 4], [2]]


def test_batches_mix_and_micro_batches_respect_the_budget():
    rng = random.Random(0)
    task = [([1] * rng.randint(20, 60), [1] * 5) for _ in range(50)]
    fc = [([2] * 300, [1] * 5) for _ in range(5)]
    rows = sft.batch_rows(task, fc, 20, 0.9, random.Random(1))
    assert sum(len(r[0]) == 300 for r in rows) == 2
    mbs = [[rows[i] for i in g] for g in micro_batches([len(r[0]) for r in rows], max_tokens=700)]
    assert sorted(map(id, rows)) == sorted(id(r) for mb in mbs for r in mb)
    for mb in mbs:
        assert len(mb) == 1 or len(mb) * max(len(r[0]) for r in mb) <= 700
    assert not math.isnan(common.lr_at(3, 1e-3, 0, 10))
