import pytest

from kit.config import paths


def test_env_var_sets_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_DATA_DIR", str(tmp_path))
    assert paths.data_dir() == tmp_path.resolve()
    (tmp_path / "x.json").write_text("[]")
    assert paths.data_file("x.json") == tmp_path.resolve() / "x.json"


def test_missing_file_error_names_file_and_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_DATA_DIR", str(tmp_path))
    with pytest.raises(paths.DataFileMissing, match=r"benchmarks/aime2024\.json.*KIT_DATA_DIR"):
        paths.data_file("benchmarks/aime2024.json")


def test_default_is_shared_data_beside_checkout(monkeypatch):
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
    assert paths.data_dir() == paths.REPO_ROOT.parent / "shared" / "data"
