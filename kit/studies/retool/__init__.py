"""ReTool (Feng et al. 2025) as a study of the series (issue #33; its record: :data:`kit.studies.RETOOL`).

- :mod:`kit.studies.retool.chain`: what notebook 10 calls (train the PPO arms, the behaviour figure,
  a self-correction found in the samples, the ReTool verdicts);
- :mod:`kit.studies.retool.job`: the same training as a background job of the runner;
- :mod:`kit.studies.retool.figures`: ReTool's Figure (a)-(f) panels.

The arms themselves are the recipe's (:func:`kit.plan.retool_arms`), and what they launch on VERL is
the bridge's (:mod:`kit.bridge.study_runs`).
"""
