"""The related-work studies' lines of a paper profile's dry run (:func:`kit.bridge.stages.describe_chain`):
each study of :data:`kit.studies.STUDIES` names one of these as its ``dry_run``."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from kit import studies
from kit.bridge.revision_sft import revision_sft_command
from kit.bridge.stages import Cluster, plan_stage
from kit.config import KitConfig
from kit.plan import retool_arms


def retool_dry_run(cfg: KitConfig, run_dir: Path, dirs: Mapping[str, str], cluster: Cluster) -> list[str]:
    """Notebook 10's dry-run lines: ReTool's PPO arms, VERL's critic and GAE, one first-stage run per
    seed beside 06's GRPO-RoC arms (``kit.studies.RETOOL``'s ``dry_run``)."""
    lines = [f"## {studies.RETOOL.notebook}  run_dir {run_dir}  (ReTool's PPO: algorithm.adv_estimator=gae with VERL's critic, "
             f"one {cfg.stages[0].name} run per seed, beside 06's GRPO-RoC arms, from {Path(dirs['sft']).resolve()}/policy)"]
    for folder, arm_cfg in retool_arms(cfg, run_dir):
        sub = Path(arm_cfg.run_dir)
        plan = plan_stage(arm_cfg, arm_cfg.stages[0].name, sub, dirs["sft"], dirs["data"], cluster=cluster, check=False)
        lines += [f"   {folder}: writes {plan.writes['metrics']}, {plan.writes['policy']} (and critic/)",
                  "   $ " + " ".join(plan.launch_command), "   $ " + " ".join(plan.merge_command), ""]
    return lines


def agent_r_dry_run(cfg: KitConfig, run_dir: Path, dirs: Mapping[str, str], cluster: Cluster) -> list[str]:
    """Notebook 11's dry-run lines: the search runs on the local engine only; at scale its rows go to
    VERL's SFT trainer (``kit.studies.AGENT_R``'s ``dry_run``)."""
    return [f"## {studies.AGENT_R.notebook}  run_dir {run_dir}",
            "   the tree search runs on the local engine only (kit.studies.agent_r); on this runtime the notebook searches "
            "nothing and its claims read inconclusive. At scale: search with a served policy, then train on the "
            "rows' parquet with VERL's SFT trainer (kit.bridge.revision_sft; notebook 11 prints that command "
            "for its own rows)", ""]


def bstar_dry_run(cfg: KitConfig, run_dir: Path, dirs: Mapping[str, str], cluster: Cluster) -> list[str]:
    """Notebook 12's dry-run lines (``kit.studies.BSTAR``'s ``dry_run``): how B-STaR's loop runs at paper scale.
    Each iteration samples through the paper profile's sampler (an OpenAI-compatible server, SGLang, serving the
    iteration's starting policy, read by the kit's agent loop through ``kit.rollout.backends.OpenAIBackend``),
    selects with :mod:`kit.studies.bstar.loop`, and fine-tunes through the kit's VERL SFT path
    (:func:`kit.bridge.revision_sft.revision_sft_command` with the ``[bstar]`` recipe); nothing runs here."""
    b = cfg.bstar
    policy = f"{Path(dirs['sft']).resolve()}/policy"
    lines = [f"## {studies.BSTAR.notebook}  run_dir {run_dir}  (B-STaR: {b.iterations} iterations per arm, "
             f"arms {', '.join(studies.BSTAR.arms)}, from {policy})",
             "   on this runtime the notebook samples nothing and its claims read inconclusive; at paper scale, per "
             "arm and iteration k:",
             f"   1. serve iteration k-1's policy (k = 1: {policy}):",
             f"      $ python -m sglang.launch_server --model-path <policy> --tp {cluster.rollout_tp} --port 30000",
             f"   2. bstar arm: sample the dev subset ({b.dev_problems} tasks x {b.samples}) at T in "
             f"{list(b.temperatures)} through OpenAIBackend('http://<host>:30000/v1'); score every threshold of "
             f"{list(b.thresholds)} by the balance score (n* = {b.n_star}); take the best pair "
             "(kit.studies.bstar.loop.choose). fixed arm: "
             f"T = {b.fixed_temperature}, threshold {b.fixed_threshold}",
             f"   3. sample {b.tasks} training tasks x {b.samples} at that T; bstar: re-pick the threshold on that pool; "
             "write the selected samples (vote share above it) as a token parquet (kit.studies.agent_r.parquet)",
             "   4. fine-tune on it with VERL's SFT trainer:"]
    for arm in studies.BSTAR.arms:
        out = Path(run_dir) / arm / "iter_<k>"
        cmd = revision_sft_command(cfg, out / "selected.parquet", out, model_path="<iteration k-1's policy>",
                                   gpus_per_node=cluster.gpus_per_node, python=cluster.python, section="bstar")
        lines.append(f"      {arm}: $ " + shlex.join(cmd))
    return [*lines, ""]
