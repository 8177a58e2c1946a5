"""Swap verl's rollout balancer for bounded-router's (bounded_router.integrations.verl).

verl (github.com/verl-project/verl) routes agent-loop requests through one balancer, a Ray actor
its ``LLMServerManager`` builds (``verl/workers/rollout/llm_server.py``): ``acquire_server(request_id)
-> (server_id, handle)``, ``release_server(server_id)``, ``add_servers`` / ``remove_servers`` as
hybrid replicas come and go, ``clear_sticky_cache()`` / ``get_total_inflight()`` when the fully
async rollouter rebalances. ``BoundedRequestLoadBalancer`` has that surface.

verl v0.9.0 (since c6dd5b50a): the balancer is a plain class, and the manager wraps it itself,
``ray.remote(load_balancer_cls).remote(servers={address: handle}, max_cache_size=10000)``, adding
``full_determinism=`` (``actor_rollout_ref.rollout.full_determinism``) when the class is the
module's ``GlobalRequestLoadBalancer``. Two ways in:

1. Code that builds the manager itself (a recipe, your own trainer) names the class::

       from verl.workers.rollout.llm_server import LLMServerManager
       manager = LLMServerManager.create(config, worker_group=wg,
                                         load_balancer_cls=bounded_balancer_class(min_load_gap=2))

   verl passes ``full_determinism`` to its own class only: give ``full_determinism=True`` to
   ``bounded_balancer_class`` yourself if the run needs it.

2. verl's own trainers build the manager in their ``TaskRunner`` actor: replace the class in its
   module there, before the manager is built (``patch_verl`` below). The manager then passes
   ``full_determinism`` as to its own class, and balancers verl builds later in that process
   (the teacher models', ``teacher_model.py``, look the class up then) are the bounded one too.
   For instance, from your own entry point, which prepares the config as verl's
   ``main_ppo.main`` does::

       import ray
       from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

       @ray.remote
       class BoundedTaskRunner(TaskRunnerV1.__ray_actor_class__):
           def run(self, config):
               from verl.workers.rollout import llm_server
               patch_verl(llm_server, min_load_gap=2)   # this file's, importable there
               return super().run(config)

       run_ppo(config, task_runner_class=BoundedTaskRunner)

Older verl, where the balancer is a ``@ray.remote`` class verl builds with ``.remote(...)``:
v0.8.0 (``llm_server``, ``servers={address: handle}``; the commits from f7daadbe6 to before
c6dd5b50a add ``full_determinism=``) and v0.7.1 (``verl.experimental.agent_loop.agent_loop``,
``server_actor_ids=[...]``, the id alone returned). ``patch_verl`` sees the actor class and
installs one (way 2 only). The commits from 3c5f6e049 to before d324b014d, in no release, pass
handles but take the id alone: add ``return_handle=False``.

The options are the balancer's keyword arguments: ``min_load_gap``, ``max_load_skew``,
``key_memory`` (else the ``max_cache_size`` verl passes, 10,000), ``key_fn`` (GRPO siblings of
one prompt share a key, below the part before ``/``, so they share a replica's prefix cache until
the bound spreads them), ``full_determinism``. Arguments verl passes win over them.

Run this file to see the balancer decide for a GRPO step without verl or Ray installed::

    python examples/verl_balancer.py
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bounded_router.integrations.verl import BoundedRequestLoadBalancer


def bounded_balancer_class(**options: Any) -> type:
    """A balancer class for verl to build with its own arguments, ``options`` added to them."""

    class ConfiguredBalancer(BoundedRequestLoadBalancer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**options, **kwargs})

    return ConfiguredBalancer


def patch_verl(module: Any, **options: Any) -> None:
    """Make ``module.GlobalRequestLoadBalancer`` (``verl.workers.rollout.llm_server``, or
    ``verl.experimental.agent_loop.agent_loop`` in verl v0.7.1) the bounded balancer, in the form
    that verl builds: the class itself where verl wraps it with ``ray.remote`` (v0.9.0), a Ray
    actor class where verl calls ``.remote`` on it (v0.7.1, v0.8.0)."""
    balancer = bounded_balancer_class(**options)
    if hasattr(module.GlobalRequestLoadBalancer, "remote"):  # verl's own is an actor class
        import ray

        module.GlobalRequestLoadBalancer = ray.remote(balancer)
    else:
        module.GlobalRequestLoadBalancer = balancer


def main() -> None:
    balancer = BoundedRequestLoadBalancer(
        {"replica-%d" % i: None for i in range(4)}, min_load_gap=2, key_fn=lambda request_id: request_id.split("/")[0]
    )
    # One GRPO step: 16 prompts, 8 samples each, all in flight at once.
    placed = {(p, s): balancer.acquire_server("prompt-%d/sample-%d" % (p, s))[0] for p in range(16) for s in range(8)}
    for p in range(3):
        print("prompt-%d: samples on %s" % (p, dict(Counter(placed[(p, s)] for s in range(8)))))
    print("in flight per replica:", balancer.get_status()["servers"])
    for server in placed.values():
        balancer.release_server(server)
    status = balancer.get_status()
    print("after release:", status["servers"], "leaked:", status["leaked_leases"])
    balancer.close()


if __name__ == "__main__":
    main()
