"""The related-work studies' lines of a paper profile's dry run (:func:`kit.bridge.stages.describe_chain`):
each study of :data:`kit.studies.STUDIES` names one of these as its ``dry_run``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kit import studies
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
