"""The kit's KV-cache-aware balancer inside VERL 0.9.1's LLM server manager (report §3.2).

VERL routes every ``generate`` of its agent loops through one load-balancer Ray actor that
``LLMServerManager`` builds with ``verl.workers.rollout.router.get_router_handle``. Its documented
extension point is ``actor_rollout_ref.rollout.router_config_path``: a YAML file whose
``router_class`` (a dotted class name) VERL wraps with ``ray.remote`` and builds as
``cls(servers, yaml_dict)``, ``servers`` being ``{server address: server actor handle}``. So no
patch is needed: ``rollout.balancer = "kv_cache"`` makes :func:`kit.bridge.overrides.to_hydra_overrides`
point that key at the YAML :func:`kit.bridge.launch.write_router_config` writes, naming
:class:`KvCacheRouter`; ``rollout.balancer = "verl"`` leaves the key unset and VERL's own
``GlobalRequestLoadBalancer`` runs. ``tests/bridge/test_kv_router.py`` checks that VERL still
builds the router this way and that the class has every method of VERL's ``RequestLoadBalancer``.

:class:`KvCacheRouter` holds a :class:`kit.sched.KvCacheBalancer` (the object ``kit.sim``
simulates) and feeds it each engine's KV reports, polled in the background every
``report_interval_s`` seconds (routing never waits for a poll):

* ``kit_cpu`` servers (``kit.bridge.verl_cpu.rollout``): their ``kv_load()`` method
  (``{"used_tokens", "capacity_tokens"}`` from the kit engine's rows and queue);
* SGLang servers (VERL's ``SGLangHttpServer``; the server id is its ``host:port``): Prometheus
  ``/metrics`` (``sglang:num_used_tokens`` and ``sglang:max_total_num_tokens``, summed over data
  parallel ranks; VERL enables them with ``rollout.prometheus.enable``), else ``/get_load``
  (``num_tokens`` per rank). Read with :func:`parse_sglang_metrics` / :func:`parse_sglang_load`,
  written from SGLang's documented metric names and not yet run against a live server.

A server whose actor is dead is marked down at once; one that does not answer (timeout, refused
connection) after ``max_missed_reports`` polls; one that answers garbage keeps its requests and
is balanced by its outstanding tokens. The balancer's counters, per-engine loads and served
counts are written to ``status_path`` (JSON) every poll that changed something (a write that fails is
logged and skipped: routing does not depend on it).

A request whose server dies while generating it (Ray's ``RayActorError`` / ``ActorDiedError``
for a dead server actor, a connection error for an SGLang server that went away) fails inside
VERL's ``LLMServerClient.generate``, which does not retry. The kit's agent loop
(:class:`kit.bridge.agent_loop.VerlServerBackend`) catches that error (:func:`is_dead_engine_error`),
tells the router (:meth:`KvCacheRouter.engine_failed`: the engine that request was routed to is
marked down, the event logged and counted as ``dead_engine_errors`` / ``resent`` in the status
file) and sends the same turn once more; it lands on another engine, since the dead one gets no
new requests. The dead engine's request is released exactly once: by VERL's ``finally`` release
if it arrives first, else by :meth:`kit.sched.KvCacheBalancer.mark_down` (VERL's late release is
then ignored as ``stale_releases``). The failed turn returned nothing, so nothing is duplicated.
Under VERL's own balancer (``rollout.balancer = "verl"``) nothing is re-sent: its sticky cache
would send the turn back to the dead server.

What it does not do: re-send a second time (a request whose second engine dies too fails, as it
would under VERL's balancer); it receives each request's whole ``prompt_ids`` over Ray (VERL
serializes only the fields a router declares; the length is all it uses).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import urllib.request
from collections import OrderedDict
from typing import Any

from kit.jsonio import write_json
from kit.sched import KvCacheBalancer

log = logging.getLogger("kit.bridge.kv_router")

ROUTER_CLASS = "kit.bridge.kv_router.KvCacheRouter"
#: KV capacity of an engine that has not reported one: the paper preset's SGLang pool for
#: Qwen3-14B on a TP=4 group of MI300X (``kit.sim.PAPER_ENGINE``), tokens
DEFAULT_CAPACITY_TOKENS = 3_500_000
#: exceptions that mean the server actor is gone (Ray's names; matched by name: no ray import here)
DEAD_ACTOR_ERRORS = ("RayActorError", "ActorDiedError")
#: exceptions that mean a server went away mid-request: the dead-actor ones, Ray's
#: ``ActorUnavailableError`` and aiohttp's disconnects (by name), plus any ``ConnectionError``
DEAD_ENGINE_ERRORS = (*DEAD_ACTOR_ERRORS, "ActorUnavailableError", "ClientConnectionError", "ServerDisconnectedError")


def is_dead_engine_error(exc: BaseException) -> bool:
    """True if ``exc`` (or a class it derives from) says the engine serving the request is gone:
    a name in :data:`DEAD_ENGINE_ERRORS` or a ``ConnectionError`` (refused, reset, broken pipe;
    Ray re-raises a server's error as a subclass of it, so a wrapped one matches too)."""
    return isinstance(exc, ConnectionError) or any(c.__name__ in DEAD_ENGINE_ERRORS for c in type(exc).__mro__)


def router_of(server_manager: Any) -> Any:
    """The kit router's handle behind a VERL 0.9.1 ``LLMServerClient`` (its ``_load_balancer``
    attribute, checked by ``tests/bridge/test_kv_router.py``), or None when VERL's own balancer
    (no ``engine_failed`` method) or no router is behind it."""
    handle = getattr(server_manager, "_load_balancer", None)
    return handle if handle is not None and getattr(handle, "engine_failed", None) is not None else None


def parse_sglang_metrics(text: str) -> tuple[float, float] | None:
    """``(used, capacity)`` tokens from SGLang's Prometheus text: ``sglang:num_used_tokens`` and
    ``sglang:max_total_num_tokens``, each summed over label sets (data-parallel ranks); None when
    either is absent or not a number."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("sglang:num_used_tokens", "sglang:max_total_num_tokens"):
            try:
                v = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                return None
            sums[name] = sums.get(name, 0.0) + v
    if len(sums) != 2 or not all(math.isfinite(v) for v in sums.values()):
        return None
    return sums["sglang:num_used_tokens"], sums["sglang:max_total_num_tokens"]


def parse_sglang_load(obj: Any) -> tuple[float, float | None] | None:
    """``(used, capacity or None)`` tokens from SGLang's ``/get_load`` JSON (a dict or a list of
    per-rank dicts with ``num_tokens``, and ``max_total_num_tokens`` when present); None if unreadable."""
    ranks = obj if isinstance(obj, list) else [obj]
    try:
        used = sum(float(r["num_tokens"]) for r in ranks)
        caps = [float(r["max_total_num_tokens"]) for r in ranks if "max_total_num_tokens" in r]
    except (KeyError, TypeError, ValueError):
        return None
    return used, (sum(caps) if caps and len(caps) == len(ranks) else None)


def _http_get(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the server's own address
        return resp.read()


def sglang_report(address: str, timeout_s: float) -> tuple[float, float | None] | None:
    """Free-KV report of the SGLang server at ``host:port`` (blocking; run in a thread).

    Returns:
        ``(used, capacity or None)`` tokens, or None when it answered with nothing readable.
    Raises:
        OSError: the server did not answer (refused, timed out).
    """
    try:
        got = parse_sglang_metrics(_http_get(f"http://{address}/metrics", timeout_s).decode("utf-8", "replace"))
    except OSError:
        got = None  # metrics off (404) or unreachable: try the load endpoint, which raises if unreachable
    if got is not None:
        return got
    try:
        return parse_sglang_load(json.loads(_http_get(f"http://{address}/get_load", timeout_s)))
    except ValueError:
        return None


def _config_number(cfg: dict[str, Any], key: str, default: float, minimum: float | None = None) -> float:
    """``cfg[key]`` (``default`` when absent or null) as a finite number, ``>= minimum`` if given,
    else ``> 0``. Raises ValueError naming the router YAML key."""
    value = cfg.get(key)
    value = default if value is None else value
    try:
        x = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if not math.isfinite(x) or (x < minimum if minimum is not None else x <= 0):
        bound = f">= {minimum:g}" if minimum is not None else "> 0"
        raise ValueError(f"router config {key}: expected a finite number {bound}, got {value!r}")
    return x


class KvCacheRouter:
    """VERL router plugin (``router_class`` of ``rollout.router_config_path``); module docstring.

    Args:
        servers: ``{server id: server actor handle}`` as VERL passes them.
        config: the router YAML as a dict: ``capacity_tokens`` (default
            :data:`DEFAULT_CAPACITY_TOKENS`), ``max_new_tokens`` (a request's budget when its
            sampling params give none; tokens), ``expected_new_tokens``, ``report_interval_s``
            (0.5), ``report_timeout_s`` (2.0), ``report_max_age_s`` (10.0), ``max_missed_reports``
            (3), ``status_path`` (optional JSON file).
    Raises:
        ValueError: a YAML value that is not a finite number in range (``max_new_tokens`` and
            ``expected_new_tokens`` >= 0, ``max_missed_reports`` >= 1, the rest > 0), naming the key.
    """

    def __init__(self, servers: dict[str, Any], config: dict[str, Any] | None = None):
        cfg = dict(config or {})
        self._servers: dict[str, Any] = dict(servers)
        self.max_new_tokens = int(_config_number(cfg, "max_new_tokens", 0, 0))
        self.interval_s = _config_number(cfg, "report_interval_s", 0.5)
        self.timeout_s = _config_number(cfg, "report_timeout_s", 2.0)
        self.status_path = cfg.get("status_path") or None
        expected = cfg.get("expected_new_tokens")
        self.policy = KvCacheBalancer(
            list(self._servers), int(_config_number(cfg, "capacity_tokens", DEFAULT_CAPACITY_TOKENS)),
            expected_new_tokens=None if expected is None else int(_config_number(cfg, "expected_new_tokens", 0, 0)),
            report_max_age_s=_config_number(cfg, "report_max_age_s", 10.0),
            max_missed_reports=int(_config_number(cfg, "max_missed_reports", 3, 1)))
        self._poller: asyncio.Task | None = None
        self._written: Any = None
        self._routed_to: OrderedDict[str, str] = OrderedDict()  # trajectory (request_id) -> engine of its last turn
        #: requests whose engine died under them (reported by the agent loop), and how many were re-sent
        self.counters = {"dead_engine_errors": 0, "resent": 0}

    # -- VERL's RequestLoadBalancer protocol ----------------------------------------------------
    async def acquire_server(self, request_id: str, prompt_ids: Any = None,
                             sampling_params: dict[str, Any] | None = None, **_: Any) -> tuple[str, Any]:
        """Route one ``generate`` (one turn of trajectory ``request_id``); returns ``(server id, handle)``.

        Raises:
            ValueError: ``sampling_params``' ``max_new_tokens`` (or ``max_tokens``) is not an integer.
        """
        self._ensure_poller()
        sp = sampling_params or {}
        key = "max_new_tokens" if "max_new_tokens" in sp else "max_tokens"
        raw = sp.get(key) or self.max_new_tokens
        try:
            max_new = int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"kv_router: request {request_id}: sampling_params.{key} must be an integer number of "
                             f"tokens, got {raw!r}") from None
        sid = self.policy.acquire(str(request_id), 0 if prompt_ids is None else len(prompt_ids), max_new)
        self._routed_to[str(request_id)] = sid
        self._routed_to.move_to_end(str(request_id))
        while len(self._routed_to) > self.policy.max_homes:  # bounded like the homes (sync VERL never clears)
            self._routed_to.popitem(last=False)
        return sid, self._servers[sid]

    def engine_failed(self, request_id: str, error: str, resend: bool = True) -> str | None:
        """The engine serving trajectory ``request_id``'s last turn died under it (``error``: the
        exception's type and text): mark that engine down (its other requests in flight are dropped
        from its load; their late releases are ignored), log and count the event (``resend``: the
        caller sends the turn again), write the status file. Returns the engine id, or None when
        the request was never routed here."""
        sid = self._routed_to.get(str(request_id))
        self.counters["dead_engine_errors"] += 1
        self.counters["resent"] += int(bool(resend))
        log.warning("kv_router: request %s failed on %s (%s); %s", request_id, sid, error,
                    "re-sending it to another engine" if resend else "not re-sent")
        if sid is not None and sid in self._servers:
            self.policy.mark_down(sid, f"request {request_id} failed: {error}")
        self._write_status()
        return sid

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        if request_id is not None:
            self.policy.release(str(request_id), server_id)

    def require_acquire_fields(self) -> list[str]:
        return ["prompt_ids", "sampling_params"]

    def require_release_fields(self) -> list[str]:
        return ["request_id"]

    def add_servers(self, servers: dict[str, Any]) -> None:
        self._servers.update(servers)
        self.policy.add_engines(servers)

    def remove_servers(self, server_ids: list[str]) -> None:
        lost = self.policy.remove_engines(server_ids)
        for sid in server_ids:
            self._servers.pop(sid, None)
        if lost:
            log.warning("kv_router: %d requests were in flight on removed servers %s", len(lost), server_ids)

    def get_all_servers(self) -> list[str]:
        return list(self._servers)

    def get_status(self) -> dict[str, Any]:
        st = self._status()
        return {**st, "servers": {e: s["inflight"] for e, s in st["engines"].items()},
                "total_inflight": self.get_total_inflight(), "active_servers": len(self._servers),
                "registered_handles": list(self._servers)}

    def clear_sticky_cache(self) -> dict[str, Any]:
        """VERL 0.9.1's separate-async trainer calls this on phase switches (new weights: the prefixes
        are stale anyway); its sync trainer never does, so the homes are a bounded LRU map instead."""
        self._write_status()
        self._routed_to.clear()
        return {"cleared_entries": self.policy.clear_sticky(),
                "server_loads": {e: self.policy.inflight(e) for e in self._servers}}

    def get_total_inflight(self) -> int:
        return sum(self.policy.inflight(e) for e in self._servers)

    # -- KV reports -------------------------------------------------------------------------------
    async def poll_once(self) -> None:
        """Ask every server for its KV load (concurrently, ``report_timeout_s`` each) and report it."""
        sids, asked_at = list(self._servers), self.policy.seq  # requests routed while waiting are not in the answers
        got = await asyncio.gather(*(self._probe(s) for s in sids), return_exceptions=True)
        for sid, res in zip(sids, got, strict=True):
            if sid not in self._servers:
                continue
            if isinstance(res, BaseException):
                if type(res).__name__ in DEAD_ACTOR_ERRORS:
                    self.policy.mark_down(sid, f"{type(res).__name__}: {res}")
                else:
                    self.policy.report_missing(sid, f"{type(res).__name__}: {res}")
            elif res is None:
                self.policy.report(sid, None)  # answered with nothing readable: counted as garbage
            else:
                self.policy.report(sid, res[0], res[1], as_of_seq=asked_at)
        self._write_status()

    async def _probe(self, sid: str) -> tuple[Any, Any] | None:
        handle = self._servers[sid]
        kv_load = getattr(handle, "kv_load", None)  # kit_cpu servers; SGLang's actor has no such method
        if kv_load is not None:
            rep = await asyncio.wait_for(_awaitable(kv_load.remote()), self.timeout_s)
            if not isinstance(rep, dict):
                return None
            return rep.get("used_tokens"), rep.get("capacity_tokens")
        return await asyncio.wait_for(asyncio.to_thread(sglang_report, sid, self.timeout_s), self.timeout_s + 1)

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def _poll_forever(self) -> None:
        while True:
            t0 = time.monotonic()
            try:
                await self.poll_once()
            except Exception:  # noqa: BLE001 - a polling bug must not stop routing; it is logged
                log.exception("kv_router: KV poll failed")
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def _write_status(self) -> None:
        if not self.status_path:
            return
        st = self._status()
        key = (st["counters"], {e: s["served"] for e, s in st["engines"].items()})
        if key != self._written:
            try:
                write_json(self.status_path, {**st, "time": time.time()})
            except OSError as exc:  # the file is for people; routing and re-sending go on without it
                log.warning("kv_router: cannot write %s: %s", self.status_path, exc)
                return
            self._written = key

    def _status(self) -> dict[str, Any]:
        st = self.policy.status()
        return {**st, "counters": {**st["counters"], **self.counters}}


async def _awaitable(ref: Any) -> Any:
    """Await a Ray ``ObjectRef`` (awaitable) or a plain value (test doubles)."""
    return await ref if hasattr(ref, "__await__") else ref
