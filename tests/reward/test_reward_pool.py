"""The killable worker pool: hard kill and replacement, memory cap, clear errors."""

import time

import pytest

from kit.reward import Verifier, VerifierError, count_reasons, verify_batch

# sympy works on this for 5 s (math_verify's own limit ends it; measured here), 10x the 0.5 s pool
# timeouts below however fast the machine is. Degree 300 took ~2 s once and 0.4 s on a faster hour.
SLOW = r"\boxed{\frac{(x+1)^{2000}-(x-1)^{2000}}{x}}"
BIG = r"\boxed{\frac{(x+1)^{900}-(x-1)^{900}}{x}}"  # expands to hundreds of big-integer terms


def test_hard_kill_replaces_the_worker_and_the_pool_stays_healthy():
    # soft alarm set after the hard deadline, so only the parent's SIGKILL can end the item
    with Verifier(1, timeout_s=0.5, soft_fraction=10.0) as v:
        assert v.verify("1", r"\boxed{\frac{2}{2}}").correct
        before = v.worker_pids()
        t = time.monotonic()
        verdict = v.verify("3", SLOW)
        assert time.monotonic() - t < 0.5 * v.wall_factor  # 0.5 CPU s, not a wall-clock expiry (issue #41)
        assert (verdict.correct, verdict.reason, verdict.detail) == (False, "timeout", "hard_kill")
        assert v.stats["hard_kills"] == 1
        assert v.verify("1", r"\boxed{\frac{3}{3}}").correct  # a fresh worker answers
        assert v.worker_pids() != before


def test_soft_alarm_keeps_the_worker():
    with Verifier(1, timeout_s=0.5) as v:
        v.verify("1", r"\boxed{\frac{2}{2}}")
        pid = v.worker_pids()
        verdict = v.verify("3", SLOW)
        assert verdict.reason == "timeout" and verdict.detail == "soft_alarm"
        assert v.worker_pids() == pid and v.stats["hard_kills"] == 0


def _vm_size_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmSize")) // 1024


def test_memory_cap_is_a_timeout_and_the_worker_is_replaced():
    with Verifier(1, timeout_s=20.0) as probe:  # measure a warm worker's address space here
        probe.verify("1", r"\boxed{\frac{2}{2}}")
        base = _vm_size_mb(probe.worker_pids()[0])
    with Verifier(1, timeout_s=20.0, memory_mb=base + 8) as v:
        assert v.verify("1", r"\boxed{\frac{2}{2}}").correct  # small items fit under the cap
        t = time.monotonic()
        verdict = v.verify("3", BIG)  # needs tens of MB more
        assert (verdict.reason, verdict.detail) == ("timeout", "memory_limit")
        assert time.monotonic() - t < 10.0  # well before the 20 s limit
        assert v.verify("1", r"\boxed{\frac{3}{3}}").correct  # replaced worker
        assert v.stats["restarts"] >= 1


def test_batch_counts_reasons_and_keeps_order(pool):
    pairs = [("1", r"\boxed{\frac{2}{2}}"), ("2", r"\boxed{3}"), ("3", "none"), ("5", r"\boxed{5\sqrt(3)}"),
             (r"\frac12", r"\boxed{0.5}")]
    vs = pool.verify_batch(pairs)
    assert [v.reason for v in vs] == ["correct", "wrong", "no_answer", "parse_error", "correct"]
    assert count_reasons(vs) == {"correct": 2, "wrong": 1, "no_answer": 1, "timeout": 0, "parse_error": 1,
                                 "infra_error": 0}


def test_bad_input_names_the_pair(pool):
    with pytest.raises(TypeError, match=r"pairs\[1\]: response must be str"):
        pool.verify_batch([("1", r"\boxed{1}"), ("2", None)])
    with pytest.raises(TypeError, match="gold must be str or int"):
        verify_batch([(1.5, r"\boxed{1}")], workers=1)


def test_closed_pool_raises():
    v = Verifier(1)
    v.start()
    v.close()
    with pytest.raises(VerifierError, match="closed"):
        v.submit("1", "1").result(timeout=5)


def test_workers_that_cannot_start_mark_the_pool_broken(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    v = Verifier(1, max_start_failures=2)
    monkeypatch.setattr("kit.reward.dispatch._REPO_ROOT", "/nonexistent")
    monkeypatch.setattr("sys.executable", "/bin/false")
    with v:
        assert v.wait_ready(30) is False
        with pytest.raises(VerifierError, match="fail to start"):
            v.submit("1", "2").result(timeout=30)


def test_a_missing_interpreter_fails_callers_instead_of_hanging(monkeypatch):
    monkeypatch.setattr("sys.executable", "/nonexistent/python")
    with Verifier(1) as v:
        with pytest.raises(VerifierError, match="crashed|closed"):
            v.submit("1", "2").result(timeout=30)
        assert not v.alive


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_a_bad_per_call_timeout_is_rejected_and_the_pool_survives(pool, bad):
    # review #4: 0 silently meant the default, -1 killed a worker at once, inf crashed the
    # dispatcher (select cannot wait forever) and broke the pool for every caller
    kills = pool.stats["hard_kills"]
    with pytest.raises(ValueError, match="timeout_s must be a finite number"):
        pool.verify(r"\frac12", r"\boxed{\frac{2}{4}}", timeout_s=bad)
    with pytest.raises(ValueError, match="timeout_s must be a finite number"):
        pool.verify_batch([("1", r"\boxed{1}")], timeout_s=bad)
    with pytest.raises(ValueError, match="timeout_s must be a finite number"):
        pool.submit("1", "2", timeout_s=bad)
    with pytest.raises(TypeError, match="timeout_s must be a number"):
        pool.verify("1", r"\boxed{1}", timeout_s="5")
    assert pool.alive and pool.stats["hard_kills"] == kills
    assert pool.verify(r"\frac12", r"\boxed{\frac{2}{4}}", timeout_s=3).correct


def test_constructor_rejects_an_infinite_timeout():
    with pytest.raises(ValueError, match="timeout_s"):
        Verifier(1, timeout_s=float("inf"))


@pytest.mark.parametrize("kw,name", [({"memory_mb": -1}, "memory_mb"), ({"recycle_after": 0}, "recycle_after"),
                                     ({"max_start_failures": 0}, "max_start_failures"),
                                     ({"soft_fraction": 0.0}, "soft_fraction"), ({"soft_fraction": float("nan")}, "soft_fraction"),
                                     ({"timeout_s": 0}, "timeout_s")])
def test_verifier_limits_must_be_positive_naming_the_argument(kw, name):
    """Issue #30: every verifier limit is refused at construction when it is not > 0."""
    with pytest.raises(ValueError, match=name):
        Verifier(1, **kw)
