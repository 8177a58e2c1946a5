"""Tools to try the router against a mock inference fleet, without GPUs.

* :mod:`bounded_router.testing.mock_worker` -- a mock LLM worker over HTTP (standard library
  only): streaming tokens, a prefix cache, prefill and decode times from the simulator's model.
* :mod:`bounded_router.testing.fleet` -- start mock workers and routing proxies as processes.
* :mod:`bounded_router.testing.e2e` -- send groups of streaming siblings through a proxy and
  measure placement, spill, cache reuse, time to first token and throughput (needs
  ``bounded-router[fastapi]``).
"""
