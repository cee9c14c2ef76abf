"""Issue #18: the self-test's latency check is relative to a bare fork measured on the spot;
phase stamps come back with each call; workers run the host's own kit checkout."""

import asyncio

import pytest

from kit.sandbox import SandboxPool, ToolCall, isolation
from kit.sandbox.hugepages import HUGE, anon_ranges
from kit.sandbox.selftest import P50_OVER_BARE, latency_verdict, measure_latency
from kit.sandbox.timings import OFF_PATH, PHASES, STAMPS, phases, summarize

needs_bwrap = pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")


def test_slow_machine_passes_when_the_sandbox_adds_nothing():
    """A busy machine: every call ~70 ms, bare fork and pool alike. The old fixed 50 ms p99
    check failed here although the sandbox cost nothing."""
    bare = [0.060 + 0.0001 * i for i in range(200)]
    kit = [t * 1.1 for t in bare]
    ok, detail = latency_verdict(kit, bare)
    assert ok, detail


def test_regression_on_a_fast_machine_fails():
    """A quiet machine where the pool is 3x a bare fork but still under 50 ms: caught."""
    bare = [0.004] * 100
    ok, detail = latency_verdict([0.012] * 100, bare)
    assert not ok and "ratios 3.00" in detail


def test_verdict_needs_both_sides():
    with pytest.raises(ValueError, match="both"):
        latency_verdict([], [0.01])


@needs_bwrap
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
async def test_selftest_catches_an_injected_regression(make_cfg, monkeypatch):
    """Every call held back 0.1 s on its way to the worker (a regression injected into the
    pool's request path) fails the relative latency check; the bare fork is unaffected."""
    from kit.sandbox import workers

    request = workers.WorkerProc.request

    async def slow_request(self, *args, **kwargs):
        await asyncio.sleep(0.1)
        return await request(self, *args, **kwargs)

    monkeypatch.setattr(workers.WorkerProc, "request", slow_request)
    async with SandboxPool(make_cfg(num_workers=2)) as pool:
        lat, bare_lat, rs, _ = await measure_latency(pool, 40, 2)
    assert all(r.status == "ok" for r in rs), rs[:2]
    ok, detail = latency_verdict(lat, bare_lat)
    assert not ok, detail
    assert sorted(lat)[len(lat) // 2] > P50_OVER_BARE * sorted(bare_lat)[len(bare_lat) // 2]


def test_phases_add_up_and_reject_bad_stamps():
    stamps = {k: float(i) * 0.5 for i, k in enumerate(STAMPS)}
    ph = phases(stamps)
    assert list(ph) == list(PHASES) and sum(ph.values()) == pytest.approx(stamps["done"] - stamps["enqueued"])
    assert phases({**stamps, "c_exec": 99.0}) is None  # out of order (a call scribbled on fd 3)
    assert phases({k: v for k, v in stamps.items() if k != "picked"}) is None
    assert phases({**stamps, "fork": "x", "c_start": float("nan")}) is None
    assert phases(None) is None
    summ = summarize([stamps, None, {**stamps, "off_prefork": 0.002}])
    assert summ["total"][0] == pytest.approx(1000 * (stamps["done"] - stamps["enqueued"]))
    assert summ["off_prefork"] == pytest.approx((2.0, 2.0))


@needs_bwrap
async def test_every_call_carries_ordered_stamps_and_off_path_work(make_cfg):
    async with SandboxPool(make_cfg(num_workers=1)) as pool:
        rs = [await pool.run(ToolCall("print(6 * 7)")) for _ in range(3)]
        forged = await pool.run(ToolCall("import os\nos.write(3, b'{\"t\": [9e9, 1.0, 2.0]}')\nprint(1)"))
    for r in rs:
        assert r.stdout == "42\n" and phases(r.timings) is not None, r.timings
        assert all(r.timings["enqueued"] <= r.timings[k] <= r.timings["done"] for k in STAMPS)
    # after the first call, the reply also says what the worker did between calls
    assert all(isinstance(rs[-1].timings[k], float) for k in OFF_PATH)
    assert forged.status == "ok" and forged.stdout == "1\n"  # a scribbled result pipe breaks nothing
    assert phases(forged.timings) is None


@needs_bwrap
def test_workers_run_the_hosts_own_kit_checkout(make_cfg):
    """``python -I -m kit.sandbox.worker`` imported whatever kit site-packages pointed at (another
    checkout's editable install), or none at all from a worktree."""
    from kit.sandbox import run_sync

    r = run_sync("import kit\nprint(kit.__file__)", make_cfg(num_workers=1))[0]
    assert r.stdout.strip() == str(isolation.kit_root()) + "/kit/__init__.py", r


def test_huge_page_ranges_are_aligned_anonymous_and_writable():
    maps = "\n".join([
        f"{0x400000:x}-{0x1000000:x} rw-p 00000000 00:00 0 ",  # anonymous: aligned inward
        f"{0x1000000:x}-{0x1600000:x} rw-p 00000000 00:00 0 [heap]",
        f"{0x2000000:x}-{0x3000000:x} r--p 00000000 08:01 7 /usr/lib/libc.so",  # a file
        f"{0x4000000:x}-{0x5000000:x} r--p 00000000 00:00 0 ",  # read-only
        f"{0x6000000:x}-{0x6100000:x} rw-p 00000000 00:00 0 ",  # smaller than a huge page
        f"{0x7000000:x}-{0x8000000:x} rw-p 00000000 00:00 0 [stack]",
    ])
    assert anon_ranges(maps) == [(0x400000, 0x1000000), (0x1000000, 0x1600000)]
    assert all(a % HUGE == 0 and b % HUGE == 0 for a, b in anon_ranges(maps))


@needs_bwrap
async def test_cleanup_after_the_reply_still_precedes_the_next_call(make_cfg):
    """Cleanup moved after the reply: a file, a daemon and an IPC segment left by one call are
    gone when the next call on the same (single) worker starts, even when it was already queued."""
    leave = ("import os, subprocess, ctypes\nopen('left.txt', 'w').write('x')\nopen('/tmp/left2', 'w').write('y')\n"
             "subprocess.Popen(['sleep', '100'], start_new_session=True)\n"
             "ctypes.CDLL(None).shmget(0, 4096, 0o1600)\nprint('left')")
    look = ("import os\nprint(sorted(os.listdir('.')), os.path.exists('/tmp/left2'), "
            "len([p for p in os.listdir('/proc') if p.isdigit()]), len(open('/proc/sysvipc/shm').readlines()) - 1)")
    async with SandboxPool(make_cfg(num_workers=1)) as pool:
        for _ in range(3):
            a, b = await asyncio.gather(pool.run(ToolCall(leave)), pool.run(ToolCall(look)))
            assert a.stdout == "left\n", a
            assert b.stdout == "[] False 3 0\n", b


def test_isolation_none_sweeps_before_the_reply(make_cfg):
    """Without bwrap nothing dies with the worker: a daemon a call left must be gone as soon as
    the pool that ran it is closed, even though the sweep otherwise runs after the reply."""
    import os

    from kit.sandbox import run_sync

    if os.geteuid() != 0 or isolation.worker_uid(0, "none") is None:
        pytest.skip("the per-call uid (and so the sweep outside bwrap) needs root and a world-readable Python")
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\nprint(os.getuid())"
    with pytest.warns(RuntimeWarning):
        r = run_sync(daemon, make_cfg(num_workers=1, isolation="none"))[0]
    uid = int(r.stdout)
    alive = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    alive.append(name)
            except OSError:
                pass
    assert alive == [], alive


def _descendants(root: int) -> dict[int, int]:
    """{pid: parent pid} of every live process below ``root``."""
    import os

    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parent[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p:
                out[c] = p
                todo.append(c)
    return out


@needs_bwrap
async def test_a_waiting_child_that_died_is_replaced_on_the_spot(make_cfg):
    """The child forked ahead of demand is killed from outside while the worker is idle: the
    next call forks another and succeeds, with no worker death and no retry."""
    import os

    async with SandboxPool(make_cfg(num_workers=1)) as pool:
        assert (await pool.run("1 + 1")).value == "2"
        w = next(iter(pool._executor.workers.values()))
        for _ in range(200):  # the next child is forked after the reply: wait for it
            tree = _descendants(w.proc.pid)  # bwrap -> bwrap (pid 1) -> worker -> waiting child
            waiting = [p for p in tree if tree[p] in tree and tree[tree[p]] in tree]
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert len(waiting) == 1, tree
        os.kill(waiting[0], 9)
        await asyncio.sleep(0.2)
        r = await pool.run(ToolCall("print(6 * 7)"))
        assert r.status == "ok" and r.stdout == "42\n", r
        st = pool.stats()
        assert st.get("worker_deaths", 0) == 0 and st.get("retries", 0) == 0, st


def test_throughput_check_is_relative_to_the_bare_fork():
    """Six CPU hogs beside the self-test: the pool made 42-46 calls/s, the bare fork about as
    many, and the fixed 50 calls/s floor failed the self-test. A quiet machine where the pool
    reaches 60 calls/s but a bare fork 190 passed the old floor: a regression, now caught."""
    from kit.sandbox.selftest import THROUGHPUT_VS_BARE, throughput_verdict

    ok, detail = throughput_verdict(42.0, 45.0)
    assert ok, detail
    ok, detail = throughput_verdict(60.0, 190.0)
    assert not ok and "ratio 0.32" in detail
    assert throughput_verdict(THROUGHPUT_VS_BARE * 100.0, 100.0)[0]
    with pytest.raises(ValueError, match="positive"):
        throughput_verdict(0.0, 10.0)
