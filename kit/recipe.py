"""Command line of the paper-scale launch: ``python -m kit.recipe launch --profile paper-14b --stage stage1``.

The one module besides the notebooks that resolves a profile (:func:`kit.config.load`); the
launch logic it calls lives in :mod:`kit.bridge.launch` and takes the resolved ``KitConfig``.

Commands::

    python -m kit.recipe prepare-data --profile paper-14b [--run-dir runs/paper-14b]
    python -m kit.recipe launch --profile paper-14b --stage stage1 [--model-path SFT_DIR] \\
        [--n-gpus-per-node 8 --nnodes 8 --rollout-tp 4] [--dry-run] [--allow-local-ray] [-- extra.hydra=overrides]
    python -m kit.recipe smoke [--run-dir runs/gpu-smoke] [--n-gpus 1] [--dry-run]

``launch`` writes ``run_dir/config.json`` and the agent-loop YAML, checks the stage's parquet
files, prints the VERL command and runs it on the Ray cluster it finds (:func:`kit.bridge.launch.launch`).
``prepare-data`` writes ``run_dir/data/{curated,val}.parquet``. ``smoke`` runs two GRPO-RoC
steps of the tiny model with SGLang on this machine's GPUs (``scripts/gpu_smoke.sh``).

What it does not do: install SGLang (see README), or start or size a Ray cluster. Chaining the
stages across the notebooks' run directories is :mod:`kit.bridge.stages` (``kit.runtime.verl``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kit.bridge import launch as bridge_launch
from kit.config import KitConfig, load

#: kit config overrides of the GPU smoke run: the ``smoke`` profile (P = 8 prompts, 16 rollouts ->
#: 8 kept, 256-token responses) trained by VERL, with equal-reward dropping off (a random model
#: scores 0 everywhere, and dropping every group would refill forever)
SMOKE_CONFIG = {"runtime": "verl", "algorithm.drop_equal_reward_groups": False}


def smoke_config(run_dir: str = "runs/gpu-smoke") -> KitConfig:
    """The resolved config of the GPU smoke run in ``run_dir``."""
    return load("smoke", {**SMOKE_CONFIG, "run_dir": run_dir}, write=False)


def smoke(run_dir: str = "runs/gpu-smoke", n_gpus: int = 1, dry_run: bool = False, python: str = sys.executable) -> int:
    """Two GRPO-RoC steps of the tiny model with SGLang on this machine's GPUs: offline inputs
    (:func:`kit.bridge.launch.prepare_smoke`) and one stage-1 launch with
    :data:`kit.bridge.launch.SMOKE_OVERRIDES`. Returns the VERL exit status."""
    cfg = smoke_config(run_dir)
    paths = bridge_launch.prepare_smoke(cfg)
    return bridge_launch.launch(cfg, cfg.stages[0].name, model_path=str(paths["model"].resolve()), train_files=str(paths["train"]),
                                val_files=str(paths["val"]), n_gpus_per_node=n_gpus, rollout_tp=1,
                                extra_overrides=bridge_launch.SMOKE_OVERRIDES, dry_run=dry_run, allow_local_ray=True,
                                python=python)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see module docstring). Returns the exit status (2: a missing file or cluster)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(prog="python -m kit.recipe", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("launch", help="print and run the VERL command of one stage")
    p.add_argument("--profile", default="paper-14b")
    p.add_argument("--stage", default="stage1", help="a stage of the profile's [[stages]] list")
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
    # prepare-data writes run_dir/config.json now; launch writes it when it runs (not on --dry-run)
    cfg = load(a.profile, {"run_dir": a.run_dir} if a.run_dir else {}, write=a.cmd == "prepare-data")
    if a.cmd == "prepare-data":
        for name, path in bridge_launch.prepare_data(cfg).items():
            print(f"{name}: {path}")
        return 0
    if a.stage not in cfg.stages.names:
        parser.error(f"--stage {a.stage!r}: profile {a.profile} has the stages {', '.join(cfg.stages.names)}")
    try:
        return bridge_launch.launch(cfg, a.stage, model_path=a.model_path, train_files=a.train_files,
                                    val_files=a.val_files, n_gpus_per_node=a.n_gpus_per_node, nnodes=a.nnodes,
                                    rollout_tp=a.rollout_tp, extra_overrides=extra, dry_run=a.dry_run,
                                    allow_local_ray=a.allow_local_ray)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"kit.recipe: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
