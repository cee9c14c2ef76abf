"""Experiment tracking on both runtimes through VERL's own tracker (``verl.utils.tracking.Tracking``).

One setting, ``[logging] backends`` (:class:`kit.config.LoggingConfig`), reaches both runtimes:

* the VERL runtime passes it as ``trainer.logger`` and the environment of :func:`tracking_env` to
  VERL's processes (``kit.bridge.overrides``, ``kit.bridge.sft``); VERL's trainer is the tracker there;
* the local trainers (``kit.train``) log each step through :func:`open_tracker`: a
  :class:`LocalTracker` wrapping the same ``Tracking`` class (loaded from VERL's file, without
  VERL's package) that renames the kit's metrics to the names VERL's trainer logs
  (``kit.metrics.RL_NAMES``, ``kit.metrics.SFT_NAMES``, the one schema), so one dashboard
  (TensorBoard, W&B, MLflow, trackio) holds runs of both runtimes. Every kit-specific metric goes
  under the one prefix ``rstar2/``: RoC's selection metrics as ``rstar2/roc/<key>``, the names the
  VERL runtime's sampler logs (``kit.bridge.roc_hook``), and every other number of the kit's row
  (tool calls, tool errors, B-STaR balance, timings VERL has no name for) as ``rstar2/<key>``.
  With no backend configured it is a :class:`NullTracker` and nothing of VERL is loaded.

The kit's ``metrics.jsonl`` stays the complete record; the trackers are views of it.
``kit.train`` calls ``log_rl`` / ``log_sft`` right after it writes a ``metrics.jsonl`` row and
``finish`` at the end of a run.

Where things go (all under the run folder, nothing on the network unless configured):
``run_dir/tracking/tensorboard`` (``TENSORBOARD_DIR``), ``run_dir/tracking/wandb``
(``WANDB_DIR``, ``WANDB_MODE=offline`` unless ``logging.wandb_mode`` says otherwise),
``run_dir/tracking/mlruns`` (``MLFLOW_TRACKING_URI``, a local file store unless
``logging.mlflow_tracking_uri`` names a server), ``run_dir/tracking/trackio`` (``TRACKIO_DIR``),
VERL's file logger at ``run_dir/tracking/verl_metrics.jsonl`` (``VERL_FILE_LOGGER_PATH``; the
VERL runtime passes its own ``verl/step_metrics.jsonl``).

What it does not do: log validation generations or tables; purge the steps a resumed local run
repeats (TensorBoard shows them from a second event file; ``metrics.jsonl`` is truncated and
rewritten); keep trackio off a Hugging Face Space when ``TRACKIO_SPACE_ID`` is set in the
environment by the user.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.config import LOG_BACKENDS, KitConfig
from kit.metrics import IDENTIFIERS, KIT_PREFIX, RL_NAMES, ROC_PREFIX, SFT_NAMES

PROJECT = "rstar2-kit"  # VERL's trainer.project_name (kit.bridge.overrides)
TRACKING_DIR = "tracking"  # under the run folder
#: Python package each backend imports (console and file need nothing beyond VERL).
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}

def tracking_dir(run_dir: str | os.PathLike) -> Path:
    """``run_dir/tracking``: where every tracker of the run writes."""
    return Path(run_dir) / TRACKING_DIR


def tracking_env(logging_cfg: Any, run_dir: str | os.PathLike, file_logger_path: str | None = None) -> dict[str, str]:
    """Environment that keeps every VERL tracker local and inside the run folder.

    Set for every backend, listed or not, so a tracker added later (e.g. by an extra Hydra
    override) still writes locally.

    Args:
        logging_cfg: a :class:`kit.config.LoggingConfig` (``wandb_mode``, ``mlflow_tracking_uri``).
        run_dir: the run folder (absolute for VERL's Ray workers; relative stays relative).
        file_logger_path: VERL's file logger output; default ``run_dir/tracking/verl_metrics.jsonl``.
    Returns:
        ``{"TENSORBOARD_DIR", "WANDB_DIR", "WANDB_MODE", "MLFLOW_TRACKING_URI", "TRACKIO_DIR",
        "VERL_FILE_LOGGER_PATH"}`` as strings.
    """
    d = tracking_dir(run_dir)
    return {
        "TENSORBOARD_DIR": str(d / "tensorboard"),
        "WANDB_DIR": str(d / "wandb"),
        "WANDB_MODE": logging_cfg.wandb_mode,
        "MLFLOW_TRACKING_URI": logging_cfg.mlflow_tracking_uri or str(d / "mlruns"),  # a path: a local file store
        "TRACKIO_DIR": str(d / "trackio"),
        "VERL_FILE_LOGGER_PATH": file_logger_path or str(d / "verl_metrics.jsonl"),
    }


def check_backends(backends: Sequence[str]) -> None:
    """Fail before a run starts when a tracker is unknown or its package is not installed.

    Raises:
        ValueError: a name outside :data:`kit.config.LOG_BACKENDS` (names the allowed ones).
        ImportError: a backend's package is missing; names the package to ``pip install``.
    """
    for b in backends:
        if b not in LOG_BACKENDS:
            raise ValueError(f"logging.backends: {b!r} is not one of {list(LOG_BACKENDS)}")
        pkg = PACKAGES.get(b)
        if pkg and importlib.util.find_spec(pkg) is None:
            raise ImportError(f"logging.backends lists {b!r} but the package {pkg!r} is not installed: "
                              f"pip install {pkg} (or remove {b!r} from logging.backends)")


def trained_stats(trajectories: Sequence[Any], rewards: Sequence[float]) -> dict[str, float]:
    """VERL's data statistics over the K trajectories the update trains on (after RoC).

    Args:
        trajectories: (K,) ``kit.rollout.Trajectory`` (``prompt_ids``, ``response_ids``, ``turns``,
            ``feedback_texts``, ``truncated``).
        rewards: (K,) their 0/1 outcome rewards.
    Returns:
        The ``trained_*`` keys of :data:`RL_NAMES` (lengths in tokens); empty when K = 0.
    """
    if not len(trajectories):
        return {}
    lengths = [len(t.response_ids) for t in trajectories]
    turns = [t.turns + len(t.feedback_texts) + 1 for t in trajectories]  # as kit.bridge.agent_loop reports it
    r = [float(x) for x in rewards]
    k = len(trajectories)
    return {"trained_score_mean": sum(r) / k, "trained_score_max": max(r), "trained_score_min": min(r),
            "trained_response_len_mean": sum(lengths) / k, "trained_response_len_max": float(max(lengths)),
            "trained_response_len_min": float(min(lengths)),
            "trained_truncation_ratio": sum(bool(t.truncated) for t in trajectories) / k,
            "trained_prompt_len_mean": sum(len(t.prompt_ids) for t in trajectories) / k,
            "trained_num_turns_mean": sum(turns) / k, "trained_num_turns_max": float(max(turns)),
            "trained_num_turns_min": float(min(turns))}


def tracker_metrics(row: Mapping[str, Any], names: Mapping[str, tuple[str, ...]],
                    selection: Mapping[str, float] | None = None) -> dict[str, float]:
    """Rename one kit metrics row for the trackers.

    Args:
        row: a ``metrics.jsonl`` row (plus :func:`trained_stats` for RL).
        names: :data:`RL_NAMES` or :data:`SFT_NAMES`.
        selection: the RoC selection metrics of the step (``kit.algo.roc_step``); logged as
            ``rstar2/roc/<key>``, and the row's copies of them are not repeated.
    Returns:
        ``{name: float}``: VERL names for the keys of ``names``, ``rstar2/roc/...`` for ``selection``,
        ``rstar2/<key>`` for every other number of ``row`` (identifiers, strings and None left out).
    """
    out: dict[str, float] = {}
    selection = selection or {}
    for key, value in row.items():
        if key in IDENTIFIERS or value is None or isinstance(value, bool | str) or not isinstance(value, int | float):
            continue
        if key in names:
            out.update({n: float(value) for n in names[key]})
        elif key not in selection:
            out[KIT_PREFIX + key] = float(value)
    out.update({ROC_PREFIX + k: float(v) for k, v in selection.items() if isinstance(v, int | float)})
    return out


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """Set ``env`` while the trackers open (they read it then) and restore the caller's after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: private module name of VERL's tracking module loaded without its package (:func:`verl_tracking_class`)
STANDALONE_TRACKING = "kit_verl_tracking"
_STANDALONE_LOCK = threading.Lock()  # one load: a second thread must not get the module half-executed


def verl_tracking_class() -> type:
    """VERL's ``Tracking`` class (``verl/utils/tracking.py``), the one tracker of both runtimes.

    Loaded from VERL's own file without importing the ``verl`` package (no import statement: the
    kit outside ``kit.bridge`` never imports VERL): that package import pulls in VERL's protocol and
    Ray, ~3-5 CPU s per process (measured: 3.0-3.9 CPU s after torch and transformers, against
    0.06-0.1 s for the file alone), and the tracker uses neither (its module imports only the
    standard library, orjson and packaging; backends import their own packages when opened, and
    ``console`` imports VERL's logger, which then loads the package as usual). Where
    ``verl.utils.tracking`` is already loaded (a VERL process), that module.

    Raises:
        ImportError: VERL is not installed, or its install has no ``utils/tracking.py`` (names the path).
    """
    loaded = sys.modules.get("verl.utils.tracking")
    if loaded is not None:
        return loaded.Tracking
    with _STANDALONE_LOCK:
        mod = sys.modules.get(STANDALONE_TRACKING)
        if mod is None:
            spec = importlib.util.find_spec("verl")  # locates the package; runs none of it
            if spec is None or spec.origin is None:
                raise ImportError("VERL is not installed: its tracker (verl.utils.tracking) is the kit's (make setup)")
            path = Path(spec.origin).parent / "utils" / "tracking.py"
            file_spec = importlib.util.spec_from_file_location(STANDALONE_TRACKING, path)
            if not path.is_file() or file_spec is None or file_spec.loader is None:
                raise ImportError(f"cannot load VERL's tracker from {path} (is VERL 0.9.1 installed? make setup)")
            mod = importlib.util.module_from_spec(file_spec)
            sys.modules[STANDALONE_TRACKING] = mod  # dataclasses and pickling look classes up by module
            try:
                file_spec.loader.exec_module(mod)
            except BaseException:
                del sys.modules[STANDALONE_TRACKING]
                raise
    return mod.Tracking


class LocalTracker:
    """VERL's ``Tracking`` for one local run: kit rows in, VERL-named metrics out.

    Args:
        logging_cfg: :class:`kit.config.LoggingConfig`; its ``backends`` must not be empty.
        run_dir: the run folder; trackers write under ``run_dir/tracking``.
        experiment: run name shown by the tracker (:meth:`kit.config.KitConfig.tracker_name`, e.g. ``tiny-stage1-grpo_roc-seed0``).
        config: the resolved kit config as a dict, recorded by wandb, mlflow and trackio.
    Raises:
        ValueError, ImportError: from :func:`check_backends`.
    """

    def __init__(self, logging_cfg: Any, run_dir: str | os.PathLike, experiment: str,
                 config: Mapping[str, Any] | None = None):
        backends = list(logging_cfg.backends)
        if not backends:
            raise ValueError("LocalTracker needs at least one backend in logging.backends")
        check_backends(backends)
        self.backends = tuple(backends)
        self.experiment = experiment  # the tracker run's name (VERL's trainer.experiment_name)
        self.dir = tracking_dir(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        # W&B's console lines (run start, history, sync hint: the README has it) would fill a training
        # cell's output as red stderr boxes in JupyterLab; its files are unchanged. WANDB_SILENT=false shows them.
        self.env = {**tracking_env(logging_cfg, Path(run_dir).resolve()),
                    "WANDB_SILENT": os.environ.get("WANDB_SILENT", "true")}
        Tracking = verl_tracking_class()  # noqa: N806 - VERL's class
        with _environ(self.env):
            self.tracking = Tracking(project_name=PROJECT, experiment_name=experiment, default_backend=backends,
                                     config={"trainer": {"project_name": PROJECT, "experiment_name": experiment},
                                             "kit": dict(config or {})})

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log already-named metrics at ``step``; TensorBoard's file is flushed so live views follow."""
        self.tracking.log(data=dict(metrics), step=int(step))
        tb = self.tracking.logger.get("tensorboard")
        if tb is not None:
            tb.writer.flush()

    def log_rl(self, row: Mapping[str, Any], selection: Mapping[str, float], trajectories: Sequence[Any] = (),
               rewards: Sequence[float] = (), kept: Sequence[int] = ()) -> dict[str, float]:
        """Log one local RL step (``row`` as written to ``metrics.jsonl``) at ``row["global_step"]``.

        Args:
            selection: the step's RoC selection metrics.
            trajectories, rewards: (N,) every sampled trajectory of the step and its 0/1 reward.
            kept: (K,) indices of the rows the update trained on (:func:`trained_stats` of them).
        Returns:
            What was logged.
        """
        idx = [int(i) for i in kept]
        trained = trained_stats([trajectories[i] for i in idx], [rewards[i] for i in idx])
        metrics = tracker_metrics({**row, **trained}, RL_NAMES, selection)
        self.log(metrics, row["global_step"])
        return metrics

    def log_sft(self, row: Mapping[str, Any]) -> dict[str, float]:
        """Log one local SFT step at ``row["global_step"]``; returns what was logged."""
        metrics = tracker_metrics(row, SFT_NAMES)
        self.log(metrics, row["global_step"])
        return metrics

    def finish(self) -> None:
        """Flush and close every backend (VERL's ``Tracking.finish``; safe to call twice)."""
        self.tracking.finish()


class NullTracker:
    """No backend configured: every call does nothing."""

    backends: tuple[str, ...] = ()

    def log_rl(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        return {}

    def log_sft(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        return {}

    def finish(self) -> None:
        pass


def open_tracker(cfg: KitConfig, run_dir: str | os.PathLike, stage: str) -> Any:
    """The tracker of one local run (SFT or an RL stage) in ``run_dir``, named
    :meth:`kit.config.KitConfig.tracker_name` as VERL's runs are.

    Returns:
        :class:`LocalTracker` (VERL's tracker, its file loaded only now: ~0.1 s) over ``cfg.logging.backends``, or
        :class:`NullTracker` when the list is empty.
    Raises:
        ImportError: a backend's package is missing (names it; raised before any training).
    """
    if not cfg.logging.backends:
        return NullTracker()
    return LocalTracker(cfg.logging, run_dir, cfg.tracker_name(stage), cfg.to_dict())
