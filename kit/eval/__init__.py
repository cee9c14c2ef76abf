"""Evaluation (rStar2-Agent §5, Tables 3-5). Import the submodules directly:

- ``benchmarks``: AIME24, AIME25, MATH-500, HMMT25 loaders, GPQA-Diamond from a user path.
- ``metrics``: avg@n, unbiased pass@k, maj@k, bootstrap intervals (pure functions).
- ``evaluate``: ``score_samples`` (pure) and ``evaluate``/``evaluate_async`` through the training
  agent loop; ``save_result``/``load_result``; pass@k curves of several checkpoints.
- ``verl_val``: the same metrics from a VERL validation dump.
- ``manifest``: model, backend, sampling, seed, kit version and data hashes of every result.
"""
