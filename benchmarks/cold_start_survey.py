"""How often the cold start learns the tiny task (issue #45): the registered precondition over many seeds.

Usage::

    .venv/bin/python -m kit reproduce --until 02 --seeds 201-220 --run survey   # the cold start alone, 20 seeds
    .venv/bin/python benchmarks/cold_start_survey.py reports/tiny/survey-s*

For each run folder: the cold start's held-out sampled accuracy, greedy accuracy and last loss (its
``sft/summary.json`` and ``sft/metrics.jsonl``) and whether it meets each precondition of
``kit/reference/claims.yaml`` (:func:`kit.claims.evaluate_preconditions`). The seeds are chosen before the
survey and every one is reported: a recipe change is judged on this pass rate, never on a claim.
Last line: ``cold_start_survey seeds=<n> passed=<k> rate=<k/n>`` (only runs whose cold start finished).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.claims import RunDirs, evaluate_preconditions  # noqa: E402


def survey_row(run: Path) -> dict | None:
    """One run folder's cold start: ``{run, sampled, greedy, last_loss, passed, reasons}``; None when its
    cold start has not finished (no ``sft/summary.json``)."""
    summary = run / "sft" / "summary.json"
    if not summary.exists():
        return None
    s = json.loads(summary.read_text())
    loss = None
    metrics = run / "sft" / "metrics.jsonl"
    if metrics.exists():
        lines = [ln for ln in metrics.read_text().splitlines() if ln.strip()]
        loss = json.loads(lines[-1]).get("loss") if lines else None
    pre = evaluate_preconditions(RunDirs.under(run))
    return {"run": run.name, "sampled": s.get("heldout_sampled_reward"), "greedy": s.get("heldout_accuracy"),
            "last_loss": loss, "passed": all(p["passed"] for p in pre.values()),
            "reasons": "; ".join(p["reason"] for p in pre.values() if not p["passed"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders (reports/tiny/<run>)")
    args = ap.parse_args(argv)
    rows = [r for r in (survey_row(Path(p)) for p in sorted(args.runs)) if r is not None]
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    for r in rows:
        print(f"{r['run']:>16}  sampled {fmt(r['sampled'])}  greedy {fmt(r['greedy'])}  last loss {fmt(r['last_loss'])}  "
              f"{'passed' if r['passed'] else 'FAILED: ' + r['reasons']}")
    k = sum(r["passed"] for r in rows)
    print(f"cold_start_survey seeds={len(rows)} passed={k} rate={k / len(rows) if rows else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
