"""Notebook 10's training, run by the pipeline as a background job beside notebooks 03-08
(:mod:`kit.pipeline.overlap`): ``python -m kit.studies.retool.job '<notebook 10 parameters as JSON>'``.

It does what the notebook's training cell does with the same parameters (:func:`kit.studies.retool.chain.retool_config`
and :func:`kit.studies.retool.chain.train_retool`); the notebook, executed afterwards, finds every PPO arm
finished and draws them. Exit code 0 when every arm finished, 1 on an error (the traceback is in the
job's log), 2 on bad parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kit.chain.job_cli import check_parameters, job_main
from kit.plan import require_upstream
from kit.studies.retool.chain import retool_config, train_retool


def run(parameters: dict[str, Any]) -> dict[str, Any]:
    """Train notebook 10's arms with its papermill ``parameters`` (``profile``, ``seed``, ``run_dir``,
    ``init_dir``, ``data_dir``; optional ``overrides``; ``ablation_dir`` is not read here).

    Raises:
        KeyError: a required parameter is missing (named).
        TypeError: a parameter has the wrong type (named).
        kit.plan.UpstreamMissing: the SFT policy or the curated data are not there yet.
    """
    p = {"overrides": {}, **parameters}
    check_parameters("retool", p, ("profile", "seed", "run_dir", "init_dir", "data_dir"),
                     {"overrides": dict, "seed": int, "profile": str})
    require_upstream("10_retool", profile=p["profile"], init_dir=p["init_dir"], data_dir=p["data_dir"])
    cfg = retool_config(p["profile"], p["overrides"], p["run_dir"], p["seed"])
    return train_retool(cfg, p["run_dir"], p["init_dir"], p["data_dir"])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one argument, the parameters as a JSON object (:func:`kit.chain.job_cli.job_main`)."""
    return job_main("retool", "10", run, lambda s: f"{len(s.get('arms', {}))} arms finished", argv)


if __name__ == "__main__":
    raise SystemExit(main())
