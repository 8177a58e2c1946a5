"""An aiohttp service in front of LLM workers: routes each request with bounded consistent hashing,
streams the answer back, and serves the router's Prometheus metrics on /metrics.

    pip install 'bounded-router[aiohttp]'
    python examples/aiohttp_proxy.py --port 8080 \
        --worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002 --min-load-gap 2
"""

from __future__ import annotations

import argparse

from aiohttp import web

from bounded_router import Router, RouterArgs
from bounded_router.integrations.aiohttp import AiohttpProxy
from bounded_router.metrics import CONTENT_TYPE


def build_app(router: Router) -> web.Application:
    proxy = AiohttpProxy(router)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=router.metrics_text().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def close_router(app: web.Application) -> None:
        router.close()

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", proxy.handle)
    app.router.add_post("/v1/chat/completions", proxy.handle)
    app.on_cleanup.append(proxy.on_cleanup)
    app.on_cleanup.append(close_router)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    RouterArgs.add_cli_args(parser)  # with --host and --port (127.0.0.1, 8080)
    args = parser.parse_args()
    router = Router.from_args(RouterArgs.from_cli_args(args))
    # handler_cancellation: a client that disconnects cancels its handler at once, which
    # releases its lease even while the worker has not sent a first token yet.
    web.run_app(build_app(router), host=args.host, port=args.port, handler_cancellation=True, print=None)


if __name__ == "__main__":
    main()
