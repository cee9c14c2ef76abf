"""Entry point of one verifier worker process: ``python -m kit.reward.worker --memory-mb N``.

Protocol (one JSON object per line): the worker writes ``{"ready": pid}`` once math_verify is
imported and warm, then reads requests ``{"id", "gold", "answer", "soft_s"}`` on stdin and
answers ``{"id", "reason", "detail", "seconds"}`` on the original stdout. Anything a library
prints goes to stderr, so it cannot corrupt the protocol.

Limits inside the worker: a soft alarm of ``soft_s`` CPU seconds of this process
(``setitimer(ITIMER_PROF)``, delivered as SIGPROF; CPU time, not wall time, so a loaded machine
does not change the verdict, issue #41) interrupts Python-level work and answers ``timeout``
while keeping the worker alive; ``RLIMIT_AS`` caps
its address space (a ``MemoryError``, or a peak within 2 MiB of the cap, since math_verify
swallows ``MemoryError`` and answers False, gives ``timeout`` with detail ``memory_limit``; the
worker then exits to be replaced). Work stuck in C code ignores the alarm: the pool's hard kill
at the item's CPU limit (:class:`kit.reward.pool.Verifier`, which reads this process's CPU time)
ends it. The worker dies with its parent (``PDEATHSIG``)
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

from kit.reward.verdict import EXIT_MEMORY

_NEAR_CAP = 2 * 1024 * 1024  # a peak this close to RLIMIT_AS counts as hitting it


class SoftTimeout(BaseException):
    """Raised by the soft alarm; a BaseException so library ``except Exception`` cannot eat it."""


SOFT_TIMER, SOFT_SIGNAL = signal.ITIMER_PROF, signal.SIGPROF  # user + system CPU time of this process


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
        signal.setitimer(SOFT_TIMER, max(0.01, float(req["soft_s"])))
        try:
            return grade_math(req["gold"], req["answer"])
        finally:
            signal.setitimer(SOFT_TIMER, 0)
    except SoftTimeout:
        return "timeout", "soft_alarm"
    except MemoryError:
        return "timeout", "memory_limit"
    except RecursionError:
        return "parse_error", "recursion"
    except Exception as e:  # a crash inside sympy on odd input is a parse problem, scored 0
        return "parse_error", f"exception:{type(e).__name__}"


def _vm_peak_bytes(status_fd: int) -> int:
    """VmPeak from an already open ``/proc/self/status`` (no file object to allocate)."""
    try:
        for line in os.pread(status_fd, 8192, 0).split(b"\n"):
            if line.startswith(b"VmPeak"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _reply(proto, req_id, reason: str, detail: str, seconds: float, exiting: bool = False) -> None:
    proto.write(json.dumps({"id": req_id, "reason": reason, "detail": detail, "seconds": seconds,
                            "exiting": exiting}) + "\n")


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
    status_fd = os.open("/proc/self/status", os.O_RDONLY) if os.path.exists("/proc/self/status") else -1
    reserve = bytearray(1 << 20)  # freed on MemoryError so the reply can still be written
    cap = args.memory_mb * 1024 * 1024 if args.memory_mb > 0 else 0
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(SOFT_SIGNAL, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a notebook's Ctrl-C is for the parent
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req_id, t0 = None, time.perf_counter()
        try:
            req = json.loads(line)
            req_id = req["id"]
            reason, detail = _grade(grade_math, req)
            if cap and status_fd >= 0 and _vm_peak_bytes(status_fd) >= cap - _NEAR_CAP:
                # math_verify catches MemoryError itself and answers False: a peak at the cap
                # means the verdict is not trustworthy
                reason, detail = "timeout", "memory_limit"
            exiting = detail == "memory_limit"
            _reply(proto, req_id, reason, detail, time.perf_counter() - t0, exiting)
        except SoftTimeout:  # an alarm that fired between two statements above
            _reply(proto, req_id, "timeout", "soft_alarm", time.perf_counter() - t0)
            exiting = False
        except MemoryError:
            del reserve
            try:
                _reply(proto, req_id, "timeout", "memory_limit", time.perf_counter() - t0, True)
            finally:
                os._exit(EXIT_MEMORY)
        if exiting:
            return EXIT_MEMORY  # the heap may be fragmented or half-built: let the pool replace us
    return 0


if __name__ == "__main__":
    sys.exit(main())
