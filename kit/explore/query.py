"""Which records the explorer shows: groups of a step, the filters, the run's tokenizer.

Pure functions over records (:mod:`kit.records`), shared by the widgets and the static export.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from kit.records import RecordIndex, StepFile

FILTERS = ("zero_spread", "correct_with_tool_errors", "truncated")


def groups(records: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """``prompt_index -> the group's records`` sorted by ``traj_index`` (prompt order kept)."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (r["prompt_index"], r["traj_index"])):
        out.setdefault(r["prompt_index"], []).append(r)
    return out


def _tool_failures(r: Mapping[str, Any]) -> int:
    return sum((r.get("tool_errors") or {}).values())


def matches(r: Mapping[str, Any], flt: str) -> bool:
    """Whether one trajectory matches a filter of :data:`FILTERS`.

    ``zero_spread``: its group's rewards are all equal; ``correct_with_tool_errors``: correct and
    at least one failed tool call (the trajectories RoC's p_err ranks down, rStar2-Agent §2.2.3);
    ``truncated``: cut by the budget.
    Raises:
        ValueError: an unknown filter.
    """
    if flt == "zero_spread":
        return bool(r["group_zero_spread"])
    if flt == "correct_with_tool_errors":
        return bool(r["correct"]) and _tool_failures(r) > 0
    if flt == "truncated":
        return bool(r["truncated"])
    raise ValueError(f"unknown filter {flt!r}; expected one of {FILTERS}")


def matching_groups(records: Sequence[Mapping[str, Any]], filters: Sequence[str] = ()) -> list[int]:
    """Prompt indices of the groups with a trajectory matching every filter (all groups without filters)."""
    return [p for p, g in groups(records).items() if any(all(matches(r, f) for f in filters) for r in g)]


def first_match(group: Sequence[Mapping[str, Any]], filters: Sequence[str] = ()) -> int:
    """``traj_index`` of the group's first trajectory matching every filter (else its first)."""
    for r in group:
        if all(matches(r, f) for f in filters):
            return int(r["traj_index"])
    return int(group[0]["traj_index"])


def find_tokenizer_dir(index: RecordIndex, f: StepFile | None = None) -> Path | None:
    """Where to load the tokenizer: the recorder's ``meta.json`` ``tokenizer_dir`` (the policy the
    run started from), else a ``policy/`` folder with a tokenizer next to the records or under the root."""
    if f is not None:
        d = index.meta(f).get("tokenizer_dir")
        if d and Path(d).exists():
            return Path(d)
        cand = f.path.parents[3] / "policy"
        if (cand / "tokenizer_config.json").exists():
            return cand
    for meta in sorted(index.root.rglob("rollouts/meta.json")):
        d = index.read_meta(meta).get("tokenizer_dir")
        if d and Path(d).exists():
            return Path(d)
    for cfg in sorted(index.root.rglob("policy/tokenizer_config.json")):
        return cfg.parent
    return None


def load_tokenizer(path: str | os.PathLike | None) -> Any:
    """The tokenizer saved in a policy folder (``kit.models.save_policy`` wrote it), without the model;
    None for None."""
    return None if path is None else AutoTokenizer.from_pretrained(str(path))
