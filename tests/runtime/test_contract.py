"""The runtime contract (kit.runtime): both runtimes take the same keyword-only arguments, the
switch is ``cfg.runtime``, and kit.chain calls whichever it picks the same way, stage-3 filtering
included."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from pathlib import Path

import pytest

from kit import chain, runtime
from kit.config import ConfigError, KitConfig, from_json, load, save
from kit.progress import StepBar
from kit.runtime import local, verl


def _params(fn):
    return [(p.name, p.kind, p.default, str(p.annotation)) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", runtime.CONTRACT)
def test_both_runtimes_define_the_same_keyword_only_signature(name):
    a, b = getattr(local, name), getattr(verl, name)
    assert _params(a) == _params(b)
    params = list(inspect.signature(a).parameters.values())
    positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional in (["cfg"], ["cfg", "stage"], ["cfg", "curation"])
    assert "run_dir" in [p.name for p in params]
    if name not in ("prepare_data",):
        assert {"init_dir", "data_dir"} <= {p.name for p in params}


def test_the_runtime_names_are_the_configs():
    allowed = typing.get_args(typing.get_type_hints(KitConfig)["runtime"])
    assert set(runtime.RUNTIMES) == set(allowed) == {"local", "verl"}
    assert runtime.get(load("smoke", write=False)) is local
    assert runtime.get(load("paper-14b", write=False)) is verl


def test_profiles_choose_their_runtime_and_the_rules_between_keys_hold(tmp_path):
    assert [load(p, write=False).runtime for p in ("tiny", "smoke", "paper-14b", "paper-32b")] == \
        ["local", "local", "verl", "verl"]
    with pytest.raises(ConfigError, match="runtime: 'cluster' is not one of"):
        load("smoke", {"runtime": "cluster"}, write=False)
    assert load("smoke", {"runtime": "verl"}, write=False).runtime == "verl"  # e.g. VERL on the CPU
    # rollout.engine was a knob nothing read (runtime says who samples): gone, so a profile, an override or
    # an old config.json that still sets it is an unknown key
    with pytest.raises(ConfigError, match="rollout.engine"):
        load("smoke", {"rollout.engine": "hf"}, write=False)
    path = save(load("smoke", write=False), tmp_path / "old")
    data = json.loads(path.read_text())
    data["rollout"]["engine"] = "hf"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="rollout.engine"):
        from_json(path)


class Recorder:
    """Stands in for one runtime module: records each call of the contract."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name not in runtime.CONTRACT:
            raise AttributeError(name)

        def call(*args, **kwargs):
            self.calls.append((name, args[1:], kwargs))
            return {"called": name}

        return call


@pytest.mark.parametrize("name", ["local", "verl"])
def test_the_chain_calls_either_runtime_the_same_way(name, monkeypatch, tmp_path):
    rec = Recorder()
    monkeypatch.setitem(runtime.RUNTIMES, name, rec)
    cfg = dataclasses.replace(load("smoke", write=False), runtime=name)
    cb = print

    class Bar:  # the chain shows a progress bar (kit.progress.StepBar) that passes every row on to cb
        def __eq__(self, other):
            return isinstance(other, StepBar) and other.inner is cb

    chain.cold_start(cfg, tmp_path / "sft", progress=cb)
    chain.train_stage(cfg, "stage1", tmp_path / "s1", tmp_path / "sft", tmp_path / "data", progress=cb)
    chain.train_stage(cfg, "stage3", tmp_path / "s3", tmp_path / "s2", tmp_path / "data", progress=cb)
    chain.train_ablation(cfg, tmp_path / "abl", tmp_path / "sft", tmp_path / "data", progress=cb, reuse=["x"])
    run = {"data_dir": tmp_path / "data", "progress": Bar()}
    assert rec.calls == [
        ("run_sft", (), {"run_dir": tmp_path / "sft", "init_dir": None, "data_dir": None, "progress": Bar(),
                         "sft_checkpoint": "", "sft_data": ""}),
        ("run_stage", ("stage1",), {"run_dir": tmp_path / "s1", "init_dir": tmp_path / "sft", **run}),
        # stage 3's pool is built first, from the upstream run folder, in the same place for both runtimes
        ("prepare_hard_subset", ("stage3",), {"run_dir": tmp_path / "s3", "init_dir": tmp_path / "s2",
                                            "data_dir": tmp_path / "data", "hard_counts": "", "sampler_url": ""}),
        ("run_stage", ("stage3",), {"run_dir": tmp_path / "s3", "init_dir": tmp_path / "s2", **run}),
        ("run_ablation", (), {"run_dir": tmp_path / "abl", "init_dir": tmp_path / "sft", **run, "reuse": ["x"]}),
    ]


def test_a_zero_step_hard_stage_builds_no_subset(monkeypatch, tmp_path):
    rec = Recorder()
    monkeypatch.setitem(runtime.RUNTIMES, "verl", rec)
    cfg = load("paper-32b", write=False)
    assert cfg.stages["stage3"].steps == 0 and cfg.stages["stage3"].problems == "hard"
    chain.train_stage(cfg, "stage3", tmp_path / "s3", tmp_path / "s2", tmp_path / "data")
    assert [c[0] for c in rec.calls] == ["run_stage"]


def test_the_local_runtime_passes_the_upstream_policy_folder_to_the_engine(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(local.rl, "run_stage",
                        lambda cfg, stage, init, run, progress, data_dir: seen.update(stage=init, data=data_dir))
    monkeypatch.setattr(local.rl, "prepare_hard_subset",
                        lambda cfg, stage, init, run, data_dir: seen.update(hard=init, hard_data=data_dir))
    monkeypatch.setattr(local.ablation, "run_ablation", lambda cfg, init, run, **kw: seen.update(abl=init, **kw))
    cfg = load("smoke", write=False)
    for run in ("s1", "s2", "sft"):
        (tmp_path / run / "policy").mkdir(parents=True)
    local.run_stage(cfg, "stage2", run_dir=tmp_path / "s2", init_dir=tmp_path / "s1", data_dir=tmp_path / "d")
    local.prepare_hard_subset(cfg, "stage3", run_dir=tmp_path / "s3", init_dir=tmp_path / "s2", data_dir=tmp_path / "d")
    local.run_ablation(cfg, run_dir=tmp_path / "a", init_dir=tmp_path / "sft", reuse=(tmp_path / "s1",))
    assert seen == {"stage": tmp_path / "s1" / "policy", "hard": tmp_path / "s2" / "policy",  # data_dir reaches the pool
                    "data": tmp_path / "d", "hard_data": tmp_path / "d",
                    "abl": tmp_path / "sft" / "policy", "progress": None, "reuse": [tmp_path / "s1"]}
    with pytest.raises(ValueError, match="ablation arms train on the task family"):
        local.run_ablation(load("smoke", {"data.source": "curated"}, write=False), run_dir=tmp_path / "a",
                           init_dir=tmp_path / "sft")


def test_each_runtime_refuses_the_others_inputs(tmp_path):
    cfg = load("smoke", write=False)
    with pytest.raises(ValueError, match="sft_checkpoint is an input of the 'verl' runtime"):
        local.run_sft(cfg, run_dir=tmp_path, sft_checkpoint="/x")
    with pytest.raises(ValueError, match="hard_counts is an input of the 'verl' runtime"):
        local.prepare_hard_subset(cfg, "stage3", run_dir=tmp_path, init_dir=tmp_path, hard_counts="c.json")
    with pytest.raises(ValueError, match="init_dir"):
        local.run_sft(cfg, run_dir=tmp_path, init_dir=tmp_path)
    paper = load("paper-14b", write=False)
    with pytest.raises(ValueError, match="init_dir"):
        verl.run_sft(paper, run_dir=tmp_path, init_dir=tmp_path, sft_checkpoint="/x")
    with pytest.raises(ValueError, match="needs data_dir"):
        verl.run_stage(paper, "stage1", run_dir=tmp_path / "s1", init_dir=tmp_path / "sft")


def test_the_verl_cold_start_without_a_checkpoint_or_data_names_the_variables_kit_reproduce_reads(monkeypatch, tmp_path):
    monkeypatch.delenv("KIT_SFT_CHECKPOINT", raising=False)
    monkeypatch.delenv("KIT_SFT_DATA", raising=False)
    with pytest.raises(RuntimeError, match=r"`sft_checkpoint` parameter .*KIT_SFT_CHECKPOINT=DIR.*KIT_SFT_DATA"):
        verl.run_sft(load("smoke", write=False), run_dir=tmp_path / "sft")
    assert not (tmp_path / "sft" / "policy").exists()


def test_the_verl_runtime_replays_converted_metrics_to_progress(monkeypatch, tmp_path):
    from kit.bridge import stages

    def fake_run_stage(cfg, stage, run_dir, init_dir, data_dir):
        Path(run_dir).mkdir(parents=True)
        rows = [{"stage": stage, "step": s, "reward_mean": 0.5} for s in (1, 2)]
        (Path(run_dir) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"stage": stage, "engine": "verl"}

    monkeypatch.setattr(stages, "run_stage", fake_run_stage)
    (tmp_path / "sft" / "policy").mkdir(parents=True)
    seen = []
    out = verl.run_stage(load("paper-14b", write=False), "stage1", run_dir=tmp_path / "s1", init_dir=tmp_path / "sft",
                         data_dir=tmp_path / "data", progress=seen.append)
    assert [r.get("step") for r in seen] == [1, 2, None] and seen[-1] == {"stage": "stage1", "summary": out}


def _policy_folder(path):
    """A folder as save_policy leaves it (model config and tokenizer files)."""
    path.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (path / name).write_text("{}")
    return path


@pytest.mark.parametrize("runtime_name", ["local", "verl"])
def test_a_wrong_init_dir_is_named_before_anything_runs(runtime_name, tmp_path):
    rt = runtime.RUNTIMES[runtime_name]
    cfg = load("smoke" if runtime_name == "local" else "paper-14b", write=False)
    data = tmp_path / "data"
    pol = _policy_folder(tmp_path / "sft" / "policy")
    (tmp_path / "half").mkdir()  # a run folder whose notebook never finished: no policy/
    calls = {
        "run_stage": lambda init: rt.run_stage(cfg, "stage1", run_dir=tmp_path / "s1", init_dir=init, data_dir=data),
        "run_ablation": lambda init: rt.run_ablation(cfg, run_dir=tmp_path / "abl", init_dir=init, data_dir=data),
        "prepare_hard_subset": lambda init: rt.prepare_hard_subset(cfg, "stage3", run_dir=tmp_path / "s3",
                                                                   init_dir=init, data_dir=data),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"{name}: init_dir is required.*upstream run folder"):
            call(None)
        with pytest.raises(FileNotFoundError, match=rf"{name}: init_dir {tmp_path / 'nope'} does not exist"):
            call(tmp_path / "nope")
        with pytest.raises(ValueError, match=rf"{name}: init_dir {pol} is a policy folder; pass the run folder "
                                             rf"that holds it, {pol.parent}"):
            call(pol)
        with pytest.raises(FileNotFoundError, match=rf"{name}: init_dir {tmp_path / 'half'} has no policy/"):
            call(tmp_path / "half")
    assert not (tmp_path / "s1").exists() and not (tmp_path / "abl").exists() and not (tmp_path / "s3").exists()
