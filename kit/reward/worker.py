"""Entry point of one verifier worker process: ``python -m kit.reward.worker --memory-mb N``.

Protocol (one JSON object per line): the worker writes ``{"ready": pid}`` once math_verify is
imported and warm, then reads requests ``{"id", "gold", "answer", "soft_s"}`` on stdin and
answers ``{"id", "reason", "detail", "seconds"}`` on the original stdout. Anything a library
prints goes to stderr, so it cannot corrupt the protocol.

Limits inside the worker: a soft alarm (``setitimer``) of ``soft_s`` seconds interrupts
Python-level work and answers ``timeout`` while keeping the worker alive; ``RLIMIT_AS`` caps
its address space (a ``MemoryError``, or a peak within 2 MiB of the cap, since math_verify
swallows ``MemoryError`` and answers False, gives ``timeout`` with detail ``memory_limit``; the
worker then exits to be replaced). Work stuck in C code ignores the alarm: the pool's hard kill
(:class:`kit.reward.pool.Verifier`) ends it. The worker dies with its parent (``PDEATHSIG``)
and exits when stdin closes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import signal
import sys
import time


_NEAR_CAP = 2 * 1024 * 1024  # a peak this close to RLIMIT_AS counts as hitting it


class SoftTimeout(BaseException):
    """Raised by the soft alarm; a BaseException so library ``except Exception`` cannot eat it."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise SoftTimeout()


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:
        os._exit(0)


def _grade(grade_math, req: dict) -> tuple[str, str]:
    try:
        signal.setitimer(signal.ITIMER_REAL, max(0.01, float(req["soft_s"])))
        try:
            return grade_math(req["gold"], req["answer"])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except SoftTimeout:
        return "timeout", "soft_alarm"
    except MemoryError:
        return "timeout", "memory_limit"
    except RecursionError:
        return "parse_error", "recursion"
    except Exception as e:  # a crash inside sympy on odd input is a parse problem, scored 0
        return "parse_error", f"exception:{type(e).__name__}"


def _vm_peak_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmPeak"))
    except (OSError, StopIteration, ValueError):
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--memory-mb", type=int, default=1024)
    args = ap.parse_args(argv)
    _die_with_parent()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from kit.reward.mathcheck import grade_math

    grade_math("1", "1")  # warm the parser caches before declaring ready
    cap = args.memory_mb * 1024 * 1024 if args.memory_mb > 0 else 0
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a notebook's Ctrl-C is for the parent
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req, reason, detail = {}, "timeout", "soft_alarm"
        try:
            req = json.loads(line)
            t0 = time.perf_counter()
            reason, detail = _grade(grade_math, req)
            if cap and _vm_peak_bytes() >= cap - _NEAR_CAP:
                # math_verify catches MemoryError itself and answers False: a peak at the cap
                # means the verdict is not trustworthy
                reason, detail = "timeout", "memory_limit"
            out = {"id": req["id"], "reason": reason, "detail": detail,
                   "seconds": time.perf_counter() - t0}
            proto.write(json.dumps(out) + "\n")
        except SoftTimeout:  # an alarm that fired between two statements above
            proto.write(json.dumps({"id": req.get("id"), "reason": "timeout", "detail": "soft_alarm",
                                    "seconds": 0.0}) + "\n")
        if reason == "timeout" and detail == "memory_limit":
            return 0  # the heap may be fragmented or half-built: let the pool replace us
    return 0


if __name__ == "__main__":
    sys.exit(main())
