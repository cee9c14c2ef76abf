"""Notebook 10's training, run by the pipeline as a background job beside notebooks 03-08
(:mod:`kit.overlap`): ``python -m kit.chain.retool_job '<notebook 10 parameters as JSON>'``.

It does what the notebook's training cell does with the same parameters (:func:`kit.chain.retool.retool_config`
and :func:`kit.chain.retool.train_retool`); the notebook, executed afterwards, finds every PPO arm
finished and draws them. Exit code 0 when every arm finished, 1 on an error (the traceback is in the
job's log), 2 on bad parameters.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from kit.chain.retool import retool_config, train_retool
from kit.config import ConfigError
from kit.plan import require_upstream


def run(parameters: dict[str, Any]) -> dict[str, Any]:
    """Train notebook 10's arms with its papermill ``parameters`` (``profile``, ``seed``, ``run_dir``,
    ``init_dir``, ``data_dir``; optional ``overrides``; ``ablation_dir`` is not read here).

    Raises:
        KeyError: a required parameter is missing (named).
        TypeError: a parameter has the wrong type (named).
        kit.plan.UpstreamMissing: the SFT policy or the curated data are not there yet.
    """
    p = {"overrides": {}, **parameters}
    missing = [k for k in ("profile", "seed", "run_dir", "init_dir", "data_dir") if k not in p]
    if missing:
        raise KeyError(f"retool job: missing parameter(s) {missing}")
    kinds = {"overrides": dict, "seed": int, "profile": str}
    wrong = [f"{k} ({type(p[k]).__name__}, expected {t.__name__})" for k, t in kinds.items() if not isinstance(p[k], t)]
    if wrong:
        raise TypeError(f"retool job: parameter(s) of the wrong type: {', '.join(wrong)}")
    require_upstream("10_retool", profile=p["profile"], init_dir=p["init_dir"], data_dir=p["data_dir"])
    cfg = retool_config(p["profile"], p["overrides"], p["run_dir"], p["seed"])
    return train_retool(cfg, p["run_dir"], p["init_dir"], p["data_dir"])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one argument, the parameters as a JSON object."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        params = json.loads(args[0]) if len(args) == 1 else None
    except json.JSONDecodeError:
        params = None
    if not isinstance(params, dict):
        print("usage: python -m kit.chain.retool_job '<notebook 10 parameters as a JSON object>'", file=sys.stderr)
        return 2
    try:
        summary = run(params)
    except (KeyError, TypeError, ConfigError) as exc:  # bad parameters: nothing trained
        print(f"retool job: bad parameters: {exc}", file=sys.stderr)
        return 2
    print(f"retool job: {len(summary.get('arms', {}))} arms finished", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
