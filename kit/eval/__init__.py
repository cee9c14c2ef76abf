"""Evaluation: benchmark loaders (``benchmarks``), metrics (``metrics``: avg@k, unbiased pass@k,
maj@k, bootstrap intervals), ``evaluate`` (scores trajectories; drives the agent loop) and run
manifests (``manifest``). Import the submodules directly."""
