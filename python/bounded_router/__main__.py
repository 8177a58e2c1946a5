"""``python -m bounded_router serve ...`` (also the ``bounded-router`` command): the native gateway.

Routes every request to the worker the router chooses and streams the answer back, with the
router's flags and the gateway's options (see :mod:`bounded_router.gateway`)::

    bounded-router serve --port 8080 --metrics-port 9090 \\
        --worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000 \\
        --policy bounded_consistent_hashing --max-load-skew 1.5 --min-load-gap 2

It prints ``gateway listening on http://HOST:PORT`` once it accepts requests (``--port 0``
picks a free port) and stops gracefully on SIGTERM or SIGINT: no new connections, in-flight
requests drain for up to ``--shutdown-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, Callable, List, Optional

from .args import RouterArgs

__all__ = ["main"]


def _number(kind: Callable[[str], Any], what: str, low: float, high: Optional[float] = None, low_ok: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not %s" % (text, what)) from None
        if value != value or value < low or (value == low and not low_ok) or (high is not None and value > high):
            raise argparse.ArgumentTypeError("%r is not %s" % (text, what))
        return value

    return parse


_port = _number(int, "a port number from 0 to 65535", 0, 65535, low_ok=True)
_seconds = _number(float, "a positive number of seconds", 0)
_bytes = _number(int, "a positive number of bytes", 0)

# (flag, type, help): gateway options passed on by name (--first-byte-timeout -> first_byte_timeout).
_OPTIONS = (
    ("--max-body-size", _bytes, "largest request body accepted, in bytes; 413 above (default: 4 MiB)"),
    ("--connect-timeout", _seconds, "seconds to connect to a worker; 502 past it (default: 10)"),
    ("--first-byte-timeout", _seconds, "seconds to wait for a worker's response headers; 504 past it (default: 600)"),
    ("--idle-stream-timeout", _seconds, "cut a streamed answer after this many seconds with no byte from the worker (default: 300)"),
    ("--body-read-timeout", _seconds, "seconds to receive a request body; 408 past it (default: 60)"),
    ("--shutdown-timeout", _seconds, "seconds in-flight requests may take to finish on SIGTERM/SIGINT (default: 10)"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bounded-router", description="bounded-router: bounded consistent-hashing request routing.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    serve = commands.add_parser(
        "serve",
        help="run the native HTTP gateway in front of the workers",
        description="Run the native HTTP gateway: each request goes to the worker the router chooses from its "
        "headers (X-SMG-Routing-Key, ...), and the answer streams back.",
    )
    RouterArgs.add_cli_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=_port, default=8080, help="port to listen on; 0 picks a free one (default: %(default)s)")
    serve.add_argument("--metrics-port", type=_port, default=None, help="serve GET /metrics (Prometheus) on this port; off by default")
    serve.add_argument("--expose-routing-headers", action="store_true", help="add X-Bounded-Router-Worker/-Branch to responses and name workers in error bodies")
    for flag, kind, text in _OPTIONS:
        serve.add_argument(flag, type=kind, default=None, help=text)
    serve.add_argument("--access-log", action="store_true", help="log one JSON line per request to stderr")
    serve.add_argument("--lifetime", type=_seconds, default=None, help="stop after this many seconds (for demos and tests)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.worker_urls:
        parser.error("--worker-urls: give at least one worker URL")
    from .router import Router

    try:
        router = Router.from_args(RouterArgs.from_cli_args(args))
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    options = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, _, _ in _OPTIONS}
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        gateway = router.serve(
            host=args.host,
            port=args.port,
            metrics_port=args.metrics_port,
            expose_routing_headers=args.expose_routing_headers,
            access_log=args.access_log,
            **options,
        )
    except ValueError as e:
        router.close()
        parser.error(str(e))
    print("gateway listening on %s" % gateway.url, flush=True)
    if gateway.metrics_url:
        print("metrics on %s" % gateway.metrics_url, flush=True)
    stop.wait(args.lifetime)
    gateway.stop()
    router.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
