"""Notebook 06's training, run by the pipeline as a background job beside notebooks 03-08
(:mod:`kit.pipeline.overlap`): ``python -m kit.chain.ablation_job '<notebook 06 parameters as JSON>'``.

It does what the notebook's training cells do with the same parameters (:func:`ablation_config`
and :func:`kit.chain.train_ablation`), without the live figures; the notebook, executed
afterwards, finds every arm finished and only draws and tabulates them. Exit code 0 when every
arm finished, 1 on an error (the traceback is in the job's log), 2 on bad parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kit.chain.job_cli import check_parameters, job_main
from kit.chain.training import ablation_config, train_ablation
from kit.plan import require_upstream


def run(parameters: dict[str, Any]) -> dict[str, Any]:
    """Train notebook 06's arms with its papermill ``parameters`` (``profile``, ``seed``,
    ``run_dir``, ``init_dir``, ``data_dir``; optional ``overrides``, ``steps``, ``reuse_dirs``).

    Returns:
        The ablation summary (``ablation.json``).
    Raises:
        KeyError: a required parameter is missing (named).
        TypeError: a parameter has the wrong type (named).
        kit.plan.UpstreamMissing: the SFT policy or the curated data are not there yet.
    """
    p = {"overrides": {}, "steps": 0, "reuse_dirs": [], **parameters}
    check_parameters("ablation", p, ("profile", "seed", "run_dir", "init_dir", "data_dir"),
                     {"overrides": dict, "steps": int, "reuse_dirs": list, "seed": int, "profile": str})
    require_upstream("06_roc_ablation", profile=p["profile"], init_dir=p["init_dir"], data_dir=p["data_dir"])
    cfg = ablation_config(p["profile"], p["overrides"], p["run_dir"], p["seed"], steps=p["steps"])
    return train_ablation(cfg, p["run_dir"], p["init_dir"], p["data_dir"], reuse=p["reuse_dirs"])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one argument, the parameters as a JSON object (:func:`kit.chain.job_cli.job_main`)."""
    return job_main("ablation", "06", run, lambda s: f"{len(s.get('runs', {}))} arms finished in {s.get('seconds', 0.0):.0f} s", argv)


if __name__ == "__main__":
    raise SystemExit(main())
