"""Stage-3 training file on a cluster: the curated pool minus the problems the stage-2 policy
solves n/n (report §4.3; ``kit.data.curate.build_hard_subset``, n = ``hard_filter_samples`` = 8).

Two ways to get the solve counts:

* sample them here through an OpenAI-compatible server that serves the merged stage-2 policy
  (:func:`sample_solve_counts`), e.g. on the cluster::

      python -m sglang.launch_server --model-path <stage2 run_dir>/policy --tp 4 --port 30000
      # then: sampler_url="http://<host>:30000/v1" in 05_rl_stage3

  The kit's agent loop and sandbox run here (the sandbox on this machine's cores), the model on
  the server; sampling temperature and budgets are stage 3's.
* bring them from your own sampling run as JSON ``{"<source>/<id>": solved, ...}``
  (:func:`read_solve_counts`; ``source`` and ``id`` as in ``curated.parquet``).

On the VERL CPU runtime (``KIT_VERL_DEVICE=cpu``, the smoke chain) there is no GPU server:
:func:`prepare_stage3_data` with ``serve_locally=True`` serves ``<init_dir>/policy`` itself on
loopback (:func:`kit.rollout.serve.serve_policy`, the kit's continuous-batching engine behind
``/v1/completions``), samples through it exactly as through SGLang, and stops it.

:func:`build_hard_parquet` then writes ``run_dir/data/hard.parquet`` (the same VERL row schema)
and ``run_dir/hard_subset.json`` (the funnel and the ``route`` that produced the counts).
Not run here at the paper's scale (no GPU); tested with a scripted backend and, on CPU, against
the served tiny policy.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from transformers import AutoTokenizer

from kit import jsonio
from kit.data.curate import build_hard_subset
from kit.data.pool import curated_file
from kit.reward import verify_batch
from kit.rollout import run_coroutine
from kit.rollout.backends import OpenAIBackend
from kit.rollout.loop import rollout_batch
from kit.rollout.serve import serve_policy
from kit.sandbox import SandboxPool


def source_id(row: Mapping[str, Any]) -> str:
    """``"<source>/<id>"`` of a ``curated.parquet`` row."""
    return f"{row['source']}/{row['id']}"


def read_solve_counts(path: str | os.PathLike) -> dict[str, int]:
    """Solve counts from a JSON object ``{"<source>/<id>": solved}``.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: it is not such an object (names the file).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"solve-count file not found: {p}")
    data = json.loads(p.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise ValueError(f"{p}: expected a JSON object {{\"<source>/<id>\": solved count}}")
    return data


def build_hard_parquet(curated: str | os.PathLike, counts: Mapping[str, int], run_dir: str | os.PathLike,
                       n: int = 8, route: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Filter ``curated`` (a ``write_curated`` parquet) to the problems solved fewer than ``n`` times.

    Args:
        curated: ``<data run_dir>/data/curated.parquet``.
        counts: solved count out of ``n`` per :func:`source_id`; every row needs one.
        run_dir: the stage-3 run directory.
        n: rollouts per problem.
        route: where the counts came from (recorded as ``route``; see :func:`prepare_stage3_data`).
    Returns:
        ``{"parquet", "in", "solved_all", "out", "solved_none", "n", "curated", "route"}`` (also
        ``run_dir/hard_subset.json``).
    Raises:
        KeyError: a problem without a count (names the first few).
        ValueError: a count outside [0, n], or no problem left.
    """
    df = pd.read_parquet(curated)
    rows = df.to_dict("records")
    missing = [source_id(r) for r in rows if source_id(r) not in counts]
    if missing:
        raise KeyError(f"{len(missing)} problems of {curated} have no solve count, e.g. {missing[:3]}")
    hard, stats = build_hard_subset(rows, [counts[source_id(r)] for r in rows], n=n)
    if not hard:
        raise ValueError(f"every problem of {curated} was solved {n}/{n}: no stage-3 data")
    out = Path(run_dir) / "data" / "hard.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(hard, columns=df.columns).to_parquet(out, index=False)
    info = {"parquet": str(out), **stats, "n": n, "curated": str(Path(curated).resolve()), "route": dict(route or {})}
    jsonio.write_json(Path(run_dir) / "hard_subset.json", info)
    return info


def hard_stage(cfg: Any) -> str:
    """The name of the first stage of ``cfg`` with ``problems = "hard"`` (``stage3`` on the paper profiles).

    Raises:
        ValueError: no stage filters its pool.
    """
    hard = [st.name for st in cfg.stages if st.problems == "hard"]
    if not hard:
        raise ValueError(f"no stage of profile {cfg.profile} has problems = 'hard' (stages: {', '.join(cfg.stages.names)})")
    return hard[0]


def sample_solve_counts(cfg: Any, curated: str | os.PathLike, *, base_url: str = "", model: str = "",
                        tokenizer_path: str = "", n: int = 8, max_concurrency: int = 256,
                        backend: Any = None, tokenizer: Any = None, executor: Any = None,
                        stage: str | None = None) -> dict[str, int]:
    """Roll out every problem of ``curated`` ``n`` times with the policy behind ``base_url`` and
    count the correct ones (``kit.reward.verify_batch``).

    Args:
        cfg: the stage's config (rollout settings, the stage's budgets, sandbox).
        curated: the curated parquet.
        base_url, model: the OpenAI-compatible server (``.../v1``) and its model name.
        tokenizer_path: the served policy's folder (its tokenizer).
        n: rollouts per problem.
        max_concurrency: trajectories alive at once.
        backend, tokenizer, executor: injected instead (tests); ``executor`` default a
            ``kit.sandbox.SandboxPool(cfg.sandbox)``.
        stage: the stage whose budget and turns the sampling uses (default :func:`hard_stage`).
    Returns:
        ``{source_id: solved}``.
    """
    rows = pd.read_parquet(curated).to_dict("records")
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    if backend is None:
        backend = OpenAIBackend(base_url, model, tokenizer)
    st = cfg.stages[stage or hard_stage(cfg)]
    kw = dict(max_concurrency=max_concurrency, max_response_tokens=st.max_response_tokens, max_turns=st.max_turns,
              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)

    async def go():
        if executor is not None:
            return await rollout_batch(backend, tokenizer, [r["problem"] for r in rows], executor, n, cfg.rollout, **kw)
        async with SandboxPool(cfg.sandbox) as pool:
            return await rollout_batch(backend, tokenizer, [r["problem"] for r in rows], pool, n, cfg.rollout, **kw)

    groups = run_coroutine(go())
    verdicts = verify_batch([(r["answer"], tr.response_text) for r, g in zip(rows, groups, strict=True) for tr in g])
    return {source_id(r): sum(int(v.correct) for v in verdicts[i * n:(i + 1) * n]) for i, r in enumerate(rows)}


def prepare_stage3_data(cfg: Any, run_dir: str | os.PathLike, data_dir: str | os.PathLike, init_dir: str | os.PathLike,
                        *, hard_counts: str = "", sampler_url: str = "", sampler_model: str = "",
                        serve_locally: bool = False, serve_threads: int = 0, stage: str | None = None) -> dict[str, Any]:
    """``run_dir/data/hard.parquet`` for stage 3 (kept when it exists), from the first of:

    Args:
        hard_counts: a solve-count JSON (:func:`read_solve_counts`); route ``{"kind": "hard_counts", "file"}``;
        sampler_url: an OpenAI-compatible server serving ``<init_dir>/policy`` (the merged stage-2
            policy); ``sampler_model`` is its model name (default that path); route
            ``{"kind": "sampler_url", "url"}``;
        serve_locally: serve ``<init_dir>/policy`` here on loopback for the sampling
            (:func:`kit.rollout.serve.serve_policy`, ``cfg.rollout.batch_size`` slots, seed
            ``cfg.seed``, ``serve_threads`` torch threads) and stop it after; route
            ``{"kind": "kit_cpu", "url"}``. For the VERL CPU runtime (no GPU server exists).
    ``stage``: the hard stage (``problems = "hard"``) this is for (default :func:`hard_stage`).
    A parquet already there is kept (route ``{"kind": "given"}`` when no ``hard_subset.json``
    says how it was built). The route is recorded in ``run_dir/hard_subset.json``.

    Raises:
        RuntimeError: none of the three is given (says how to get one), or the local server failed.
    """
    out = Path(run_dir) / "data" / "hard.parquet"
    info_path = Path(run_dir) / "hard_subset.json"
    if out.exists():
        if info_path.exists():
            return json.loads(info_path.read_text())
        info = {"parquet": str(out), "route": {"kind": "given"}}
        jsonio.write_json(info_path, info)
        return info
    curated = curated_file(data_dir)  # kit.data.pool: the file both runtimes train on
    stage = stage or hard_stage(cfg)
    n = cfg.stages[stage].hard_filter_samples
    policy = str((Path(init_dir) / "policy").resolve())
    if hard_counts:
        counts = read_solve_counts(hard_counts)
        route = {"kind": "hard_counts", "file": str(Path(hard_counts).resolve())}
    elif sampler_url or serve_locally:
        with contextlib.ExitStack() as stack:
            if sampler_url:
                route = {"kind": "sampler_url", "url": sampler_url}
            else:
                url = stack.enter_context(serve_policy(policy, slots=cfg.rollout.batch_size, seed=int(cfg.seed),
                                                       threads=serve_threads))
                route = {"kind": "kit_cpu", "url": url}
            counts = sample_solve_counts(cfg, curated, base_url=route["url"],
                                         model=(sampler_model if sampler_url else "") or policy,
                                         tokenizer_path=policy, n=n, stage=stage)
        (Path(run_dir) / "solve_counts.json").write_text(json.dumps(counts) + "\n")
    else:
        raise RuntimeError(
            f"stage 3 needs {out}: the curated problems minus those the stage-2 policy solves {n}/{n}. Serve "
            f"{policy} (python -m sglang.launch_server --model-path {policy} --tp 4 --port 30000) and pass "
            "sampler_url='http://HOST:30000/v1', or pass hard_counts=<JSON {\"source/id\": solved}>, or place the "
            "parquet there yourself")
    return build_hard_parquet(curated, counts, run_dir, n=n, route=route)
