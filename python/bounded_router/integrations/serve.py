"""``python -m bounded_router.integrations.serve``: a ready-made routing proxy (FastAPI + uvicorn).

Forwards every request to the worker the router chooses (see :class:`ASGIProxy`) and answers
``GET /metrics`` with the router's Prometheus metrics. Configured with the router's flags::

    python -m bounded_router.integrations.serve --port 8080 \\
        --worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000 \\
        --policy bounded_consistent_hashing --max-load-skew 1.5 --min-load-gap 2

It prints ``proxy listening on http://HOST:PORT`` once it accepts requests (``--port 0`` picks a
free port). Needs ``pip install 'bounded-router[fastapi]'``.
"""

# No "from __future__ import annotations": FastAPI reads the route signatures below, whose
# types are imported inside create_app.
import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time
from typing import Any, AsyncIterator, List, Optional

from ..args import RouterArgs
from ..router import Router
from .asgi import ASGIProxy

__all__ = ["create_app", "main"]


def create_app(router: Router, *, expose_routing_headers: bool = False, metrics_path: str = "/metrics") -> Any:
    """A FastAPI app: ``GET metrics_path`` -> the router's metrics; anything else -> a worker."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import PlainTextResponse
    except ImportError as e:
        raise ImportError("the routing proxy needs FastAPI (%s): pip install 'bounded-router[fastapi]'" % e) from None
    from ..metrics import CONTENT_TYPE

    proxy = ASGIProxy(router, expose_routing_headers=expose_routing_headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        await proxy.aclose()

    app = FastAPI(title="bounded-router proxy", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.proxy = proxy

    @app.get(metrics_path, include_in_schema=False)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(router.metrics_text(), media_type=CONTENT_TYPE)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
    async def forward(request: Request, path: str) -> Any:
        return await proxy.forward(request)

    return app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bounded_router.integrations.serve",
        description="A routing proxy: forwards each request to the worker the router chooses and streams "
        "the answer back; GET /metrics gives the router's Prometheus metrics.",
    )
    RouterArgs.add_cli_args(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--expose-routing-headers", action="store_true", help="add X-Bounded-Router-Worker/-Branch to responses")
    parser.add_argument("--lifetime", type=float, default=None, help="exit after this many seconds (for tests and demos)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default: %(default)s)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        parser.error("the routing proxy runs on uvicorn, which is not installed: pip install 'bounded-router[fastapi]'")
    if not args.worker_urls:
        parser.error("--worker-urls: give at least one worker URL")
    try:
        router = Router.from_args(RouterArgs.from_cli_args(args))
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    app = create_app(router, expose_routing_headers=args.expose_routing_headers)
    # proto=IPPROTO_TCP: asyncio turns Nagle's algorithm off only on sockets that say they are TCP;
    # without it a streamed token can wait 40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)

    async def run() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            print("proxy listening on http://%s:%d" % (args.host, port), flush=True)
        parent = os.getppid()
        started = time.monotonic()
        while not serving.done():
            await asyncio.sleep(0.2)
            expired = args.lifetime is not None and time.monotonic() - started > args.lifetime
            if expired or os.getppid() != parent:
                server.should_exit = True
        await serving

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        router.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
