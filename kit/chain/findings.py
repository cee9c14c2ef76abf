"""What a training notebook's run showed, as Markdown computed from its own files (issue #31).

Each training notebook ends with one of these, so its last cell says what *this* run did (the numbers
and their direction), never a fixed sentence. Read from the run folder the notebook wrote:

- :func:`sft_findings`: ``sft/metrics.jsonl`` (loss per step) and ``sft/summary.json`` (held-out scores);
- :func:`stage_findings`: an RL stage's ``metrics.jsonl`` (accuracy, response length, truncation, tool
  use, RoC's tool-error ratio among correct trajectories before and after its selection) and
  ``summary.json`` (held-out sampled reward);
- :func:`ablation_findings`: every arm's ``metrics.jsonl`` under the ablation folder, per algorithm
  over its seeds (Figure 4's and Figure 9's quantities);
- :func:`thirds`, :func:`column_mean`, :func:`bullets`, :func:`fmt`, :func:`plural`: the helpers a study's own
  findings use (``kit.studies.retool.chain.retool_findings``).

"First" and "last" are the means over the first and the last third of the steps (at least one step
each), the same reading as the claims' first and last windows, without their intervals: the verdicts
with intervals are notebook 20's (:mod:`kit.claims`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from kit.report.figures import collect_metrics, read_metrics


def thirds(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The first and last third of ``df``'s rows ordered by ``step`` (at least one row each) and its width."""
    df = df.sort_values("step") if "step" in df else df
    k = max(1, len(df) // 3)
    return df.head(k), df.tail(k), k


def column_mean(df: pd.DataFrame, key: str) -> float:
    """The mean of ``df[key]`` as numbers (non-numbers skipped); NaN when the column is absent or empty."""
    if key not in df:
        return math.nan
    v = pd.to_numeric(df[key], errors="coerce").mean()
    return float(v) if pd.notna(v) else math.nan


def _change(name: str, a: float, b: float, digits: int = 3, unit: str = "") -> str | None:
    """``name went from a to b (rose by d)``, or None where either end is missing."""
    if math.isnan(a) or math.isnan(b):
        return None
    d = b - a
    way = "rose" if d > 0 else "fell" if d < 0 else "did not move"
    by = f" by {abs(d):.{digits}f}{unit}" if d else ""
    return f"{name} went from {a:.{digits}f}{unit} to {b:.{digits}f}{unit} ({way}{by})"


def _summary(run_dir: Path) -> dict[str, Any]:
    p = run_dir / "summary.json"
    if not p.is_file():
        return {}
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc.msg})") from exc
    return data if isinstance(data, dict) else {}


def _number(d: dict[str, Any], key: str) -> float:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else math.nan


def plural(k: int, word: str) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def bullets(title: str, lines: list[str | None]) -> str:
    """Markdown: ``title`` in bold, then one bullet per line that is not None."""
    return "\n".join([f"**{title}**", "", *(f"- {line}." for line in lines if line)])


def sft_findings(run_dir: str | os.PathLike) -> str:
    """Markdown: what the cold start of ``run_dir`` (notebook 02's folder) did.

    Reads ``metrics.jsonl`` (``loss`` per step) and, where present, ``summary.json``
    (``heldout_accuracy``: greedy, tool allowed; ``heldout_sampled_reward``: T = 1; ``heldout_tool_rate``).
    A cold start this run did not train (the VERL runtime's ``sft_checkpoint``: ``summary.json`` with
    ``engine = "linked"`` and no ``metrics.jsonl``) is said as such, naming the linked policy.

    Raises:
        kit.metrics.MetricsError: ``metrics.jsonl`` is malformed (names the file and line), or it is
            missing and no ``summary.json`` says the policy was linked.
    """
    run_dir = Path(run_dir)
    s = _summary(run_dir)
    if not (run_dir / "metrics.jsonl").exists() and s.get("engine") == "linked":
        return bullets("What this run showed", [
            f"This run trained no cold start: its policy is linked from `{s.get('sft_checkpoint', '?')}` "
            "(`summary.json`), so there are no SFT steps to read here"])
    df = read_metrics(run_dir / "metrics.jsonl")
    first, last, k = thirds(df)
    acc, sampled, tool = (_number(s, key) for key in ("heldout_accuracy", "heldout_sampled_reward", "heldout_tool_rate"))
    return bullets(f"What this run showed ({plural(len(df), 'SFT step')}; first and last {plural(k, 'step')})", [
        _change("The training loss", column_mean(first, "loss"), column_mean(last, "loss")),
        None if math.isnan(acc) else (f"On held-out task problems the policy answers {acc:.1%} correctly greedily "
                                      f"(tool allowed) and {sampled:.1%} when sampled at T = 1, the reward RL starts from"),
        None if math.isnan(tool) else f"It calls the tool on {tool:.0%} of held-out problems",
    ])


def stage_findings(run_dir: str | os.PathLike) -> str:
    """Markdown: what one RL stage (``run_dir``, notebooks 03-05) did, from its ``metrics.jsonl`` and
    ``summary.json``: training accuracy, response length, truncation, tool calls per trajectory, RoC's
    tool-error ratio among correct trajectories before (the 2G sampled) and after (the G kept) its
    selection, and the held-out sampled reward at the stage's end.

    Raises:
        kit.metrics.MetricsError: ``metrics.jsonl`` is missing or malformed (names the file and line).
    """
    run_dir = Path(run_dir)
    df = read_metrics(run_dir / "metrics.jsonl")
    first, last, k = thirds(df)
    lines: list[str | None] = [
        _change("Training accuracy (the fraction of sampled trajectories the verifier accepts)",
                column_mean(first, "accuracy"), column_mean(last, "accuracy")),
        _change("The mean response length", column_mean(first, "response_len_mean"), column_mean(last, "response_len_mean"), 1,
                " tokens"),
        _change("The share of responses cut at the token budget", column_mean(first, "truncation_ratio"),
                column_mean(last, "truncation_ratio")),
        _change("Tool calls per trajectory", column_mean(first, "tool_calls_per_traj"), column_mean(last, "tool_calls_per_traj"), 2),
    ]
    before, after = column_mean(df, "tool_error_ratio_correct_before"), column_mean(df, "tool_error_ratio_correct_after")
    if not (math.isnan(before) or math.isnan(after)):
        lines.append(f"Over all steps, correct trajectories had a tool-error ratio of {before:.3f} as sampled and "
                     f"{after:.3f} among those RoC kept: the selection {'lowered' if after < before else 'did not lower'} "
                     "the errors the update learns from")
        lines.append(_change("The sampled tool-error ratio among correct trajectories",
                             column_mean(first, "tool_error_ratio_correct_before"), column_mean(last, "tool_error_ratio_correct_before")))
    else:
        lines.append("No step had a correct trajectory that called the tool, so RoC's tool-error ratio has no value here")
    s = _summary(run_dir)
    sampled = _number(s, "heldout_sampled_reward")
    if not math.isnan(sampled):
        lines.append(f"At the stage's end the held-out sampled reward (T = 1, the RL objective) is {sampled:.3f}")
    title = f"What this run showed ({plural(len(df), 'step')}; first and last {plural(k, 'step')})"
    if len(df) < 3:
        title += ": too few steps to read a trend"
    return bullets(title, lines)


def ablation_findings(run_dir: str | os.PathLike) -> str:
    """Markdown: GRPO against GRPO-RoC in the ablation folder ``run_dir`` (notebook 06): per algorithm, the
    mean over seeds of each arm's last-third mean of the sampled tool-error ratio among correct
    trajectories (Figure 4), accuracy and response length (Figure 9), and on how many seeds RoC's
    tool-error ratio ended below GRPO's.

    Raises:
        kit.metrics.MetricsError: no ``metrics.jsonl`` under ``run_dir``, or a malformed one.
        ValueError: the metrics lack ``algorithm`` or ``seed`` columns.
    """
    df = collect_metrics(run_dir)
    if not {"algorithm", "seed"} <= set(df.columns):
        raise ValueError(f"{run_dir}: ablation metrics need 'algorithm' and 'seed' columns")
    ends: dict[str, dict[int, dict[str, float]]] = {}
    for (alg, seed), arm in df.groupby(["algorithm", "seed"]):
        _, last, _ = thirds(arm)
        ends.setdefault(str(alg), {})[int(seed)] = {key: column_mean(last, key) for key in (
            "tool_error_ratio_correct_before", "accuracy", "response_len_mean")}
    lines: list[str | None] = []
    for alg in sorted(ends):
        arms = pd.DataFrame(ends[alg]).T
        lines.append(f"`{alg}` ({plural(len(arms), 'seed')}, last third of each arm's steps): tool-error ratio among correct "
                     f"trajectories {fmt(arms['tool_error_ratio_correct_before'].mean())}, accuracy "
                     f"{fmt(arms['accuracy'].mean())}, response length {fmt(arms['response_len_mean'].mean(), 1)} tokens")
    if {"grpo", "grpo_roc"} <= ends.keys():
        seeds = sorted(ends["grpo"].keys() & ends["grpo_roc"].keys())
        key = "tool_error_ratio_correct_before"
        diffs = [ends["grpo"][s][key] - ends["grpo_roc"][s][key] for s in seeds]
        diffs = [d for d in diffs if not math.isnan(d)]
        if diffs:
            lower = sum(d > 0 for d in diffs)
            lines.append(f"RoC ended with the lower tool-error ratio on {lower} of {len(diffs)} seeds "
                         f"(GRPO minus RoC, mean {sum(diffs) / len(diffs):+.3f}); notebook 20 gives the interval and the verdict")
    return bullets("What this run showed", lines)


def fmt(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` decimals, or an em dash for NaN."""
    return "—" if pd.isna(v) else f"{v:.{digits}f}"
