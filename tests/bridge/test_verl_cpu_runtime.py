"""The kit's CPU runtime for VERL, piece by piece, without Ray (issue #15).

Each patch to VERL internals has a guard here that fails loudly when a VERL upgrade moves it;
the plugin's registration is checked in a fresh interpreter (as every VERL process loads it);
the CPU rollout server is driven directly (concurrent requests, weight updates, versions).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")

from kit.bridge.verl_cpu import patches, runner  # noqa: E402
from kit.bridge.verl_cpu.platform import DEVICE_MODULE, PlatformCPU  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _verl_python(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter as a VERL process would start (plugin at import verl);
    it prints one JSON line last."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **runner.plugin_route({runner.FALLBACK_ENV: "1"}), **env}
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_pyproject_declares_the_entry_point_the_pin_and_the_marker():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["verl.plugins"] == {runner.ENTRY_POINT: runner.PLUGIN_MODULE}
    assert f"verl[verl-core]=={patches.VERL_VERSION}" in meta["project"]["dependencies"]
    assert runner.VERL_PIN == patches.VERL_VERSION
    ini = meta["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("verl_cpu:") for m in ini["markers"])
    assert "verl_cpu" not in ini["addopts"]  # `make test` runs the VERL-on-CPU tests


def test_entry_point_is_installed():
    # the committed route; fails until the editable install is refreshed (pip install -e . / make setup)
    assert runner.plugin_installed(), ("entry point verl.plugins:kit_cpu not installed: refresh the kit's editable "
                                       "install (pip install -e . / make setup) after pulling pyproject.toml")


CPU_PROCESS = """
import json, os, torch.distributed as dist, verl
from verl.plugin.platform.platform_manager import PlatformRegistry, get_platform
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
import verl.workers.engine_workers as ew
from verl.utils import distributed as vd
from kit.bridge.verl_cpu import plugin, patches
p = get_platform()
out = {'names': PlatformRegistry.registered_names(), 'device': p.device_name, 'backend': p.communication_backend_name(),
       'error': plugin.ERROR, 'applied': patches.applied(), 'adapter': get_rollout_class('kit_cpu', 'async').__name__,
       'replica': get_rollout_replica_class('kit_cpu').__name__}
os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29533', RANK='0', WORLD_SIZE='1')
try:
    vd.initialize_global_process_group_ray.__kit_patched__(timeout_second=30)
    out['orig'] = 'ok'
except Exception as e:
    out['orig'] = str(e)
ew.initialize_global_process_group_ray(timeout_second=30)
out.update(pg_backend=str(dist.get_backend()), world=dist.get_world_size())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cpu_process():
    """One fresh VERL process with ``VERL_PLATFORM=cpu``, as every process of a CPU run starts."""
    return _verl_python(CPU_PROCESS, VERL_PLATFORM="cpu")


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_plugin_registers_the_cpu_platform_rollout_and_patches(cpu_process):
    out = cpu_process
    assert "cpu" in out["names"] and out["error"] is None
    assert (out["device"], out["backend"]) == ("cpu", "gloo")
    assert out["applied"] == {"process_group_backend": True, "rollout_registry": True, "valuehead_attention": True}
    assert (out["adapter"], out["replica"]) == ("KitCpuRolloutAdapter", "KitCpuReplica")


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_without_verl_platform_cpu_only_the_platform_is_registered():
    code = ("import json, verl\nfrom verl.plugin.platform.platform_manager import PlatformRegistry\n"
            "from kit.bridge.verl_cpu import plugin\n"
            "print(json.dumps({'names': PlatformRegistry.registered_names(), 'reg': plugin.REGISTERED}))\n")
    out = _verl_python(code, VERL_PLATFORM="")
    assert "cpu" in out["names"] and out["reg"] == ["platform:cpu"]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_patched_process_group_starts_on_gloo_and_the_original_would_not(cpu_process):
    assert "Duplicate device type cpu" in cpu_process["orig"]  # why the patch exists
    assert (cpu_process["pg_backend"], cpu_process["world"]) == ("gloo", 1)


def test_patch_points_are_where_verl_091_has_them():
    assert patches.check() == ["process_group_backend", "rollout_registry", "valuehead_attention"]


@pytest.mark.parametrize("module,old,new", [
    ("verl.utils.distributed", 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"', '"gloo"'),
    ("verl.workers.engine_workers", "initialize_global_process_group_ray(timeout_second=None)", "init_pg()"),
    ("verl.workers.rollout.base", "fqdn = _ROLLOUT_REGISTRY[(rollout_name, mode)]", "fqdn = lookup(rollout_name)"),
    ("verl.utils.model", 'attn_implementation="flash_attention_2"', 'attn_implementation=config_attn'),
])
def test_a_moved_internal_fails_loudly(monkeypatch, module, old, new):
    real = patches._source

    def moved(name):
        return real(name).replace(old, new) if name == module else real(name)

    monkeypatch.setattr(patches, "_source", moved)
    if module == "verl.utils.distributed":  # this one is read from the live function
        monkeypatch.setattr(patches.inspect, "getsource", lambda fn: real(module).replace(old, new))
    with pytest.raises(patches.VerlPatchError, match=r"verl==0\.9\.1"):
        patches.check()


def test_device_module_answers_every_call_verl_makes():
    dm = DEVICE_MODULE
    dm.empty_cache(), dm.ipc_collect(), dm.synchronize(), dm.set_per_process_memory_fraction(0.5)
    free, total = dm.mem_get_info()
    assert 0 < free <= total
    assert dm.memory_allocated() == dm.memory_reserved() == dm.max_memory_allocated() == dm.max_memory_reserved() == 0
    assert dm.is_available() and dm.device_count() == 1 and dm.get_device_name() == "cpu"
    state = dm.get_rng_state()
    a = torch.rand(3)
    dm.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    assert dm.current_stream() is not None and dm.Stream is torch.cpu.Stream
    p = PlatformCPU()
    assert (p.device_name, p.communication_backend_name(), p.ray_resource_name(), p.current_device()) == \
        ("cpu", "gloo", "GPU", "cpu")
    assert p.ray_resource_options(1) == {"num_gpus": 1}


def test_cpu_platform_is_never_auto_detected(monkeypatch):
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert not PlatformCPU().is_platform_available(use_smi_check=True)


def test_bad_input_each_gives_one_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100")
    with pytest.raises(runner.VerlCpuError, match="CUDA GPU is visible.*SGLang"):
        runner.require_cpu_machine()
    monkeypatch.setattr(runner.metadata, "version", lambda name: "0.10.0")
    with pytest.raises(runner.VerlCpuError, match=r"installed verl 0\.10\.0.*verl==0\.9\.1"):
        runner.check_verl_version()
    monkeypatch.setattr(runner, "plugin_installed", lambda: False)
    with pytest.raises(runner.VerlCpuError, match=r"pip install -e \."):
        runner.plugin_route({})
    assert runner.plugin_route({runner.FALLBACK_ENV: "1"}) == {"VERL_USE_EXTERNAL_MODULES": runner.PLUGIN_MODULE}


def test_ray_start_failure_names_the_logs(monkeypatch, tmp_path):
    from kit.bridge.verl_cpu import ray_local

    marks = tmp_path / "attempts"
    script = f"import sys; open({str(marks)!r}, 'a').write('x'); sys.exit(3)"
    monkeypatch.setattr(ray_local, "ray_cli", lambda: [sys.executable, "-c", script])
    stops = []
    monkeypatch.setattr(ray_local, "stop_ray", lambda *a, **k: stops.append(1) or [])
    monkeypatch.setattr(ray_local.time, "sleep", lambda s: None)
    # default: 4 tries, each failed one cleaned up, then one error that says what to do
    with pytest.raises(ray_local.RayStartError, match=f"after 4 tries.*{tmp_path}.*Stop other heavy jobs.*make test-verl"):
        ray_local.start_ray(tmp_path)
    assert marks.read_text() == "xxxx" and len(stops) == 4


def test_ray_start_succeeds_on_the_retry(monkeypatch, tmp_path):
    from kit.bridge.verl_cpu import ray_local

    marks = tmp_path / "attempts"  # the first try fails (a missed raylet registration), the second starts
    script = (f"import os, sys; p = {str(marks)!r}; n = len(open(p).read()) if os.path.exists(p) else 0; "
              "open(p, 'a').write('x'); sys.exit(0 if n else 1)")
    monkeypatch.setattr(ray_local, "ray_cli", lambda: [sys.executable, "-c", script])
    monkeypatch.setattr(ray_local, "stop_ray", lambda *a, **k: [])
    monkeypatch.setattr(ray_local.time, "sleep", lambda s: None)
    assert ray_local.start_ray(tmp_path) == "127.0.0.1:6379" and marks.read_text() == "xx"


def test_ray_stop_refuses_outside_the_private_namespace(monkeypatch):
    from kit.bridge.verl_cpu import ray_local

    monkeypatch.delenv(ray_local.SESSION_ENV, raising=False)
    with pytest.raises(RuntimeError, match="refusing"):
        ray_local.stop_ray()


def test_cpu_overrides_compose_with_verls_config(tmp_path):
    from hydra import compose, initialize_config_module

    from kit.bridge.launch import prepare_smoke
    from kit.config import load

    paths = prepare_smoke(load("smoke", run_dir=str(tmp_path / "smoke"), write=False), n_train=4, n_val=2)
    cfg = load("smoke", run_dir=str(tmp_path / "run"), write=False)
    _, ln = runner.build_cpu_launch(cfg, "stage1", model_path=str(paths["model"]), train_files=str(paths["train"]),
                                    val_files=str(paths["val"]))
    assert ln.cwd == str(tmp_path / "run")  # VERL's Hydra writes outputs/ there, not into the checkout
    overrides = ln.argv[3:]
    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    assert cfg.actor_rollout_ref.rollout.name == "kit_cpu" and cfg.trainer.device == "cpu"
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == runner.CPU_MICRO_TOKENS
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert cfg.trainer.v1.sampler.sampler_kwargs.poll_interval_s == runner.CPU_POLL_INTERVAL_S < 2.0
    assert cfg.ray_kwargs.ray_init.num_cpus is None and cfg.ray_kwargs.ray_init.address == "127.0.0.1:6379"
    assert Path(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path).exists()


def test_the_cpu_runtime_is_chosen_explicitly_and_never_by_accident(monkeypatch):
    from kit.bridge import launch as bridge_launch

    cpu = {runner.DEVICE_ENV: "cpu"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runner.default_launcher(cpu) is runner.run_cpu
    # a CPU-only machine asked for VERL without the explicit selection: refused, says what to set
    with pytest.raises(runner.VerlCpuError, match=r"no CUDA GPU is visible.*KIT_VERL_DEVICE=cpu"):
        runner.default_launcher({})
    with pytest.raises(runner.VerlCpuError, match=r"KIT_VERL_DEVICE=gpu but no CUDA GPU"):
        runner.default_launcher({runner.DEVICE_ENV: "gpu"})
    with pytest.raises(runner.VerlCpuError, match=r"'tpu'.*KIT_VERL_DEVICE=gpu.*KIT_VERL_DEVICE=cpu"):
        runner.default_launcher({runner.DEVICE_ENV: "tpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runner.default_launcher({}) is bridge_launch.launch
    assert runner.default_launcher({runner.DEVICE_ENV: "gpu"}) is bridge_launch.launch
    # a GPU machine with the CPU runtime selected: refused
    with pytest.raises(runner.VerlCpuError, match="CUDA GPU is visible.*NVIDIA H100"):
        runner.default_launcher(cpu)


def test_a_cpu_only_stage_without_the_selection_fails_before_launching(monkeypatch, tmp_path):
    from kit.bridge import stages

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(runner.DEVICE_ENV, raising=False)
    launched = []
    monkeypatch.setattr(runner, "run_cpu", lambda *a, **k: launched.append(a) or 0)
    monkeypatch.setattr(stages, "plan_stage", lambda *a, **k: stages.StagePlan(
        "stage1", str(tmp_path), 0, 2, {}, {}, [], [], launch_kwargs={"python": sys.executable}))
    with pytest.raises(runner.VerlCpuError, match="KIT_VERL_DEVICE=cpu"):
        stages.run_stage(None, "stage1", tmp_path, tmp_path, tmp_path)
    assert launched == []


def test_stages_inside_a_session_share_its_ray_head(monkeypatch, tmp_path):
    # a chain run inside one session: each stage runs on the session's Ray (no second `ray start`);
    # outside a session each stage gets its own
    from kit.bridge.verl_cpu import ray_local

    marker = tmp_path / "seen"
    script = f"import os; open({str(marker)!r}, 'w').write(os.environ['RAY_ADDRESS']); print('verl ran')"
    monkeypatch.setattr(runner, "build_cpu_launch", lambda cfg, stage, **kw: (
        SimpleNamespace(run_dir=str(tmp_path)), runner.Launch(stage, [sys.executable, "-c", script],
                                                              str(tmp_path / f"verl_{stage}.log"), cwd=str(tmp_path))))
    sessions = []
    monkeypatch.setattr(runner, "run_session", lambda launches, out, **kw: sessions.append(launches) or SimpleNamespace(
        error=None, codes={launches[0].name: 0}))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setattr(ray_local, "in_private_namespace", lambda: True)
    assert runner.run_cpu(None, "stage2") == 0 and sessions == []
    assert marker.read_text() == "127.0.0.1:6379" and "verl ran" in (tmp_path / "verl_stage2.log").read_text()
    monkeypatch.setattr(ray_local, "in_private_namespace", lambda: False)  # RAY_ADDRESS of someone else's Ray
    assert runner.run_cpu(None, "stage3") == 0 and [ln.name for ln in sessions[0]] == ["stage3"]


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None, reason="needs unshare and ip")
def test_a_failing_session_leaves_no_process_and_sees_only_loopback(tmp_path):
    # the launch daemonises a sleeper (as Ray's daemons do), lists the interfaces, then fails
    script = ("import os, subprocess, sys, psutil; "
              "subprocess.Popen(['sleep', '600'], start_new_session=True); "
              "print(sorted(psutil.net_if_addrs())); sys.exit(3)")
    ln = runner.Launch("boom", [sys.executable, "-c", script], str(tmp_path / "boom.log"))
    res = runner.run_session([ln], tmp_path / "s", start_ray=False, timeout_s=120)
    assert res.codes == {"boom": 3} and not res.ok
    assert (tmp_path / "boom.log").read_text().strip() == "['lo']"  # no route off the machine
    assert res.orphans == [] and res.pid_namespace
    assert runner.ray_local.processes_in_namespace(res.pid_namespace) == []


def test_sandbox_worker_count_skips_wrappers_and_forked_call_children():
    from kit.bridge.verl_cpu import ray_local

    class P:
        def __init__(self, pid, ppid, cmd):
            self.pid, self.info = pid, {"pid": pid, "ppid": ppid, "cmdline": cmd}

    from kit.sandbox.isolation import python_argv

    worker = python_argv("kit.sandbox.worker", "{}")  # the command line the pool really starts
    procs = [P(10, 1, ["/usr/bin/bwrap", "--die-with-parent", "--", *worker]), P(11, 10, worker),
             P(12, 11, worker),  # the child forked for a call
             P(20, 1, ["/usr/bin/bwrap", "--", *worker]), P(21, 20, worker), P(30, 1, ["python", "-m", "other"])]
    assert ray_local.sandbox_workers(procs) == 2
