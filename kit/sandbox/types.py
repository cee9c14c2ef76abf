"""The data that crosses the sandbox boundary: a call in, a result out (rStar2-Agent §3.1).

``ToolCall`` is what the model asked for (``execute_python_code_with_standard_io(code, input)``);
``FunctionCall`` runs an importable function in a worker instead (answer verification, report
§3.1 "offloads reward computation"); ``ToolResult`` is what comes back for either.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "error", "timeout", "memory_limit", "output_limit", "killed", "infra_error")
"""Every value ``ToolResult.status`` can take.

ok            the code ran to the end (or called ``sys.exit(0)``).
error         the code raised (traceback in ``stderr``) or exited non-zero; the model's mistake.
timeout       the call used its time: CPU time (``cpu_s``: SIGXCPU, or SIGKILL at the hard limit) or
              ``timeout_s`` of used time (its processes' CPU, or wall clock minus its waits for a
              CPU, sleeping and blocking included; :mod:`kit.sandbox.limits`). Load never makes one.
memory_limit  a ``MemoryError`` under the address-space cap (``memory_mb``).
output_limit  the call kept printing far past ``max_output_chars`` and was killed.
killed        the process died from a signal the sandbox did not send (segfault, abort, self-kill).
infra_error   the sandbox itself failed (a worker died twice, the pool closed, load starved the call
              of CPU past the wall-clock backstop twice); never the model's fault.
"""


def _check_timeout(t: Any) -> float | None:
    """None (the config's limit) or a finite number of seconds > 0; anything else is a caller bug
    that would otherwise reach (and crash) a worker."""
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise TypeError(f"timeout_s must be a number of seconds or None, got {type(t).__name__}")
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"timeout_s must be finite and > 0, got {t!r}")
    return float(t)


@dataclass(frozen=True)
class ToolCall:
    """One ``execute_python_code_with_standard_io`` call.

    Args:
        code: Python source; the last top-level expression's ``repr`` becomes ``value``.
        input: text fed to stdin (``input()``, ``sys.stdin.read()``).
        timeout_s: time limit for this call, seconds of used time (:mod:`kit.sandbox.limits`; the
            wall-clock backstop is a multiple of it); None = ``SandboxConfig.timeout_s``.
    """

    code: str
    input: str = ""
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.code, str):
            raise TypeError(f"ToolCall.code must be a str, got {type(self.code).__name__}")
        if self.input is None:
            object.__setattr__(self, "input", "")
        elif not isinstance(self.input, str):
            raise TypeError(f"ToolCall.input must be a str, got {type(self.input).__name__}")
        object.__setattr__(self, "timeout_s", _check_timeout(self.timeout_s))

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "code", "code": self.code, "input": self.input, "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class FunctionCall:
    """Run ``module:qualname(*args, **kwargs)`` in a forked worker child, e.g. a verifier.

    Arguments and the return value must be JSON-serialisable (dataclasses are converted with
    ``dataclasses.asdict``); the JSON-decoded return value lands in ``ToolResult.data``. The
    same limits as code calls apply, so a hung sympy comparison is killed at its time limit.
    """

    target: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or ":" not in self.target:
            raise ValueError(f"FunctionCall.target must be 'module:qualname', got {self.target!r}")
        object.__setattr__(self, "timeout_s", _check_timeout(self.timeout_s))

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "func", "target": self.target, "args": list(self.args),
                "kwargs": dict(self.kwargs), "timeout_s": self.timeout_s}


@dataclass
class ToolResult:
    """What one call produced.

    Fields:
        status: one of :data:`STATUSES`.
        stdout: captured standard output, capped at ``max_output_chars`` (middle cut, marker).
        stderr: traceback text (type, message, line number, source line) or captured stderr.
        value: ``repr`` of the last top-level expression, IPython-style, only when stdout is
            empty and the value is not None (report §3.4); else "".
        exit_code: the child's exit status; ``-N`` when killed by signal N; None if it never ran.
        wall_s: seconds from fork to reap in the worker (queueing not included).
        cpu_s: user + system CPU seconds of the call's process.
        truncated: stdout or stderr was cut.
        data: JSON-decoded return value of a :class:`FunctionCall`; None for code calls.
        timings: ``time.monotonic()`` stamps of the call's phases (queue, fork, execution, ...)
            and the worker's work between calls, for benchmarks and the self-test;
            :func:`kit.sandbox.timings.phases` turns them into durations. None for infra errors;
            with Ray on several machines the stamps mix two machines' clocks.
        cached: the result of an earlier identical call of the same step, not a run of this one
            (:class:`kit.sandbox.step_cache.StepCache`; ``wall_s``, ``cpu_s`` are 0 and ``timings`` None then).
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    value: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    truncated: bool = False
    data: Any = None
    timings: dict | None = field(default=None, repr=False, compare=False)
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def output(self) -> str:
        """What a notebook cell would show: stdout, else the last value."""
        return self.stdout if self.stdout else self.value

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def infra(cls, reason: str) -> ToolResult:
        return cls(status="infra_error", stderr=f"sandbox infrastructure error: {reason}")
