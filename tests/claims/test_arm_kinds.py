"""The arm test kinds on synthetic run folders whose answer is known: ``ablation_rise`` and
``ablation_last`` (ReTool's behaviour claims), arms in another run folder than the ablation's, a
paired test across two folders, and a claim's ``section``."""

from __future__ import annotations

import json
from pathlib import Path

from kit.claims import RunDirs, evaluate_claims


def arm(root: Path, folder: str, name: str, seed: int, steps: int, key: str, start: float, end: float,
        algorithm: str = "grpo") -> None:
    """``<folder>/<name>_seed<seed>/metrics.jsonl``: ``key`` linear from start to end, seed jitter 0.002."""
    rows = [{"stage": "stage1", "step": s + 1, "algorithm": algorithm, "seed": seed,
             key: start + (end - start) * s / max(1, steps - 1) + 0.002 * ((seed * 7 + s * 3) % 5 - 2) / 2}
            for s in range(steps)]
    path = root / folder / f"{name}_seed{seed}" / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def claim(*tests, section=None):
    c = {"id": "c", "source": "s", "claim": "c", "paper": "p", "tests": list(tests)}
    return {**c, "section": section} if section else c


def spec(kind, comparison, threshold, **kw):
    return {"name": kind, "kind": kind, "statistic": "s", "interval": "t_seeds", "comparison": comparison,
            "threshold": threshold, "min_seeds": 3, "min_steps": 10, **kw}


def one(root: Path, *tests, section=None):
    (res,) = evaluate_claims(RunDirs.under(root), [claim(*tests, section=section)], preconditions={})
    return res


def test_rise_and_last_level_of_an_arm_in_the_retool_folder(tmp_path):
    for s in (0, 1, 2):  # ppo rows carry algorithm "grpo" (GAE estimator): the retool folder's arms are taken as named
        arm(tmp_path / "up", "retool", "ppo", s, 20, "code_ratio", 0.80, 0.95)
        arm(tmp_path / "down", "retool", "ppo", s, 20, "code_ratio", 0.95, 0.80)
    rise = spec("ablation_rise", ">", 0.0, algorithm="ppo", key="code_ratio", folder="retool")
    assert one(tmp_path / "up", rise).verdict == "reproduced"
    res = one(tmp_path / "down", rise)
    assert res.verdict == "not reproduced" and abs(res.tests[0].value + 0.15 * 15 / 19) < 0.005  # windows of 5 of 20 steps
    low = spec("ablation_last", "<", 0.9, algorithm="ppo", key="code_ratio", folder="retool")
    assert one(tmp_path / "down", low).verdict == "reproduced" and one(tmp_path / "up", low).verdict == "not reproduced"
    # the ablation folder keeps its row filter: there a ppo arm's grpo rows are not the arm's
    assert one(tmp_path / "up", {**rise, "folder": "ablation"}).verdict == "inconclusive"
    # too few seeds (smoke: one) or steps: inconclusive, never an error
    arm(tmp_path / "one", "retool", "ppo", 0, 20, "code_ratio", 0.8, 0.95)
    assert "at least 3" in one(tmp_path / "one", rise).tests[0].reason
    for s in (0, 1, 2):
        arm(tmp_path / "short", "retool", "ppo", s, 2, "code_ratio", 0.8, 0.95)
    assert one(tmp_path / "short", rise).verdict == "inconclusive"


def test_paired_last_across_two_folders_and_the_claims_section(tmp_path):
    for s in (0, 1, 2, 3, 4):  # the ablation has more seeds than the ReTool comparison: pairs on the common ones
        arm(tmp_path / "r", "ablation", "grpo_roc", s, 20, "accuracy", 0.6, 0.8, algorithm="grpo_roc")
    for s in (0, 1, 2):
        arm(tmp_path / "r", "retool", "ppo", s, 20, "accuracy", 0.6, 0.75)
    t = spec("ablation_paired_last", ">", -0.1, key="accuracy", minuend="ppo", minuend_folder="retool",
             subtrahend="grpo_roc", subtrahend_folder="ablation")
    res = one(tmp_path / "r", t, section="ReTool")
    assert res.verdict == "reproduced" and res.tests[0].n == 3 and -0.06 < res.tests[0].value < -0.04
    assert res.section == "ReTool" and res.to_dict()["section"] == "ReTool"
    assert one(tmp_path / "r", {**t, "threshold": -0.01}).verdict == "not reproduced"
    assert one(tmp_path / "r", t).section == "rStar2-Agent"  # the default: the kit's own paper
