"""Stage 3's hard subset on the VERL CPU runtime: the stage-2 policy served on loopback by the kit
(kit.rollout.serve) and sampled through the same OpenAI route as an SGLang server (issue #15 item 3)."""

from __future__ import annotations

import json
import os
from urllib.parse import urlparse

import pandas as pd
import psutil
import pytest
import torch
from doubles import port_refused

from kit import prompts
from kit.bridge.verl_cpu.runner import DEVICE_ENV, VerlCpuError
from kit.config import load
from kit.models import build_tiny_model, save_policy, train_tokenizer
from kit.runtime import verl as verl_runtime

PROBLEMS = [("What is 3 * 10?", "30"), ("What is 4 * 11?", "44"), ("What is 5 * 12?", "60")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``s2/policy`` (an untrained tiny policy: it solves nothing) and ``data/data/curated.parquet``."""
    root = tmp_path_factory.mktemp("hard_subset")
    text = [prompts.render_prompt(q) + f" ok </reason> <answer> {a} </answer>" for q, a in PROBLEMS * 20]
    tok = train_tokenizer(text, 400)
    save_policy(build_tiny_model(load("tiny", write=False).model, tok, seed=0).eval(), tok, root / "s2" / "policy")
    (root / "data" / "data").mkdir(parents=True)
    pd.DataFrame([{"source": "arith", "id": i, "problem": q, "answer": a} for i, (q, a) in enumerate(PROBLEMS)]) \
        .to_parquet(root / "data" / "data" / "curated.parquet", index=False)
    return root


def _cfg(run_dir):
    iso = os.environ.get("KIT_SANDBOX_ISOLATION")
    return load("smoke", run_dir=str(run_dir), overrides={
        "stages.stage3.max_response_tokens": 24, "stages.stage3.max_turns": 1, "stages.stage3.hard_filter_samples": 4,
        "sandbox.num_workers": 1, "model.torch_threads": 1, **({"sandbox.isolation": iso} if iso else {})})


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_on_cpu_the_stage2_policy_is_served_on_loopback_sampled_and_stopped(folders, tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    for var in ("KIT_HARD_COUNTS", "KIT_SAMPLER_URL"):
        monkeypatch.delenv(var, raising=False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    run = tmp_path / "s3"
    info = verl_runtime.prepare_hard_subset(_cfg(run), "stage3", run_dir=run, init_dir=folders / "s2",
                                            data_dir=folders / "data")
    url = urlparse(info["route"]["url"])
    assert info["route"]["kind"] == "kit_cpu" and url.hostname == "127.0.0.1" and url.path == "/v1"
    assert json.loads((run / "hard_subset.json").read_text()) == info
    counts = json.loads((run / "solve_counts.json").read_text())
    assert set(counts) == {f"arith/{i}" for i in range(len(PROBLEMS))}
    assert all(0 <= c < 4 for c in counts.values())  # the untrained policy never solves a problem 4/4
    hard = pd.read_parquet(run / "data" / "hard.parquet")
    assert list(hard["problem"]) == [q for q, _ in PROBLEMS] and info["n"] == 4 and info["out"] == len(PROBLEMS)
    assert port_refused(url.port)  # the server is gone
    left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not [c for c in left if c[1:4] == ["-m", "kit", "serve"]]  # (kit.reward keeps its verifier workers for reuse)
    # a second call keeps the parquet and its record
    assert verl_runtime.prepare_hard_subset(_cfg(run), "stage3", run_dir=run, init_dir=folders / "s2",
                                            data_dir=folders / "data") == info


def test_on_a_gpu_runtime_without_counts_or_server_the_error_says_how(folders, tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "gpu")
    for var in ("KIT_HARD_COUNTS", "KIT_SAMPLER_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="sglang.launch_server.*sampler_url"):
        verl_runtime.prepare_hard_subset(_cfg(tmp_path), "stage3", run_dir=tmp_path, init_dir=folders / "s2",
                                         data_dir=folders / "data")
    assert not (tmp_path / "data" / "hard.parquet").exists()


def test_cpu_runtime_on_a_cuda_machine_is_refused_before_serving(folders, tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "a GPU")
    with pytest.raises(VerlCpuError, match="CUDA GPU is visible"):
        verl_runtime.prepare_hard_subset(_cfg(tmp_path), "stage3", run_dir=tmp_path, init_dir=folders / "s2",
                                         data_dir=folders / "data")


def test_the_counts_file_and_a_given_parquet_are_recorded_as_their_routes(folders, tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps({"arith/0": 4, "arith/1": 1, "arith/2": 0}))
    info = verl_runtime.prepare_hard_subset(_cfg(tmp_path / "a"), "stage3", run_dir=tmp_path / "a",
                                            init_dir=folders / "s2", data_dir=folders / "data",
                                            hard_counts=str(counts))
    assert info["route"] == {"kind": "hard_counts", "file": str(counts.resolve())}
    assert list(pd.read_parquet(info["parquet"])["id"]) == [1, 2]
    given = tmp_path / "b" / "data" / "hard.parquet"
    given.parent.mkdir(parents=True)
    pd.read_parquet(info["parquet"]).to_parquet(given)
    kept = verl_runtime.prepare_hard_subset(_cfg(tmp_path / "b"), "stage3", run_dir=tmp_path / "b",
                                            init_dir=folders / "s2", data_dir=folders / "data")
    assert kept["route"] == {"kind": "given"} and kept["parquet"] == str(given)
    assert json.loads((tmp_path / "b" / "hard_subset.json").read_text()) == kept
