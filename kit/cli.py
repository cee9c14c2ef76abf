"""Command line: ``python -m kit <command>`` (what the Makefile calls)."""

from __future__ import annotations

import argparse

from kit import pipeline, report


def _reproduce(args: argparse.Namespace) -> int:
    argv = ["run", "--profile", args.profile, "--run", args.run, "--seed", str(args.seed),
            *(["--force"] if args.force else []), *(["--no-overlap"] if args.no_overlap else [])]
    argv += [*(["--until", args.until] if args.until else []), *[f"--set={s}" for s in args.set]]
    argv += ["--dry-run"] if args.dry_run else []
    argv += ["--cell-timeout", str(args.cell_timeout)] if args.cell_timeout is not None else []
    return pipeline.main(argv)


def _report(args: argparse.Namespace) -> int:
    return report.main(["--profile", args.profile, "--run", args.run, *(["--allow-failed"] if args.allow_failed else [])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kit", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("reproduce", help="run the notebook series through papermill")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--run", default="main")
    p.add_argument("--seed", type=int, default=0,
                   help="the run's seed (every notebook; the ablation's seeds are offsets from it)")
    p.add_argument("--force", action="store_true", help="re-run notebooks that already finished")
    p.add_argument("--no-overlap", action="store_true",
                   help="run strictly in order (06's training does not run in the background beside 03-08)")
    p.add_argument("--until", default=None, metavar="NN", help="stop after the notebook whose name starts with NN")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--cell-timeout", type=int, default=None, metavar="SECONDS",
                   help="stop a cell that runs longer than this (default: the profile's limit; 0 = none)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run (paper profiles: the exact VERL and merge commands), run nothing")
    p.set_defaults(fn=_reproduce)
    r = sub.add_parser("report", help="build the report PDF of a run")
    r.add_argument("--profile", default="tiny")
    r.add_argument("--run", default="main")
    r.add_argument("--allow-failed", action="store_true",
                   help="build the report of a run with failed notebooks; its first page lists them")
    r.set_defaults(fn=_report)
    args = parser.parse_args(argv)
    return args.fn(args)
