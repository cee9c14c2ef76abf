"""Training data for the kit: the real RL pools, their curation, the tiny task family, SFT data.

Modules (import them directly; this package re-exports nothing):

- ``kit.data.pools``: loaders for the RL problem pools in ``<data_dir>/train`` (DAPO-Math-17k,
  GSM8K, Project Euler, AIME 1983-2025, the OpenMathReasoning sample), one :class:`Problem`
  per row with its source and id.
- ``kit.data.decontam``: n-gram decontamination against the evaluation benchmarks.
- ``kit.data.curate``: the report's §4.2 filters and funnel table, the consistency filter, the
  stage-3 hard subset builder and the curated parquet writer.
- ``kit.data.tasks``: the generated tool-use task family of the tiny profile (``@register_family``).
- ``kit.data.pool``: the RL stages' training pool by ``data.source`` (task family or curated parquet),
  one ``pool(cfg, stage, data_dir)`` for both runtimes.
- ``kit.data.sft``: cold-start (non-reasoning) SFT loaders.
"""
