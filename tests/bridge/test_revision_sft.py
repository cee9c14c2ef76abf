"""Agent-R's rows on VERL's SFT route (kit/studies/agent_r/parquet.py, kit/bridge/revision_sft.py): the parquet
carries ids and loss mask, the dataset VERL loads through data.custom_cls gives them back unchanged,
and the launch names it."""

from pathlib import Path

import pytest

from kit.bridge.revision_sft import TokenSFTDataset, dry_run_text, revision_sft_command
from kit.config import load
from kit.studies.agent_r.parquet import read_rows, write_rows
from kit.studies.agent_r.revision import RevisionRow

ROWS = [RevisionRow([5, 6, 7, 8, 9], [0, 0, 0, 1, 1], [], "revision", "t0"), RevisionRow([5, 6, 7], [0, 1, 1], [], "good", "t1")]


class Tok:
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def test_parquet_and_dataset_carry_the_loss_mask(tmp_path):
    path = write_rows(ROWS, tmp_path / "r.parquet", Tok(), general=[([1, 2], [0, 1])])
    df = read_rows(path)
    assert list(df["kind"]) == ["revision", "good", "general"] and list(df["loss_mask"][0]) == [0, 0, 0, 1, 1]
    ds = TokenSFTDataset(str(path), Tok(), {"pad_mode": "no_padding", "max_length": 16})
    assert len(ds) == 3 and ds[0]["loss_mask"].tolist() == [0, 0, 0, 1, 1] and ds[0]["input_ids"].tolist() == [5, 6, 7, 8, 9]
    padded = TokenSFTDataset([path], Tok(), {"pad_mode": "right", "max_length": 6})[1]
    assert padded["loss_mask"].tolist() == [0, 1, 1, 0, 0, 0] and padded["attention_mask"].tolist() == [1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="exceed"):
        TokenSFTDataset(str(path), Tok(), {"max_length": 4, "truncation": "error"})[0]
    with pytest.raises(ValueError, match="mask"):
        write_rows([RevisionRow([1, 2], [1], [], "good", "t")], tmp_path / "bad.parquet")


def test_launch_names_the_dataset_class_verl_loads(tmp_path):
    from verl.utils.import_utils import load_extern_object  # VERL's own loader of data.custom_cls

    cfg = load("paper-14b", write=False)
    cmd = revision_sft_command(cfg, tmp_path / "r.parquet", tmp_path, model_path="/m/policy")
    over = dict(c.split("=", 1) for c in cmd if "=" in c and not c.startswith("--"))
    assert over["model.path"] == "/m/policy" and "data.messages_key" not in over
    assert Path(over["data.custom_cls.path"]).name == "revision_sft.py"
    write_rows(ROWS, tmp_path / "r.parquet")
    loaded = load_extern_object(over["data.custom_cls.path"], over["data.custom_cls.name"])  # a copy of the module
    assert loaded.__name__ == TokenSFTDataset.__name__
    assert loaded(str(tmp_path / "r.parquet"), Tok(), {})[0]["loss_mask"].tolist() == [0, 0, 0, 1, 1]
    text = dry_run_text(cfg, tmp_path / "r.parquet", tmp_path)
    assert "2 rows (revision 1, good 1), 4 loss tokens" in text and "not launchable" in text  # 2 rows < a batch of 128
    text = dry_run_text(load("paper-14b", {"agent_r.batch_size": 2}, write=False), tmp_path / "r.parquet", tmp_path)
    assert "verl.trainer.sft_trainer" in text and "not launchable" not in text


def test_verl_gets_the_local_loops_fine_tune_recipe(tmp_path):
    from hydra import compose, initialize_config_module

    cfg = load("paper-14b", {"agent_r.lr": 3e-6, "agent_r.batch_size": 12, "agent_r.passes": 2.5,
                             "agent_r.sft_steps": 40, "agent_r.warmup_ratio": 0.1, "agent_r.warmup_steps": 3}, write=False)
    rows = ROWS * 12  # 24 own rows, 10 of 12 a batch at eta = 0.2: ceil(2.5 x 24 / 10) = 6 steps
    write_rows(rows, tmp_path / "r.parquet", general=[([1, 2], [0, 1])] * 5)
    cmd = revision_sft_command(cfg, tmp_path / "r.parquet", tmp_path)
    assert len([c for c in cmd if c.startswith("optim.lr=")]) == 1  # the [sft] value is replaced, not repeated
    with initialize_config_module("verl.trainer.config", version_base=None):
        c = compose(config_name="sft_trainer_engine", overrides=cmd[cmd.index("verl.trainer.sft_trainer") + 1:])
    assert c.optim.lr == 3e-6 and c.data.train_batch_size == 12
    assert c.trainer.total_training_steps == 6 and c.optim.lr_warmup_steps == 3  # round(0.6) = 1 < the floor 3
    assert c.trainer.total_epochs == 3  # 29 rows: 2 full batches an epoch (VERL drops the rest), 3 epochs for 6 steps
    assert c.optim.lr_scheduler_type == "cosine" and c.optim.min_lr_ratio == 0.0  # [sft]'s floor, the local loop's too
    assert c.optim.zero_indexed_step is False  # VERL's warm-up (s + 1) / W, as the local loop's
    write_rows(ROWS * 40, tmp_path / "big.parquet", general=[([1, 2], [0, 1])] * 16)  # 96 rows: 8 batches an epoch
    big = revision_sft_command(cfg, tmp_path / "big.parquet", tmp_path)
    assert "trainer.total_training_steps=20" in big and "trainer.total_epochs=3" in big  # ceil(2.5 x 80 / 10); 20 / 8
    with pytest.raises(ValueError, match="0 own rows"):
        write_rows([], tmp_path / "none.parquet", general=[([1, 2], [0, 1])] * 20)
        revision_sft_command(cfg, tmp_path / "none.parquet", tmp_path)
    before = revision_sft_command(cfg, tmp_path / "absent.parquet", tmp_path)  # no parquet yet: epochs and ratio only
    assert not any(x.startswith(("trainer.total_training_steps=", "optim.lr_warmup_steps=")) for x in before)
