"""A reaped call's reply: status, output, value, limits hit (rStar2-Agent §3.1, issue #3).

The worker (:mod:`kit.sandbox.worker`) calls :func:`make_result` once the call's child is gone.
Statuses the worker saw itself (timeout, output limit, a signal) win over anything the child
wrote on its result pipe, which the call's own code can scribble on.
"""

from __future__ import annotations

import json
import os
import re
import signal

from kit.sandbox.limits import rlimit_cpu
from kit.sandbox.wire import Capture


def make_result(status: int, ru, wall: float, killed_by: str | None, out: Capture, err: Capture, res: Capture,
                timeout: float, opts: dict, starved: str = "") -> dict:
    """The reply for one reaped call (the fields of :class:`~kit.sandbox.types.ToolResult`,
    plus ``rss_mb`` and the child's ``timings`` stamps; ``starved: True`` on a starved call).

    Args:
        status: the wait status from ``wait4``; ``ru``: its resource usage.
        wall: seconds from hand-over to reap; ``killed_by``: "timeout" (its used time reached the
            limit), "starved" (the wall-clock backstop passed first, :mod:`kit.sandbox.limits`),
            "output" or None.
        out, err, res: what was captured on stdout, stderr and the result pipe.
        timeout: the call's time limit (s); ``opts``: the worker options with the call's ``cpu_s``.
        starved: for ``killed_by="starved"``, what the worker measured (in the ``infra_error``
            message).
    Returns:
        The reply dict. A process killed by the CPU limit (SIGXCPU at the soft RLIMIT_CPU, or
        SIGKILL at the hard one, which a call that ignores SIGXCPU reaches) is ``timeout``; a
        starved call is ``infra_error`` with no output (the host retries it once).
    """
    if killed_by == "starved":
        return {"timings": {}, "status": "infra_error", "stdout": "", "value": "", "exit_code": None,
                "stderr": f"sandbox infrastructure error: {starved or 'the call was starved of CPU by load'}",
                "wall_s": round(wall, 6), "cpu_s": round(ru.ru_utime + ru.ru_stime, 6), "truncated": False,
                "data": None, "starved": True, "rss_mb": rss_mb()}
    stdout, t_out = out.text()
    stderr, t_err = err.text()
    rec: dict = {}
    raw = bytes(res.head + res.tail)
    if raw:
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = {}
    exit_code = os.waitstatus_to_exitcode(status)
    cpu = ru.ru_utime + ru.ru_stime
    value = rec.get("value") or ""
    if rec.get("error"):
        stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + rec["error"])
    note = ""
    if killed_by == "output":
        st = "output_limit"
        note = f"OutputLimitExceeded: the call printed more than {out.total + err.total} characters and was stopped"
    elif killed_by == "timeout":
        st = "timeout"
        note = f"TimeoutError: execution exceeded the {timeout:g} s time limit"
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        # SIGKILL after the soft CPU limit: the hard one (a call that survived SIGXCPU); rusage
        # reads a few percent below the kernel's precise clock, hence the margin
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= 0.95 * rlimit_cpu(opts["cpu_s"])[0]):
            st = "timeout"
            note = f"TimeoutError: execution exceeded the {opts['cpu_s']:g} s CPU time limit"
        else:
            st = "killed"
            note = f"Killed: the process died from signal {signal.Signals(sig).name}"
    elif rec.get("memory"):
        st = "memory_limit"
    elif exit_code == 0:
        st = "ok"
    else:
        st = "error"
    if note:
        stderr = stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + note
    if stdout:
        value = ""
    stdout, stderr, value = canonical_addresses(stdout, stderr, value)
    return {"timings": child_stamps(rec.get("t")), "status": st, "stdout": stdout, "stderr": stderr, "value": value,
            "exit_code": exit_code, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6),
            "truncated": bool(t_out or t_err or rec.get("value_truncated")),
            "data": rec.get("data"), "rss_mb": rss_mb()}


#: an object's address in a default ``repr``: ``<function f at 0x7ffff743be00>``, ``<map object at 0x...>``
REPR_ADDRESS = re.compile(r"(?<= at )0x[0-9a-f]+(?=>)")
#: the first address :func:`canonical_addresses` gives out; the next ones are :data:`ADDRESS_STEP` apart
ADDRESS_BASE, ADDRESS_STEP = 0x7F0000000000, 0x40


def canonical_addresses(*texts: str) -> tuple[str, ...]:
    """``texts`` with every object address in a default ``repr`` (:data:`REPR_ADDRESS`) renumbered in
    order of first appearance across them: the k-th distinct address becomes ``ADDRESS_BASE + k *
    ADDRESS_STEP`` in hex, the same object keeping the same number.

    Why: what a call creates sits where the worker's heap had room at the fork, which depends on the
    calls the worker served before, so ``print(x for x in ...)`` printed another address on another
    worker or in a rerun, and the trajectory, its tokens and everything trained on it followed
    (2026-12-07: one call in seed 102's ablation, 1 of about 30,000; reports/LOG.md). Builtins and
    pre-imported objects already sit at the same address everywhere (address randomisation off).
    Not covered: an address the code turns into other text (``id(x)``, ``hex(id(x))``) or acts on
    (the order of a set of objects hashed by identity); :mod:`kit.sandbox.step_cache` does not reuse
    such calls.

    Args:
        texts: stdout, stderr and value of one call (any number of strings).
    Returns:
        The strings, renumbered, in the same order.
    """
    seen: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        return seen.setdefault(m.group(0), f"0x{ADDRESS_BASE + len(seen) * ADDRESS_STEP:x}")

    return tuple(REPR_ADDRESS.sub(sub, t) if t else t for t in texts)


def child_stamps(t: object) -> dict:
    """The child's three monotonic stamps (see :mod:`kit.sandbox.timings`); {} if the call's
    code scribbled something else on the result pipe."""
    if isinstance(t, list) and len(t) == 3 and all(type(x) is float for x in t):
        return dict(zip(("c_start", "c_exec", "c_done"), t, strict=True))
    return {}


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
