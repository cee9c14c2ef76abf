"""Scale-out of the code sandbox: the same warm workers as a pool of Ray actors (issue #3).

The report's environment served up to 45K tool calls per RL step from many CPU machines
(rStar2-Agent §3.1). Here each :class:`SandboxActor` runs a :class:`~kit.sandbox.workers.
LocalExecutor` (warm bubblewrap workers) on whatever node Ray places it; the client side is the
ordinary :class:`~kit.sandbox.SandboxPool` with ``backend="ray"``, so callers keep
``await pool.run(call)`` / ``run_batch``. Send workers hand whole batches (up to
``batch_size``, 64 in the report) to the least-loaded actor in one remote call.

Failure handling: an actor that dies mid-batch (node lost, OOM-killed) is replaced and its
batch retried once on another actor; calls that fail twice are answered ``infra_error``.

Sizing: ``cfg.num_workers`` is the total number of warm workers across the cluster (0 = one
per CPU Ray reports), packed ``workers_per_actor`` to an actor (default: 8), each actor
reserving that many CPUs and spread over nodes (``SPREAD``).

Which Ray: the caller's session when Ray is already initialised; else the cluster at
``ray_init["address"]`` when one is given; else a Ray instance of its own
(``ray.init(address="local")``), never one that ``RAY_ADDRESS`` or ``/tmp/ray`` names (a bare
``ray.init()`` joins whatever cluster was last recorded on the machine, someone else's
included; issue #30). It says which on stderr and in ``stats()["ray"]``.

Example:
    >>> ray.init(address="auto")              # or a local ray.init(num_cpus=...)
    >>> cfg = dataclasses.replace(cfg.sandbox, backend="ray", num_workers=256)
    >>> async with SandboxPool(cfg) as pool:
    ...     rs = await pool.run_batch(calls)
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import sys
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from kit.config import SandboxConfig
from kit.sandbox.pool import register_executor
from kit.sandbox.workers import LocalExecutor, _infra


@ray.remote(max_restarts=0)
class SandboxActor:
    """Hosts ``num_workers`` warm sandbox workers on one node."""

    def __init__(self, cfg: dict, preload: tuple[str, ...] = ()):
        self.cfg = SandboxConfig(**cfg)
        self.preload = tuple(preload)
        self.ex: LocalExecutor | None = None

    async def start(self) -> dict[str, Any]:
        self.ex = LocalExecutor(self.cfg, self.preload)
        await self.ex.start()
        return {"workers": self.ex.n, "node": ray.get_runtime_context().get_node_id()}

    async def run_batch(self, reqs: list[dict]) -> list[dict]:
        assert self.ex is not None, "SandboxActor.start() was not awaited"
        return list(await asyncio.gather(*(self.ex.run(r) for r in reqs)))

    async def stats(self) -> dict[str, Any]:
        return self.ex.stats() if self.ex else {}

    async def close(self) -> None:
        if self.ex is not None:
            await self.ex.close()


class RayExecutor:
    """Client side: dispatches batches to :class:`SandboxActor` s; same interface as LocalExecutor."""

    def __init__(self, cfg: SandboxConfig, preload: tuple[str, ...] = (), *, workers_per_actor: int = 8,
                 ray_init: dict | None = None):
        self.cfg, self.preload = cfg, tuple(preload)
        self.workers_per_actor = max(1, workers_per_actor)
        self.ray_init = ray_init or {}
        self.actors: list[Any] = []
        self.load: collections.Counter[int] = collections.Counter()
        self.counters: collections.Counter[str] = collections.Counter()
        self.nodes: set[str] = set()

    async def start(self) -> None:
        self.ray = init_ray(self.ray_init)
        total = self.cfg.num_workers or int(ray.cluster_resources().get("CPU", 1))
        n_actors = max(1, math.ceil(total / self.workers_per_actor))
        per = max(1, math.ceil(total / n_actors))
        self._per = per
        self.actors = [self._new_actor(per) for _ in range(n_actors)]
        infos = await asyncio.gather(*(a.start.remote() for a in self.actors))
        self.nodes = {i["node"] for i in infos}

    def _new_actor(self, per: int) -> Any:
        cfg = dataclasses.replace(self.cfg, num_workers=per, backend="local")
        return SandboxActor.options(num_cpus=per, scheduling_strategy="SPREAD").remote(
            dataclasses.asdict(cfg), self.preload)

    async def run(self, req: dict) -> dict:
        return (await self.run_batch([req]))[0]

    async def run_batch(self, reqs: list[dict]) -> list[dict]:
        last = ""
        for attempt in range(2):
            if not self.actors:
                return [_infra("no sandbox actors left")] * len(reqs)
            i = min(range(len(self.actors)), key=lambda k: self.load[k])
            actor = self.actors[i]
            self.load[i] += len(reqs)
            try:
                return list(await actor.run_batch.remote(reqs))
            except (RayActorError, RayError) as exc:
                last = f"{type(exc).__name__}: {str(exc)[:300]}"
                self.counters["actor_deaths"] += 1
                self.counters["retries"] += attempt == 0
                await self._replace(i, actor)
            finally:
                self.load[i] -= len(reqs)
        return [_infra(f"batch failed on two actors: {last}")] * len(reqs)

    async def _replace(self, i: int, dead: Any) -> None:
        if i >= len(self.actors) or self.actors[i] is not dead:
            return  # another sender already replaced it
        new = self._new_actor(self._per)
        self.actors[i] = new
        try:
            await new.start.remote()
            self.counters["actor_restarts"] += 1
        except RayError:
            self.actors.pop(i)

    async def close(self) -> None:
        for a in self.actors:
            try:
                await asyncio.wait_for(a.close.remote(), 10)
            except Exception:  # noqa: BLE001 - the actor may be gone already
                pass
            ray.kill(a)
        self.actors = []

    def stats(self) -> dict[str, Any]:
        return {"backend": "ray", "ray": getattr(self, "ray", ""), "actors": len(self.actors), "nodes": len(self.nodes),
                **self.counters}


def init_ray(ray_init: dict[str, Any]) -> str:
    """Make sure Ray is running for the sandbox actors, joining only an address that was given.

    Args:
        ray_init: keyword arguments of ``ray.init``; its ``address`` (if any) is the only cluster
            joined. Without one a local instance is started (``address="local"``), whatever
            ``RAY_ADDRESS`` or the last cluster recorded on this machine say.
    Returns:
        What was used, in words (also printed to stderr): the caller's session, the cluster joined,
        or the instance started.
    """
    if ray.is_initialized():
        how = f"the Ray session this process already had ({ray.get_runtime_context().gcs_address})"
    elif ray_init.get("address"):
        ctx = ray.init(**ray_init)
        how = f"joined the Ray cluster at {ray_init['address']!r} ({ctx.address_info.get('gcs_address', '?')})"
    else:
        ctx = ray.init(**{**ray_init, "address": "local"})
        how = f"started a local Ray instance of its own ({ctx.address_info.get('gcs_address', '?')})"
    print(f"kit.sandbox (ray backend): {how}", file=sys.stderr)
    return how


register_executor("ray", RayExecutor)  # SandboxPool(backend="ray") finds it from now on
