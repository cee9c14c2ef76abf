"""The paper-profile chain on a GPU cluster: VERL stages across the notebooks' run directories.

Each notebook has its own run directory (``kit.pipeline``); a VERL stage there reads its
upstream's files and leaves the same files a local (tiny) stage leaves, so evaluation, analysis
and figures find them the same way:

=========  ==========================================  =============================================
stage      reads                                       writes (under its ``run_dir``)
=========  ==========================================  =============================================
sft        ``sft_checkpoint`` (linked), or a VERL       ``policy/`` (link or merged model),
           multi-turn parquet (``verl.trainer.         ``checkpoints/``, ``summary.json``
           sft_trainer`` on ``torchrun``)
stage1     ``<sft>/policy``, ``<data>/data/{curated,   ``checkpoints/global_step_<N>/actor``,
           val}.parquet``                               ``verl/step_metrics.jsonl`` (VERL's log),
                                                        ``metrics.jsonl`` (kit keys), ``policy/``
                                                        (merged), ``summary.json``
stage2     ``<stage1>/checkpoints/global_step_<N>``     same
           (model + optimizer), ``<stage1>/policy``
           (config, tokenizer), data as stage 1
stage3     ``<stage2>/checkpoints/global_step_<N>``     same, plus ``data/hard.parquet`` and
           (weights only: optimizer reset),             ``hard_subset.json`` (built first from the
           ``<stage2>/policy``, its own                 stage-2 policy's solve counts)
           ``data/hard.parquet``
=========  ==========================================  =============================================

A stage starts at the step of the checkpoint it resumes (``start_step``) and ends
``stages.<stage>.steps`` later; a stage interrupted after its first save resumes from its own
last checkpoint; a finished one (its last checkpoint at ``end_step``) is not launched again, and
a ``policy/`` newer than that checkpoint is not merged again. :func:`describe_chain` prints all
of it without running anything (``python -m kit reproduce --profile paper-14b --dry-run``).

The cluster layout comes from the environment: ``KIT_NNODES`` (1), ``KIT_GPUS_PER_NODE`` (8),
``KIT_ROLLOUT_TP`` (4); the interpreter of the VERL processes from ``KIT_VERL_PYTHON`` (this one);
the device from ``KIT_VERL_DEVICE``: ``gpu`` (the default where CUDA is visible) or ``cpu`` (VERL's
trainer on this CPU through :mod:`kit.bridge.verl_cpu`, chosen on purpose only; a CPU-only machine
without it is refused).

What it does not do: start SGLang or a Ray cluster, or choose the SFT data (see README).
Nothing here has run on a GPU in this repository's CI; the command construction, the directory
logic and the metrics conversion are tested on a CPU with fake VERL outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import jsonio
from kit.algo import needs_critic, sampling_plan
from kit.bridge import launch
from kit.bridge.checkpoints import (
    CheckpointError,
    latest_verl_checkpoint,
    merge_command,
    merge_to_policy,
    saved_steps,
)
from kit.bridge.metric_map import METRIC_MAP, is_training_row
from kit.bridge.overrides import stage_step_offset
from kit.bridge.sft import sft_command
from kit.config import KitConfig, save
from kit.data.pool import curated_file
from kit.plan import ablation_arms, arm_name, series
from kit.studies import STUDIES, resolve
from kit.train.critic import CRITIC_DIR

#: VERL's own per-step log (its file logger), beside the kit's ``metrics.jsonl``: not named like it, since
#: every reader of a run folder tree takes each ``metrics.jsonl`` below it (``kit.report.figures.collect_metrics``)
METRICS_FILE = "verl/step_metrics.jsonl"


@dataclass(frozen=True)
class Cluster:
    """Cluster layout and the interpreter of the VERL processes."""

    nnodes: int = 1
    gpus_per_node: int = 8
    rollout_tp: int = 4
    python: str = sys.executable

    @classmethod
    def from_env(cls) -> Cluster:
        e = os.environ
        return cls(int(e.get("KIT_NNODES", 1)), int(e.get("KIT_GPUS_PER_NODE", 8)), int(e.get("KIT_ROLLOUT_TP", 4)),
                   e.get("KIT_VERL_PYTHON", sys.executable))


@dataclass
class StagePlan:
    """What one VERL stage reads and writes, and the commands that do it (nothing run yet)."""

    stage: str
    run_dir: str
    start_step: int
    end_step: int
    reads: dict[str, str]
    writes: dict[str, str]
    launch_command: list[str]
    merge_command: list[str]
    config: KitConfig | None = None  # the stage's config: the caller's with run_dir = this run_dir
    launch_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan_stage(cfg: KitConfig, stage: str, run_dir: str | os.PathLike, init_dir: str | os.PathLike,
               data_dir: str | os.PathLike, *, cluster: Cluster | None = None, check: bool = True) -> StagePlan:
    """Plan one RL stage of ``cfg`` (a paper profile) in ``run_dir``, starting from ``init_dir``.

    Args:
        cfg: the notebook's resolved ``KitConfig``; the stage launches exactly it, with
            ``run_dir`` set to this stage's (``dataclasses.replace``, never a reload).
        stage: a name of ``cfg.stages`` (``stage1`` | ``stage2`` | ``stage3`` on the paper profiles).
        run_dir, init_dir, data_dir: this stage's, the upstream stage's and the data notebook's
            run directories.
        cluster: layout (default :meth:`Cluster.from_env`).
        check: read the upstream and own checkpoints (False for a dry run before anything exists:
            the steps are then the profile's and the paths the predicted ones).
    Raises:
        kit.bridge.checkpoints.CheckpointError: ``check`` and stage 2/3 find no upstream checkpoint.
    """
    if stage not in cfg.stages.names:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(cfg.stages.names)}")
    cluster = cluster or Cluster.from_env()
    run, init, data = (Path(p).resolve() for p in (run_dir, init_dir, data_dir))
    notes: list[str] = []
    resume: str | None = None
    if check and not (init / "policy").exists():
        raise FileNotFoundError(f"{init / 'policy'} not found: the upstream notebook writes it (the SFT link or "
                                "the merged policy of the previous stage); run it first")
    if stage == cfg.stages[0].name:  # the first stage starts from the SFT policy
        start = 0
    elif check:
        up = latest_verl_checkpoint(init / "checkpoints")
        start, resume = up.step, str(up.step_dir)
    else:
        start = stage_step_offset(cfg, stage)
        resume = str(init / "checkpoints" / f"global_step_{start}")
    end = start + cfg.stages[stage].steps
    own = saved_steps(run / "checkpoints") if check else []
    if own and start < own[-1] < end:
        notes.append(f"resuming this stage from its own step {own[-1]} (interrupted run)")
        resume = str(run / "checkpoints" / f"global_step_{own[-1]}")
    hard = cfg.stages[stage].problems == "hard"
    train = run / "data" / "hard.parquet" if hard else curated_file(data)  # kit.data.pool: both runtimes
    reads = {"model": str(init / "policy"), "train_files": str(train), "val_files": str(data / "data" / "val.parquet")}
    if resume:
        reads["resume_from"] = resume
    writes = {"checkpoints": str(run / "checkpoints"), "verl_metrics": str(run / METRICS_FILE),
              "metrics": str(run / "metrics.jsonl"), "policy": str(run / "policy"), "summary": str(run / "summary.json")}
    stage_cfg = dataclasses.replace(cfg, run_dir=str(run))
    kwargs = dict(model_path=reads["model"], train_files=str(train), val_files=reads["val_files"],
                  n_gpus_per_node=cluster.gpus_per_node, nnodes=cluster.nnodes, rollout_tp=cluster.rollout_tp,
                  start_step=start, resume_from=resume, metrics_file=writes["verl_metrics"], python=cluster.python)
    _, cmd = launch.build_launch(stage_cfg, stage, **kwargs)
    merge = merge_command(run / "checkpoints" / f"global_step_{end}" / "actor", run / "policy.partial", cluster.python)
    return StagePlan(stage, str(run), start, end, reads, writes, cmd, merge, stage_cfg, kwargs, notes)


def convert_metrics(verl_file: str | os.PathLike, out_file: str | os.PathLike, *, stage: str, start_step: int,
                    algorithm: str, seed: int) -> int:
    """Rewrite VERL's file-logger lines (``{"step": N, "data": {...}}``) as kit ``metrics.jsonl``
    rows (keys declared in kit.metrics, mapped by :data:`METRIC_MAP`; absent ones left out), one per
    training step; validation-only lines are skipped, and so is a line that is not JSON (the partial
    last line of a killed run, with a warning naming ``file:line``); VERL's bare ``NaN`` is written
    as ``null``. Returns the number of rows written.

    Raises:
        FileNotFoundError: ``verl_file`` does not exist (names it).
    """
    src = Path(verl_file)
    if not src.exists():
        raise FileNotFoundError(f"VERL metrics file not found: {src} (the stage logs there through trainer.logger=file)")
    rows: dict[int, dict[str, Any]] = {}
    for lineno, line in enumerate(src.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:  # a run killed mid-write; the resumed run appends after it
            warnings.warn(f"{src}:{lineno}: not a JSON line ({exc}); skipped (a partial line of a killed run)",
                          stacklevel=2)
            continue
        step, data = int(rec["step"]), rec.get("data", {})
        row = rows.setdefault(step, {})
        for key, sources in METRIC_MAP.items():
            value = next((data[s] for s in sources if s in data), None)
            if isinstance(value, int | float) and key not in row:
                row[key] = float(value)
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w") as fh:
        for step in sorted(rows):
            row = rows[step]
            if not is_training_row(row):
                continue
            fh.write(jsonio.dumps({"stage": stage, "step": step - start_step, "global_step": step, **row,
                                 "algorithm": algorithm, "seed": seed, "engine": "verl"}) + "\n")
            n += 1
    return n


def run_stage(cfg: KitConfig, stage: str, run_dir: str | os.PathLike, init_dir: str | os.PathLike,
              data_dir: str | os.PathLike, *, cluster: Cluster | None = None,
              launcher: Callable[..., int] | None = None,
              merge_runner: Callable[[Sequence[str]], int] | None = None) -> dict[str, Any]:
    """Launch one stage in VERL (unless it already finished), merge its last checkpoint into
    ``run_dir/policy``, convert its metrics and write ``run_dir/summary.json``.

    Args:
        cfg, stage, run_dir, init_dir, data_dir, cluster: as in :func:`plan_stage`.
        launcher: called as ``launcher(stage_cfg, stage, **kwargs)``; default
            :func:`kit.bridge.verl_cpu.runner.default_launcher` (``kit.bridge.launch.launch`` on a
            CUDA machine; the CPU runtime's ``run_cpu`` only with ``KIT_VERL_DEVICE=cpu``, an error
            on a CPU-only machine without it; tests pass a fake that writes a checkpoint layout).
        merge_runner: runs the merge argv (default a subprocess).
    Returns:
        The summary written to ``run_dir/summary.json``.
    Raises:
        CheckpointError: the upstream checkpoint, or this stage's after training, is missing or
            incomplete (names the path).
        RuntimeError: VERL or the merger exited with an error.
        FileNotFoundError: stage 3 without ``run_dir/data/hard.parquet`` (see :func:`build_hard_parquet`).
    """
    plan = plan_stage(cfg, stage, run_dir, init_dir, data_dir, cluster=cluster)
    run = Path(plan.run_dir)
    own = saved_steps(run / "checkpoints")
    launched = not (own and own[-1] >= plan.end_step)
    if launched:
        if launcher is None:  # SGLang on CUDA; the kit's CPU runtime only when KIT_VERL_DEVICE=cpu asks for it
            from kit.bridge.verl_cpu.runner import default_launcher

            launcher = default_launcher()
        code = launcher(plan.config, stage, **plan.launch_kwargs)
        if code != 0:
            raise RuntimeError(f"VERL {stage} exited with status {code} (run_dir {run}; its log is above)")
    merged = merge_to_policy(run / "checkpoints", run / "policy", python=plan.launch_kwargs["python"], run=merge_runner)
    if merged["step"] != plan.end_step:
        plan.notes.append(f"last checkpoint is step {merged['step']}, expected {plan.end_step}")
    critic = None
    if needs_critic(cfg.algorithm):  # PPO: VERL's critic checkpoint, merged beside policy/ (the local layout)
        critic = merge_to_policy(run / "checkpoints", run / CRITIC_DIR, subdir="critic",
                                 python=plan.launch_kwargs["python"], run=merge_runner)
    label = sampling_plan(cfg.algorithm)[2]  # grpo, grpo_roc, or ppo / ppo_roc (the local rows' names)
    verl_metrics = Path(plan.writes["verl_metrics"])
    n_rows = (convert_metrics(verl_metrics, plan.writes["metrics"], stage=stage, start_step=plan.start_step,
                              algorithm=label, seed=cfg.seed) if verl_metrics.exists() else 0)
    if not verl_metrics.exists():
        plan.notes.append(f"no VERL metrics file at {verl_metrics}")
    summary = {
        "stage": stage, "engine": "verl", "profile": cfg.profile, "algorithm": label, "seed": cfg.seed,
        "run_dir": str(run), "init_dir": str(Path(init_dir).resolve()), "policy_dir": merged["policy_dir"],
        "checkpoint": merged["checkpoint"], "start_step": plan.start_step, "end_step": merged["step"],
        "global_step": merged["step"], "steps": int(merged["step"]) - plan.start_step,
        "resumed_from": plan.reads.get("resume_from"), "model_path": plan.reads["model"],
        "train_files": plan.reads["train_files"], "val_files": plan.reads["val_files"],
        "metrics_file": plan.writes["metrics"], "metric_rows": n_rows, "verl_metrics_file": str(verl_metrics),
        "launched": launched, "merged": merged["merged"], "launch_command": plan.launch_command,
        "merge_command": merged["command"], "notes": plan.notes,
    }
    if critic is not None:
        summary.update(critic_dir=critic["policy_dir"], critic_merged=critic["merged"], critic_merge_command=critic["command"])
    jsonio.write_json(run / "summary.json", summary)
    return summary


def skip_stage(cfg: KitConfig, stage: str, run_dir: str | os.PathLike, init_dir: str | os.PathLike) -> dict[str, Any]:
    """A stage with 0 steps in the profile (paper-32b has no stage 3): nothing is launched;
    ``run_dir/policy`` links the upstream ``init_dir/policy`` so later notebooks read the last
    trained policy, and ``run_dir/summary.json`` says so.

    Raises:
        CheckpointError: the upstream ``policy/`` does not exist (names it).
    """
    run, upstream = Path(run_dir), Path(init_dir).resolve() / "policy"
    if not (upstream / "config.json").exists():
        raise CheckpointError(f"{stage} has 0 steps and links the upstream policy, but {upstream} holds no model")
    run.mkdir(parents=True, exist_ok=True)
    link = run / "policy"
    if link.is_symlink() or link.exists():
        if link.resolve() != upstream:
            raise CheckpointError(f"{link} exists and is not a link to {upstream}; move it away")
    else:
        link.symlink_to(upstream, target_is_directory=True)
    summary = {"stage": stage, "engine": "verl", "profile": cfg.profile, "steps": 0, "skipped": True,
               "note": f"0 steps in profile {cfg.profile}: not launched; policy/ links the upstream policy",
               "run_dir": str(run), "init_dir": str(Path(init_dir).resolve()), "policy_dir": str(link)}
    jsonio.write_json(run / "summary.json", summary)
    return summary


def run_ablation(cfg: KitConfig, run_dir: str | os.PathLike, init_dir: str | os.PathLike, data_dir: str | os.PathLike,
                 **kwargs: Any) -> dict[str, Any]:
    """The RoC ablation on the cluster: one first-stage VERL run per arm of :func:`kit.plan.ablation_arms` from the SFT
    policy, each in ``run_dir/<algorithm>_seed<s>/`` with ``ablation.steps`` steps (as the local
    engine lays it out); writes ``run_dir/ablation.json`` and ``run_dir/summary.json``."""
    runs = {}
    for sub, sub_cfg in ablation_configs(cfg, run_dir):
        sub.mkdir(parents=True, exist_ok=True)
        save(sub_cfg, sub)
        runs[sub.name] = run_stage(sub_cfg, sub_cfg.stages[0].name, sub, init_dir, data_dir, **kwargs)
    out = {"engine": "verl", "runs": {k: {"run_dir": v["run_dir"], "metrics_file": v["metrics_file"],
                                          "policy_dir": v["policy_dir"], "end_step": v["end_step"]}
                                      for k, v in runs.items()}}
    for name in ("ablation.json", "summary.json"):
        jsonio.write_json(Path(run_dir) / name, out)
    return out


def ablation_configs(cfg: KitConfig, run_dir: str | os.PathLike) -> list[tuple[Path, KitConfig]]:
    """``(arm folder, arm config)`` per arm of :func:`kit.plan.ablation_arms` (the arms the local
    runtime trains: seed, algorithm, the first stage's steps ``ablation.steps`` and budget
    ``rollout.max_response_tokens``), each arm's ``run_dir`` its folder ``run_dir/<algorithm>_seed<s>``."""
    return [(Path(run_dir) / arm_name(arm), arm) for arm in ablation_arms(cfg, run_dir)]


def describe_chain(cfg: KitConfig, dirs: Mapping[str, str], *, cluster: Cluster | None = None,
                   notebooks: Sequence[str] | None = None) -> str:
    """Text of the whole paper chain: for each notebook's training step, what it reads, what it
    writes and the exact commands (VERL SFT, VERL PPO per stage, merges), without running or
    checking anything. ``dirs`` maps ``data, sft``, each stage's name and ``ablation`` to run dirs;
    ``notebooks`` (names, e.g. the series cut by ``--until``) limits the text to those notebooks."""
    cluster = cluster or Cluster.from_env()
    q = " ".join
    lines = [f"# paper chain, profile {cfg.profile}: {cluster.nnodes} node(s) x {cluster.gpus_per_node} GPUs, "
             f"rollout TP {cluster.rollout_tp} (KIT_NNODES, KIT_GPUS_PER_NODE, KIT_ROLLOUT_TP)", ""]
    sft = Path(dirs["sft"]).resolve()
    data = Path(dirs["data"]).resolve()
    def shown(nb: str) -> bool:
        return notebooks is None or nb in notebooks

    lines += [] if not shown("02_cold_start_sft") else [
        f"## 02_cold_start_sft  run_dir {sft}",
        f"   writes: {sft}/policy, {sft}/summary.json",
        "   either sft_checkpoint=<HF model folder>: linked as policy/ (nothing runs), or",
        "   sft_data=<parquet with a `messages` column>:",
        "   $ " + q(sft_command(cfg, "<sft_data>", sft, gpus_per_node=cluster.gpus_per_node, python=cluster.python)),
        "   $ " + q(merge_command(sft / "checkpoints" / "global_step_<last>", sft / "policy.partial", cluster.python))
        + "  (then renamed to policy/)", ""]
    previous = dirs["sft"]
    notebook = {e.folder: e.name for e in series(cfg.stages.names)}  # each stage's notebook (kit.plan)
    for stage in cfg.stages.names:
        nb = notebook[stage]
        plan = plan_stage(cfg, stage, dirs[stage], previous, dirs["data"], cluster=cluster, check=False)
        upstream, previous = previous, dirs[stage]
        if not shown(nb):
            continue
        if cfg.stages[stage].steps == 0:  # the profile skips it (paper-32b: stages 1-2 only)
            lines += [f"## {nb}  run_dir {plan.run_dir}  (0 steps in profile {cfg.profile}: skipped; "
                      f"policy/ links {Path(upstream).resolve()}/policy)", ""]
            continue
        lines.append(f"## {nb}  run_dir {plan.run_dir}  (global steps {plan.start_step} -> {plan.end_step})")
        if cfg.stages[stage].problems == "hard":
            n = cfg.stages[stage].hard_filter_samples
            lines.append(f"   first: {plan.reads['train_files']} = {data}/data/curated.parquet minus the problems "
                         f"{Path(upstream).resolve()}/policy solves {n}/{n} (sampler_url= an OpenAI server of that policy, "
                         "or hard_counts= a JSON of solve counts; kit.bridge.hard_subset)")
        lines += [f"   reads:  {k} = {v}" for k, v in plan.reads.items()]
        lines += [f"   writes: {k} = {v}" for k, v in plan.writes.items()]
        lines += ["   $ " + q(plan.launch_command), "   $ " + q(plan.merge_command) + "  (then renamed to policy/)", ""]
    if not shown("06_roc_ablation"):
        return "\n".join(lines)
    abl = Path(dirs["ablation"]).resolve()
    lines.append(f"## 06_roc_ablation  run_dir {abl}  (one {cfg.stages[0].name} run per algorithm and seed, "
                 f"{cfg.ablation.steps} steps at {cfg.rollout.max_response_tokens} tokens, from {sft}/policy)")
    for sub, sub_cfg in ablation_configs(cfg, abl):
        plan = plan_stage(sub_cfg, sub_cfg.stages[0].name, sub, dirs["sft"], dirs["data"], cluster=cluster, check=False)
        lines += [f"   {sub.name}: writes {plan.writes['metrics']}, {plan.writes['policy']}",
                  "   $ " + q(plan.launch_command), "   $ " + q(plan.merge_command), ""]
    return "\n".join(lines + _related_work(cfg, dirs, cluster, shown))


def _related_work(cfg: KitConfig, dirs: Mapping[str, str], cluster: Cluster, shown) -> list[str]:
    """The dry-run lines of each study of the series (:data:`kit.studies.STUDIES`, its ``dry_run``)
    whose notebook is shown and whose folder ``dirs`` names."""
    lines: list[str] = []
    for study in STUDIES:
        if not (shown(study.notebook) and study.key in dirs):
            continue
        if study.dry_run:
            lines += resolve(study.dry_run)(cfg, Path(dirs[study.key]).resolve(), dirs, cluster)
        else:  # a study without dry-run lines of its own still says where it runs
            lines += [f"## {study.notebook}  run_dir {Path(dirs[study.key]).resolve()}", "   runs in its notebook's "
                      "kernel; it names no VERL launch (kit.studies.Study.dry_run is empty)", ""]
    return lines
