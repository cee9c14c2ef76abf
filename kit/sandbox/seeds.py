"""Random seeds of a sandbox call, derived from the call itself (issue #41).

A call's child is forked from a warm worker and so starts with the worker's generator states: left
alone, every call of one worker would draw the same numbers, and two workers different ones. The
child seeds them from :func:`call_seed` before the call's code runs (:func:`seed_call`), so the same
code with the same input draws the same numbers on any worker of any run, and different code or input
draws unrelated ones. Clock reads (``time.time``, ``datetime.now``) and OS randomness stay not
repeatable (see :func:`seed_call`).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys


def call_seed(req: dict) -> bytes:
    """The random seed of one request: a BLAKE2b digest (32 bytes) of what the call runs and reads.

    Args:
        req: the wire request: ``kind`` "code" with ``code`` and ``input``, or "func" with ``target``,
            ``args`` and ``kwargs``. Nothing else of it (``timeout_s``) enters the seed.
    Returns:
        The digest. It is a function of the request's text only (JSON with sorted keys; never Python's
        salted ``hash``), so the same code with the same input gets the same seed on every worker of
        every run, and a different code or input an unrelated one.

    Example:
        >>> call_seed({"kind": "code", "code": "1", "input": ""}) == call_seed({"kind": "code", "code": "1"})
        True
    """
    if req.get("kind") == "func":
        what = ["func", req.get("target"), req.get("args", []), req.get("kwargs", {})]
    else:
        what = ["code", req.get("code", ""), req.get("input") or ""]
    text = json.dumps(what, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).digest()


def seed_call(seed: bytes) -> None:
    """Seed every generator a call's code may draw from without seeding it itself: ``random``'s
    module functions, numpy's legacy global ``np.random`` (``np.random.rand``, ``np.random.seed``'s
    state) and sympy's own ``sympy.core.random`` (``randprime``, ``randMatrix``), from ``seed``
    (:func:`call_seed`). Forked children share the worker's RNG state, so without this every call of
    a worker would draw the same numbers and two workers different ones.

    Not seeded, so not repeatable: ``np.random.default_rng()`` / ``SeedSequence()`` without a seed,
    ``random.Random()`` / ``random.seed()`` without an argument, ``random.SystemRandom``, ``secrets``,
    ``os.urandom``, ``uuid.uuid4``, and ``random`` in processes the call forks (Python reseeds them
    from the OS at fork).
    """
    random.seed(int.from_bytes(seed, "big"))
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed([int.from_bytes(seed[i:i + 4], "little") for i in range(0, len(seed), 4)])
        except Exception:  # noqa: BLE001 - a broken numpy is the call's problem, not the worker's
            pass
    sp = sys.modules.get("sympy.core.random")
    if sp is not None and isinstance(getattr(sp, "rng", None), random.Random):
        sp.rng.seed(b"sympy" + seed)
