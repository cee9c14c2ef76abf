"""The report's Tables 3-6 with this run's numbers beside the published ones.

Each ``tableN_*`` function returns a DataFrame: one row per benchmark, a first column
``reproduced: <profile>, <model>`` with what this run measured, then one ``paper: <model>`` column
per model the report lists. ``df.attrs["caption"]`` names the profile, the model and the sampling
protocol, so a tiny run is never mistaken for the paper's model. Absent values (not measured here,
or not published) stay NaN in the DataFrame, an empty cell in CSV and an em dash in LaTeX and
HTML: never zero.

Published numbers come from ``paper_values.yaml`` (rStar2-Agent report, arXiv 2508.20722):
the copy shipped in ``kit/reference/``, or the file ``KIT_REFERENCE_FILE`` names.

Reproduced values come from the evaluation run directory as a mapping
``{benchmark: {"accuracy": fraction in [0, 1], "response_len_mean": tokens, "n_samples": int}}``
(see :func:`eval_summary`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

BUNDLED_REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "paper_values.yaml"  # kit/reference/
ABSENT = "\u2014"  # em dash, how an absent value is shown

BENCH_LABEL = {"math500": "MATH-500", "aime24": "AIME24", "aime25": "AIME25", "hmmt25": "HMMT25",
               "gpqa_diamond": "GPQA-Diamond", "bfcl_v3": "BFCL v3", "ifeval": "IFEval",
               "arena_hard": "Arena-Hard"}
EVAL_FILE_NAME = {"gpqa_diamond": "gpqa"}  # kit.eval's benchmark names where they differ
MODEL_LABEL = {
    "rstar2_agent_14b": "rStar2-Agent-14B", "deepseek_r1_671b": "DeepSeek-R1 (671B)",
    "o3_mini_medium": "o3-mini (medium)", "claude_opus_4_think": "Claude-Opus-4.0 (think)",
    "qwen3_14b": "Qwen3-14B", "deepseek_r1_zero_671b": "DeepSeek-R1-Zero (671B)",
    "sft_checkpoint": "rStar2-Agent SFT checkpoint", "deepseek_v3": "DeepSeek-V3",
    "rstar2_agent_32b_two_stages_700_steps": "rStar2-Agent-32B (2 stages, 700 steps)",
    "retool_32b_400_steps": "ReTool-32B (400 steps)", "dapo_qwen_32b_5000_steps": "DAPO-Qwen-32B (5000 steps)",
}


class ReferenceError(ValueError):
    """The paper-values file is missing or lacks a section a table needs."""


@dataclass(frozen=True)
class RunInfo:
    """What produced the reproduced column: named in every caption.

    Attributes:
        profile: kit profile name (``tiny``, ``smoke``, ``paper-14b``...).
        model: human-readable model name (e.g. ``tiny Qwen3, 0.45M params, from scratch``).
        n_samples: samples per problem behind avg@n.
        temperature: sampling temperature of the evaluation.
        notes: appended to every caption (e.g. problems skipped because the prompt is too long).
    """

    profile: str
    model: str
    n_samples: int | None = None
    temperature: float | None = None
    notes: str = ""

    @property
    def column(self) -> str:
        return f"reproduced: {self.profile}, {self.model}"

    def protocol(self) -> str:
        parts = []
        if self.n_samples:
            parts.append(f"avg@{self.n_samples}")
        if self.temperature is not None:
            parts.append(f"temperature {self.temperature:g}")
        return ", ".join(parts)


def reference_path() -> Path:
    """The paper-values file used: ``KIT_REFERENCE_FILE``, else the bundled copy."""
    env = os.environ.get("KIT_REFERENCE_FILE")
    return Path(env) if env else BUNDLED_REFERENCE


def paper_values(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Load the published values (``rstar2_agent`` and ``retool`` sections) as nested dicts.

    Raises:
        ReferenceError: the file is missing or has no ``rstar2_agent`` section.
    """
    p = Path(path) if path is not None else reference_path()
    if not p.exists():
        raise ReferenceError(f"paper values file not found: {p} (set KIT_REFERENCE_FILE)")
    data = yaml.safe_load(p.read_text())
    if not isinstance(data, dict) or "rstar2_agent" not in data:
        raise ReferenceError(f"{p}: expected a mapping with an 'rstar2_agent' section")
    return data


def _section(ref: Mapping[str, Any], key: str) -> Mapping[str, Mapping[str, float]]:
    try:
        return ref["rstar2_agent"][key]
    except (KeyError, TypeError):
        raise ReferenceError(f"paper values lack rstar2_agent.{key}") from None


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _build(benchmarks: list[str], reproduced: Mapping[str, float | None], run: RunInfo,
           published: Mapping[str, Mapping[str, float]], caption: str, name: str) -> pd.DataFrame:
    data = {run.column: [_num(reproduced.get(b)) for b in benchmarks]}
    for model, vals in published.items():
        data[f"paper: {MODEL_LABEL.get(model, model)}"] = [_num((vals or {}).get(b)) for b in benchmarks]
    df = pd.DataFrame(data, index=pd.Index([BENCH_LABEL.get(b, b) for b in benchmarks], name="benchmark"))
    df.attrs["caption"] = caption
    df.attrs["name"] = name
    return df


def _pct(summary: Mapping[str, Mapping[str, Any]], key: str = "accuracy") -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for bench, vals in summary.items():
        v = _num((vals or {}).get(key))
        out[bench] = None if math.isnan(v) else 100.0 * v
    return out


def _caption(title: str, run: RunInfo, unit: str) -> str:
    proto = run.protocol()
    return (f"{title} ({unit}). Reproduced column: profile '{run.profile}', model {run.model}"
            f"{', ' + proto if proto else ''}. Paper columns: published values from the rStar2-Agent report "
            f"(arXiv 2508.20722) for other models, shown for reference only. {ABSENT} = absent "
            f"(not measured in this run, or not published).{' ' + run.notes if run.notes else ''}")


def table3_math(summary: Mapping[str, Mapping[str, Any]], run: RunInfo, ref: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Table 3: math accuracy (avg@n, percent) on MATH-500, AIME24, AIME25, HMMT25.

    Args:
        summary: ``{benchmark: {"accuracy": fraction}}`` from :func:`eval_summary`.
        run: the profile and model that produced ``summary``.
        ref: paper values (default :func:`paper_values`).
    Raises:
        ReferenceError: the paper values lack ``table3_math``.
    """
    ref = ref if ref is not None else paper_values()
    return _build(["math500", "aime24", "aime25", "hmmt25"], _pct(summary), run, _section(ref, "table3_math"),
                  _caption("Table 3: math reasoning accuracy", run, "%"), "table3_math")


def table4_response_tokens(summary: Mapping[str, Mapping[str, Any]], run: RunInfo,
                           ref: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Table 4: mean response length in tokens (all turns, tool responses included as in the report)."""
    ref = ref if ref is not None else paper_values()
    lens = {b: (v or {}).get("response_len_mean") for b, v in summary.items()}
    return _build(["aime24", "aime25", "math500", "hmmt25"], lens, run, _section(ref, "table4_response_tokens"),
                  _caption("Table 4: mean response length", run, "tokens"), "table4_response_tokens")


def table5_generalization(summary: Mapping[str, Mapping[str, Any]], run: RunInfo,
                          ref: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Table 5: GPQA-Diamond, BFCL v3, IFEval, Arena-Hard (percent / score).

    The kit evaluates GPQA-Diamond only when the user supplies the file; it does not run BFCL,
    IFEval or Arena-Hard, so those reproduced cells are absent.
    """
    ref = ref if ref is not None else paper_values()
    return _build(["gpqa_diamond", "bfcl_v3", "ifeval", "arena_hard"], _pct(summary), run,
                  _section(ref, "table5_generalization"),
                  _caption("Table 5: generalization beyond math", run, "%"), "table5_generalization")


def table6_32b(summary: Mapping[str, Mapping[str, Any]], run: RunInfo, ref: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Table 6: the 32B comparison (Qwen2.5-32B-Instruct base): MATH-500, AIME24, AIME25 (percent)."""
    ref = ref if ref is not None else paper_values()
    return _build(["math500", "aime24", "aime25"], _pct(summary), run, _section(ref, "table6_32b"),
                  _caption("Table 6: 32B models", run, "%"), "table6_32b")


ALL_TABLES = (table3_math, table4_response_tokens, table5_generalization, table6_32b)


# --------------------------------------------------------------------------- writing and showing


def to_latex(df: pd.DataFrame, decimals: int = 1, *, notebook: bool = False) -> str:
    """LaTeX ``table`` (booktabs) with the caption from ``df.attrs``; absent cells as an em dash.

    Laid out like the paper's tables: one row per model (the reproduced row first), one column
    per benchmark. ``notebook=True`` re-enables captions, which nbconvert's template hides.
    """
    wide = df.T
    wide.index.name = None
    styler = wide.style.format(na_rep="---", precision=decimals, escape="latex")
    styler = styler.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    tex = styler.to_latex(caption=_latex_text(df.attrs.get("caption", "")), hrules=True, position="H",
                          position_float="centering", label=f"tab:{df.attrs.get('name', 'table')}")
    # shrink (never enlarge) wide tables to the line width; adjustbox is loaded by nbconvert's template
    start, end = tex.index("\\begin{tabular}"), tex.index("\\end{tabular}") + len("\\end{tabular}")
    tex = tex[:start] + "\\begin{adjustbox}{max width=\\linewidth}\n" + tex[start:end] + "\n\\end{adjustbox}" + tex[end:]
    if notebook:
        tex = tex.replace("\\centering\n", "\\centering\n\\captionsetup{format=plain,font=small}\n", 1)
        tex = tex.replace("\\caption{", "\\caption*{", 1)  # the caption already says "Table N"
    return tex


#: LaTeX for the characters that are special in running text (captions here, trajectories in
#: :class:`kit.chain.TrajectoryView`).
LATEX_SPECIALS = {**{c: "\\" + c for c in "&%$#_{}"}, "\\": r"\textbackslash{}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}"}


def _latex_text(text: str) -> str:
    """Escape LaTeX specials in plain text (captions); the absent mark becomes an em dash."""
    return "".join("---" if ch == ABSENT else LATEX_SPECIALS.get(ch, ch) for ch in text)


def write_table(df: pd.DataFrame, out_dir: str | os.PathLike, name: str | None = None) -> tuple[Path, Path]:
    """Write ``df`` as ``<name>.csv`` (absent = empty cell) and ``<name>.tex``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or df.attrs.get("name", "table")
    csv = out / f"{name}.csv"
    df.to_csv(csv, na_rep="", float_format="%.6g")  # keeps published values such as 14246.8 exact
    tex = out / f"{name}.tex"
    tex.write_text(to_latex(df) + "\n")
    return csv, tex


def show(df: pd.DataFrame):
    """A display object for notebooks: HTML in JupyterLab, LaTeX in the PDF, with the caption."""
    html = df.style.format(na_rep=ABSENT, precision=1).set_caption(df.attrs.get("caption", "")).to_html()

    class _Table:
        def _repr_html_(self):
            return html

        def _repr_latex_(self):
            return to_latex(df, notebook=True)

        def __repr__(self):
            return df.attrs.get("caption", "") + "\n" + df.to_string(na_rep=ABSENT, float_format="%.1f")

    return _Table()


# --------------------------------------------------------------------------- inputs


def eval_summary(eval_dir: str | os.PathLike, tag: str = "") -> dict[str, dict[str, Any]]:
    """Headline numbers of the ``<benchmark>[_<tag>].json`` files written by ``kit.eval.evaluate.save_result``.

    Args:
        eval_dir: the evaluation run directory (its ``eval/`` subfolder is used when present).
        tag: the checkpoint tag of the files (``""`` for untagged ones).
    Returns:
        ``{benchmark: {"accuracy": avg@n as a fraction, "response_len_mean": tokens,
        "n_samples": n, "n_problems": N, "temperature": T, "model": manifest model}}``.
    Raises:
        FileNotFoundError: the folder does not exist or holds no result for ``tag``.
        ValueError: a result file lacks ``avg_at_n`` (the message names the file).
    """
    base = Path(eval_dir)
    if (base / "eval").is_dir():
        base = base / "eval"
    if not base.is_dir():
        raise FileNotFoundError(f"evaluation folder not found: {base}")
    suffix = f"_{tag}" if tag else ""
    out: dict[str, dict[str, Any]] = {}
    for bench in BENCH_LABEL:
        p = base / f"{EVAL_FILE_NAME.get(bench, bench)}{suffix}.json"
        if not p.exists():
            continue
        d = json.loads(p.read_text())
        if "avg_at_n" not in d:
            raise ValueError(f"{p}: no 'avg_at_n' (not a kit.eval result file)")
        man = d.get("manifest") or {}
        out[bench] = {"accuracy": d["avg_at_n"], "response_len_mean": d.get("response_tokens_mean"),
                      "n_samples": d.get("n_samples"), "n_problems": d.get("n_problems"),
                      "temperature": (man.get("sampling") or {}).get("temperature"), "model": man.get("model"),
                      "benchmark_size": man.get("benchmark_size", d.get("n_problems")),
                      "skipped": len(man.get("skipped_prompt_too_long") or [])}
    if not out:
        raise FileNotFoundError(f"no evaluation results{' tagged ' + repr(tag) if tag else ''} in {base}")
    return out


def describe_model(name_or_path: str, n_params: int | None = None) -> str:
    """Caption text for the model: ``tiny`` becomes "tiny Qwen3 from scratch (0.45M params)"."""
    if name_or_path == "tiny":
        size = f" ({n_params / 1e6:.2f}M params)" if n_params else ""
        return f"tiny Qwen3 trained from scratch{size}"
    return name_or_path


def run_info(profile: str, model: str, summary: Mapping[str, Mapping[str, Any]]) -> RunInfo:
    """:class:`RunInfo` for ``summary`` (from :func:`eval_summary`): n and temperature taken from
    its results when they agree across benchmarks, else left out of the caption."""
    ns = {v.get("n_samples") for v in summary.values()}
    ts = {v.get("temperature") for v in summary.values()}
    sizes = [f"{BENCH_LABEL.get(b, b)} {v['n_problems']} of {v['benchmark_size']}" for b, v in summary.items()
             if v.get("n_problems") is not None and v.get("benchmark_size") not in (None, v.get("n_problems"))]
    skipped = [f"{BENCH_LABEL.get(b, b)} {v['skipped']}" for b, v in summary.items() if v.get("skipped")]
    notes = []
    if sizes:
        notes.append("Reproduced values cover the first problems only: " + ", ".join(sizes) + ".")
    if skipped:
        notes.append("Problems skipped because the prompt exceeds the model's context: " + ", ".join(skipped) + ".")
    return RunInfo(profile, model, ns.pop() if len(ns) == 1 else None, ts.pop() if len(ts) == 1 else None,
                   " ".join(notes))
