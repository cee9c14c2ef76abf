"""Glue the notebooks of the chain call, so their cells stay short: load a run's policy, sample a
few trajectories to look at, evaluate a checkpoint on every benchmark of the profile, and run the
entropy analysis over checkpoints.

Everything here composes public functions of ``kit.rollout``, ``kit.sandbox``, ``kit.eval``,
``kit.analysis`` and ``kit.train``; nothing samples, runs code or grades by itself. Notebooks import
from ``kit.chain``; the code lives in the submodules:

- ``policies``: load a saved policy, count its parameters, wrap it in a backend, sample
  trajectories on held-out task problems.
- ``training``: cold-start SFT, RL stages and the RoC ablation (:func:`ablation_config`, the
  config notebook 06 and its background job, :mod:`kit.chain.ablation_job`, share) on the runtime of
  ``cfg.runtime`` (:mod:`kit.runtime`); the RL data; a trainer's summary as Markdown.
- ``display``: :class:`TrajectoryView` (HTML under a legend, LaTeX and plain text of one trajectory);
  :func:`learning_note` (the line a profile too small to learn shows beside its results).
- ``evaluation``: :func:`evaluate_checkpoint` on the profile's benchmarks; the entropy analysis
  :func:`analyze_checkpoints`.
- ``boundary``: the consistency filter :func:`consistency_check` and the pass@k curves
  :func:`passk_boundary` with their figure.

Imports sit at the top of each submodule, so a name is bound where it is used: to monkeypatch
one, patch the submodule whose function looks it up (e.g. ``kit.chain.evaluation.load_run_policy``
for :func:`evaluate_checkpoint`), not ``kit.chain`` or the module that defines it.
"""

from kit.chain.boundary import (
    Consistency,
    PassK,
    consistency_check,
    copy_passk_figure,
    passk_boundary,
    passk_figure,
    passk_hard_boundary,
    passk_items,
)
from kit.chain.display import TrajectoryView, learning_note, show_learning_note
from kit.chain.evaluation import Analysis, analyze_checkpoints, eval_benchmarks, evaluate_checkpoint
from kit.chain.policies import (
    count_parameters,
    heldout_problems,
    load_run_policy,
    policy_backend,
    sample_trajectories,
)
from kit.chain.training import (
    ablation_config,
    cold_start,
    prepare_rl_data,
    summary_markdown,
    train_ablation,
    train_stage,
)

__all__ = [
    "Analysis",
    "ablation_config",
    "Consistency",
    "PassK",
    "TrajectoryView",
    "analyze_checkpoints",
    "cold_start",
    "consistency_check",
    "copy_passk_figure",
    "count_parameters",
    "eval_benchmarks",
    "evaluate_checkpoint",
    "heldout_problems",
    "learning_note",
    "load_run_policy",
    "passk_boundary",
    "passk_hard_boundary",
    "passk_figure",
    "passk_items",
    "policy_backend",
    "prepare_rl_data",
    "sample_trajectories",
    "show_learning_note",
    "summary_markdown",
    "train_ablation",
    "train_stage",
]
