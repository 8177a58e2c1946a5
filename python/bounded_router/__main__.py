"""``python -m bounded_router serve ...`` (also the ``bounded-router`` command): the native gateway.

Routes every request to the worker the router chooses and streams the answer back, with the
router's flags and the gateway's options (see :mod:`bounded_router.gateway`)::

    bounded-router serve --port 8080 --prometheus-port 9090 \\
        --worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000 \\
        --policy bounded_consistent_hashing --max-load-skew 1.5 --min-load-gap 2

It prints ``gateway listening on http://HOST:PORT`` once it accepts requests (``--port 0``
picks a free port) and stops gracefully on SIGTERM or SIGINT: no new connections, in-flight
requests drain for up to ``--shutdown-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import List, Optional, Tuple

from ._cli import SERVE_HINT, CommandParser
from ._feed_flags import add_feed_args, start_feeds
from .args import RouterArgs, port_number
from .launch_router import serve_until_signalled
from .integrations.options import ProxyOptions, positive_seconds, router_and_options

__all__ = ["main"]


def _parser() -> Tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser and its ``serve`` subcommand's."""
    parser = CommandParser(prog="bounded-router", description="bounded-router: bounded consistent-hashing request routing.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    commands.required = True
    serve = commands.add_parser(
        "serve",
        hint=SERVE_HINT,
        settings={"metrics_port": "--prometheus-port"},
        help="run the native HTTP gateway in front of the workers",
        description="Run the native HTTP gateway: each request goes to the worker the router chooses from its "
        "headers (X-SMG-Routing-Key, ...), and the answer streams back.",
    )
    RouterArgs.add_cli_args(serve)  # with --host and --port
    serve.add_argument("--metrics-port", dest="prometheus_port", type=port_number, default=None, help="the same as --prometheus-port")
    ProxyOptions.add_cli_args(serve)
    serve.add_argument(
        "--shutdown-timeout",
        "--shutdown-grace-period-secs",
        type=positive_seconds,
        default=10.0,
        help="seconds in-flight requests may take to finish on SIGTERM/SIGINT (SMG: --shutdown-grace-period-secs; default: %(default)s)",
    )
    serve.add_argument("--access-log", action="store_true", help="log one JSON line per request to stderr")
    serve.add_argument("--pprof", action="store_true", help="serve Go's profiles on /debug/pprof/ of the --prometheus-port listener (for profiling; off by default)")
    serve.add_argument("--lifetime", type=positive_seconds, default=None, help="stop after this many seconds (for demos and tests)")
    add_feed_args(serve)
    return parser, serve


def main(argv: Optional[List[str]] = None) -> int:
    top, parser = _parser()
    args = top.parse_args(argv)
    router, options = router_and_options(parser, args, worker_api=True)
    try:
        start_feeds(router, args)  # stopped when serving ends and the router closes
    except ValueError as e:
        router.close()
        parser.error(str(e))
    try:
        settings = RouterArgs.from_cli_args(args).gateway_options()
        settings.update(shutdown_timeout=args.shutdown_timeout, access_log=args.access_log, pprof=args.pprof)
        serve_until_signalled(router, args.lifetime, **settings, **dataclasses.asdict(options))
    except ValueError as e:
        router.close()
        parser.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
