"""Tool output that depended on the worker is the same on every worker of every pool (issue #41):
one hash seed for all workers, and address randomisation off, so what exists before a call's child
is forked (builtins, pre-imported modules) sits at the same address everywhere."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit.config import SandboxConfig
from kit.sandbox import SyncSandboxPool, isolation

pytestmark = pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")

HASH_ORDER = "print({'apple', 'banana', 'cherry', 'date', 'elder'}, hash('abc'), frozenset('xyzw'))"
PERSONALITY = "import ctypes\nctypes.CDLL(None).personality(0xffffffff)"  # reads it (a call cannot read its /proc/self)
LAYOUT = ("import math\nprint(id(None), id(len), id(int), id(math.gcd),\n"
          "      [f.__name__ for f in {abs, max, min, len, sum, sorted, int, str, float}])")


def _outputs(isolation_kind: str) -> list[tuple[str, str, str]]:
    """(hash-order output, layout output, personality) of 6 calls on each of two pool starts."""
    cfg = SandboxConfig(isolation=isolation_kind, timeout_s=5.0, cpu_s=5.0, memory_mb=768, num_workers=2,
                        preimport=())
    out = []
    for _ in range(2):
        with SyncSandboxPool(cfg) as pool:
            rs = pool.run_batch([HASH_ORDER, LAYOUT, PERSONALITY] * 3)
        assert all(r.status == "ok" for r in rs), rs
        out += [(rs[i].stdout, rs[i + 1].stdout, rs[i + 2].value) for i in range(0, len(rs), 3)]
    return out


@pytest.fixture(scope="module")
def outputs():
    return _outputs("bwrap")


def test_hash_order_is_the_same_on_every_worker_and_pool_start(outputs):
    assert len({o[0] for o in outputs}) == 1, outputs
    # and it is PYTHONHASHSEED=0's: what this interpreter prints under the same seed
    ref = subprocess.run([sys.executable, "-c", HASH_ORDER], env={"PYTHONHASHSEED": "0"}, capture_output=True,
                         text=True, check=True).stdout
    assert outputs[0][0] == ref


def test_addresses_of_what_exists_before_the_fork_are_the_same_everywhere(outputs):
    """id() of builtins and of pre-imported modules' objects repeats across 2 workers x 2 pool
    starts, and so does a set of builtins' order. Objects a call builds itself (its classes,
    instances, functions, even ``object()``) did not: the worker's heap differs from call to
    call, which is why kit.sandbox.step_cache refuses output with an address in it."""
    assert len({o[1] for o in outputs}) == 1, outputs
    assert all(int(o[2]) & isolation.ADDR_NO_RANDOMIZE for o in outputs), outputs


def test_isolation_none_runs_workers_the_same_way(recwarn):
    outs = _outputs("none")
    assert len({o[0] for o in outs}) == 1 and len({o[1] for o in outs}) == 1, outs


def test_the_boot_code_turns_address_randomisation_off_by_re_executing_once():
    """It sets the personality flag and execs the same command line, which finds the flag set and
    goes on (an exec loop would hang here)."""
    code = isolation.FIXED_LAYOUT + "\nprint(int(open('/proc/self/personality').read(), 16) & 0x40000)"
    once = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert once == f"{isolation.ADDR_NO_RANDOMIZE}\n"



CREATED = ("class A: pass\na = A()\nprint(a, a, (x for x in 'ab'), map(len, []))\n"
           "def f(): pass\nprint(f)\nprint(hex(2**44 + 5))")
VALUE_ONLY = "def g(): pass\ng"
WARM_UP = "xs = [object() for _ in range({n})]\nprint(len(xs))"


def test_addresses_of_what_a_call_creates_are_renumbered_in_order_of_appearance():
    """Objects a call builds sit where its worker's heap had room, which depends on the calls the
    worker served before: each worker here first runs other calls (different allocations), then the
    same calls. Their output is the same on every worker of two pool starts, with the addresses of
    default reprs renumbered (kit.sandbox.outcome.canonical_addresses): the same object keeps its
    number, a call's value is renumbered too, and a hex number the code computed is left alone."""
    cfg = SandboxConfig(isolation="bwrap", timeout_s=5.0, cpu_s=5.0, memory_mb=768, num_workers=2, preimport=())
    seen = set()
    for start in range(2):
        with SyncSandboxPool(cfg) as pool:
            pool.run_batch([WARM_UP.format(n=10 ** (k + start)) for k in range(4)])
            rs = pool.run_batch([CREATED, VALUE_ONLY] * 3)
        assert all(r.status == "ok" for r in rs), rs
        seen |= {tuple((r.stdout, r.value) for r in rs[i:i + 2]) for i in range(0, len(rs), 2)}
    assert len(seen) == 1, seen
    (stdout, _), (_, value) = seen.pop()
    first, second, third = stdout.splitlines()
    assert first.count(" at 0x7f0000000000>") == 2, first  # a, printed twice: one number
    assert "<generator object <genexpr> at 0x7f0000000040>" in first and "<map object at 0x7f0000000080>" in first
    assert second.startswith("<function f at 0x7f00000000c0>") and third == "0x100000000005", stdout
    assert value.startswith("<function g at 0x7f0000000000>"), value
