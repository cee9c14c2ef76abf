"""Score VERL validation dumps with the kit's metrics (the "VERL validation" evaluation backend).

With ``trainer.validation_data_dir=<dir>`` (and ``trainer.val_only=True`` for an eval-only
run), VERL 0.9 writes ``<dir>/<global_step>.jsonl``: one row per sample with ``input`` (the
prompt text), ``output`` (the response text), ``gts`` (the gold), ``score`` (the reward) and
every per-sample key the reward function returned (``RayPPOTrainer._write_generations``). The
``n`` samples of one prompt (``actor_rollout_ref.rollout.val_kwargs.n``) share its ``input``.

VERL itself reports only ``val-core/<source>/reward/mean@n`` (= avg@n), best@k and maj@k; this
module turns the same samples into a :class:`kit.eval.evaluate.EvalResult` (unbiased pass@k
for every k, bootstrap interval, lengths, tool statistics when the reward function returned
them) so paper-scale numbers and tiny-profile numbers come out of one code path.

Not read from the dump (VERL does not write them): response token counts (pass a tokenizer),
tool calls/errors and truncation (read when the reward function added ``tool_calls``,
``tool_errors``, ``truncated`` keys). Remember to set ``val_kwargs.temperature``/``top_p``/
``do_sample``: VERL validates greedily by default (``rstar2_agent_release.md`` §9).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.eval.evaluate import EvalResult, score_samples
from kit.eval.manifest import build_manifest
from kit.reward import extract_final_answer


class VerlDumpError(ValueError):
    """A validation dump row is malformed or groups have different sizes (names file and row)."""


def read_verl_dump(path: str | Path) -> list[dict[str, Any]]:
    """Rows of one ``<step>.jsonl`` validation dump.

    Raises:
        VerlDumpError: a line that is not a JSON object or lacks input/output/gts/score.
    """
    path = Path(path)
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise VerlDumpError(f"{path}: line {i}: invalid JSON ({exc.msg})") from None
        missing = [k for k in ("input", "output", "gts", "score") if not isinstance(row, dict) or k not in row]
        if missing:
            raise VerlDumpError(f"{path}: line {i}: missing keys {missing}")
        rows.append(row)
    return rows


def score_verl_dump(path: str | Path, benchmark: str, *, tokenizer: Any = None, sampling: Mapping[str, Any] | None = None,
                    model: str = "", bootstrap_samples: int = 1000, seed: int = 0) -> EvalResult:
    """Group a validation dump by prompt and compute every kit metric.

    Args:
        path: the ``<step>.jsonl`` file.
        benchmark: name recorded in the result (a dump may hold one data source).
        tokenizer: counts response tokens (``len(encode(output))``); None leaves lengths NaN.
        sampling: the ``val_kwargs`` used (recorded in the manifest; VERL does not dump them).
        model: checkpoint name for the manifest.
    Returns:
        An :class:`EvalResult` whose manifest names the dump and its sha256.
    Raises:
        VerlDumpError: prompts with different sample counts, or malformed rows.
    """
    rows = read_verl_dump(path)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row["input"]), []).append(row)
    sizes = {len(g) for g in groups.values()}
    if len(sizes) > 1:
        raise VerlDumpError(f"{path}: prompts have different sample counts {sorted(sizes)}")
    trajs, verdicts = [], []
    for g in groups.values():
        trajs.append([{
            "response_len": len(tokenizer.encode(str(r["output"]), add_special_tokens=False)) if tokenizer else float("nan"),
            "tool_calls": r.get("tool_calls", 0), "tool_errors": r.get("tool_errors", 0),
            "truncated": bool(r.get("truncated", False))} for r in g])
        verdicts.append([{"correct": float(r["score"]) > 0,
                          "extracted": r.get("pred") if r.get("pred") is not None else extract_final_answer(str(r["output"]))}
                         for r in g])
    ids = [f"{i}" for i in range(len(groups))]
    result = score_samples(benchmark, ids, trajs, verdicts, bootstrap_samples=bootstrap_samples, seed=seed)
    result.manifest = build_manifest(model=model or "unknown", backend="verl validation dump",
                                     sampling=dict(sampling or {}), seed=None, data_files=[path],
                                     extra={"benchmark": benchmark, "step": rows[0].get("step") if rows else None})
    return result
