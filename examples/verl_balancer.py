"""Swap verl's rollout balancer for bounded-router's (bounded_router.integrations.verl).

verl routes agent-loop requests through a ``GlobalRequestLoadBalancer`` Ray actor
(``acquire_server(request_id)`` / ``release_server(server_id)``). Two ways to put the bounded one
in its place, depending on the verl version:

1. verl with a balancer registry (``verl/workers/rollout/...``: ``LoadBalancerRegistry``,
   chosen by ``actor_rollout_ref.rollout.router_strategy``): register it once, before the trainer
   starts, and name it in the config::

       from verl.workers.rollout.load_balancer import LoadBalancerRegistry   # where your verl has it
       from bounded_router.integrations.verl import BoundedRequestLoadBalancer
       LoadBalancerRegistry.register("bounded")(BoundedRequestLoadBalancer)

   .. code-block:: yaml

       actor_rollout_ref:
         rollout:
           router_strategy: bounded
           router_config:
             min_load_gap: 2        # requests in flight above the least loaded replica
             max_load_skew: 1.5     # ... and above the mean times this, before a request id moves
             key_memory: 10000      # request ids that keep their replica (verl's LRU size)
             return_handle: true    # this protocol's acquire_server returns (server_id, handle)

2. verl whose ``LLMServerManager`` builds ``GlobalRequestLoadBalancer.remote(servers=...,
   max_cache_size=...)`` directly: replace the class in its module before the manager starts
   (``patch_verl`` below). The constructor takes verl's arguments (``servers`` or
   ``server_actor_ids``, ``max_cache_size``).

GRPO siblings of one prompt can share a key: ``key_fn`` maps a request id to its group (below,
the part before ``/``), so they share a replica's prefix cache until the bound spreads them.

Run this file to see the balancer decide for a GRPO step without verl or Ray installed::

    python examples/verl_balancer.py
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bounded_router.integrations.verl import BoundedRequestLoadBalancer


def patch_verl(module: Any, **options: Any) -> None:
    """Make ``module.GlobalRequestLoadBalancer`` (e.g. ``verl.workers.rollout.llm_server``) the
    bounded balancer, as a Ray actor class; ``options`` go to every balancer it builds."""
    import ray

    class Configured(BoundedRequestLoadBalancer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**options, **kwargs})

    module.GlobalRequestLoadBalancer = ray.remote(Configured)


def main() -> None:
    balancer = BoundedRequestLoadBalancer(
        {"replica-%d" % i: None for i in range(4)}, min_load_gap=2, key_fn=lambda request_id: request_id.split("/")[0]
    )
    # One GRPO step: 16 prompts, 8 samples each, all in flight at once.
    placed = {(p, s): balancer.acquire_server("prompt-%d/sample-%d" % (p, s))[0] for p in range(16) for s in range(8)}
    for p in range(3):
        print("prompt-%d: samples on %s" % (p, dict(Counter(placed[(p, s)] for s in range(8)))))
    print("in flight per replica:", balancer.get_status()["inflight"])
    for server in placed.values():
        balancer.release_server(server)
    print("after release:", balancer.get_status()["inflight"], "leaked:", balancer.get_status()["leaked_leases"])
    balancer.close()


if __name__ == "__main__":
    main()
