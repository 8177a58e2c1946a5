"""``python -m bounded_router.integrations.serve``: a ready-made routing proxy (FastAPI + uvicorn).

Forwards every request to the worker the router chooses (see :class:`ASGIProxy`), configured with
the router's flags and the proxy's limits::

    python -m bounded_router.integrations.serve --port 8080 \\
        --worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000 \\
        --policy bounded_consistent_hashing --max-load-skew 1.5 --min-load-gap 2 \\
        --prometheus-port 9090

The router's Prometheus metrics name every worker, so they are served only on their own port
(``--prometheus-port``, SMG's name, or ``--metrics-port``), never on the proxy's. It prints
``metrics listening on http://HOST:PORT`` (with ``--prometheus-port``) and then ``proxy
listening on http://HOST:PORT`` once it accepts requests (port 0 picks a free port), and runs until SIGINT/SIGTERM or ``--lifetime`` seconds.
Needs ``pip install 'bounded-router[fastapi]'``.
"""

import argparse
import asyncio
import dataclasses
import socket
import sys
from typing import Any, List, Optional, Tuple

from .._cli import SERVE_HINT, CommandParser
from .._feed_flags import add_feed_args, start_feeds
from ..args import RouterArgs, port_number
from ..health import RetryConfig
from ..router import Router
from .asgi import ASGIProxy
from .options import ProxyOptions, positive_seconds, router_and_options

__all__ = ["create_app", "create_metrics_app", "main"]

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def create_app(router: Router, options: ProxyOptions = ProxyOptions(), retries: RetryConfig = RetryConfig()) -> ASGIProxy:
    """The proxy app: every request, whatever its path and method, goes to a worker."""
    return ASGIProxy(router, retries=retries, **dataclasses.asdict(options))


def create_metrics_app(router: Router) -> Any:
    """An app answering ``GET /metrics`` with the router's Prometheus metrics."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from ..metrics import CONTENT_TYPE

    async def metrics(request: Request) -> Response:
        return Response(router.metrics_text(), media_type=CONTENT_TYPE)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="python -m bounded_router.integrations.serve",
        hint=SERVE_HINT,
        description="A routing proxy: forwards each request to the worker the router chooses and streams the answer back.",
    )
    RouterArgs.add_cli_args(parser)  # with --host and --port
    parser.set_defaults(request_timeout_secs=None)  # the gateway's alone: refused when given (main)
    parser.add_argument("--metrics-port", dest="prometheus_port", type=port_number, default=None, help="the same as --prometheus-port")
    ProxyOptions.add_cli_args(parser)
    add_feed_args(parser)
    parser.add_argument("--lifetime", type=positive_seconds, default=None, help="exit after this many seconds (default: run until stopped)")
    parser.add_argument("--log-level", choices=_LOG_LEVELS, default="warning", help="uvicorn log level (default: %(default)s)")
    return parser


def _listen(parser: argparse.ArgumentParser, host: str, port: int, what: str) -> socket.socket:
    """A bound TCP socket (IPPROTO_TCP, so asyncio turns Nagle's algorithm off on it)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        parser.error("cannot listen for the %s on %s port %d: %s" % (what, host, port, e.strerror or e))
    return sock


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        parser.error("the routing proxy runs on uvicorn, which is not installed: pip install 'bounded-router[fastapi]'")
    if args.request_timeout_secs is not None:
        parser.error("--request-timeout-secs applies to the native gateway (python -m bounded_router serve); "
                     "this proxy bounds a request by --first-byte-timeout and --idle-timeout")
    args.request_timeout_secs = RouterArgs.request_timeout_secs
    try:
        retries = RouterArgs.from_cli_args(args).retry_config()
    except ValueError as e:
        parser.error("--retry-max-retries: %s" % e)
    router, options = router_and_options(parser, args)
    try:
        start_feeds(router, args)  # stopped when the router closes
    except ValueError as e:
        router.close()
        parser.error(str(e))
    apps: List[Tuple[str, Any, socket.socket]] = []
    if args.prometheus_port is not None:
        apps.append(("metrics", create_metrics_app(router), _listen(parser, args.host, args.prometheus_port, "metrics")))
    apps.append(("proxy", create_app(router, options, retries), _listen(parser, args.host, args.port, "proxy")))
    try:
        asyncio.run(_serve(uvicorn, apps, args.log_level, args.lifetime))
    except KeyboardInterrupt:
        pass
    finally:
        router.close()
    return 0


async def _serve(uvicorn: Any, apps: List[Tuple[str, Any, socket.socket]], log_level: str, lifetime: Optional[float]) -> None:
    """Serve each (name, app, socket) with uvicorn and say where, until one stops or ``lifetime`` ends."""
    running = []
    for name, app, sock in apps:
        config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5, server_header=False)
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            await task  # it did not start: raise what it raised
            return
        host, port = sock.getsockname()[:2]
        print("%s listening on http://%s:%d" % (name, "[%s]" % host if ":" in host else host, port), flush=True)
        running.append((server, task))
    await asyncio.wait([task for _, task in running], timeout=lifetime, return_when=asyncio.FIRST_COMPLETED)
    for server, _ in running:
        server.should_exit = True
    await asyncio.gather(*(task for _, task in running))


if __name__ == "__main__":
    sys.exit(main())
