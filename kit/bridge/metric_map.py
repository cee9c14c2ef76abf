"""kit ``metrics.jsonl`` key <- VERL step-metric names, derived from the one schema (:mod:`kit.metrics`).

``METRIC_MAP[key]`` is ``kit.metrics.RL_KEYS[key].verl``: the names, first present wins, that fill
the key on VERL rows with the population the schema declares for it. The ``rstar2/`` names come
from the kit's replay buffers (:mod:`kit.bridge.sampler`: the sampled population of every step, on
GRPO and GRPO-RoC; :mod:`kit.bridge.roc_hook`: ``rstar2/roc/...``); ``roc/<key>`` is RoC's name
before the kit's metrics moved under one prefix, read so a stage resumed across that change converts
its earlier lines too. VERL's own data metrics (``response_length/*``, ``critic/score/*``) are over
the rows it trains on (RoC's kept G of 2G), so they fill no sampled key. Keys with ``verl=None`` in
the schema are absent from VERL rows (the schema says why); GRPO rows also lack the RoC ones.
Every name here is one VERL 0.9.1's v1 trainer or the kit's buffers log
(``tests/bridge/golden/verl_step_metrics.txt``).
"""

from __future__ import annotations

from kit.metrics import RL_KEYS

METRIC_MAP: dict[str, tuple[str, ...]] = {key: m.verl for key, m in RL_KEYS.items() if m.verl}

#: Keys whose presence marks a training step's line in VERL's log (a validation-only line has none):
#: every mapped key measured over rollouts (sampled or kept), not the step-level timings.
DATA_KEYS: frozenset[str] = frozenset(k for k in METRIC_MAP if RL_KEYS[k].population in ("sampled", "kept"))


def is_training_row(row: dict) -> bool:
    """Whether a converted row (kit keys) holds a training step's data, not validation only."""
    return any(k in row for k in DATA_KEYS)
