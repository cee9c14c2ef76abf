"""The kit's one command line: ``python -m kit <verb>`` (what the Makefile and the README call).

Verbs (``python -m kit <verb> --help`` explains each option)::

    reproduce     run the notebook series into reports/<profile>/<run>/, then build its report.pdf
    report        build the report PDF of a run
    launch        print and run the VERL command of one stage on a Ray cluster (paper scale)
    prepare-data  write a paper run's training and validation parquet files
    serve         serve a policy folder on loopback as an OpenAI-compatible /v1/completions
    selftest      check the code sandbox: isolation, limits, semantics, throughput
    claims        several runs' verdicts side by side (CSV)
    compare       are two run folders the same run? result files compared byte for byte
    config        print a profile's resolved config with each key's help text

Examples::

    python -m kit reproduce --profile tiny --run main
    python -m kit reproduce --profile paper-14b --dry-run
    python -m kit prepare-data --profile paper-14b
    python -m kit launch --profile paper-14b --stage stage1
    python -m kit config --profile tiny stages

Each verb's options are declared once, here; the work is done by the functions of
:mod:`kit.pipeline` (:func:`kit.pipeline.reproduce`), :mod:`kit.report`, :mod:`kit.runtime.paper`,
:mod:`kit.rollout.serve`, :mod:`kit.sandbox.selftest` and :mod:`kit.config.keyhelp`, imported only
when their verb runs (``--help`` and ``config`` load neither torch nor papermill). Exit codes: 0 ok,
1 the work failed (a notebook, the report; ``compare``: the runs differ), 2 bad arguments (the message names the option, key or
file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from kit.config import ConfigError, SandboxConfig, available_profiles, load
from kit.config.keyhelp import config_rows, format_rows
from kit.studies import KIT_SECTION, STUDIES


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x,y"]`` -> ``{"a.b": 1, "c": "x,y"}``: the ``--set`` overrides; values are JSON
    when they parse as JSON, else strings.

    Raises:
        ValueError: an item without ``=`` (the message quotes it).
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


# ---- the verbs: each imports what it runs -------------------------------------------------------------


def _reproduce(a: argparse.Namespace, argv: list[str]) -> int:
    from kit import pipeline  # papermill, nbclient and the notebooks' kernels: only for this verb

    options = dict(overrides=parse_sets(a.set), force=a.force, log_output=a.log_output, cell_timeout=a.cell_timeout,
                   until=a.until, with_report=not a.no_report, overlap=not a.no_overlap, dry_run=a.dry_run,
                   reports_root=a.reports_root, command=argv,
                   only=None if a.only is None else [x.strip() for x in a.only.split(",")])
    if a.seeds is None and (a.ray or a.ray_cpus):
        print("kit reproduce: --ray runs several seeds side by side; give them with --seeds", file=sys.stderr)
        return 2
    if a.ray_cpus is not None and (a.ray_cpus < 1 or a.ray != "local"):
        print("kit reproduce: --ray-cpus is the CPU count of a local Ray head: give it with --ray local, "
              "at least 1", file=sys.stderr)
        return 2
    if a.seeds is None:
        return pipeline.reproduce(a.profile, a.run, seed=0 if a.seed is None else a.seed, **options)
    from kit.pipeline.seeds import parse_seeds, reproduce_seeds  # the claims' pooling: only with --seeds

    if a.seed is not None:
        print("kit reproduce: give --seed or --seeds, not both", file=sys.stderr)
        return 2
    try:
        seeds = parse_seeds(a.seeds)
    except ValueError as exc:
        print(f"kit reproduce: {exc}", file=sys.stderr)
        return 2
    return reproduce_seeds(pipeline.reproduce, a.profile, a.run, seeds, pool=not (a.until or a.dry_run), ray=a.ray,
                           ray_cpus=a.ray_cpus, **options)


def _report(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.report import builder  # nbconvert, matplotlib: only for this verb

    try:
        pdf = builder.build_report(builder.Layout.for_run(a.profile, a.run, a.reports_root), allow_failed=a.allow_failed)
    except builder.ReportError as exc:
        print(f"kit report: {exc}", file=sys.stderr)
        return 1
    print(f"kit report: wrote {pdf}")
    return 0


def _launch(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.runtime import paper as recipe  # kit.bridge (VERL, Hydra): only for the paper-scale verbs

    if a.smoke:
        return recipe.smoke(a.run_dir or recipe.SMOKE_RUN_DIR, a.n_gpus_per_node or 1, a.dry_run)
    return recipe.launch(a.profile, a.stage, run_dir=a.run_dir, model_path=a.model_path, train_files=a.train_files,
                         val_files=a.val_files, n_gpus_per_node=a.n_gpus_per_node or 8, nnodes=a.nnodes,
                         rollout_tp=a.rollout_tp, extra_overrides=a.overrides, dry_run=a.dry_run,
                         allow_local_ray=a.allow_local_ray)


def _prepare_data(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.runtime import paper as recipe  # kit.bridge (VERL, Hydra): only for the paper-scale verbs

    for name, path in recipe.prepare_data(a.profile, a.run_dir).items():
        print(f"{name}: {path}")
    return 0


def _serve(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.rollout import serve  # torch, FastAPI, uvicorn: only for this verb

    body = serve.MAX_BODY_BYTES if a.max_body_bytes is None else a.max_body_bytes
    return serve.run_server(a.policy, host=a.host, port=a.port, model_name=a.model_name, slots=a.slots, seed=a.seed,
                            threads=a.threads, max_body_bytes=body,
                            port_file=a.port_file, parent_pid=a.parent_pid)


def _selftest(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.sandbox.selftest import main as selftest  # the sandbox's pool and workers: only for this verb

    return selftest(SandboxConfig(isolation=a.isolation, num_workers=a.workers))


def _claims(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.claims import ClaimsError  # reads claims.json files only
    from kit.claims.over_seeds import seeds_table, write_csv  # reads claims.json files only

    sections = {KIT_SECTION, *(s.section for s in STUDIES)}
    if a.section is None:
        a.section = "all" if a.runs[0] == "pool" else KIT_SECTION
    if a.section != "all" and a.section not in sections:
        print(f"kit claims: --section {a.section!r} is no paper's; one of {', '.join(sorted(sections))} or all",
              file=sys.stderr)
        return 2
    if a.runs[0] != "pool":
        write_csv(seeds_table(a.runs, None if a.section == "all" else a.section), a.out)
        return 0
    from kit.claims import pool  # scipy's bootstrap; matplotlib for the page

    try:
        doc = pool.pool_runs(a.runs[1:], section=None if a.section == "all" else a.section)
    except ClaimsError as exc:
        print(f"kit claims pool: {exc}", file=sys.stderr)
        return 2
    for note in doc["notes"]:
        print(f"kit claims pool: {note}", file=sys.stderr)
    rows = pool.table_rows(doc)
    if a.section != "all":
        rows = rows[:1] + [r for r in rows[1:] if r[0] == a.section]
    write_csv(rows, None)
    if a.out:
        try:
            paths = pool.write_pooled(doc, a.out)
        except ClaimsError as exc:  # the table above is printed already
            print(f"kit claims pool: {exc}", file=sys.stderr)
            return 2
        for path in paths:
            print(f"kit claims pool: wrote {path}", file=sys.stderr)
    return 0


def _compare(a: argparse.Namespace, argv: list[str]) -> int:
    from kit.pipeline.compare import compare_runs, run_notes  # reads files only

    diffs = compare_runs(a.run_a, a.run_b)
    for note in run_notes(a.run_a, a.run_b):
        print(f"note: {note}")
    for d in diffs:
        print(f"{d.path}: {d.what}")
    print(f"{len(diffs)} result files differ" if diffs else "same results: every result file is equal (time fields stripped)")
    return 1 if diffs else 0


def _config(a: argparse.Namespace, argv: list[str]) -> int:
    cfg = load(a.profile, parse_sets(a.set), write=False)
    print(format_rows(config_rows(cfg, a.profile, a.key or "")))
    return 0


# ---- the parser ---------------------------------------------------------------------------------------


def _profile(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--profile", default=default,
                   help=f"a profile of kit/profiles/ ({', '.join(available_profiles())}; default {default})")


def _run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default="main", help="the run's name: its folder is reports/<profile>/<run>/ (default main)")
    p.add_argument("--reports-root", default=None, help=argparse.SUPPRESS)  # tests: another folder than reports/


def _sets(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. --set rollout.max_response_tokens=64 (repeatable; values are JSON "
                        "when they parse as JSON; `python -m kit config` lists the keys)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m kit``: one sub-parser per verb, each option declared once."""
    parser = argparse.ArgumentParser(prog="python -m kit",
                                     description="The rStar2-Agent reproducibility kit: one verb per job.",
                                     epilog="`python -m kit <verb> --help` explains the verb's options.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="<verb>", title="verbs")

    def verb(name: str, fn: Any, summary: str, description: str = "") -> argparse.ArgumentParser:
        # no abbreviations: a verb's arguments are re-run as given (each seed's series, the VERL CPU session), and
        # an abbreviated --ray-c would survive into the seed's command where --ray-cpus is stripped
        p = sub.add_parser(name, help=summary, description=description or summary, allow_abbrev=False)
        p.set_defaults(fn=fn)
        return p

    p = verb("reproduce", _reproduce, "run the notebook series into reports/<profile>/<run>/, then build report.pdf",
             "Execute notebooks/NN_*.ipynb in order with papermill (finished notebooks with the same parameters and "
             "source are skipped), then build the report PDF. Exit 1 when a notebook failed (named with its "
             "cell), 2 on bad arguments or when runtime=verl cannot launch here.")
    _profile(p, "tiny")
    _run(p)
    p.add_argument("--seed", type=int, default=None,
                   help="the run's seed, for every notebook (the ablation's seeds are offsets from it; default 0)")
    p.add_argument("--seeds", default=None, metavar="SPEC",
                   help="run the series once per pipeline seed (a range or a list: 101-105, 1,3,7), one after another, "
                        "each into reports/<profile>/s<seed>/ (<run>-s<seed>/ with --run), then pool the claims over "
                        "them into reports/<profile>/pooled/ (kit.claims.pool); resumable like one run")
    p.add_argument("--ray", default=None, metavar="local|ADDRESS",
                   help="with --seeds: run the seeds side by side as Ray tasks, each asking for model.torch_threads "
                        "CPUs, into the same run folders, then pool. 'local': a Ray head the kit starts on this "
                        "machine in a private network namespace (loopback only) and stops at the end; an address "
                        "(host:port): an existing cluster whose nodes see this checkout at the same path")
    p.add_argument("--ray-cpus", type=int, default=None, metavar="N",
                   help="with --ray local: the CPUs the head announces (default: those this process may use)")
    _sets(p)
    p.add_argument("--force", action="store_true",
                   help="rerun notebooks that already finished; with --only, only the named ones (and the selected notebooks "
                        "that read their folders), not the ones they read: --only 08 --force keeps the cold start. "
                        "A finished notebook outside --only that reads them (20) reruns the next time it is selected "
                        "(a plain reproduce): every notebook records which finishing of its inputs it read")
    p.add_argument("--until", default=None, metavar="NN",
                   help="stop after the last notebook whose name starts with NN (03: stage 1; 05: every stage the "
                        "template runs as 05_rl_<stage>; 05_rl_stage3: that one); no report then")
    p.add_argument("--only", default=None, metavar="NN[,NN]",
                   help="run only the notebooks whose names start with these (11: Agent-R) and the ones whose folders "
                        "they read (11: 00, 02), then write claims.json over the folders the run holds (claims "
                        "without their files inconclusive) and no report. With --seeds: one study pooled over seeds "
                        "into <run>-only-<NN>-pooled/")
    p.add_argument("--cell-timeout", type=int, default=None, metavar="SECONDS",
                   help="stop a cell that runs longer than this and fail its notebook naming the cell "
                        "(default: the profile's limit, kit.pipeline.CELL_TIMEOUT_S; 0 = no limit)")
    p.add_argument("--no-overlap", action="store_true",
                   help="run strictly in order: 06's training does not run in the background beside 03-08")
    p.add_argument("--no-report", action="store_true", help="do not build report.pdf at the end")
    p.add_argument("--log-output", action="store_true", help="stream the cells' outputs to the terminal")
    p.add_argument("--dry-run", action="store_true",
                   help="print what each notebook would do (skipped: finished; runs: why; forced) with its parameters "
                        "(paper profiles: also the VERL and merge commands with the folders each stage reads and "
                        "writes) and run nothing")

    p = verb("report", _report, "build the report PDF of a run (reports/<profile>/<run>/report.pdf)")
    _profile(p, "tiny")
    _run(p)
    p.add_argument("--allow-failed", action="store_true",
                   help="build the report of a run with failed notebooks; its first page lists them")

    p = verb("launch", _launch, "print and run the VERL command of one RL stage on the Ray cluster (paper scale)",
             "Write run_dir/config.json and the agent-loop YAML, check the stage's parquet files, print the VERL "
             "command and run it on the Ray cluster it finds. Arguments after `--` are passed to VERL as Hydra "
             "overrides. With --smoke: two GRPO-RoC steps of the tiny model with SGLang on this machine's GPUs.")
    _profile(p, "paper-14b")
    p.add_argument("--stage", default="stage1", help="the RL stage to launch: a name of the profile's [[stages]] list (`python -m kit config --profile P stages` lists them)")
    p.add_argument("--run-dir", default=None,
                   help="the run's folder (default: the profile's run_dir, else runs/<profile>; --smoke: runs/gpu-smoke)")
    p.add_argument("--model-path", default=None, help="stage 1's starting policy, the SFT checkpoint (default: the profile's model.name_or_path; "
                        "later stages resume from the previous stage's checkpoint in run_dir)")
    p.add_argument("--train-files", default=None, help="training parquet (default: run_dir/data/curated.parquet)")
    p.add_argument("--val-files", default=None, help="validation parquet (default: run_dir/data/val.parquet)")
    p.add_argument("--n-gpus-per-node", type=int, default=None, help="GPUs per node (default 8; --smoke: 1)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes of the Ray cluster")
    p.add_argument("--rollout-tp", type=int, default=4, help="SGLang tensor-parallel size of the rollout")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing, write nothing")
    p.add_argument("--allow-local-ray", action="store_true",
                   help="start a Ray of its own on this machine when no cluster is found")
    p.add_argument("--smoke", action="store_true",
                   help="the GPU smoke run: the smoke profile on offline inputs, two steps, SGLang (--profile and "
                        "--stage are ignored)")
    p.add_argument("overrides", nargs="*", metavar="-- KEY=VALUE", help="Hydra overrides passed to VERL as they are")

    p = verb("prepare-data", _prepare_data, "write a paper run's run_dir/data/{curated,val}.parquet",
             "Curate the profile's training pools (report §4.2) into run_dir/data/curated.parquet and write "
             "run_dir/data/val.parquet; also writes run_dir/config.json.")
    _profile(p, "paper-14b")
    p.add_argument("--run-dir", default=None, help="the run's folder (default: the profile's run_dir, else runs/<profile>)")

    p = verb("serve", _serve, "serve a policy folder on loopback as an OpenAI-compatible /v1/completions",
             "The kit's continuous-batching engine behind FastAPI + uvicorn on this machine's CPU (kit.rollout.serve); "
             "prints `serving <url>` once the socket is bound. Also GET /v1/models and /health.")
    p.add_argument("--policy", required=True, help="a policy folder (kit.models.load_policy)")
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="0: the OS picks a free one (printed)")
    p.add_argument("--model-name", default="", help="the served model name (default: the policy's resolved path)")
    p.add_argument("--slots", type=int, default=64, help="rows decoded together (default 64)")
    p.add_argument("--seed", type=int, default=0, help="base sampling seed")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--max-body-bytes", type=int, default=None,
                   help="larger request bodies get HTTP 413 (default kit.rollout.serve.MAX_BODY_BYTES, 8 MiB)")
    p.add_argument("--port-file", default="", help=argparse.SUPPRESS)  # serve_policy: the bound port is written here
    p.add_argument("--parent-pid", type=int, default=0, help=argparse.SUPPRESS)  # serve_policy: exit when it dies

    p = verb("selftest", _selftest, "check the code sandbox: isolation, limits, semantics, throughput (PASS/FAIL)")
    p.add_argument("--isolation", choices=["bwrap", "none"], default="bwrap",
                   help="bwrap: each call in bubblewrap namespaces (default); none: no isolation, for a machine without bubblewrap")
    p.add_argument("--workers", type=int, default=0, help="warm workers (0: one per core)")

    p = verb("claims", _claims, "several runs' verdicts side by side, or pooled over seeds (`claims pool`)",
             "Read each run folder's claims.json (notebook 20) and print, or write with --out, one row per claim of "
             "--section with one `statistic (interval) verdict` cell per run. `kit claims pool RUN...` judges every "
             "claim over the runs instead (kit.claims.pool: the unit is the pipeline seed, t interval over runs below "
             "10 runs, BCa bootstrap from 10, Holm over each paper's primary claims) and prints one row per test; "
             "with --out DIR it writes pooled_claims.json, pooled_claims.csv and over_seeds.pdf there. Exit 2 on "
             "runs that cannot be pooled (named).")
    p.add_argument("runs", nargs="+", help="run folders with a claims.json, e.g. reports/tiny/s7; or `pool` and the runs")
    p.add_argument("--section", default=None,
                   help=f"the claims' paper: rStar2-Agent, {', '.join(s.section for s in STUDIES)}, or all (default: "
                        "all for `claims pool`, rStar2-Agent for the side-by-side view)")
    p.add_argument("--out", default=None, help="the CSV file to write (default: print); with `pool`, a folder")

    p = verb("compare", _compare, "are two run folders the same run? result files compared byte for byte",
             "Compare every result file of two run folders (metrics, samples, evaluation outputs, weights, claims.json) "
             "with time and host fields stripped (kit.pipeline.compare); executed notebooks and renderings are not "
             "compared; notes name what may explain a difference (fingerprint, stamp, code version, profile, seed, "
             "an unfinished run). Exit 0 when equal, 1 when a file differs (each named), 2 when a folder is "
             "missing, both are the same folder, or neither holds a result file.")
    p.add_argument("run_a", help="a run folder, e.g. reports/tiny/main")
    p.add_argument("run_b", help="another run folder of the same profile and seed")

    p = verb("config", _config, "print a profile's resolved config with each key's help text",
             "Print every key of the resolved config as `key = value`, with its help (the comments beside the "
             "fields of kit/config/schema.py) and the profile's note (the comment beside it in "
             "kit/profiles/<profile>.toml and the profiles it inherits from).")
    _profile(p, "tiny")
    _sets(p)
    p.add_argument("key", nargs="?", default="",
                   help="only this table or key, e.g. stages or algorithm.clip_ratio_high (default: all)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m kit <verb> [options]`` with ``argv`` (default ``sys.argv[1:]``) and return the
    exit code (see the module docstring). Bad options exit through argparse (``SystemExit(2)``,
    the message names the option or the verb)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args, argv)
    except (ValueError, ConfigError, FileNotFoundError) as exc:
        print(f"kit {args.verb}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m kit config | head`: the reader left; Python's documented way out
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
