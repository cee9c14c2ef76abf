"""kit.sched.balancer: routing decisions against engines with scripted KV reports (report §3.2)."""

import logging

import pytest

from kit.sched import KvCacheBalancer, StickyLeastInflight, check_report

CAP = 10_000


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make(n=3, **kw):
    clock = Clock()
    return KvCacheBalancer([f"e{i}" for i in range(n)], CAP, clock=clock, **kw), clock


def test_a_new_request_goes_to_the_engine_with_most_free_kv():
    bal, _ = make()
    bal.report("e0", 6_000)
    bal.report("e1", 1_000)
    bal.report("e2", 3_000)
    assert bal.acquire("a", prompt_tokens=500, max_new_tokens=1_000) == "e1"
    # e1 now counts 1000 + 1500 = 2500 < e2's 3000: still e1; then e2 ties below e1
    assert bal.acquire("b", 500, 1_000) == "e1"
    assert bal.acquire("c", 500, 1_000) == "e2"
    assert bal.load("e1") == 1_000 + 2 * 1_500


def test_requests_spread_by_tokens_not_by_count():
    bal, _ = make(2)
    for e in ("e0", "e1"):
        bal.report(e, 0)
    assert bal.acquire("long", 100, 8_000) == "e0"
    # VERL's fewest-in-flight would now pick e1 for one and e0 for the next; by KV, the short
    # ones all go to e1 until it holds as much as e0
    assert [bal.acquire(f"s{i}", 100, 1_000) for i in range(8)] == ["e1"] * 8  # 8 x 1100 vs 8100
    assert bal.acquire("s8", 100, 1_000) == "e0"


def test_a_trajectory_stays_on_the_engine_holding_its_prefix():
    bal, _ = make(2)
    bal.report("e0", 0)
    bal.report("e1", 0)
    e = bal.acquire("traj", 200, 1_000)
    bal.release("traj", e)
    assert e == "e0" and bal.acquire("x", 100, 200) == "e0"  # tie: engine order
    assert bal.load("e0") == 300 > bal.load("e1") == 0
    assert bal.acquire("traj", 1_400, 600) == "e0"  # next turn: home, though not the emptiest
    assert bal.counters["sticky"] == 1 and bal.counters["moves"] == 0


def test_a_trajectory_leaves_an_overloaded_home():
    bal, _ = make(2)
    bal.report("e0", 0)
    bal.report("e1", 0)
    assert bal.acquire("traj", 200, 800) == "e0"
    bal.release("traj", "e0")
    bal.report("e0", 9_000)  # home filled up meanwhile
    bal.report("e1", 2_000)
    lease = bal.lease("traj", 1_500, 800)
    assert lease.engine == "e1" and lease.moved
    assert bal.counters["moves"] == 1
    # within the threshold (load <= 1.25 x least + 0.05 x capacity) it stays
    bal.release("traj", "e1")
    bal.report("e0", 2_000)
    bal.report("e1", 2_400)  # home e1 is more loaded, but within 1.25 x 2000 + 500
    assert bal.acquire("traj", 1_500, 800) == "e1"


def test_a_home_that_cannot_fit_the_request_is_left():
    bal, _ = make(2, balance_rel=10.0, balance_abs=1.0)  # threshold never trips: only the fit rule
    bal.report("e0", 0)
    bal.report("e1", 0)
    assert bal.acquire("t", 100, 100) == "e0"
    bal.release("t", "e0")
    bal.report("e0", 9_500)
    bal.report("e1", 8_000)
    assert bal.acquire("t", 1_000, 500) == "e1"  # 1500 fits in e1's 2000, not in e0's 500


def test_an_over_committed_engine_is_avoided():
    bal, _ = make(2)
    bal.report("e0", 14_000)  # queued beyond its pool
    bal.report("e1", 9_000)
    assert bal.acquire("a", 100, 100) == "e1"
    assert bal.counters["bad_reports"] == 0


def test_never_held_back_even_when_nothing_fits():
    bal, _ = make(2)
    bal.report("e0", 9_900)
    bal.report("e1", 9_950)
    assert [bal.acquire(f"r{i}", 5_000, 5_000) for i in range(3)] == ["e0", "e1", "e0"]


def test_requests_routed_after_a_report_count_on_top_of_it():
    bal, clock = make(2)
    bal.report("e0", 1_000)
    bal.report("e1", 2_000)
    assert bal.acquire("a", 1_500, 0) == "e0"  # e0: 1000 + 1500
    assert bal.load("e0") == 2_500
    bal.report("e0", 2_600)  # the engine now holds it: not counted twice
    assert bal.load("e0") == 2_600
    clock.t = 11.0  # reports older than report_max_age_s (10 s): outstanding tokens only
    assert bal.load("e0") == 1_500 and bal.load("e1") == 0


@pytest.mark.parametrize("bad", [None, "lots", float("nan"), float("inf"), -5, True, [1]])
def test_garbage_reports_are_ignored_logged_and_counted(bad, caplog):
    bal, _ = make(2)
    bal.report("e1", 0)
    with caplog.at_level(logging.WARNING, logger="kit.sched.balancer"):
        assert bal.report("e0", bad) is False
    assert bal.counters["bad_reports"] == 1 and "bad KV report from e0" in caplog.text
    assert bal.engines["e0"].alive  # it answers: garbage is not death
    # e0 falls back to its outstanding tokens (none), so it is chosen over e1 with 0 reported? tie -> order
    assert bal.acquire("a", 100, 100) == "e0"
    assert bal.load("e0") == 200


def test_check_report():
    assert check_report(10, 100) == (10, 100)
    assert check_report("7", 8.0) == (7, 8)
    assert check_report(150, 100) == (150, 100)  # queued requests beyond the pool: over-committed, not garbage
    for used, cap in [(1, 0), (-1, 4), (None, 4), (1, None), (True, 4), (float("nan"), 4), (1, float("inf"))]:
        assert check_report(used, cap) is None


def test_an_engine_that_stops_answering_gets_nothing_and_hands_its_requests_back(caplog):
    bal, _ = make(2, max_missed_reports=2)
    bal.report("e0", 0)
    bal.report("e1", 5_000)
    got = [bal.acquire(f"r{i}", 100, 100) for i in range(3)]
    assert got == ["e0"] * 3
    with caplog.at_level(logging.WARNING, logger="kit.sched.balancer"):
        assert bal.report_missing("e0", "timeout") == []
        back = bal.report_missing("e0", "timeout")
    assert sorted(back) == ["r0", "r1", "r2"]  # each once
    assert "e0 marked down" in caplog.text
    assert bal.counters["engines_down"] == 1 and bal.counters["rerouted"] == 3
    assert [bal.acquire(r, 100, 100) for r in back] == ["e1"] * 3  # sent again, elsewhere
    assert bal.release("r0", "e0") is False  # the dead engine's late answer is not counted
    assert bal.counters["stale_releases"] == 1
    assert bal.inflight("e1") == 3 and bal.release("r0", "e1")
    # it comes back with a valid report
    bal.report("e0", 0)
    assert bal.engines["e0"].alive and bal.counters["engines_up"] == 1
    assert bal.acquire("new", 100, 100) == "e0"


def test_mark_down_drops_homes_and_every_engine_down_still_routes():
    bal, _ = make(2)
    bal.report("e0", 0)
    bal.report("e1", 100)
    assert bal.acquire("t", 10, 10) == "e0"
    assert bal.mark_down("e0", "actor died") == ["t"]
    assert bal.acquire("t", 10, 10) == "e1"  # its home is gone: moved
    bal.mark_down("e1", "actor died")
    assert bal.acquire("u", 10, 10) in ("e0", "e1")
    assert bal.counters["all_down_routes"] == 1


def test_release_without_engine_and_unknown_release():
    bal, _ = make(2)
    e = bal.acquire("a", 10, 10)
    assert bal.release("a") is True and bal.inflight(e) == 0
    assert bal.release("a") is False and bal.counters["stale_releases"] == 1


def test_expected_new_tokens_caps_the_charge_and_bad_construction_raises():
    bal, _ = make(2, expected_new_tokens=500)
    assert bal.charge(100, 8_000) == 600 and bal.charge(100, 200) == 300
    with pytest.raises(RuntimeError, match="no engines"):
        KvCacheBalancer([], CAP).acquire("a", 1, 1)
    with pytest.raises(ValueError):
        KvCacheBalancer(["a", "a"], CAP)
    with pytest.raises(ValueError):
        KvCacheBalancer(["a"], 0)


def test_status_and_clear_sticky():
    bal, _ = make(2)
    bal.acquire("a", 10, 10)
    st = bal.status()
    assert st["engines"]["e0"]["inflight"] == 1 and st["counters"]["routed"] == 1
    assert bal.clear_sticky() == 1 and bal.home == {}


def test_verl_default_model_is_sticky_and_counts_requests_not_tokens():
    bal = StickyLeastInflight(["e0", "e1"], seed=0)
    first = bal.acquire("long", 100, 8_000)
    second = bal.acquire("short", 100, 10)
    assert {first, second} == {"e0", "e1"}
    assert bal.acquire("long", 9_000, 100) == first  # sticky whatever the load
    bal.release("short", second)
    assert bal.acquire("third", 100, 8_000) == second  # fewest in flight: 0 vs 2


def test_hostile_reports_huge_ints_and_boolean_capacity_are_garbage_not_crashes():
    # an int too large for a float used to raise OverflowError out of report() (and out of the
    # router's poll, so the engines after it went unreported that poll); a boolean capacity was
    # read as 1 token
    assert check_report(10**400, CAP) is None and check_report(5, 10**400) is None
    assert check_report(5, True) is None and check_report(5, False) is None
    bal, _ = make(2)
    assert bal.report("e0", 10**400) is False and bal.report("e1", 10, True) is False
    assert bal.counters["bad_reports"] == 2 and bal.engines["e1"].capacity == CAP


@pytest.mark.parametrize("cap", [float("nan"), float("inf"), True, "lots", None, -1])
def test_a_bad_capacity_is_a_clear_error_naming_the_key(cap):
    with pytest.raises(ValueError, match="capacity_tokens must be a finite number > 0"):
        KvCacheBalancer(["a"], cap)


def test_a_report_asked_for_before_a_request_was_routed_does_not_cover_it():
    bal, _ = make(2)
    asked = bal.seq  # the query goes out...
    bal.acquire("a", 1_000, 1_000)  # ...a request is routed while it is in flight (to e0, by order)
    assert bal.report("e0", 500, as_of_seq=asked)  # the answer predates "a"
    assert bal.load("e0") == 500 + 2_000
    bal.release("a", "e0")
    assert bal.load("e0") == 500
    assert bal.report("e0", 700) and bal.load("e0") == 700  # default: as of now


def test_homes_are_bounded_least_recently_routed_dropped_first():
    # VERL's sync trainer never calls clear_sticky_cache: homes used to grow by one per trajectory
    bal, _ = make(2, max_homes=3)
    for rid in ["a", "b", "c"]:
        bal.release(rid, bal.acquire(rid, 10, 10))
    bal.release("a", bal.acquire("a", 10, 10))  # "a" routed again: now the most recent
    bal.release("d", bal.acquire("d", 10, 10))
    assert list(bal.home) == ["c", "a", "d"]
