"""Code execution service: isolated, warm, batched Python tool (rStar2-Agent §3.1, issue #3).

The model's tool ``execute_python_code_with_standard_io(code, input)`` runs here::

    from kit.sandbox import SandboxPool, ToolCall, run_sync
    async with SandboxPool(cfg.sandbox) as pool:
        r = await pool.run(ToolCall("x = 2\\nx + 1"))        # r.status == "ok", r.value == "3"
        rs = await pool.run_batch([ToolCall(c) for c in codes])
    run_sync(["print(1)"], cfg.sandbox)                      # notebooks, tests
    SyncSandboxPool(cfg.sandbox).run("1+1")                  # a warm pool for sync code

Design: one warm worker per core (numpy, scipy, sympy imported once) forks a child per call,
which is 20-30x faster than a fresh interpreter per call (measured on 2 cores; see
``benchmarks/sandbox_bench.py``). Each worker lives in its own bubblewrap sandbox. Fixed costs
stay off the call's path (issue #18): the child is forked while the worker is idle and waits
for its code, the sweep of what a call left runs after its reply (before the next call), and
the worker's heap sits on huge pages so a fork copies fewer page-table entries. The benchmark
and the self-test measure the pool against a bare warm fork (:mod:`kit.sandbox.barefork`) in
the same run, and every result carries its phase stamps (:mod:`kit.sandbox.timings`). Semantics
follow the released template (report §3.4): the last top-level expression's ``repr`` is the
``value`` when nothing was printed; errors give a traceback of the user's cell.

What the sandbox does:
    * bubblewrap per worker: no network (empty net namespace), an allowlisted read-only file
      system (system dirs, the Python install, the venv, the kit checkout), a private
      size-capped tmpfs ``/tmp`` and one on ``/dev/shm`` (64 MiB: POSIX semaphores and shared
      memory, so ``multiprocessing.Pool`` and ``ProcessPoolExecutor`` work in a call, their
      processes under the call's limits), a PID namespace, its own IPC/UTS namespaces, an environment
      scrubbed to a fixed list (no inherited variables, tokens or secrets), one hash seed for
      every worker (``PYTHONHASHSEED=0``: set order repeats across workers and runs) and address
      randomisation off (builtins and pre-imported objects at the same addresses; what a call
      creates still is not, issue #41, so the addresses in default reprs of its output are
      renumbered in order of appearance: :func:`kit.sandbox.outcome.canonical_addresses`).
    * per call: a new session/process group, RLIMIT_AS (``memory_mb``), RLIMIT_CPU (``cpu_s``),
      RLIMIT_FSIZE (64 MiB), RLIMIT_NOFILE (256), RLIMIT_CORE=0, ``OPENBLAS_NUM_THREADS=1``;
      ``random``, numpy's global ``np.random`` and sympy's generator seeded from the call's code and
      input (:mod:`kit.sandbox.seeds`: the same call draws the same numbers everywhere; clock reads
      and OS randomness still differ);
      a dedicated unprivileged uid per worker when the kit runs as root (not as the root of a user namespace
      that maps only itself, as a non-root user's Ray session is: there, as for a non-root user, none), which makes
      RLIMIT_NPROC (``max_procs``) hold and stops the call from signalling its worker or
      writing root-owned paths; a kill of the whole group at its time limit (used time, not
      load: :mod:`kit.sandbox.limits`; a call starved by load is retried once, then
      ``infra_error``; a call is judged again when it exits, on its processes' CPU), then a sweep that kills
      every leftover process of the call (setsid grandchildren included); output capped at
      ``max_output_chars`` with a visible marker, and a call that keeps printing (16x the cap,
      at least 1 MiB) is killed, so gigabytes of output never reach the host.
    * the host: workers that die or hang are replaced, a call on a dead worker is retried
      once and then answered ``infra_error``; workers are recycled after ``recycle_after``
      calls or on memory growth; results cross the boundary as size-capped JSON, never pickle.

What the sandbox does NOT protect against (read before exposing it to untrusted users):
    * Kernel exploits. Namespaces and rlimits share the host kernel; there is no seccomp
      filter, no VM boundary (e2b/Firecracker, gVisor) and no LSM profile. Treat it as a guard
      against a careless or reward-hacking model, not against a determined attacker.
    * Reading what is mounted: the Python install, the venv and the kit checkout (with any
      files you put in it) are readable by the code; ``/etc`` is visible read-only.
    * Total memory across processes: RLIMIT_AS is per process, so up to ``max_procs`` processes
      of one call may each use ``memory_mb`` (no memory cgroup). Memory that is not mapped is
      not counted at all: ``memfd_create`` files written with ``write``/``fallocate`` hold up to
      64 MiB (RLIMIT_FSIZE) per descriptor, 256 descriptors per process, for as long as the call
      runs (1 GiB held under ``memory_mb=768`` was measured), plus up to 256 MiB in ``/tmp`` and 64 MiB in ``/dev/shm``.
      Size ``max_procs`` and ``memory_mb`` for your RAM, or run workers inside a memory-capped
      container (a memory cgroup is the only real bound).
    * CPU starvation of the host by ``num_workers`` busy calls (no cpu cgroup) and disk I/O
      bandwidth; wall-clock and CPU limits bound each call only in time.
    * Side channels and timing; information in ``/proc/cpuinfo``, ``/sys``, kernel version.
    * Cross-call leaks are limited, not impossible: the call's working directory and every
      file it left in ``/tmp`` and ``/dev/shm``, its POSIX message queues and System V IPC
      objects are deleted after the call, but a call can see
      what the worker pre-imported and the worker's own (root-owned, read-only) files.
    * With ``isolation="none"`` (explicit opt-in, warned loudly): no namespaces at all, so the
      network, the host file system (read, and write where the uid allows) and host processes
      are reachable; and when the Python install is not world-readable the call keeps the
      worker's uid, so the process-count limit does not hold for root.
    * Non-root hosts: bwrap runs in a user namespace and the per-call uid switch is skipped;
      RLIMIT_NPROC then counts within that namespace.
"""

from kit.sandbox.isolation import SandboxUnavailable
from kit.sandbox.pool import SandboxPool, SyncSandboxPool, run_sync
from kit.sandbox.types import STATUSES, FunctionCall, ToolCall, ToolResult

__all__ = ["STATUSES", "FunctionCall", "SandboxPool", "SandboxUnavailable", "SyncSandboxPool", "ToolCall",
           "ToolResult", "run_sync"]
