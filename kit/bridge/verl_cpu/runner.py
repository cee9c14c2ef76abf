"""Run VERL 0.9.1's trainer on this CPU machine: checks, Hydra overrides, one Ray session.

``run_cpu(cfg, stage, ...)`` is :func:`kit.bridge.launch.launch` for ``runtime=verl`` on a machine
without a GPU: the same kit overrides (:func:`kit.bridge.launch.build_launch`), plus :func:`cpu_overrides`
(CPU platform, FSDP2 actor, ``sdpa`` attention, the ``kit_cpu`` rollout, one TransferQueue
storage unit, one agent-loop and one reward worker), run by
:func:`run_session` in a private namespace with a Ray head the kit starts and stops
(:mod:`kit.bridge.verl_cpu.ray_local`). Several launches can share one session (one Ray start).

Checks before anything starts (each raises :class:`VerlCpuError` naming what to do):
:func:`require_cpu_machine` (a CUDA machine must use the GPU runtime), :func:`check_verl_version`
(the pin the patches were written for), :func:`plugin_route` (the ``verl.plugins`` entry point is
installed; ``KIT_VERL_PLUGIN_FALLBACK=1`` instead loads it through VERL's
``VERL_USE_EXTERNAL_MODULES``, for a checkout whose editable install predates the entry point).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from kit.bridge.verl_cpu import ray_local

PLUGIN_MODULE = "kit.bridge.verl_cpu.plugin"
ENTRY_POINT = "kit_cpu"
VERL_PIN = "0.9.1"
#: seconds between the kit replay buffers' checks for finished trajectories on the CPU runtime (GRPO and RoC)
CPU_POLL_INTERVAL_S = 0.1
FALLBACK_ENV = "KIT_VERL_PLUGIN_FALLBACK"


class VerlCpuError(RuntimeError):
    """The CPU runtime cannot run here (the message says what to do)."""


def require_cpu_machine() -> None:
    """Raises :class:`VerlCpuError` on a machine with a CUDA GPU (use the GPU runtime there)."""
    import torch

    if torch.cuda.is_available():
        raise VerlCpuError("runtime=verl on this machine would use the kit's CPU runtime, but a CUDA GPU is visible "
                           f"({torch.cuda.get_device_name(0)}): run VERL with SGLang instead (python -m kit "
                           "launch ..., see README 'Paper scale'), or hide the GPU (CUDA_VISIBLE_DEVICES=) to test the "
                           "CPU path on purpose")


def check_verl_version() -> str:
    """The installed VERL version; raises :class:`VerlCpuError` unless it is the pinned one."""
    try:
        version = metadata.version("verl")
    except metadata.PackageNotFoundError as exc:
        raise VerlCpuError(f"VERL is not installed: pip install 'verl[verl-core]=={VERL_PIN}'") from exc
    if version != VERL_PIN:
        raise VerlCpuError(f"the kit's VERL CPU runtime patches verl=={VERL_PIN} internals; installed verl {version}. "
                           f"Install verl=={VERL_PIN} (pip install 'verl[verl-core]=={VERL_PIN}', as pyproject.toml pins)")
    return version


def plugin_installed() -> bool:
    """True when the ``verl.plugins`` entry point ``kit_cpu`` is installed (editable install current)."""
    return any(ep.name == ENTRY_POINT and ep.value == PLUGIN_MODULE for ep in metadata.entry_points(group="verl.plugins"))


def plugin_route(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment that makes every VERL process load the kit's plugin.

    Returns:
        ``{}`` when the entry point is installed, else (with ``KIT_VERL_PLUGIN_FALLBACK=1``)
        ``{"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE}``.
    Raises:
        VerlCpuError: no entry point and no fallback asked for.
    """
    env = os.environ if env is None else env
    if plugin_installed():
        return {}
    if env.get(FALLBACK_ENV) == "1":
        return {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE}
    raise VerlCpuError(f"the kit's VERL plugin (entry point verl.plugins:{ENTRY_POINT} -> {PLUGIN_MODULE}) is not "
                       "installed: refresh the kit's install (`pip install -e .` in the checkout, or `make setup`), "
                       f"or set {FALLBACK_ENV}=1 to load it through VERL_USE_EXTERNAL_MODULES")


#: tokens per forward/backward micro-batch on the CPU (the GPU recipe uses prompt + response
#: length, one trajectory per micro-batch for the tiny model): fewer, larger forwards
CPU_MICRO_TOKENS = 16384


def cpu_overrides(address: str, *, test_freq: int = -1, critic: bool = False) -> list[str]:
    """Hydra overrides that put a kit recipe on the CPU runtime (appended after the kit's own).

    Args:
        address: the Ray head (``127.0.0.1:6379``).
        test_freq: validation every that many steps (-1: none).
        critic: PPO (``algorithm.adv_estimator = "gae"``): VERL's critic worker gets what its actor gets
            here (FSDP2, ``sdpa`` attention, no remove-padding or checkpointing, CPU micro-batches).
    """
    return [*_cpu_base(address, test_freq), *(CPU_CRITIC if critic else [])]


#: VERL's critic on the CPU runtime: the actor's CPU settings (its value-model engine is VERL's
#: ``FSDPEngineWithValueHead``, picked like the actor's through ``VERL_ENGINE_DEVICE=cuda``)
CPU_CRITIC = [
    "critic.strategy=fsdp2",
    "+critic.model.override_config.attn_implementation=sdpa",
    "critic.model.use_remove_padding=False",
    "critic.model.enable_gradient_checkpointing=False",
    f"critic.ppo_max_token_len_per_gpu={CPU_MICRO_TOKENS}",
    f"critic.forward_max_token_len_per_gpu={CPU_MICRO_TOKENS}",
]


def _cpu_base(address: str, test_freq: int) -> list[str]:
    return [
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={CPU_MICRO_TOKENS}",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={CPU_MICRO_TOKENS}",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.test_freq={test_freq}",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.rollout.name=kit_cpu",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "+trainer.v1.sampler.sampler_kwargs.records_log_probs=True",  # so the rollout records carry them
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "data.dataloader_num_workers=0",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # the kit's replay buffers (kit.bridge.sampler, GRPO; kit.bridge.roc_hook, RoC) check for finished
        # trajectories every 0.1 s, not VERL's 2 s: a tiny CPU step generates in ~1 s, so 2 s polls doubled it
        f"+trainer.v1.sampler.sampler_kwargs.poll_interval_s={CPU_POLL_INTERVAL_S}",
        "ray_kwargs.ray_init.num_cpus=null",
        f"+ray_kwargs.ray_init.address={address}",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM=cpu",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_ENGINE_DEVICE=cuda",
    ]


def session_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of the Ray daemons and VERL processes of a CPU session (:func:`ray_env` plus VERL's)."""
    return ray_env({
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",  # VERL registers its FSDP engine for cuda/npu only (engine/base.py:405)
        "OMP_NUM_THREADS": str(os.cpu_count() or 1),
        "TOKENIZERS_PARALLELISM": "false",
        **plugin_route(),
        **(extra or {}),
    })


def ray_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a session's Ray daemons when it runs no VERL trainer (``run_session(verl=False)``):
    token auth off (the head listens on the namespace's loopback only) and this checkout first on
    ``PYTHONPATH``, so that Ray's workers import this ``kit``."""
    root = str(Path(__file__).resolve().parents[3])
    pp = os.environ.get("PYTHONPATH", "")
    return {"RAY_AUTH_MODE": "disabled", "PYTHONPATH": root + (os.pathsep + pp if pp else ""), **(extra or {})}


@dataclass
class Launch:
    """One command of a session: ``argv`` run in ``cwd`` with the session env plus ``env``; output to ``log``."""

    name: str
    argv: list[str]
    log: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


def build_cpu_launch(cfg: Any, stage: str, *, model_path: str | None = None, train_files: str | None = None,
                     val_files: str | None = None, extra_overrides: Sequence[str] = (),
                     start_step: int | None = None, resume_from: str | None = None,
                     metrics_file: str | None = None, test_freq: int = -1,
                     address: str = f"{ray_local.HOST}:{ray_local.PORTS['--port']}",
                     python: str = sys.executable, **_layout: Any) -> tuple[Any, Launch]:
    """Paths and :class:`Launch` of one stage of ``cfg`` on the CPU runtime; writes the run
    folder's ``config.json`` and agent-loop YAML.

    Arguments as :func:`kit.bridge.launch.launch` (cluster-layout ones are ignored: one fake GPU).
    Returns:
        ``(RecipePaths, Launch)``; the launch runs in the run folder (VERL's Hydra writes
        ``outputs/`` into its working directory). The rollout server logs each weight update to
        ``<run_dir>/verl_<stage>_weight_updates.jsonl``.
    Raises:
        FileNotFoundError: a parquet file is missing (names it).
    """
    from kit.algo import needs_critic
    from kit.bridge import launch as bridge_launch
    from kit.config import save

    run_dir = Path(cfg.run_dir or f"runs/{cfg.profile}").resolve()
    updates = run_dir / f"verl_{stage}_weight_updates.jsonl"
    paths, argv = bridge_launch.build_launch(
        cfg, stage, model_path=model_path, train_files=train_files, val_files=val_files, n_gpus_per_node=1,
        nnodes=1, rollout_tp=1, start_step=start_step, resume_from=resume_from, metrics_file=metrics_file,
        python=python, extra_overrides=[*cpu_overrides(address, test_freq=test_freq,
                                                      critic=needs_critic(cfg.algorithm)),
                                        f"+ray_kwargs.ray_init.runtime_env.env_vars.KIT_CPU_ROLLOUT_UPDATE_LOG={updates}",
                                        *extra_overrides])
    Path(paths.run_dir).mkdir(parents=True, exist_ok=True)
    save(cfg, paths.run_dir)
    bridge_launch.write_agent_loop_config(cfg, paths.agent_loop_config)
    bridge_launch.write_router_config(cfg, paths, stage)  # rollout.balancer = "kv_cache" (issue #19)
    for f in (paths.train_files, paths.val_files):
        if not Path(f).exists():
            raise FileNotFoundError(f"{f} does not exist ({stage} of run {paths.run_dir} reads it)")
    env = {"VERL_FILE_LOGGER_PATH": str(Path(metrics_file).resolve())} if metrics_file else {}
    if metrics_file:
        Path(metrics_file).parent.mkdir(parents=True, exist_ok=True)
    log = str(Path(paths.run_dir) / f"verl_{stage}.log")
    return paths, Launch(stage, argv, log, env, cwd=str(paths.run_dir))


@dataclass
class SessionResult:
    """What a session did: exit codes, seconds, sandbox workers, memory, orphans (see run_session)."""

    codes: dict[str, int]
    timings: dict[str, float]
    sandbox_workers_max: int
    sandbox_workers_steady: int
    peak_rss_bytes: int
    peak_pss_bytes: int
    orphans: list[int]
    pid_namespace: str
    log_dir: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(c == 0 for c in self.codes.values())


def run_session(launches: Sequence[Launch], out_dir: str | os.PathLike, *, num_cpus: int = 8, num_gpus: int = 1,
                timeout_s: float = 3600.0, env: Mapping[str, str] | None = None, start_ray: bool = True,
                verl: bool = True) -> SessionResult:
    """Run ``launches`` one after the other in one private namespace sharing one Ray head.

    Args:
        launches: the commands (a later one runs even if an earlier failed: stop early
            yourself by calling once per launch when order matters).
        out_dir: where ``session.json`` and ``session.log`` go.
        num_cpus, num_gpus: Ray's logical resources (TransferQueue needs >= 2 CPUs free; VERL one
            GPU per trainer worker).
        timeout_s: the whole session, seconds; on expiry it is killed (every process in it).
            The session also dies with this process (issue #44): it reads a pipe whose only write
            end this process holds (close-on-exec, so no program it runs inherits it), and EOF on
            it (this process killed, even by SIGKILL) stops every process of the session
            (:func:`kit.bridge.verl_cpu.session.watch_lifeline`). A child this process forks
            without exec (``os.fork``, multiprocessing's ``fork``) holds the write end too, and the
            session lives until that child ends as well.
        env: more environment for every process.
        start_ray: False runs the launches in the namespace without a Ray head (tests).
        verl: False for a session that runs no VERL trainer (the seeds side by side,
            :mod:`kit.pipeline.fanout`): no GPU-machine or VERL-version check, and only Ray's own
            environment (``RAY_AUTH_MODE``, ``PYTHONPATH``) instead of :func:`session_env`.
    Returns:
        :class:`SessionResult`; ``orphans`` lists processes left in the session's namespace after
        it ended (killed, and reported: should be empty).
    Raises:
        VerlCpuError: checks failed (GPU machine, VERL version, plugin).
    """
    if verl:
        require_cpu_machine()
        check_verl_version()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    lifeline_r, lifeline_w = os.pipe()  # both close-on-exec; the read end is passed to the session alone
    spec = {"launches": [vars(launch) for launch in launches], "out": str(out), "num_cpus": num_cpus,
            "num_gpus": num_gpus, "env": session_env(env) if verl else ray_env(env), "start_ray": start_ray,
            "ray_temp": f"/tmp/kitray-{uuid.uuid4().hex[:8]}", "lifeline_fd": lifeline_r}
    (out / "session_spec.json").write_text(json.dumps(spec, indent=2))
    result_file = out / "session.json"
    result_file.unlink(missing_ok=True)
    argv = [*ray_local.namespace_argv(), sys.executable, "-m", "kit.bridge.verl_cpu.session", str(out / "session_spec.json")]
    t0 = time.perf_counter()
    try:
        with open(out / "session.log", "w") as log:
            try:
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **spec["env"]},
                                        start_new_session=True, pass_fds=(lifeline_r,))
            finally:
                os.close(lifeline_r)
            try:
                proc.wait(timeout=timeout_s)
                error = None if proc.returncode == 0 else f"session exited with status {proc.returncode}"
            except subprocess.TimeoutExpired:
                proc.kill()  # unshare --kill-child: the namespace's init dies, and with it every process in it
                proc.wait()
                error = f"session timed out after {timeout_s:.0f} s"
    finally:
        os.close(lifeline_w)  # (the session has ended here; a killed starter closes it by dying)
    info = json.loads(result_file.read_text()) if result_file.exists() else {}
    if not info and error:  # the namespace itself did not start (unshare refused, no `ip`, ...)
        tail = (out / "session.log").read_text()[-800:]
        error = (f"{error}: the private network/PID namespace did not start (`unshare --net --pid` needs root or "
                 f"user namespaces; `ip` from iproute2). Output:\n{tail}")
    ns = info.get("pid_namespace", "")
    orphans = _reap(ns) if ns else []
    if info:  # recorded for callers that only see the run folder (run_cpu, the chain)
        result_file.write_text(json.dumps({**info, "orphans": orphans}, indent=2))
    timings = {**info.get("timings", {}), "session_s": time.perf_counter() - t0}
    error = info.get("error") or error  # the session's own reason (e.g. Ray did not start) first
    if error:
        error += f" (log: {out / 'session.log'})"
    return SessionResult(codes={k: int(v) for k, v in info.get("codes", {}).items()}, timings=timings,
                         sandbox_workers_max=int(info.get("sandbox_workers_max", -1)),
                         sandbox_workers_steady=int(info.get("sandbox_workers_steady", -1)),
                         peak_rss_bytes=int(info.get("peak_rss_bytes", -1)),
                         peak_pss_bytes=int(info.get("peak_pss_bytes", -1)), orphans=orphans, pid_namespace=ns,
                         log_dir=str(out), error=error)


def _reap(ns: str, wait_s: float = 10.0) -> list[int]:
    """PIDs still in namespace ``ns`` after ``wait_s`` (then SIGKILLed)."""
    import signal

    deadline = time.monotonic() + wait_s
    left = ray_local.processes_in_namespace(ns)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ray_local.processes_in_namespace(ns)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def shared_ray_address(env: Mapping[str, str] | None = None) -> str:
    """The Ray head of the session this process runs in (``RAY_ADDRESS`` inside a kit session's
    private namespace), or ``""`` outside one."""
    env = os.environ if env is None else env
    return env.get("RAY_ADDRESS", "") if ray_local.in_private_namespace() else ""


def run_cpu(cfg: Any, stage: str, *, timeout_s: float = 3600.0, replicas: int = 1, **kwargs: Any) -> int:
    """:func:`kit.bridge.launch.launch` on the CPU runtime (same call, usable as the ``launcher`` of
    :func:`kit.bridge.stages.run_stage`); returns VERL's exit status.

    Called inside a kit session (a command run by :func:`run_session`, e.g. a whole chain:
    ``run_session([Launch("chain", [python, "-m", "kit", "reproduce", ...], log)], out)``), the
    stage runs directly on that session's Ray head: Ray starts once for every stage of the chain
    (its start-up is a large share of a small stage). Elsewhere the stage gets a session of its own.
    Its output goes to ``<run_dir>/verl_<stage>.log`` either way.

    ``replicas`` > 1 runs that many FSDP ranks, hence that many ``kit_cpu`` rollout replicas behind
    VERL's router (``trainer.n_gpus_per_node``, one fake Ray GPU each), in a session of its own.

    Raises:
        ValueError: ``replicas`` < 1, or > 1 inside a shared session (its Ray has one fake GPU).
        VerlCpuError: see the module docstring.
        RuntimeError: the session itself failed before VERL ran (Ray did not start, timeout); names the log.
    """
    for key in ("dry_run", "allow_local_ray"):
        kwargs.pop(key, None)
    address = shared_ray_address()
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"run_cpu: replicas must be an integer >= 1, got {replicas!r}")
    if replicas > 1:
        if address:
            raise ValueError(f"run_cpu: replicas={replicas} needs a session of its own; this one's Ray has one fake GPU")
        kwargs["extra_overrides"] = [*kwargs.get("extra_overrides", ()), f"trainer.n_gpus_per_node={replicas}"]
    paths, launch = build_cpu_launch(cfg, stage, **({"address": address} if address else {}), **kwargs)
    if address:
        with open(launch.log, "w") as log:
            try:
                return subprocess.run(launch.argv, env={**os.environ, **launch.env}, cwd=launch.cwd, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=timeout_s).returncode
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError(f"VERL {stage} timed out after {timeout_s:.0f} s (log {launch.log})") from exc
    res = run_session([launch], Path(paths.run_dir) / "verl_session", num_gpus=replicas, timeout_s=timeout_s)
    if res.error and stage not in res.codes:
        raise RuntimeError(f"VERL CPU session for {stage} failed: {res.error}")
    return res.codes.get(stage, 1)


#: which machine VERL's stages run on: ``gpu`` (SGLang, :func:`kit.bridge.launch.launch`) or
#: ``cpu`` (this runtime, :func:`run_cpu`); unset means ``gpu`` where CUDA is visible
DEVICE_ENV = "KIT_VERL_DEVICE"


def default_launcher(env: Mapping[str, str] | None = None) -> Any:
    """The launcher of a VERL stage, chosen explicitly by ``KIT_VERL_DEVICE``, never guessed:

    * ``gpu``, or unset on a machine with CUDA: :func:`kit.bridge.launch.launch` (SGLang, the paper path);
    * ``cpu``: :func:`run_cpu` (this CPU runtime; refused where a CUDA GPU is visible).

    Raises:
        VerlCpuError: ``cpu`` on a CUDA machine; ``gpu`` without CUDA; unset without CUDA (a
            paper profile on a CPU-only machine: says to set ``KIT_VERL_DEVICE=cpu`` on purpose);
            any other value.
    """
    import torch

    env = os.environ if env is None else env
    device = env.get(DEVICE_ENV, "").strip().lower()
    cuda = torch.cuda.is_available()
    if device == "cpu":
        require_cpu_machine()
        return run_cpu
    if device not in ("", "gpu"):
        raise VerlCpuError(f"{DEVICE_ENV}={env.get(DEVICE_ENV)!r}: use {DEVICE_ENV}=gpu (VERL with SGLang on CUDA) "
                           f"or {DEVICE_ENV}=cpu (the kit's CPU runtime, for tests and the smoke profile)")
    if not cuda:
        asked = f"{DEVICE_ENV}=gpu" if device else f"runtime=verl (no {DEVICE_ENV} set)"
        raise VerlCpuError(f"{asked} but no CUDA GPU is visible: run the paper profiles on a GPU machine, or set "
                           f"{DEVICE_ENV}=cpu to run VERL's trainer on this CPU on purpose (slow: tests and the "
                           "smoke profile only)")
    from kit.bridge import launch as bridge_launch

    return bridge_launch.launch
