"""``multiprocessing`` inside a call: a private, writable, size-capped ``/dev/shm``, emptied after each
call like ``/tmp`` (issue #30: it was the read-only ``/dev`` of bwrap, so ``multiprocessing.Lock()``
raised PermissionError), and a ``__main__`` the call's functions are found in (Pool pickles them)."""

import os

import pytest

from kit.config import SandboxConfig
from kit.sandbox import SyncSandboxPool, ToolCall, isolation
from kit.sandbox.isolation import SHM_BYTES

pytestmark = pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")

SQUARES = "def sq(x):\n    return x * x\n"
NPROCS = "import os\nprint(sum(n.isdigit() for n in os.listdir('/proc')))"


@pytest.fixture(scope="module")
def pool1():
    cfg = SandboxConfig(isolation="bwrap", timeout_s=5.0, cpu_s=5.0, memory_mb=768, max_output_chars=2000,
                        max_procs=32, num_workers=1, preimport=())  # the limits of conftest.sandbox_cfg
    with SyncSandboxPool(cfg) as p:
        yield p


def test_multiprocessing_pool_and_process_pool_executor_work_in_a_call(pool1):
    rs = pool1.run_batch([
        ToolCall("import multiprocessing\nmultiprocessing.Lock()\n'lock'"),
        ToolCall(SQUARES + "import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(p.map(sq, range(6)))"),
        ToolCall(SQUARES + "from concurrent.futures import ProcessPoolExecutor\n"
                 "with ProcessPoolExecutor(2) as ex:\n    print(list(ex.map(sq, range(6))))"),
    ])
    assert [(r.status, r.stdout or r.value) for r in rs] == [
        ("ok", "'lock'"), ("ok", "[0, 1, 4, 9, 16, 25]\n"), ("ok", "[0, 1, 4, 9, 16, 25]\n")], [r.stderr[-300:] for r in rs]


def test_pool_workers_stay_under_the_calls_limits(pool1):
    before = pool1.run(NPROCS)
    # memory: a pool worker has the call's RLIMIT_AS (768 MB); its MemoryError comes back to the call
    big = pool1.run(ToolCall("import multiprocessing as mp\ndef big(n):\n    return len(bytearray(n))\n"
                             "with mp.Pool(2) as p:\n    p.apply(big, (4 << 30,))"))
    assert big.status == "memory_limit" and "MemoryError" in big.stderr, (big.status, big.stderr[-300:])
    # processes: more pool workers than max_procs (32) cannot start
    many = pool1.run(ToolCall("import multiprocessing as mp\nmp.Pool(40)"))
    assert many.status == "error" and ("BlockingIOError" in many.stderr or "Resource temporarily" in many.stderr), \
        many.stderr[-300:]
    # time: pool workers still running at the wall-clock limit are killed with the call
    slow = pool1.run(ToolCall("import multiprocessing as mp, time\nwith mp.Pool(2) as p:\n    p.map(time.sleep, [30, 30])",
                              timeout_s=1.0))
    assert slow.status == "timeout" and slow.wall_s < 5
    after = pool1.run(NPROCS)
    assert after.stdout == before.stdout  # no pool process of those calls is left in the namespace


def test_dev_shm_is_capped_inside_the_call_and_emptied_after_it(pool1):
    name = f"kit_shm_cap_{os.getpid()}"
    # two 40 MiB files (each under RLIMIT_FSIZE's 64 MiB): the second fills the 64 MiB tmpfs
    fill = pool1.run(ToolCall(f"chunk = b'x' * (40 << 20)\nfor i in range(2):\n"
                              f"    open(f'/dev/shm/{name}_{{i}}', 'wb').write(chunk)"))
    assert fill.status == "error" and "No space left on device" in fill.stderr, fill.stderr[-300:]
    assert not any(n.startswith(name) for n in os.listdir("/dev/shm"))  # the host's /dev/shm is untouched
    left = pool1.run(ToolCall("import os\nopen('/dev/shm/left_behind', 'w').write('secret')\n"
                              "os.statvfs('/dev/shm').f_blocks * os.statvfs('/dev/shm').f_frsize"))
    assert left.status == "ok" and int(left.value) == SHM_BYTES
    nxt = pool1.run(ToolCall("import os\nos.listdir('/dev/shm')"))
    assert nxt.status == "ok" and nxt.value == "[]"  # neither the full files nor the left one are there
