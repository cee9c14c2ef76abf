"""The async client: infra errors are never lost, retries, back-pressure, sync wrappers."""

import asyncio
import warnings

import pytest

from kit.config import ConfigError, SandboxConfig, load
from kit.sandbox import SandboxPool, SandboxUnavailable, SyncSandboxPool, ToolCall, isolation, run_sync
from kit.sandbox.worker import SCIENCE_PREIMPORTS


async def test_worker_death_is_retried_then_infra_error(make_cfg):
    async with SandboxPool(make_cfg(num_workers=2)) as pool:
        ex = pool._executor

        async def killer(times):
            killed = []
            for _ in range(times):
                for _ in range(500):  # wait until the call is in flight on a worker not yet killed
                    busy = [w for w in ex.workers.values()
                            if w.alive and w not in ex.idle._queue and w not in killed]
                    if busy:
                        await asyncio.sleep(0.1)
                        for w in busy:
                            await w.kill()  # the worker of the call in flight
                        killed += busy
                        break
                    await asyncio.sleep(0.02)

        # killed once: the call is retried on another worker and succeeds
        r, _ = await asyncio.gather(pool.run(ToolCall("import time\ntime.sleep(1)\nprint('ok')")), killer(1))
        assert r.status == "ok" and r.stdout == "ok\n"
        # killed on both attempts: infra_error, not a model error, and not lost
        r, _ = await asyncio.gather(pool.run(ToolCall("import time\ntime.sleep(1)")), killer(2))
        assert r.status == "infra_error" and "infrastructure" in r.stderr
        st = pool.stats()
        assert st["worker_deaths"] >= 3 and st["retries"] >= 2
        rs = await pool.run_batch(["1 + 1"] * 8)  # replaced workers serve again
        assert all(x.value == "2" for x in rs)


async def test_watchdog_replaces_idle_dead_worker(make_cfg):
    async with SandboxPool(make_cfg(num_workers=1)) as pool:
        w = next(iter(pool._executor.workers.values()))
        await w.kill()
        r = await pool.run("6 * 7")
        assert r.value == "42"


async def test_recycling_after_n_calls(make_cfg):
    async with SandboxPool(make_cfg(num_workers=1, recycle_after=5)) as pool:
        ex = pool._executor
        first = ex.workers[0]
        rs = await pool.run_batch([f"{i}" for i in range(6)])
        assert [r.value for r in rs] == [str(i) for i in range(6)] and pool.stats()["recycled"] == 1
        for _ in range(300):  # the old worker keeps serving while its replacement starts
            if ex.workers[0] is not first:
                break
            await asyncio.sleep(0.1)
        assert ex.workers[0].generation == 1
        rs = await pool.run_batch([f"{i}" for i in range(6)])
        assert [r.value for r in rs] == [str(i) for i in range(6)]
        assert not first.alive  # retired once the new worker took over


async def test_backpressure_and_many_coroutines(make_cfg):
    cfg = make_cfg(num_workers=2, batch_size=4, send_workers=2)
    async with SandboxPool(cfg) as pool:
        assert pool._queue.maxsize == 2 * 4 * 2
        rs = await asyncio.gather(*(pool.run(ToolCall(f"{i} * 2")) for i in range(300)))
        assert [r.value for r in rs] == [str(2 * i) for i in range(300)]


async def test_close_answers_pending_calls(make_cfg):
    pool = await SandboxPool(make_cfg(num_workers=1)).start()
    task = asyncio.ensure_future(pool.run_batch([ToolCall("import time\ntime.sleep(0.3)")] * 6))
    await asyncio.sleep(0.5)
    await pool.close()
    rs = await asyncio.wait_for(task, 10)
    assert {r.status for r in rs} <= {"ok", "infra_error"} and len(rs) == 6


async def test_run_sync_inside_a_running_loop(make_cfg):
    # a notebook cell: an event loop is already running in this thread
    rs = run_sync(["sum(range(4))", ToolCall("print(input())", input="hey")], make_cfg(num_workers=1))
    assert rs[0].value == "6" and rs[1].stdout == "hey\n"


def test_run_sync_plain(make_cfg):
    assert run_sync("2 ** 10", make_cfg(num_workers=1))[0].value == "1024"


def _our_sandbox_uids_alive() -> list[int]:
    import os

    base = isolation.worker_uid(0)
    if base is None:
        return []
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                uid = os.stat(f"/proc/{name}").st_uid
            except OSError:
                continue
            if base <= uid < base + 256:
                found.append(int(name))
    return found


def test_nothing_survives_the_pool(make_cfg):
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\nprint('x')"
    rs = run_sync([daemon, ToolCall("import time\ntime.sleep(300)", timeout_s=0.5)], make_cfg(num_workers=1))
    assert [r.status for r in rs] == ["ok", "timeout"]
    assert _our_sandbox_uids_alive() == []


def test_closing_a_sync_pool_closes_its_loop_and_frees_its_descriptors(make_cfg):
    """Issue #30: ``SyncSandboxPool.close()`` left its private loop open (3 descriptors each until
    garbage collection; many short-lived pools ran out of descriptors)."""
    import gc
    import os

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    gc.collect()
    before, pools = fds(), []
    for _ in range(2):
        with SyncSandboxPool(make_cfg(num_workers=1)) as p:
            assert p.run("print(1)").stdout == "1\n"
        pools.append(p)  # kept alive: garbage collection must not be what frees them
    assert all(p._loop.is_closed() for p in pools)
    assert fds() <= before
    pools[0].close()  # a second close is a no-op


def test_missing_bwrap_is_a_clear_error(make_cfg, monkeypatch):
    monkeypatch.setattr(isolation, "bwrap_path", lambda: None)
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        run_sync("1", make_cfg(num_workers=1))


def test_isolation_none_warns_loudly_and_still_limits(make_cfg):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs = run_sync(["x = bytearray(10**12)", "import time\ntime.sleep(30)", "7 * 6"],
                      make_cfg(num_workers=1, isolation="none", timeout_s=1.0))
    assert any("WITHOUT" in str(w.message) for w in caught)
    assert [r.status for r in rs] == ["memory_limit", "timeout", "ok"]


async def test_calls_abandoned_while_queued_are_not_executed(make_cfg):
    """Callers that time out or are cancelled while their call waits for a worker: the call is
    skipped, not run (20 abandoned 0.5 s calls used to hold 2 workers for 5 s)."""
    async with SandboxPool(make_cfg(num_workers=2)) as pool:
        gave_up = await asyncio.gather(*(asyncio.wait_for(pool.run(ToolCall("import time\ntime.sleep(0.5)")), 0.01)
                                         for _ in range(20)), return_exceptions=True)
        assert all(isinstance(g, TimeoutError | asyncio.TimeoutError) for g in gave_up)
        t0 = asyncio.get_running_loop().time()
        assert (await pool.run("6 * 7")).value == "42"
        assert asyncio.get_running_loop().time() - t0 < 2.5


async def test_preimport_sets_what_the_workers_import(make_cfg):
    """``SandboxConfig.preimport``: the default workers hold numpy/scipy/sympy warm; the tiny
    profile's ``preimport = []`` leaves them out (cheaper forks), and a call that imports one
    still works, paying the import."""
    probe = "import sys\nprint(sorted(m for m in ('numpy', 'scipy', 'sympy') if m in sys.modules))"
    async with SandboxPool(make_cfg(num_workers=1)) as pool:
        r = await pool.run(probe)
        assert r.stdout == "['numpy', 'scipy', 'sympy']\n"
    async with SandboxPool(make_cfg(num_workers=1, preimport=()), preload=("fractions", "numpy")) as pool:
        r = await pool.run(probe)
        assert r.stdout == "['numpy']\n"  # the pool's own extras still load
    async with SandboxPool(make_cfg(num_workers=1, preimport=())) as pool:
        rs = await pool.run_batch([probe, "import math\nprint(math.gcd(12, 18))", "import sympy\nprint(sympy.factorint(12))"])
        assert [x.stdout for x in rs] == ["[]\n", "6\n", "{2: 2, 3: 1}\n"]


def test_tiny_profile_preimports_nothing_the_paper_profiles_keep_the_default():
    assert load("tiny", write=False).sandbox.preimport == ()
    assert load("paper-14b", write=False).sandbox.preimport == SandboxConfig().preimport


def test_the_config_default_is_the_worker_s_documented_science_list():
    """``SandboxConfig.preimport``'s default and ``kit.sandbox.worker.SCIENCE_PREIMPORTS`` (what the
    bare-fork baseline imports by default and the docs price) are written twice: they must agree."""
    assert SandboxConfig().preimport == SCIENCE_PREIMPORTS


@pytest.mark.parametrize("override", [{"sandbox.preimport": ["numpy", ""]}, ["sandbox.preimport=numpy,[]"],
                                      {"sandbox.preimport": ["numpy scipy"]}, {"sandbox.preimport": ["scipy."]}])
def test_a_malformed_preimport_name_fails_at_load_naming_the_entry(override):
    """``""``, ``"[]"`` (TOML's empty list typed on a command line) or two names in one string used
    to load fine and only print a line in each worker's unread log."""
    with pytest.raises(ConfigError, match=r"sandbox\.preimport\[\d\]: .* is not a module name"):
        load("tiny", override, write=False)
    assert load("tiny", ["sandbox.preimport="], write=False).sandbox.preimport == ()  # the CLI's empty list


@pytest.mark.parametrize("name", ["nump", "numpy.nolinalg", "nump.linalg"])
async def test_a_preimport_that_does_not_import_stops_the_pool_naming_the_key(make_cfg, name):
    """A typo in ``sandbox.preimport`` used to start the pool anyway (the worker logged it where
    nobody reads): every call using the module then paid its import. The pool's own extras
    (``preload``) stay best-effort, as before."""
    with pytest.raises(ConfigError, match=rf"sandbox\.preimport: '{name}' does not import.*ModuleNotFoundError"):
        async with SandboxPool(make_cfg(num_workers=1, preimport=("math", name))):
            pass
    async with SandboxPool(make_cfg(num_workers=1, preimport=()), preload=(name,)) as pool:
        assert (await pool.run("6 * 7")).value == "42"


def test_a_user_namespace_that_maps_only_its_root_gives_no_call_uid(tmp_path, monkeypatch):
    """``unshare --map-root-user`` (a non-root user's Ray or VERL session): root there, but no other uid exists,
    so chown to a dedicated call uid would fail (EINVAL); the worker keeps its own uid instead."""
    whole, only_root = tmp_path / "whole", tmp_path / "only_root"
    whole.write_text("         0          0 4294967295\n")
    only_root.write_text("         0       1000          1\n")
    assert isolation.uid_mapped(100_000_000, str(whole)) and isolation.uid_mapped(0, str(only_root))
    assert not isolation.uid_mapped(100_000_000, str(only_root))
    assert isolation.uid_mapped(5, str(tmp_path / "missing"))  # no user namespaces: every uid exists
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(isolation, "uid_mapped", lambda uid: False)
    assert isolation.worker_uid(3) is None
    monkeypatch.setattr(isolation, "uid_mapped", lambda uid: True)
    assert isolation.worker_uid(3) is not None
