"""Launching one VERL stage from a resolved ``KitConfig``: the files a run reads, and the command.

``launch(cfg, stage)`` writes the agent-loop YAML the overrides point at, checks that the
stage's parquet files exist, prints the VERL command (``python -m verl.trainer.main_ppo`` with
:func:`kit.bridge.overrides.to_hydra_overrides`) and runs it with ``RAY_ADDRESS`` set to the Ray
cluster it finds (``RAY_ADDRESS``, else the cluster ``ray start`` recorded in
``/tmp/ray/ray_current_cluster``). Without a cluster it stops with a message, unless
``allow_local_ray`` lets VERL start a one-node Ray itself.

``prepare_data(cfg)`` writes the files a run reads: ``run_dir/data/curated.parquet`` (the
curated RL pools, ``kit.data.curate``; stages 1-2), ``run_dir/data/val.parquet`` (benchmarks,
same VERL row schema). Stage 3's ``hard.parquet`` needs solve counts of the stage-2 policy
(8 rollouts per problem): :mod:`kit.bridge.hard_subset` builds it.

Config flows one way: every function takes the ``KitConfig`` it is given and never reloads a
profile; ``cfg.run_dir`` (``runs/<profile>`` when empty) is the run folder. The command line
that resolves a profile is :mod:`kit.runtime.paper` (``python -m kit launch``); the chain across notebook run folders is
:mod:`kit.bridge.stages`. What it does not do: install SGLang (see README), or start or size a
Ray cluster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kit import prompts
from kit.bridge.kv_router import ROUTER_CLASS
from kit.bridge.overrides import (
    AGENT_NAME,
    RecipePaths,
    command,
    stage_step_offset,
    to_hydra_overrides,
)
from kit.config import KitConfig, save
from kit.data.curate import CurationResult, curate_from_config, write_curated
from kit.data.tasks import make_split
from kit.eval.benchmarks import load_benchmark
from kit.models import build_tiny_model, save_policy, train_tokenizer
from kit.train.tracking import check_backends

RAY_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
VAL_BENCHMARKS = ("aime24", "aime25")
#: Hydra overrides that make the GPU smoke run two small steps on one GPU.
SMOKE_OVERRIDES = (
    "trainer.total_training_steps=2",
    "trainer.save_freq=2",
    "trainer.test_freq=2",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=2",
    "reward.num_workers=2",
    "data.dataloader_num_workers=0",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.model.use_remove_padding=False",
)


def find_ray_cluster(cluster_file: Path | None = None) -> str | None:
    """Address of a running Ray cluster: ``RAY_ADDRESS``, else the one ``ray start`` recorded
    in ``cluster_file`` (default :data:`RAY_CLUSTER_FILE`); None when there is neither."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    cluster_file = cluster_file or RAY_CLUSTER_FILE
    if cluster_file.exists():
        text = cluster_file.read_text().strip()
        return text or None
    return None


def run_dir_of(cfg: KitConfig) -> str:
    """The run folder of ``cfg``: ``cfg.run_dir``, else ``runs/<profile>``."""
    return cfg.run_dir or f"runs/{cfg.profile}"


def write_agent_loop_config(cfg: KitConfig, path: str | os.PathLike) -> Path:
    """The ``agent_loop_config_path`` YAML registering the kit agent loop with the run's settings.

    Written as JSON (a YAML subset OmegaConf reads): one entry ``rstar2_kit`` ->
    ``kit.bridge.agent_loop.KitAgentLoop`` with the ``[sandbox]`` section and the rollout's
    per-turn call limit and feedback truncation (tokens).
    """
    r = cfg.rollout
    entry = {
        "name": AGENT_NAME,
        "_target_": "kit.bridge.agent_loop.KitAgentLoop",
        "sandbox": dataclasses.asdict(cfg.sandbox),
        "max_calls_per_turn": r.max_calls_per_turn,
        "tool_response_max_tokens": r.tool_response_max_tokens,
        "tool_name": r.tool_name,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([entry], indent=2) + "\n")
    return path


def write_router_config(cfg: KitConfig, paths: RecipePaths, stage: str | None = None) -> Path | None:
    """The ``router_config_path`` YAML of ``rollout.balancer = "kv_cache"`` (report §3.2); None
    (nothing written) under ``"verl"``.

    Written as JSON (a YAML subset OmegaConf reads): ``router_class`` =
    ``kit.bridge.kv_router.KvCacheRouter`` (VERL builds it as ``cls(servers, this dict)``), the
    stage's (default the first stage's) response budget as a request's default ``max_new_tokens`` (tokens) and
    ``status_path`` = ``<verl folder>/router_status.json`` (served requests per engine, moves,
    missed and bad reports).
    """
    if cfg.rollout.balancer != "kv_cache":
        return None
    path = Path(paths.router_yaml)
    entry = {"router_class": ROUTER_CLASS,
             "max_new_tokens": cfg.stages[stage if stage is not None else 0].max_response_tokens,
             "status_path": str(path.with_name("router_status.json"))}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return path


def _val_rows(cfg: KitConfig, benchmarks: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for name in benchmarks:
        for item in load_benchmark(name, cfg.data.data_dir or None):
            rows.append({
                "data_source": f"rstar2_kit/{name}", "prompt": [{"role": "user", "content": item.question}],
                "ability": "math", "reward_model": {"style": "rule", "ground_truth": item.answer},
                "extra_info": {"index": len(rows), "source": name, "id": item.id},
            })
    return rows


def prepare_data(cfg: KitConfig, *, curated: CurationResult | None = None,
                 val_benchmarks: Sequence[str] = VAL_BENCHMARKS) -> dict[str, Path]:
    """Write ``run_dir/data/curated.parquet`` and ``run_dir/data/val.parquet`` (VERL row schema).

    Args:
        cfg: resolved kit config (run folder :func:`run_dir_of`).
        curated: a ``kit.data.curate.CurationResult``; default: curate ``cfg.data.train_pools``
            from the data directory (minutes for the full pools).
        val_benchmarks: benchmarks in the validation file.
    Returns:
        ``{"train": path, "val": path}``.
    Raises:
        kit.config.paths.DataFileMissing: a pool or benchmark file is absent (names it).
    """
    run_dir = Path(run_dir_of(cfg))
    result = curated if curated is not None else curate_from_config(cfg.data)
    train = write_curated(run_dir, result)["parquet"]
    val = run_dir / "data" / "val.parquet"
    pd.DataFrame(_val_rows(cfg, val_benchmarks)).to_parquet(val, index=False)
    return {"train": train, "val": val}


def _task_rows(problems: Sequence[Any], source: str) -> list[dict[str, Any]]:
    return [{"data_source": f"rstar2_kit/{source}", "prompt": [{"role": "user", "content": p.question}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"index": i, "source": source, "id": p.id}} for i, p in enumerate(problems)]


def prepare_smoke(cfg: KitConfig, n_train: int = 64, n_val: int = 8) -> dict[str, Path]:
    """Offline inputs for the GPU smoke run in ``run_dir_of(cfg)``: a randomly initialised tiny
    Qwen3 (``cfg.model``, seed ``cfg.seed``) with a tokenizer trained on the task prompts
    (``run_dir/model``), and train/val parquet files of the tiny task family (``run_dir/data``).
    Nothing is downloaded.

    Returns:
        ``{"model": dir, "train": parquet, "val": parquet}``.
    """
    run_dir = Path(run_dir_of(cfg))
    split = make_split(n_train, n_val, cfg.seed)
    corpus = [prompts.render_prompt(p.question) + f"<reason>{p.code}</reason> <answer>\\boxed{{{p.answer}}}</answer>"
              for p in (*split.train, *split.heldout)]
    tok = train_tokenizer(corpus * 4, cfg.model.tokenizer_vocab_size)
    model_dir = save_policy(build_tiny_model(cfg.model, tok, seed=cfg.seed), tok, run_dir / "model")
    data = run_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = {"model": model_dir, "train": data / "curated.parquet", "val": data / "val.parquet"}
    pd.DataFrame(_task_rows(split.train, "tasks")).to_parquet(paths["train"], index=False)
    pd.DataFrame(_task_rows(split.heldout, "tasks_heldout")).to_parquet(paths["val"], index=False)
    return paths


def build_launch(
    cfg: KitConfig,
    stage: str,
    *,
    model_path: str | None = None,
    train_files: str | None = None,
    val_files: str | None = None,
    n_gpus_per_node: int = 8,
    nnodes: int = 1,
    rollout_tp: int = 4,
    extra_overrides: Sequence[str] = (),
    start_step: int | None = None,
    resume_from: str | None = None,
    metrics_file: str | None = None,
    python: str = sys.executable,
) -> tuple[RecipePaths, list[str]]:
    """The run's paths and the VERL argv of one stage of ``cfg``; nothing runs or is written.

    Arguments as in :func:`launch`. Paths are made absolute (Ray workers do not share the
    launcher's working directory).
    """
    absolute = str(Path(run_dir_of(cfg)).resolve())
    paths = RecipePaths.default(absolute, train_files and str(Path(train_files).resolve()),
                                val_files and str(Path(val_files).resolve()), hard=cfg.stages[stage].problems == "hard")
    args = to_hydra_overrides(cfg, stage, paths=paths, model_path=model_path, n_gpus_per_node=n_gpus_per_node,
                              nnodes=nnodes, rollout_tp=rollout_tp, start_step=start_step,
                              resume_from=resume_from and str(Path(resume_from).resolve()),
                              metrics_file=metrics_file and str(Path(metrics_file).resolve()))
    return paths, command([*args, *extra_overrides], python=python)


def launch(
    cfg: KitConfig,
    stage: str,
    *,
    model_path: str | None = None,
    train_files: str | None = None,
    val_files: str | None = None,
    n_gpus_per_node: int = 8,
    nnodes: int = 1,
    rollout_tp: int = 4,
    extra_overrides: Sequence[str] = (),
    start_step: int | None = None,
    resume_from: str | None = None,
    metrics_file: str | None = None,
    dry_run: bool = False,
    allow_local_ray: bool = False,
    python: str = sys.executable,
) -> int:
    """Print the VERL command for one stage of ``cfg`` and run it on the Ray cluster found.

    Args:
        cfg: the resolved config; its run folder (:func:`run_dir_of`) holds config, data,
            agent-loop YAML and checkpoints; ``config.json`` is written there unless ``dry_run``.
        stage: a name of ``cfg.stages`` (``stage1`` | ``stage2`` | ``stage3`` on the paper profiles).
        model_path: the first stage's starting policy (the SFT checkpoint; default ``cfg.model.name_or_path``).
        train_files, val_files: parquet files (default under ``run_dir/data``).
        n_gpus_per_node, nnodes, rollout_tp: cluster layout (see ``to_hydra_overrides``).
        extra_overrides: more Hydra overrides appended last (they win).
        start_step, resume_from: where the stage starts (``to_hydra_overrides``; default: the
            previous stage's last step in this run folder).
        metrics_file: JSON-lines file VERL logs every step to (``to_hydra_overrides``).
        dry_run: print and return 0 without running.
        allow_local_ray: run even when no cluster is found (VERL starts a local Ray).
        python: interpreter for the child process.
    Returns:
        The command's exit status (0 for a dry run).
    Raises:
        FileNotFoundError: a parquet file or the checkpoint to resume from is missing (names it
            and what writes it).
        RuntimeError: no Ray cluster found and ``allow_local_ray`` is False.
    """
    paths, cmd = build_launch(
        cfg, stage, model_path=model_path, train_files=train_files, val_files=val_files,
        n_gpus_per_node=n_gpus_per_node, nnodes=nnodes, rollout_tp=rollout_tp, extra_overrides=extra_overrides,
        start_step=start_step, resume_from=resume_from, metrics_file=metrics_file, python=python)
    names = cfg.stages.names
    if stage == names[0] and model_path is None:
        print(f"kit launch: note: stage 1 starts from {cfg.model.name_or_path} (no --model-path); the report "
              "starts RL from the non-reasoning SFT checkpoint", file=sys.stderr, flush=True)
    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    check_backends(cfg.logging.backends)  # a missing tracker package fails here, not after VERL's start-up
    if cfg.run_dir:
        save(cfg, cfg.run_dir)
    write_agent_loop_config(cfg, paths.agent_loop_config)
    write_router_config(cfg, paths, stage)
    for f in (paths.train_files, paths.val_files):
        if not Path(f).exists():
            how = ("build it from stage-2 solve counts (kit.data.curate.build_hard_subset) and pass --train-files"
                   if cfg.stages[stage].problems == "hard" and f == paths.train_files
                   else f"run: python -m kit prepare-data --profile {cfg.profile} --run-dir {paths.run_dir}")
            raise FileNotFoundError(f"{f} does not exist; {how}")
    resume_overridden = any(o.startswith(("trainer.resume_from_path=", "trainer.resume_mode=")) for o in extra_overrides)
    if resume_from is not None and not Path(resume_from).is_dir():
        raise FileNotFoundError(f"{resume_from} does not exist; {stage} was asked to resume from it")
    if stage != names[0] and resume_from is None and not resume_overridden:
        offset = stage_step_offset(cfg, stage) if start_step is None else start_step
        ckpt = Path(paths.checkpoints) / f"global_step_{offset}"
        if not ckpt.is_dir():
            previous = names[names.index(stage) - 1]
            raise FileNotFoundError(f"{ckpt} does not exist; {stage} resumes from the end of {previous}: run "
                                    f"{previous} first with the same --run-dir (or pass -- trainer.resume_from_path=...)")
    env = dict(os.environ)
    if metrics_file:  # a local Ray inherits it; a cluster gets it through the runtime_env override
        Path(metrics_file).parent.mkdir(parents=True, exist_ok=True)
        env["VERL_FILE_LOGGER_PATH"] = str(Path(metrics_file).resolve())
    address = find_ray_cluster()
    if address:
        env["RAY_ADDRESS"] = address
        print(f"kit launch: using the Ray cluster at {address}", flush=True)
    elif not allow_local_ray:
        raise RuntimeError("no Ray cluster found (RAY_ADDRESS unset, no /tmp/ray/ray_current_cluster): "
                           "run `ray start --head` on this node or join your cluster, or pass --allow-local-ray")
    return subprocess.run(cmd, env=env, check=False).returncode
