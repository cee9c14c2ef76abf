"""Experiment tracking (issue #20 item 1): the [logging] setting, VERL's names, offline defaults, backends."""

import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kit.algo import RocParams, roc_step
from kit.bridge.overrides import RecipePaths, to_hydra_overrides
from kit.config import LOG_BACKENDS, ConfigError, available_profiles, load
from kit.train import tracking
from kit.train.tracking import NullTracker, open_tracker

GOLDEN = Path(__file__).parent / "golden" / "verl_step_metrics.txt"


def verl_emitted() -> set[str]:
    """Names in VERL's own file-logger output of the kit's CPU e2e run (the golden list)."""
    return {ln.strip() for ln in GOLDEN.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` read back with TensorBoard's own event reader."""
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _traj(resp=4, prompt=3, turns=1, feedback=0, truncated=False):
    return SimpleNamespace(prompt_ids=[1] * prompt, response_ids=[2] * resp, turns=turns,
                           feedback_texts=["x"] * feedback, truncated=truncated)


# --------------------------------------------------------------------------- the setting


def test_a_bad_backend_name_is_rejected_naming_the_key_and_the_allowed_values():
    with pytest.raises(ConfigError) as err:
        load("tiny", {"logging.backends": ["console", "tensorbord"]}, write=False)
    assert "logging.backends[1]" in str(err.value) and "'tensorbord'" in str(err.value)
    assert all(repr(b) in str(err.value) for b in LOG_BACKENDS)
    with pytest.raises(ConfigError, match="logging.backends: 'file' is listed twice"):
        load("tiny", ["logging.backends=file,file"], write=False)
    with pytest.raises(ConfigError, match="logging.wandb_mode"):
        load("tiny", {"logging.wandb_mode": "cloud"}, write=False)


def test_every_kit_backend_is_one_verl_s_tracker_supports():
    from verl.utils.tracking import Tracking

    assert set(LOG_BACKENDS) <= set(Tracking.supported_backend)


def test_no_profile_configures_an_online_tracker_and_tiny_writes_tensorboard():
    for name in available_profiles():
        lc = load(name, write=False).logging
        assert lc.wandb_mode == "offline" and lc.mlflow_tracking_uri == "", name
        assert "tensorboard" in lc.backends, name
    assert load("tiny", write=False).logging.backends == ("tensorboard",)


def test_the_environment_defaults_keep_every_tracker_in_the_run_folder_and_offline(tmp_path):
    env = tracking.tracking_env(load("paper-14b", write=False).logging, tmp_path)
    assert env["WANDB_MODE"] == "offline"
    for key in ("TENSORBOARD_DIR", "WANDB_DIR", "MLFLOW_TRACKING_URI", "TRACKIO_DIR", "VERL_FILE_LOGGER_PATH"):
        assert Path(env[key]).is_relative_to(tmp_path / "tracking"), key  # a path, not a server URL
    online = load("paper-14b", {"logging.wandb_mode": "online", "logging.mlflow_tracking_uri": "http://mlflow:5000"},
                  write=False)
    env = tracking.tracking_env(online.logging, tmp_path)
    assert (env["WANDB_MODE"], env["MLFLOW_TRACKING_URI"]) == ("online", "http://mlflow:5000")


def test_the_verl_runtime_gets_the_backends_as_trainer_logger_and_the_offline_environment():
    cfg = load("paper-14b", {"logging.backends": ["wandb", "mlflow"]}, write=False)
    out = to_hydra_overrides(cfg, "stage1", paths=RecipePaths.default("/RUN"), metrics_file="/RUN/verl/m.jsonl")
    assert "trainer.logger=[wandb,mlflow,file]" in out  # file: the metrics file the kit converts
    env = "+ray_kwargs.ray_init.runtime_env.env_vars."
    assert f"{env}WANDB_MODE=offline" in out and f"{env}WANDB_DIR=/RUN/tracking/wandb" in out
    assert f"{env}MLFLOW_TRACKING_URI=/RUN/tracking/mlruns" in out
    assert f"{env}VERL_FILE_LOGGER_PATH=/RUN/verl/m.jsonl" in out


def test_verl_sft_gets_the_backends_too(tmp_path):
    from kit.bridge import sft

    cfg = load("paper-14b", {"logging.backends": ["console", "tensorboard"]}, write=False)
    assert "trainer.logger=[console,tensorboard,file]" in sft.sft_command(cfg, str(tmp_path / "d.parquet"), tmp_path)


def test_a_missing_tracker_package_is_named_before_the_run(monkeypatch):
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name))
    with pytest.raises(ImportError, match=r"'mlflow' is not installed: pip install mlflow"):
        tracking.check_backends(["tensorboard", "mlflow"])
    tracking.check_backends(["console", "file", "tensorboard"])


# --------------------------------------------------------------------------- names


def test_the_table_names_only_metrics_verl_s_trainer_really_logs():
    emitted = verl_emitted()
    named = {n for names in tracking.RL_NAMES.values() for n in names}
    assert named <= emitted, sorted(named - emitted)
    assert {"actor/pg_loss", "actor/entropy", "actor/grad_norm", "response_length/mean", "critic/score/mean"} <= named


def test_the_roc_names_are_the_ones_the_verl_runtime_logs():
    rng = np.random.default_rng(0)
    rewards = np.array([1, 0, 1, 0, 1, 1, 0, 0] * 2, dtype=float)
    gids = np.repeat([0, 1], 8)
    cnt = {"tool_calls": rng.integers(0, 3, 16), "tool_failures": rng.integers(0, 2, 16),
           "infra_errors": np.zeros(16, int), "answer_tags": np.ones(16, int), "turns": np.full(16, 2)}
    cnt["tool_failures"] = np.minimum(cnt["tool_failures"], cnt["tool_calls"])
    _, sel = roc_step(rewards, gids, cnt, RocParams(group_size=4), seed=0)
    logged = tracking.tracker_metrics({"global_step": 1, "kept": 8}, tracking.RL_NAMES, sel)
    roc = {k for k in logged if k.startswith(tracking.ROC_PREFIX)}
    assert roc and roc <= verl_emitted(), sorted(roc - verl_emitted())
    assert "rstar2/kept" not in logged  # the row's copy of a selection metric is not repeated


def test_every_kit_metric_goes_under_the_one_kit_prefix():
    # issue #20: VERL's names unprefixed, RoC and tool metrics (and every other kit number) under rstar2/
    rewards = np.array([1, 0, 1, 0, 1, 1, 0, 0], float)
    cnt = {"tool_calls": np.ones(8, int), "tool_failures": np.zeros(8, int), "infra_errors": np.zeros(8, int),
           "answer_tags": np.ones(8, int), "turns": np.full(8, 2)}
    _, sel = roc_step(rewards, np.zeros(8, int), cnt, RocParams(group_size=4), seed=0)
    row = {"stage": "stage1", "step": 1, "global_step": 1, "loss": 0.1, "kept": 4, "tool_calls_per_traj": 1.0,
           "tool_error_ratio_correct_before": 0.0, "bstar_balance": 0.5, "time_tool_s": 0.2}
    logged = tracking.tracker_metrics(row, tracking.RL_NAMES, sel)
    verl = {n for names in tracking.RL_NAMES.values() for n in names}
    kit = set(logged) - verl
    assert kit and all(k.startswith("rstar2/") for k in kit), sorted(kit)
    assert {"rstar2/roc/kept", "rstar2/roc/sampled", "rstar2/tool_calls_per_traj", "rstar2/bstar_balance"} <= kit
    assert logged["actor/pg_loss"] == 0.1 and tracking.ROC_PREFIX == "rstar2/roc/"


def test_sft_names_are_the_ones_verl_s_sft_trainer_builds():
    import verl.trainer.sft_trainer as vsft

    src = Path(vsft.__file__).read_text()
    listed = re.search(r'for k in \[([^\]]*)\]:\s*\n\s*if k in metrics.keys\(\):\s*\n\s*value = metrics.pop\(k\)\s*\n'
                       r'\s*metrics\[f"train/\{k\}"\] = value', src)
    assert listed, "verl.trainer.sft_trainer no longer renames its metrics to train/<k>"
    keys = {k.strip().strip('"') for k in listed.group(1).split(",")}
    for kit_key, names in tracking.SFT_NAMES.items():
        assert names == (f"train/{kit_key}",) and kit_key in keys


def test_trained_stats_follow_verl_s_definitions_on_the_kept_rows():
    trajs = [_traj(resp=4, prompt=3, turns=1), _traj(resp=10, prompt=5, turns=2, feedback=1, truncated=True)]
    s = tracking.trained_stats(trajs, [1.0, 0.0])
    assert (s["trained_score_mean"], s["trained_score_max"], s["trained_score_min"]) == (0.5, 1.0, 0.0)
    assert (s["trained_response_len_mean"], s["trained_response_len_max"], s["trained_response_len_min"]) == (7, 10, 4)
    assert s["trained_truncation_ratio"] == 0.5 and s["trained_prompt_len_mean"] == 4
    assert (s["trained_num_turns_min"], s["trained_num_turns_max"]) == (2, 4)  # user + assistant turns + 1
    assert tracking.trained_stats([], []) == {}


# --------------------------------------------------------------------------- backends


def test_tensorboard_and_file_backends_write_verl_names_under_the_run_folder(tmp_path):
    cfg = load("tiny", {"logging.backends": ["file", "tensorboard"]}, write=False)
    t = tracking.LocalTracker(cfg.logging, tmp_path, "tiny-sft", cfg.to_dict())
    rows = [{"stage": "sft", "step": s, "global_step": s, "loss": 3.0 - s, "lr": 1e-3, "grad_norm": 0.5,
             "tokens": 100, "seed": 0} for s in (1, 2)]
    for r in rows:
        t.log_sft(r)
    kept = t.log_rl({"stage": "stage1", "step": 1, "global_step": 3, "loss": 0.25, "tool_calls_per_traj": 1.5},
                    {"kept": 2.0}, [_traj(), _traj(resp=6), _traj(resp=8)], [1.0, 0.0, 1.0], kept=[0, 2])
    t.finish()
    assert kept["response_length/mean"] == 6 and kept["critic/score/mean"] == 1.0 and kept["rstar2/roc/kept"] == 2
    sc = scalars(tmp_path / "tracking" / "tensorboard")
    assert sc["train/loss"] == [(1, 2.0), (2, 1.0)] and sc["actor/pg_loss"] == [(3, 0.25)]
    assert sc["rstar2/tool_calls_per_traj"] == [(3, 1.5)] and sc["rstar2/tokens"] == [(1, 100.0), (2, 100.0)]
    lines = [json.loads(ln) for ln in (tmp_path / "tracking" / "verl_metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [1, 2, 3] and lines[0]["data"]["train/lr"] == 1e-3


FRESH_TRACKER = """
import json, sys
{pre}
from kit.config import load
from kit.train.tracking import open_tracker
cfg = load("tiny", {{"logging.backends": ["tensorboard", "file"]}}, write=False)
t = open_tracker(cfg, sys.argv[1], "stage1")
t.log_rl({{"stage": "stage1", "step": 1, "global_step": 1, "loss": 0.5}}, {{}})
t.finish()
print(json.dumps({{"verl": "verl" in sys.modules, "ray": "ray" in sys.modules,
                  "module": type(t.tracking).__module__, "file": sys.modules[type(t.tracking).__module__].__file__}}))
"""


@pytest.mark.parametrize("verl_first", [False, True])
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_local_run_process_gets_verl_s_tracker_without_importing_verl_and_ray(tmp_path, verl_first):
    """A fresh local-run process (a stage kernel, an ablation arm) loads VERL's own tracker file
    without VERL's package (which imports Ray: ~3-5 CPU s per process); where VERL is already
    loaded (the VERL runtime) it is VERL's module. Both write the same TensorBoard and file logs."""
    pre = "import verl.utils.tracking" if verl_first else ""
    out = subprocess.run([sys.executable, "-c", FRESH_TRACKER.format(pre=pre), str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    import verl.utils.tracking as verl_tracking  # the file VERL's trainer uses

    assert got["file"] == verl_tracking.__file__
    if verl_first:
        assert got["module"] == "verl.utils.tracking"
    else:
        assert got == {"verl": False, "ray": False, "module": tracking.STANDALONE_TRACKING, "file": verl_tracking.__file__}
    assert scalars(tmp_path / "tracking" / "tensorboard")["actor/pg_loss"] == [(1, 0.5)]
    lines = (tmp_path / "tracking" / "verl_metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["data"]["actor/pg_loss"] for ln in lines] == [0.5]


@pytest.fixture
def without_verl(monkeypatch):
    """This process as a fresh local run sees it: VERL not imported, its tracker file not loaded
    (both restored afterwards)."""
    monkeypatch.delitem(sys.modules, "verl", raising=False)
    monkeypatch.delitem(sys.modules, "verl.utils.tracking", raising=False)
    monkeypatch.delitem(sys.modules, tracking.STANDALONE_TRACKING, raising=False)
    yield
    sys.modules.pop(tracking.STANDALONE_TRACKING, None)


def test_a_verl_install_without_its_tracker_file_is_an_import_error_naming_the_path(tmp_path, monkeypatch,
                                                                                     without_verl):
    """Was a bare FileNotFoundError, outside LocalTracker's and open_tracker's documented ImportError."""
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=re.escape(str(tmp_path / "verl" / "utils" / "tracking.py"))):
        tracking.verl_tracking_class()
    assert tracking.STANDALONE_TRACKING not in sys.modules


def test_two_threads_loading_the_tracker_file_get_the_same_complete_class(monkeypatch, without_verl):
    """The file is registered in sys.modules before it runs (dataclasses need that); a second
    thread used to take that half-run module and fail with AttributeError: no 'Tracking'."""
    entered, release = threading.Event(), threading.Event()
    real = importlib.util.spec_from_file_location

    class HeldLoader:  # runs the real loader once the test lets it
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            entered.set()
            release.wait(30)
            self.inner.exec_module(module)

    def held_spec(name, path, *args, **kwargs):
        spec = real(name, path, *args, **kwargs)
        spec.loader = HeldLoader(spec.loader)
        return spec

    monkeypatch.setattr(importlib.util, "spec_from_file_location", held_spec)
    got: dict[str, object] = {}

    def call(key):
        try:
            got[key] = tracking.verl_tracking_class()
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            got[key] = exc

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=call, args=("second",))
    second.start()
    second.join(0.5)  # before the fix it had already failed by now
    release.set()
    first.join(30)
    second.join(30)
    assert isinstance(got["first"], type) and got["first"].__name__ == "Tracking"
    assert got["second"] is got["first"]


def test_no_backend_opens_no_tracker(tmp_path):
    cfg = load("tiny", {"logging.backends": []}, write=False)
    t = open_tracker(cfg, tmp_path, "stage1")
    assert isinstance(t, NullTracker) and t.log_rl({"global_step": 1}, {}) == {}
    assert not (tmp_path / "tracking").exists()


def test_wandb_defaults_to_offline_files_in_the_run_folder(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("WANDB_MODE", "online")  # the config, not the shell, decides
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    cfg = load("tiny", {"logging.backends": ["wandb"]}, write=False)
    t0 = time.perf_counter()
    t = tracking.LocalTracker(cfg.logging, tmp_path, "tiny-stage1", cfg.to_dict())
    t.log_rl({"stage": "stage1", "step": 1, "global_step": 1, "loss": 0.5}, {"kept": 4.0})
    t.finish()
    seconds = time.perf_counter() - t0
    runs = list((tmp_path / "tracking" / "wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), runs
    import os

    assert os.environ["WANDB_MODE"] == "online"  # the caller's environment is restored afterwards
    assert "WANDB_SILENT" not in os.environ
    # W&B's console lines (red stderr boxes in a training cell, issue #20) are kept out of the output
    err = capfd.readouterr().err
    assert "wandb:" not in err, err[:300]
    print(f"wandb offline init+log+finish: {seconds:.1f} s")
