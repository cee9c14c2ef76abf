"""Paper-scale launch on a GPU cluster: ``python -m kit.recipe launch --profile paper-14b --stage stage1``.

``launch(profile, stage)`` resolves the profile (``kit.config``), writes the agent-loop YAML the
overrides point at, checks that the stage's parquet files exist, prints the VERL command
(``python -m verl.trainer.main_ppo`` with ``kit.bridge.overrides.to_hydra_overrides``) and runs
it with ``RAY_ADDRESS`` set to the Ray cluster it finds (``RAY_ADDRESS``, else the cluster
``ray start`` recorded in ``/tmp/ray/ray_current_cluster``). Without a cluster it stops with a
message, unless ``allow_local_ray`` lets VERL start a one-node Ray itself.

``prepare_data(config)`` writes the files a run reads: ``run_dir/data/curated.parquet`` (the
curated RL pools, ``kit.data.curate``; stages 1-2), ``run_dir/data/val.parquet`` (benchmarks,
same VERL row schema). Stage 3's ``hard.parquet`` needs solve counts of the stage-2 policy
(8 rollouts per problem): ``kit.bridge.hard_subset`` builds it from a served policy or from your
counts; pass it as ``train_files`` (or place it at the default path).

Commands::

    python -m kit.recipe prepare-data --profile paper-14b [--run-dir runs/paper-14b]
    python -m kit.recipe launch --profile paper-14b --stage stage1 [--model-path SFT_DIR] \\
        [--n-gpus-per-node 8 --nnodes 8 --rollout-tp 4] [--dry-run] [-- extra.hydra=overrides]

What it does not do: install SGLang (see README), or start or size a Ray cluster. Chaining the
stages across the notebooks' run directories (merging each stage's checkpoint into ``policy/``,
``summary.json``, the stage-3 hard subset) is :mod:`kit.bridge.stages`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.bridge.overrides import (
    AGENT_NAME,
    STAGES,
    RecipePaths,
    command,
    stage_step_offset,
    to_hydra_overrides,
)
from kit.config import KitConfig, load

RAY_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
VAL_BENCHMARKS = ("aime24", "aime25")


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


def run_dir_of(config: KitConfig) -> str:
    return config.run_dir or f"runs/{config.profile}"


def write_agent_loop_config(config: KitConfig, path: str | os.PathLike) -> Path:
    """The ``agent_loop_config_path`` YAML registering the kit agent loop with the run's settings.

    Written as JSON (a YAML subset OmegaConf reads): one entry ``rstar2_kit`` ->
    ``kit.bridge.agent_loop.KitAgentLoop`` with the ``[sandbox]`` section and the rollout's
    per-turn call limit and feedback truncation (tokens).
    """
    r = config.rollout
    entry = {
        "name": AGENT_NAME,
        "_target_": "kit.bridge.agent_loop.KitAgentLoop",
        "sandbox": dataclasses.asdict(config.sandbox),
        "max_calls_per_turn": r.max_calls_per_turn,
        "tool_response_max_tokens": r.tool_response_max_tokens,
        "tool_name": r.tool_name,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([entry], indent=2) + "\n")
    return path


def _val_rows(config: KitConfig, benchmarks: Sequence[str]) -> list[dict[str, Any]]:
    from kit.eval.benchmarks import load_benchmark

    rows = []
    for name in benchmarks:
        for item in load_benchmark(name, config.data.data_dir or None):
            rows.append({
                "data_source": f"rstar2_kit/{name}", "prompt": [{"role": "user", "content": item.question}],
                "ability": "math", "reward_model": {"style": "rule", "ground_truth": item.answer},
                "extra_info": {"index": len(rows), "source": name, "id": item.id},
            })
    return rows


def prepare_data(config: KitConfig, *, curated: Any = None, val_benchmarks: Sequence[str] = VAL_BENCHMARKS) -> dict[str, Path]:
    """Write ``run_dir/data/curated.parquet`` and ``run_dir/data/val.parquet`` (VERL row schema).

    Args:
        config: resolved kit config (``run_dir`` empty: ``runs/<profile>``).
        curated: a ``kit.data.curate.CurationResult``; default: curate ``config.data.train_pools``
            from the data directory (minutes for the full pools).
        val_benchmarks: benchmarks in the validation file.
    Returns:
        ``{"train": path, "val": path}``.
    Raises:
        kit.paths.DataFileMissing: a pool or benchmark file is absent (names it).
    """
    import pandas as pd

    from kit.data.curate import curate_from_config, write_curated

    run_dir = Path(run_dir_of(config))
    result = curated if curated is not None else curate_from_config(config.data)
    train = write_curated(run_dir, result)["parquet"]
    val = run_dir / "data" / "val.parquet"
    pd.DataFrame(_val_rows(config, val_benchmarks)).to_parquet(val, index=False)
    return {"train": train, "val": val}


def _task_rows(problems: Sequence[Any], source: str) -> list[dict[str, Any]]:
    return [{"data_source": f"rstar2_kit/{source}", "prompt": [{"role": "user", "content": p.question}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"index": i, "source": source, "id": p.id}} for i, p in enumerate(problems)]


def prepare_smoke(run_dir: str | os.PathLike, n_train: int = 64, n_val: int = 8, seed: int = 0) -> dict[str, Path]:
    """Offline inputs for the GPU smoke run: a randomly initialised tiny Qwen3 with a tokenizer
    trained on the task prompts (``run_dir/model``), and train/val parquet files of the tiny
    task family (``run_dir/data``). Nothing is downloaded.

    Returns:
        ``{"model": dir, "train": parquet, "val": parquet}``.
    """
    import pandas as pd

    from kit import prompts
    from kit.data.tasks import make_split
    from kit.models import build_tiny_model, save_policy, train_tokenizer

    run_dir = Path(run_dir)
    split = make_split(n_train, n_val, seed)
    corpus = [prompts.render_prompt(p.question) + f"<reason>{p.code}</reason> <answer>\\boxed{{{p.answer}}}</answer>"
              for p in (*split.train, *split.heldout)]
    cfg = load("smoke", write=False)
    tok = train_tokenizer(corpus * 4, cfg.model.tokenizer_vocab_size)
    model_dir = save_policy(build_tiny_model(cfg.model, tok, seed=seed), tok, run_dir / "model")
    data = run_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = {"model": model_dir, "train": data / "curated.parquet", "val": data / "val.parquet"}
    pd.DataFrame(_task_rows(split.train, "tasks")).to_parquet(paths["train"], index=False)
    pd.DataFrame(_task_rows(split.heldout, "tasks_heldout")).to_parquet(paths["val"], index=False)
    return paths


#: Hydra overrides that make the smoke run two small steps on one GPU.
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


def smoke(run_dir: str = "runs/gpu-smoke", n_gpus: int = 1, dry_run: bool = False, python: str = sys.executable) -> int:
    """Two GRPO-RoC steps of the tiny model with SGLang on this machine's GPUs (``scripts/gpu_smoke.sh``).

    The ``smoke`` profile (P = 8 prompts, 16 rollouts -> 8 kept, 256-token responses) with
    equal-reward dropping off: a random model scores 0 everywhere, and dropping every group
    would refill forever. Returns the VERL exit status.
    """
    paths = prepare_smoke(run_dir)
    return launch("smoke", "stage1", run_dir=run_dir, model_path=str(paths["model"].resolve()),
                  train_files=str(paths["train"]), val_files=str(paths["val"]), n_gpus_per_node=n_gpus,
                  rollout_tp=1, extra_overrides=SMOKE_OVERRIDES,
                  config_overrides={"algorithm.drop_equal_reward_groups": False},
                  dry_run=dry_run, allow_local_ray=True, python=python)


def build_launch(
    profile: str,
    stage: str,
    *,
    run_dir: str | None = None,
    model_path: str | None = None,
    train_files: str | None = None,
    val_files: str | None = None,
    n_gpus_per_node: int = 8,
    nnodes: int = 1,
    rollout_tp: int = 4,
    extra_overrides: Sequence[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
    start_step: int | None = None,
    resume_from: str | None = None,
    metrics_file: str | None = None,
    write: bool = False,
    python: str = sys.executable,
) -> tuple[KitConfig, RecipePaths, list[str]]:
    """The resolved config, the run's paths and the VERL argv of one stage; nothing runs.

    Arguments as in :func:`launch`; ``write`` writes ``run_dir/config.json``. Paths are made
    absolute (Ray workers do not share the launcher's working directory).
    """
    overrides = {**(config_overrides or {}), **({"run_dir": run_dir} if run_dir else {})}
    config = load(profile, overrides=overrides, write=write)
    absolute = str(Path(run_dir_of(config)).resolve())
    paths = RecipePaths.default(absolute, stage, train_files and str(Path(train_files).resolve()),
                                val_files and str(Path(val_files).resolve()))
    args = to_hydra_overrides(config, stage, paths=paths, model_path=model_path, n_gpus_per_node=n_gpus_per_node,
                              nnodes=nnodes, rollout_tp=rollout_tp, start_step=start_step,
                              resume_from=resume_from and str(Path(resume_from).resolve()),
                              metrics_file=metrics_file and str(Path(metrics_file).resolve()))
    return config, paths, command([*args, *extra_overrides], python=python)


def launch(
    profile: str,
    stage: str,
    *,
    run_dir: str | None = None,
    model_path: str | None = None,
    train_files: str | None = None,
    val_files: str | None = None,
    n_gpus_per_node: int = 8,
    nnodes: int = 1,
    rollout_tp: int = 4,
    extra_overrides: Sequence[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
    start_step: int | None = None,
    resume_from: str | None = None,
    metrics_file: str | None = None,
    dry_run: bool = False,
    allow_local_ray: bool = False,
    python: str = sys.executable,
) -> int:
    """Print the VERL command for one stage and run it on the Ray cluster found.

    Args:
        profile: kit profile (``paper-14b``, ``paper-32b``).
        stage: ``stage1`` | ``stage2`` | ``stage3``.
        run_dir: where config, data, agent-loop YAML and checkpoints live (default ``runs/<profile>``).
        model_path: stage-1 starting policy (the SFT checkpoint; default the profile's model).
        train_files, val_files: parquet files (default under ``run_dir/data``).
        n_gpus_per_node, nnodes, rollout_tp: cluster layout (see ``to_hydra_overrides``).
        extra_overrides: more Hydra overrides appended last (they win).
        config_overrides: kit config overrides (``{"algorithm.roc_mode": "rank"}``).
        start_step, resume_from: where the stage starts (``to_hydra_overrides``; default: the
            previous stage's last step in this ``run_dir``).
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
    config, paths, cmd = build_launch(
        profile, stage, run_dir=run_dir, model_path=model_path, train_files=train_files, val_files=val_files,
        n_gpus_per_node=n_gpus_per_node, nnodes=nnodes, rollout_tp=rollout_tp, extra_overrides=extra_overrides,
        config_overrides=config_overrides, start_step=start_step, resume_from=resume_from,
        metrics_file=metrics_file, write=not dry_run, python=python)
    if stage == "stage1" and model_path is None:
        print(f"kit.recipe: note: stage 1 starts from {config.model.name_or_path} (no --model-path); the report "
              "starts RL from the non-reasoning SFT checkpoint", file=sys.stderr, flush=True)
    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    write_agent_loop_config(config, paths.agent_loop_config)
    for f in (paths.train_files, paths.val_files):
        if not Path(f).exists():
            how = ("build it from stage-2 solve counts (kit.data.curate.build_hard_subset) and pass --train-files"
                   if stage == "stage3" and f == paths.train_files
                   else f"run: python -m kit.recipe prepare-data --profile {profile} --run-dir {paths.run_dir}")
            raise FileNotFoundError(f"{f} does not exist; {how}")
    resume_overridden = any(o.startswith(("trainer.resume_from_path=", "trainer.resume_mode=")) for o in extra_overrides)
    if resume_from is not None and not Path(resume_from).is_dir():
        raise FileNotFoundError(f"{resume_from} does not exist; {stage} was asked to resume from it")
    if stage != "stage1" and resume_from is None and not resume_overridden:
        offset = stage_step_offset(config, stage) if start_step is None else start_step
        ckpt = Path(paths.checkpoints) / f"global_step_{offset}"
        if not ckpt.is_dir():
            previous = STAGES[STAGES.index(stage) - 1]
            raise FileNotFoundError(f"{ckpt} does not exist; {stage} resumes from the end of {previous}: run "
                                    f"{previous} first with the same --run-dir (or pass -- trainer.resume_from_path=...)")
    env = dict(os.environ)
    if metrics_file:  # a local Ray inherits it; a cluster gets it through the runtime_env override
        Path(metrics_file).parent.mkdir(parents=True, exist_ok=True)
        env["VERL_FILE_LOGGER_PATH"] = str(Path(metrics_file).resolve())
    address = find_ray_cluster()
    if address:
        env["RAY_ADDRESS"] = address
        print(f"kit.recipe: using the Ray cluster at {address}", flush=True)
    elif not allow_local_ray:
        raise RuntimeError("no Ray cluster found (RAY_ADDRESS unset, no /tmp/ray/ray_current_cluster): "
                           "run `ray start --head` on this node or join your cluster, or pass --allow-local-ray")
    return subprocess.run(cmd, env=env, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(prog="python -m kit.recipe", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("launch", help="print and run the VERL command of one stage")
    p.add_argument("--profile", default="paper-14b")
    p.add_argument("--stage", default="stage1", choices=STAGES)
    p.add_argument("--run-dir")
    p.add_argument("--model-path")
    p.add_argument("--train-files")
    p.add_argument("--val-files")
    p.add_argument("--n-gpus-per-node", type=int, default=8)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--rollout-tp", type=int, default=4)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--allow-local-ray", action="store_true")
    d = sub.add_parser("prepare-data", help="write run_dir/data/{curated,val}.parquet")
    d.add_argument("--profile", default="paper-14b")
    d.add_argument("--run-dir")
    s = sub.add_parser("smoke", help="two training steps of the tiny model with SGLang (GPU)")
    s.add_argument("--run-dir", default="runs/gpu-smoke")
    s.add_argument("--n-gpus", type=int, default=1)
    s.add_argument("--dry-run", action="store_true")
    a = parser.parse_args(argv)
    if a.cmd == "smoke":
        return smoke(a.run_dir, a.n_gpus, a.dry_run)
    if a.cmd == "prepare-data":
        cfg = load(a.profile, overrides={"run_dir": a.run_dir} if a.run_dir else {})
        for name, path in prepare_data(cfg).items():
            print(f"{name}: {path}")
        return 0
    try:
        return launch(a.profile, a.stage, run_dir=a.run_dir, model_path=a.model_path, train_files=a.train_files,
                      val_files=a.val_files, n_gpus_per_node=a.n_gpus_per_node, nnodes=a.nnodes,
                      rollout_tp=a.rollout_tp, extra_overrides=extra, dry_run=a.dry_run,
                      allow_local_ray=a.allow_local_ray)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"kit.recipe: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
