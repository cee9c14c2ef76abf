"""The environment a run computes on, and whether the run is bitwise repeatable (issue #41).

A run is a function of (code, seed, machine type) only when every float reduction happens in the
same order each time. What decides that order besides the code is recorded here:

- :func:`environment_fingerprint`: the CPU model and the instruction-set flags that select float
  kernels (AVX2, AVX-512, AMX, ...), torch's version and build (BLAS backend, oneMKL and oneDNN
  versions, the CPU capability torch dispatches to), numpy, Python and the C library, and the
  thread settings (the profile's ``model.torch_threads``, torch's intra-op threads, and the
  environment variables that change BLAS/OpenMP threads or code paths, e.g. ``MKL_CBWR``).
  :func:`fingerprint_key` is a short hash of the fields that decide floats (:data:`KEY_FIELDS`):
  two runs with equal keys ran the same kernels at the same thread counts.
- :func:`repeatability`: the one place that decides whether a run is stamped bitwise repeatable
  (``{"bitwise": bool, "why": str}``): only with a fixed thread count (``model.torch_threads > 0``)
  on the local runtime.

Where they go: ``pipeline_state.json`` (the runner, :mod:`kit.pipeline.series`: keys
:data:`ENVIRONMENT_KEY` and :data:`REPEATABLE_KEY`, and each finished notebook's
``environment_key``), ``claims.json`` (:func:`kit.claims.write_claims`) and the summary page
(:mod:`kit.report.summary`). A file comparer strips the ``environment`` key: it describes the host, not
the result. Resuming a run on another fingerprint is allowed and said (:func:`resume_warning`);
``python -m kit claims`` says when the runs it puts side by side differ (:func:`differences`).

What this does not do: it does not make anything repeatable (the thread policy, the rollout
engine and the sandbox do that), and it cannot see every cause of a float difference: the
microcode, the kernel's CPU frequency policy and libraries torch loads lazily are not recorded.
Two machines with equal keys are expected, not proven, to compute the same bits.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy
import torch

import kit
from kit.config import ConfigError, load
from kit.plan import ENVIRONMENT_KEY, REPEATABLE_KEY

__all__ = ["ENVIRONMENT_KEY", "FLOAT_FLAGS", "KEY_FIELDS", "REPEATABLE_KEY", "SCHEMA", "THREAD_ENV", "describe",
           "differences", "environment_fingerprint", "fingerprint_key", "repeatability", "resume_warning", "stamp",
           "stamp_state"]
#: version of the fingerprint's layout (a new field or another hash input: a new version); 2: the CPU's
#: family, model and stepping (one model name covers several generations) and oneMKL's mode in effect
SCHEMA = 2
#: ``/proc/cpuinfo`` flags that select float kernels in oneMKL, oneDNN or torch's own dispatch
FLOAT_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl",
               "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
               "asimd", "sve", "sve2")  # the last three: Arm
#: environment variables that change thread counts or code paths of torch's BLAS/OpenMP kernels; recorded when set
THREAD_ENV = ("MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
              "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
              "ONEDNN_DEFAULT_FPMATH_MODE", "KMP_DETERMINISTIC_REDUCTION")
#: the fields (dotted paths) :func:`fingerprint_key` hashes: every field that decides floats. Left out:
#: ``cpu.logical_cores``, ``cpu.usable_cores`` and ``threads.torch_intra_op`` (the runner's own; they decide
#: nothing once the thread count is fixed, and ``threads.effective`` carries them when it is torch's default),
#: ``platform`` (free-form: kernel release), ``key`` and ``warnings``.
KEY_FIELDS = ("schema", "cpu.model", "cpu.arch", "cpu.flags", "cpu.family", "cpu.model_number", "cpu.stepping",
              "python", "libc", "numpy", "torch.version", "torch.blas", "torch.mkl_cbwr",
              "torch.lapack", "torch.mkl", "torch.onednn", "torch.openmp", "torch.cpu_capability", "torch.mkl_available",
              "torch.mkldnn_available", "threads.torch_threads", "threads.effective", "threads.env")


def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str, list[str], dict[str, str | None]]:
    """``(model name, float flags present, {"family", "model_number", "stepping"})`` from ``path`` (x86's
    ``cpu family``/``model``/``stepping``; Arm's ``CPU implementer``/``CPU part``/``CPU revision``);
    ``(platform.processor() or "unknown", [], all None)`` without it."""
    model, flags = "", set()
    ids: dict[str, str | None] = {"family": None, "model_number": None, "stepping": None}
    names = {"cpu family": "family", "model": "model_number", "stepping": "stepping", "cpu implementer": "family",
             "cpu part": "model_number", "cpu revision": "stepping"}
    try:
        with open(path) as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name in ("model name", "cpu model") and not model:
                    model = " ".join(value.split())
                elif name in ("flags", "features") and not flags:  # x86: flags; Arm: Features
                    flags = set(value.split())
                elif name in names and ids[names[name]] is None:
                    ids[names[name]] = value.strip()
    except OSError:
        pass
    return model or platform.processor() or "unknown", [f for f in FLOAT_FLAGS if f in flags], ids


#: oneMKL's conditional-numerical-reproducibility branches (``mkl_cbwr.h``), for :func:`_mkl_cbwr`
_CBWR_BRANCHES = {0: "OFF", 1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSE4_2", 8: "AVX",
                  9: "AVX2", 10: "AVX512_MIC", 11: "AVX512", 12: "AVX512_MIC_E1", 14: "AVX512_E1"}


def _mkl_cbwr() -> str | None:
    """oneMKL's conditional-numerical-reproducibility mode in effect in this process (``"AUTO,STRICT"``,
    ``"BRANCH_OFF"``, ...), read from torch's oneMKL; None for a torch without oneMKL. ``MKL_CBWR`` in the
    environment says what new processes get; this is what this one runs (issue #41: importing torch and
    using oneMKL before ``kit`` leaves it off)."""
    get = kit._mkl_function("mkl_serv_cbwr_get")
    if get is None:
        return None
    mode = int(get(-1))  # MKL_CBWR_ALL: the branch and the STRICT bit
    name = _CBWR_BRANCHES.get(mode & 0xFFFF, hex(mode & 0xFFFF))
    return name + (",STRICT" if mode & 0x10000 else "")


def _torch_build() -> dict[str, Any]:
    """The float-relevant lines of ``torch.__config__.show()``: BLAS/LAPACK backend, oneMKL, oneDNN and
    OpenMP versions, the CPU capability in use; None for a field the build text does not state."""
    text = torch.__config__.show()

    def find(pattern: str) -> str | None:
        m = re.search(pattern, text)
        return m.group(1).strip() if m else None

    capability = None
    try:  # the ISA torch's own kernels dispatch to (torch >= 2.0)
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        capability = find(r"CPU capability usage:\s*(\S+)")
    return {"version": str(torch.__version__), "blas": find(r"BLAS_INFO=([^,\s]+)"),
            "lapack": find(r"LAPACK_INFO=([^,\s]+)"), "mkl": find(r"Math Kernel Library Version ([^\s-]+)"),
            "onednn": find(r"MKL-DNN (v[\d.]+)") or find(r"oneDNN (v[\d.]+)"), "openmp": find(r"OpenMP (\d+)"),
            "cpu_capability": capability, "mkl_available": bool(torch.backends.mkl.is_available()),
            "mkldnn_available": bool(torch.backends.mkldnn.is_available()), "mkl_cbwr": _mkl_cbwr()}


def _effective_threads(torch_threads: int | None, intra_op: int) -> str:
    """The thread count the trainers run at, as a word: ``"2"`` fixed, ``"default:<n>"`` torch's default
    (the machine's cores), ``"adaptive<=n"`` the load-adaptive policy, ``"unknown"`` without a config."""
    if torch_threads is None:
        return "unknown"
    if torch_threads > 0:
        return str(torch_threads)
    return f"default:{intra_op}" if torch_threads == 0 else f"adaptive<={-torch_threads}"


def environment_fingerprint(cfg: Any = None, *, environ: Mapping[str, str] | None = None,
                            cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """What decides this machine's floats for a run of ``cfg``, as a JSON-ready dict.

    Args:
        cfg: the run's resolved :class:`kit.config.KitConfig` (its ``model.torch_threads``); None where no
            config could be loaded (``threads.torch_threads`` is then None).
        environ: the environment the run's processes get (default ``os.environ``; the runner passes its
            kernels' environment).
        cpuinfo: the file to read the CPU model and flags from (tests pass their own).
    Returns:
        ``{"schema", "key", "cpu": {"model", "arch", "flags", "family", "model_number", "stepping",
        "logical_cores", "usable_cores"}, "python", "libc", "numpy", "torch": {"version", "blas", "lapack", "mkl",
        "onednn", "openmp", "cpu_capability", "mkl_available", "mkldnn_available", "mkl_cbwr" (the mode in effect in
        this process)}, "threads": {"torch_threads", "effective", "torch_intra_op",
        "env": {name: value} of :data:`THREAD_ENV` that are set}, "platform"}``; ``key`` is
        :func:`fingerprint_key` of the rest. Versions are strings; a build field torch does not state is None.
    Raises:
        Nothing: a missing ``/proc/cpuinfo`` gives ``platform.processor()`` as the model and no flags.
    """
    env = os.environ if environ is None else environ
    model, flags, ids = _cpuinfo(cpuinfo)
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        usable = os.cpu_count() or 0
    torch_threads = None if cfg is None else int(cfg.model.torch_threads)
    intra = int(torch.get_num_threads())
    libc = " ".join(x for x in platform.libc_ver() if x) or "unknown"
    fp: dict[str, Any] = {
        "schema": SCHEMA,
        "cpu": {"model": model, "arch": platform.machine(), "flags": flags, **ids, "logical_cores": os.cpu_count() or 0,
                "usable_cores": usable},
        "python": platform.python_version(), "libc": libc, "numpy": str(numpy.__version__),
        "torch": _torch_build(),
        "threads": {"torch_threads": torch_threads, "effective": _effective_threads(torch_threads, intra),
                    "torch_intra_op": intra, "env": {k: env[k] for k in THREAD_ENV if k in env}},
        "platform": platform.platform(),
    }
    return {"schema": SCHEMA, "key": fingerprint_key(fp), **{k: v for k, v in fp.items() if k != "schema"}}


def _get(fp: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = fp
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return cur


def fingerprint_key(fp: Mapping[str, Any]) -> str:
    """A 12-hex-digit hash of ``fp``'s :data:`KEY_FIELDS` (a missing field counts as None), stable across
    processes and Python versions: equal keys = the same kernels at the same thread counts.

    Args:
        fp: a fingerprint (:func:`environment_fingerprint`), also one read back from JSON.
    Returns:
        The first 12 hex digits of the SHA-256 of the fields as sorted, compact JSON.
    """
    fields = {f: _get(fp, f) for f in KEY_FIELDS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """The :data:`KEY_FIELDS` whose values differ between two fingerprints, as ``"field: a -> b"`` lines
    (``["no fingerprint recorded"]`` when either is None or empty); ``[]`` when they agree."""
    if not a or not b:
        return ["no fingerprint recorded"]
    return [f"{f}: {_get(a, f)!r} -> {_get(b, f)!r}" for f in KEY_FIELDS if _get(a, f) != _get(b, f)]


def describe(fp: Mapping[str, Any] | None) -> str:
    """One line for people: ``AMD EPYC (avx2, avx512f), torch 2.13.0 (mkl 2024.2, oneDNN v3.12.0, AVX512),
    numpy 2.4.6, Python 3.11.7, threads 2, MKL_CBWR=COMPATIBLE; key 0123456789ab`` ("not recorded" for None)."""
    if not fp:
        return "not recorded"
    cpu, t, th = fp.get("cpu") or {}, fp.get("torch") or {}, fp.get("threads") or {}
    wide = [f for f in cpu.get("flags") or [] if f.startswith(("avx2", "avx512f", "amx", "sve"))]
    build = ", ".join(str(x) for x in (f"{t.get('blas')} {t.get('mkl') or ''}".strip(), t.get("onednn") and
                                       f"oneDNN {t['onednn']}", t.get("cpu_capability")) if x)
    env = "".join(f", {k}={v}" for k, v in (th.get("env") or {}).items())
    return (f"{cpu.get('model', '?')}" + (f" ({', '.join(wide)})" if wide else "")
            + f", torch {t.get('version', '?')} ({build}), numpy {fp.get('numpy', '?')}, Python {fp.get('python', '?')}"
            + f", threads {th.get('effective', '?')}{env}; key {fp.get('key', '?')}")


def repeatability(cfg: Any) -> dict[str, Any]:
    """Whether a run of ``cfg`` is stamped bitwise repeatable on one machine type: the one place that decides it.

    Bitwise repeatable needs every thread count fixed for the whole run, so that each float reduction
    has one order: ``model.torch_threads > 0`` (each notebook, background job and ablation arm then sets
    a fixed count), on the local runtime; and no tool call within reach of its CPU limit, which the stamp's
    ``why`` states and the run does not count (LOG 2026-12-07: 1 timeout in a seed's 43,954 rollout calls,
    1 probe of 3,328 flipped in a rerun). ``torch_threads < 0`` is the load-adaptive speed mode
    (:class:`kit.train.common.LoadAdaptiveThreads`: the count follows what else the machine runs);
    ``0`` leaves torch's default, which follows the machine's cores. The VERL runtime is never stamped
    repeatable: its GPU kernels and multi-turn tool rollouts are not bitwise reproducible (VERL's
    ``full_determinism`` covers vLLM only), and the kit cannot promise what it does not run itself.

    Args:
        cfg: a resolved :class:`kit.config.KitConfig` (reads ``model.torch_threads`` and ``runtime``); None
            where the run's config could not be loaded.
    Returns:
        ``{"bitwise": bool, "why": str}``; ``why`` says in words what makes it so (every reason, "; "-joined).
    """
    if cfg is None:
        return {"bitwise": False, "why": "the run's configuration could not be loaded, so its thread counts are unknown"}
    n = int(cfg.model.torch_threads)
    reasons = []
    if n < 0:
        reasons.append(f"model.torch_threads = {n}: the load-adaptive speed mode (at most {-n} threads, sized to the "
                       "cores other processes leave free), so a step's float summation order follows the machine's load")
    elif n == 0:
        reasons.append("model.torch_threads = 0: torch's default thread count, which follows the machine's cores")
    if getattr(cfg, "runtime", "local") != "local":
        reasons.append(f"runtime {cfg.runtime!r}: VERL's GPU kernels and multi-turn tool rollouts are not bitwise "
                       "reproducible; the kit passes its determinism settings through but cannot promise it")
    if reasons:
        return {"bitwise": False, "why": "; ".join(reasons)}
    return {"bitwise": True, "why": f"model.torch_threads = {n}: a fixed thread count in every process, on the "
                                    "local runtime (same code, seed and machine type give the same result files), "
                                    f"except after a tool call that ends near its CPU limit (sandbox.cpu_s = "
                                    f"{cfg.sandbox.cpu_s:g} s): used CPU grows with contention, so on a loaded machine "
                                    "such a call can end the other way (kit.sandbox.limits)"}


def resume_warning(stored: Mapping[str, Any] | None, current: Mapping[str, Any], kept: Iterable[str]) -> str | None:
    """The warning for resuming a run into ``kept`` notebooks that finished under ``stored``, now on ``current``.

    Args:
        stored: the fingerprint the run folder holds (None: a run begun before fingerprints were recorded).
        current: this machine's (:func:`environment_fingerprint`).
        kept: the notebooks that finished earlier and may be kept as they are.
    Returns:
        None when nothing is kept or the keys agree; else one paragraph naming the notebooks, both keys and
        the fields that differ: the run's result files then mix two environments and are not what a run on
        either would give bit for bit (their verdicts agree only in distribution).
    """
    kept = list(kept)
    if not kept or (stored and stored.get("key") == current.get("key")):
        return None
    diff = "; ".join(differences(stored, current))
    old = stored.get("key") if stored else None
    return (f"resuming a run whose stored environment ({old or 'not recorded'}) differs from this machine's "
            f"({current.get('key')}): {diff}. The notebooks finished there ({', '.join(kept)}) are kept, so this run's "
            "files mix two environments and are not bitwise what a run on either would give; --force (without --only) reruns them all here.")



def stamp(profile: str, overrides: Mapping[str, Any] | None, stored: Mapping[str, Any] | None, kept: Iterable[str],
          environ: Mapping[str, str] | None = None,
          echo: Callable[[str], None] | None = None) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The run-level record of one invocation of the series: ``(environment, repeatable, warning)``.

    Args:
        profile, overrides: the series' profile and the notebooks' ``overrides`` (dotted key -> value); a
            config that does not load (an unknown profile) counts as None (:func:`repeatability`).
        stored: the fingerprint the run folder holds from an earlier invocation, or None.
        kept: the notebooks that finished earlier and may be kept (see :func:`resume_warning`).
        environ: the notebooks' environment (default ``os.environ``).
        echo: where a new warning is also written, as ``WARNING: <text>`` (None: nowhere).
    Returns:
        ``environment``: this machine's :func:`environment_fingerprint`, plus ``warnings`` (a list of
        :func:`resume_warning` texts, the stored ones carried over while earlier notebooks are kept) when
        there is any; ``repeatable``: :func:`repeatability`; ``warning``: this invocation's new warning or None.
    """
    try:
        cfg = load(profile, overrides, write=False)
    except (ConfigError, FileNotFoundError):
        cfg = None
    kept = list(kept)
    current = environment_fingerprint(cfg, environ=environ)
    warning = resume_warning(stored, current, kept)
    warnings = list((stored or {}).get("warnings") or []) if kept else []
    if warning and warning not in warnings:
        warnings.append(warning)
    if warning and echo is not None:
        echo(f"WARNING: {warning}")
    if warnings:
        current["warnings"] = warnings
    return current, repeatability(cfg), warning


def stamp_state(state: Mapping[str, Any], stored: Mapping[str, Any], profile: str,
                parameters: Iterable[Mapping[str, Any]], forced: Iterable[str] = (),
                echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``pipeline_state.json``'s content with the run's record first: ``{"environment", "repeatable", **state}``.

    Args:
        state: the notebooks' entries (:func:`kit.plan.read_state`).
        stored: the run keys the folder holds (:func:`kit.plan.read_run_keys`).
        profile: the series' profile.
        parameters: each notebook's papermill parameters; the first non-empty ``overrides`` is the series'.
        forced: the notebooks this invocation reruns whatever their state (``--force``): not kept. Every other
            notebook with an entry (done, or failed/interrupted: resumed from its checkpoints) counts as kept.
        echo: where a resume onto another fingerprint is warned (:func:`stamp`).
    Returns:
        A new dict; ``state`` is not changed.
    """
    forced = set(forced)
    # a failed or interrupted notebook resumes from its checkpoints, which were written there too
    kept = [n for n, e in state.items() if isinstance(e, Mapping) and e.get("status") in ("done", "failed", "running")
            and n not in forced]
    overrides = next((p["overrides"] for p in parameters if p.get("overrides")), None)
    env, repeatable, _ = stamp(profile, overrides, stored.get(ENVIRONMENT_KEY), kept, echo=echo)
    return {ENVIRONMENT_KEY: env, REPEATABLE_KEY: repeatable, **state}
