"""Helpers that put a :class:`~bounded_router.Router` in front of workers in a Python serving stack.

* :mod:`bounded_router.integrations.asgi` -- Starlette / FastAPI (``pip install
  'bounded-router[fastapi]'``): :class:`~bounded_router.integrations.asgi.ASGIProxy`, an ASGI app
  and ``await proxy.forward(request)`` for your own routes.
* :mod:`bounded_router.integrations.aiohttp` -- aiohttp (``pip install 'bounded-router[aiohttp]'``):
  :class:`~bounded_router.integrations.aiohttp.AiohttpProxy`, a request handler.

Both route each request from its headers (contract: "Inputs and precedence"), forward it to the chosen worker,
stream the worker's answer back, and hold the request's lease until the body is finished, fails,
or the client disconnects. Importing this package imports no framework; each module imports its
own when it is imported.

``python -m bounded_router.integrations.serve`` runs a ready-made proxy (FastAPI + uvicorn) with
a ``/metrics`` endpoint, configured with the router's command-line flags.
"""
