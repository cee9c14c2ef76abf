"""Rollout request routing across inference engines (rStar2-Agent report §3.2).

One policy object, two users: :mod:`kit.sim` simulates it on a model of the cluster and
``kit.bridge.kv_router`` runs it inside VERL's LLM server manager (``rollout.balancer``).

    from kit.sched import KvCacheBalancer, StickyLeastInflight
    bal = KvCacheBalancer(["e0", "e1"], capacity_tokens=3_500_000)
    bal.report("e0", used_tokens=1_200_000)          # what the engine says it holds
    engine = bal.acquire("traj-7", prompt_tokens=900, max_new_tokens=8192)
    ...                                              # send the turn there
    bal.release("traj-7", engine)

:class:`StickyLeastInflight` is a model of VERL 0.9.1's default (``GlobalRequestLoadBalancer``:
sticky sessions plus fewest in-flight requests) with the same interface, for comparisons.
Pure Python: nothing here imports verl, ray or numpy.
"""

from kit.sched.balancer import Balancer, KvCacheBalancer, Lease, StickyLeastInflight, check_report

__all__ = ["Balancer", "KvCacheBalancer", "Lease", "StickyLeastInflight", "check_report"]
