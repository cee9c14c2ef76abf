"""KV-cache-aware rollout request balancer (rStar2-Agent report §3.2) and a model of VERL's default.

The report's scheduler assigns each rollout request to the inference engine with the most free
KV cache, so that no engine overflows (and evicts, then recomputes) while another idles, and it
sends a request the moment it is ready (a turn whose tool call returned does not wait for the
rest of the batch). The release never shipped it; VERL 0.9.1's default balancer knows nothing
about KV cache (sticky sessions plus fewest in-flight requests). :class:`KvCacheBalancer` is the
kit's version; :class:`StickyLeastInflight` models VERL's default for comparisons.

Units: every size is in tokens (KV cache slots), times in seconds.

How :class:`KvCacheBalancer` sees an engine's load (tokens):
    * a valid, fresh report ``used_tokens`` (KV the engine holds or has queued) taken after the
      ``k``-th routing decision covers the requests routed up to then; requests routed after it
      are added at their *charge* (``prompt_tokens + min(max_new_tokens, expected_new_tokens)``);
    * without one (never reported, report older than ``report_max_age_s``, or garbage), the load is
      the sum of the charges of its requests in flight (the engine's outstanding tokens).
    Free KV = capacity - load.

Routing (:meth:`KvCacheBalancer.acquire`, never blocks, never waits for a batch):
    * a request whose trajectory has a home (the engine that served its last turn, which holds
      its prefix) goes home unless home is *overloaded*: the request does not fit in its free KV
      while another engine's does, or its load exceeds the least-loaded engine's by more than
      ``balance_rel`` x that load + ``balance_abs`` x capacity (the sglang-router rule the
      simulator uses); then it moves to the engine with the most free KV (counted in ``moves``);
    * any other request goes to the engine with the most free KV (ties: fewer requests in flight,
      then the engine's order).

Bad input (report §3.2 leaves it open; ours): a report that is not a finite number ``>= 0`` (or a capacity
that is not ``> 0``) is ignored (``bad_reports``; the estimate is used); an engine that misses
``max_missed_reports`` reports in a row, or that the caller finds dead (:meth:`mark_down`), gets
no new requests; its requests in flight are returned to the caller to send again, exactly once,
and their late releases are ignored (``stale_releases``). A valid report brings it back
(``engines_up``). Every event is logged (logger ``kit.sched.balancer``) and counted
(:attr:`KvCacheBalancer.counters`). If every engine is down, requests still go somewhere (the
least-loaded by estimate; ``all_down_routes``): holding them would lose them.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("kit.sched.balancer")

#: Overload threshold of a trajectory's home engine (see the module docstring); the simulator's
#: ``dynamic`` policy found 0.1-1.0 and 0.02-0.2 within 1% of each other on the paper preset.
BALANCE_REL, BALANCE_ABS = 0.25, 0.05


@dataclass(frozen=True)
class Lease:
    """One routed request: ``charge_tokens`` counted against ``engine`` until released."""

    request_id: str
    engine: str
    charge_tokens: int
    seq: int  # routing decision number (1-based)
    moved: bool = False  # left the engine holding the trajectory's prefix


class Balancer(Protocol):
    """What :mod:`kit.sim` and ``kit.bridge.kv_router`` call."""

    def acquire(self, request_id: str, prompt_tokens: int = 0, max_new_tokens: int = 0) -> str: ...

    def release(self, request_id: str, engine: str | None = None) -> bool: ...


def check_report(used_tokens: Any, capacity_tokens: Any) -> tuple[int, int] | None:
    """``(used, capacity)`` as ints if both are finite numbers with ``used >= 0`` and
    ``capacity > 0`` (tokens; a numeric string such as ``"7"`` is read as its number); None for
    anything else (None, other strings, booleans, NaN, infinities, negatives, ints too large for
    a float). ``used`` may exceed ``capacity``: it counts queued requests too (an over-committed
    engine)."""
    if isinstance(used_tokens, bool) or isinstance(capacity_tokens, bool):
        return None
    try:
        u, c = float(used_tokens), float(capacity_tokens)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(u) and math.isfinite(c)) or c <= 0 or u < 0:
        return None
    return int(u), int(c)


@dataclass
class _Engine:
    capacity: int
    alive: bool = True
    used: int | None = None  # last valid report (tokens)
    report_seq: int = 0  # routing decisions the report covers
    report_t: float = -math.inf
    misses: int = 0
    leases: dict[str, list[Lease]] = field(default_factory=dict)  # request_id -> leases in flight
    outstanding: int = 0  # charges of the leases in flight (tokens)
    after: int = 0  # charges of the leases in flight routed after the last report (tokens)
    n: int = 0  # leases in flight

    def drop(self, lease: Lease) -> None:
        self.outstanding -= lease.charge_tokens
        self.after -= lease.charge_tokens if lease.seq > self.report_seq else 0
        self.n -= 1


class KvCacheBalancer:
    """Routes rollout requests by each engine's free KV cache (report §3.2; module docstring).

    Args:
        engines: engine ids (VERL: server addresses), in a fixed order; more via :meth:`add_engines`.
        capacity_tokens: KV capacity of an engine that has not reported its own (tokens).
        expected_new_tokens: tokens a request is expected to add to the KV beyond its prompt;
            its charge is ``prompt + min(max_new, expected_new_tokens)``; default: ``max_new``.
        balance_rel, balance_abs: overload threshold of a home engine (module docstring).
        report_max_age_s: a report older than this is not used (seconds).
        max_missed_reports: consecutive missed reports after which an engine gets no requests.
        max_homes: trajectory homes kept, least recently routed dropped first (VERL's sync trainer
            never clears them; unbounded, they would grow by one per trajectory for the whole run).
        clock: seconds, monotonic (tests pass a fake one).
    Raises:
        ValueError: duplicate engine ids, or a capacity that is not a finite number > 0.
    """

    def __init__(self, engines: Iterable[str], capacity_tokens: int, *, expected_new_tokens: int | None = None,
                 balance_rel: float = BALANCE_REL, balance_abs: float = BALANCE_ABS, report_max_age_s: float = 10.0,
                 max_missed_reports: int = 3, max_homes: int = 200_000, clock: Callable[[], float] = time.monotonic):
        names = [str(e) for e in engines]  # may be empty: VERL can register servers later
        if len(set(names)) != len(names):
            raise ValueError(f"KvCacheBalancer: engine ids must be distinct, got {names}")
        if check_report(0, capacity_tokens) is None:
            raise ValueError(f"KvCacheBalancer: capacity_tokens must be a finite number > 0 (tokens), "
                             f"got {capacity_tokens!r}")
        self.default_capacity = check_report(0, capacity_tokens)[1]
        self.expected_new = expected_new_tokens
        self.balance_rel, self.balance_abs = float(balance_rel), float(balance_abs)
        self.report_max_age_s, self.max_missed = float(report_max_age_s), int(max_missed_reports)
        self.clock = clock
        self.engines: dict[str, _Engine] = {}
        #: trajectory (request_id) -> engine holding its prefix, least recently routed first
        self.home: OrderedDict[str, str] = OrderedDict()
        self.max_homes = max(1, int(max_homes))
        self.seq = 0
        self.counters = dict(routed=0, sticky=0, moves=0, reports=0, bad_reports=0, missed_reports=0,
                             engines_down=0, engines_up=0, rerouted=0, stale_releases=0, all_down_routes=0)
        self.served: dict[str, int] = {}  # engine -> requests routed there
        self.add_engines(names)

    # -- engines -------------------------------------------------------------------------------
    def add_engines(self, engines: Iterable[str]) -> None:
        """Register engines (no-op for known ones)."""
        for e in engines:
            self.engines.setdefault(str(e), _Engine(self.default_capacity))
            self.served.setdefault(str(e), 0)

    def remove_engines(self, engines: Iterable[str]) -> list[str]:
        """Forget engines; returns the request ids they had in flight (send them again)."""
        out: list[str] = []
        for e in engines:
            if e in self.engines:
                out += self.mark_down(e, "removed")
                del self.engines[e]
        return out

    def report(self, engine: str, used_tokens: Any, capacity_tokens: Any = None, *, as_of_seq: int | None = None) -> bool:
        """The engine's KV in use, queued requests included (tokens), and optionally its capacity.

        ``as_of_seq``: the routing decision count (:attr:`seq`) when the report was *asked for*
        (default: now). A report that answers a query sent before some requests were routed does
        not cover them: they stay counted on top of it at their charge.

        Returns:
            True if taken; False for an unknown engine or garbage (logged, counted in
            ``bad_reports``; the outstanding-token estimate is used instead).
        """
        en = self.engines.get(engine)
        if en is None:
            return False
        checked = check_report(used_tokens, en.capacity if capacity_tokens is None else capacity_tokens)
        if checked is None:
            self.counters["bad_reports"] += 1
            log.warning("balancer: ignoring a bad KV report from %s: used=%r capacity=%r", engine, used_tokens,
                        capacity_tokens)
            en.used = None
            return False
        en.used, en.capacity = checked
        as_of = self.seq if as_of_seq is None else max(0, min(int(as_of_seq), self.seq))
        en.report_seq, en.report_t, en.misses = as_of, self.clock(), 0
        en.after = sum(lease.charge_tokens for leases in en.leases.values() for lease in leases if lease.seq > as_of)
        self.counters["reports"] += 1
        if not en.alive:
            en.alive = True
            self.counters["engines_up"] += 1
            log.warning("balancer: engine %s reports again; routing to it", engine)
        return True

    def report_missing(self, engine: str, reason: str = "no answer") -> list[str]:
        """The engine did not answer a KV query; after ``max_missed_reports`` in a row it is
        marked down. Returns the request ids to send again (empty unless it went down)."""
        en = self.engines.get(engine)
        if en is None:
            return []
        en.misses += 1
        en.used = None
        self.counters["missed_reports"] += 1
        log.warning("balancer: engine %s missed a KV report (%d in a row): %s", engine, en.misses, reason)
        return self.mark_down(engine, f"{en.misses} missed reports") if en.misses >= self.max_missed else []

    def mark_down(self, engine: str, reason: str) -> list[str]:
        """Route nothing more to ``engine`` (dead or not answering); returns the request ids it had
        in flight, each once, for the caller to send again (their leases are dropped)."""
        en = self.engines.get(engine)
        if en is None:
            return []
        if en.alive:
            en.alive = False
            self.counters["engines_down"] += 1
            log.warning("balancer: engine %s marked down: %s", engine, reason)
        lost = [lease.request_id for leases in en.leases.values() for lease in leases]
        en.leases.clear()
        en.used, en.outstanding, en.after, en.n = None, 0, 0, 0
        self.counters["rerouted"] += len(lost)
        for rid, e in list(self.home.items()):
            if e == engine:
                del self.home[rid]
        return lost

    # -- routing -------------------------------------------------------------------------------
    def load(self, engine: str) -> int:
        """KV tokens counted against ``engine`` (the module docstring says how)."""
        en = self.engines[engine]
        if en.used is not None and self.clock() - en.report_t <= self.report_max_age_s:
            return en.used + en.after
        return en.outstanding

    def inflight(self, engine: str) -> int:
        """Requests routed to ``engine`` and not released."""
        return self.engines[engine].n

    def charge(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """Tokens a request is expected to hold: prompt + min(max_new, ``expected_new_tokens``)."""
        new = max(0, int(max_new_tokens))
        if self.expected_new is not None:
            new = min(new, int(self.expected_new))
        return max(0, int(prompt_tokens)) + new

    def lease(self, request_id: str, prompt_tokens: int = 0, max_new_tokens: int = 0) -> Lease:
        """Route one request (one turn of trajectory ``request_id``); see the module docstring.

        Args:
            request_id: the trajectory's id (every turn of it shares it, as in VERL).
            prompt_tokens: context the request sends (tokens).
            max_new_tokens: its generation budget (tokens).
        Returns:
            the :class:`Lease`; its engine is counted until :meth:`release`.
        Raises:
            RuntimeError: no engines registered.
        """
        if not self.engines:
            raise RuntimeError("KvCacheBalancer: no engines registered")
        cost = self.charge(prompt_tokens, max_new_tokens)
        alive = [e for e, en in self.engines.items() if en.alive]
        if not alive:
            self.counters["all_down_routes"] += 1
            log.warning("balancer: every engine is down; routing %s by estimate anyway", request_id)
            alive = list(self.engines)
        loads = {e: self.load(e) for e in alive}
        free = {e: self.engines[e].capacity - loads[e] for e in alive}
        order = {e: i for i, e in enumerate(self.engines)}
        best = max(alive, key=lambda e: (free[e], -self.inflight(e), -order[e]))
        target, home = best, self.home.get(request_id)
        if home in free and home != best:
            least = min(loads.values())
            overloaded = (free[home] < cost <= free[best]) or \
                loads[home] > (1 + self.balance_rel) * least + self.balance_abs * self.engines[home].capacity
            target = best if overloaded else home
        moved = home is not None and target != home
        self.seq += 1
        lease = Lease(str(request_id), target, cost, self.seq, moved)
        en = self.engines[target]
        en.leases.setdefault(lease.request_id, []).append(lease)
        en.outstanding, en.after, en.n = en.outstanding + cost, en.after + cost, en.n + 1
        self.home[lease.request_id] = target
        self.home.move_to_end(lease.request_id)
        while len(self.home) > self.max_homes:
            self.home.popitem(last=False)
        self.served[target] += 1
        self.counters["routed"] += 1
        if home is not None:
            self.counters["moves" if moved else "sticky"] += 1
        return lease

    def acquire(self, request_id: str, prompt_tokens: int = 0, max_new_tokens: int = 0) -> str:
        """:meth:`lease` returning only the engine id."""
        return self.lease(request_id, prompt_tokens, max_new_tokens).engine

    def release(self, request_id: str, engine: str | None = None) -> bool:
        """The request finished (or failed): stop counting its oldest lease (on ``engine`` if given).

        Returns:
            False (counted in ``stale_releases``) when no such lease is in flight, e.g. a late
            release from an engine marked down, whose requests were already handed back.
        """
        for e in [engine] if engine is not None else list(self.engines):
            en = self.engines.get(e)
            leases = en.leases.get(str(request_id)) if en is not None else None
            if leases:
                en.drop(leases.pop(0))
                if not leases:
                    del en.leases[str(request_id)]
                return True
        self.counters["stale_releases"] += 1
        return False

    def forget(self, request_id: str) -> None:
        """The trajectory ended: drop its home (its prefix is no longer needed)."""
        self.home.pop(str(request_id), None)

    def clear_sticky(self) -> int:
        """Drop every home (e.g. after a weight update invalidated the prefix caches); returns how many."""
        n = len(self.home)
        self.home.clear()
        return n

    def status(self) -> dict[str, Any]:
        """Per engine: alive, capacity, load (tokens), requests in flight and served; the counters."""
        return {"engines": {e: {"alive": en.alive, "capacity_tokens": en.capacity, "load_tokens": self.load(e),
                                "inflight": self.inflight(e), "served": self.served[e], "reported_tokens": en.used}
                            for e, en in self.engines.items()},
                "counters": dict(self.counters)}


class StickyLeastInflight:
    """A model of VERL 0.9.1's ``GlobalRequestLoadBalancer`` (``verl/workers/rollout/router.py``).

    A trajectory (``request_id``) stays on the engine of its first request; a new one goes to the
    engine with the fewest requests in flight, ties broken at random (seeded here). Token counts
    are accepted and ignored, as VERL ignores them. Same interface as :class:`KvCacheBalancer`.
    """

    def __init__(self, engines: Iterable[str], seed: int = 0):
        self.inflight: dict[str, int] = {str(e): 0 for e in engines}
        self.home: dict[str, str] = {}
        self.rng = random.Random(seed)
        self.served: dict[str, int] = dict.fromkeys(self.inflight, 0)

    def acquire(self, request_id: str, prompt_tokens: int = 0, max_new_tokens: int = 0) -> str:
        e = self.home.get(request_id)
        if e is None:
            least = min(self.inflight.values())
            e = self.rng.choice([s for s, n in self.inflight.items() if n == least])
            self.home[request_id] = e
        self.inflight[e] += 1
        self.served[e] += 1
        return e

    def release(self, request_id: str, engine: str | None = None) -> bool:
        e = engine if engine is not None else self.home.get(request_id)
        if e not in self.inflight or self.inflight[e] == 0:
            return False
        self.inflight[e] -= 1
        return True

    def forget(self, request_id: str) -> None:
        """Kept for interface parity; VERL keeps the entry in its LRU cache."""
