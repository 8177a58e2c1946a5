"""Helpers that put a :class:`~bounded_router.Router` in front of workers in a Python serving stack.

* :mod:`bounded_router.integrations.asgi` -- Starlette / FastAPI (``pip install
  'bounded-router[fastapi]'``): :class:`~bounded_router.integrations.asgi.ASGIProxy`, an ASGI app
  and ``await proxy.forward(request)`` for your own routes.
* :mod:`bounded_router.integrations.aiohttp` -- aiohttp (``pip install 'bounded-router[aiohttp]'``):
  :class:`~bounded_router.integrations.aiohttp.AiohttpProxy`, a request handler.
* :mod:`bounded_router.integrations.options` -- :class:`ProxyOptions`, the limits and timeouts
  both take as keyword arguments.
* :mod:`bounded_router.integrations.verl` -- verl's rollout balancer (``acquire_server`` /
  ``release_server``) on a bounded router; needs no extra, imports neither verl nor Ray.

Both check each request (path, header and body size), route it from its headers, forward it to
the chosen worker, stream the worker's answer back, and hold the request's lease until the body
is finished, fails, or the client disconnects; docs/contract.md ("HTTP proxies") states the
rules. Importing this package imports no framework; each module imports its own when it is
imported.

``python -m bounded_router.integrations.serve`` runs a ready-made proxy (FastAPI + uvicorn),
configured with the router's command-line flags, with metrics on a port of their own.
"""
