"""Huge pages for the worker heap (issue #18) are best effort: without transparent huge pages
(THP off, a kernel before MADV_COLLAPSE, no glibc) nothing fails and calls run as before."""

import ctypes

import pytest

from kit.sandbox import hugepages, isolation


class NoThpLibc:
    """madvise as on a kernel without THP: every advice fails with EINVAL."""

    def __init__(self):
        self.calls = []

    def madvise(self, start, length, advice):
        self.calls.append(advice)
        ctypes.set_errno(22)
        return -1


def test_without_thp_collapse_reports_nothing_and_does_not_raise(monkeypatch):
    fake = NoThpLibc()
    monkeypatch.setattr(hugepages, "_LIBC", fake)
    assert hugepages.collapse_heap() == 0
    assert set(fake.calls) == {hugepages.MADV_HUGEPAGE, hugepages.MADV_COLLAPSE}
    monkeypatch.setattr(hugepages, "_LIBC", None)
    assert hugepages.collapse_heap() == 0


def test_unreadable_maps_is_no_collapse(monkeypatch):
    def no_maps(*a, **k):
        raise PermissionError("/proc/self/maps")

    monkeypatch.setattr(hugepages, "open", no_maps, raising=False)
    assert hugepages.collapse_heap() == 0


@pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")
def test_a_worker_with_thp_disabled_serves_calls(make_cfg, monkeypatch):
    """PR_SET_THP_DISABLE (inherited through fork and exec) makes MADV_COLLAPSE fail in the
    workers, as on a machine with THP off: they start, report 0 MB collapsed, and serve."""
    from kit.sandbox import SyncSandboxPool, ToolCall

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(41, 1, 0, 0, 0) != 0:  # PR_SET_THP_DISABLE, for this test process and its children
        pytest.skip("PR_SET_THP_DISABLE is not available")
    try:
        with SyncSandboxPool(make_cfg(num_workers=1)) as pool:
            w = next(iter(pool.pool._executor.workers.values()))
            assert w.info["huge_mb"] == 0, w.info
            rs = pool.run_batch([ToolCall("print(6 * 7)"), ToolCall("x = bytearray(1 << 40)")] * 3)
            assert [r.status for r in rs] == ["ok", "memory_limit"] * 3 and rs[0].stdout == "42\n"
    finally:
        libc.prctl(41, 0, 0, 0, 0)
