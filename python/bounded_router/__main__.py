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
from .args import RouterArgs, port_number, seconds_at_most
from .feeds import LOAD_FORMATS, MAX_FEED_SECONDS, Feed
from .launch_router import serve_until_signalled
from .router import Router
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
    feeds = serve.add_argument_group("engine state (docs/contract.md, \"Reported blocks\", \"Engine load reports\")")
    feeds.add_argument(
        "--kv-events",
        metavar="WORKER=tcp://HOST:PORT",
        type=_worker_endpoint,
        action="append",
        default=[],
        help="subscribe to this worker's KV event stream (cache_aware; repeat per worker)",
    )
    feeds.add_argument(
        "--kv-events-replay",
        metavar="WORKER=tcp://HOST:PORT",
        type=_worker_endpoint,
        action="append",
        default=[],
        help="the worker's KV event replay endpoint, to recover missed batches (repeat per worker)",
    )
    feeds.add_argument(
        "--load-poll",
        choices=LOAD_FORMATS,
        default=None,
        help="poll every worker's load: sglang (GET /get_load), sglang_loads (GET /v1/loads) or vllm (GET /metrics); off by default",
    )
    feeds.add_argument(
        "--load-poll-interval-secs", type=seconds_at_most(MAX_FEED_SECONDS), default=None, help="seconds between polls, at most %d (default 0.2)" % MAX_FEED_SECONDS
    )
    peers = serve.add_argument_group("router replicas (docs/contract.md, \"Sharing routes over the wire\")")
    peers.add_argument(
        "--peer-routes-publish",
        metavar="tcp://HOST:PORT",
        default=None,
        help="publish every route this gateway takes on this endpoint, for its peers (bind a private interface); off by default",
    )
    peers.add_argument(
        "--peer-routes",
        metavar="tcp://HOST:PORT",
        nargs="+",
        default=[],
        help="apply the routes these peers publish (their --peer-routes-publish endpoints; this gateway's own is skipped); "
        "they count while engine load reports stand (--load-poll)",
    )
    return parser, serve


def _worker_endpoint(text: str) -> Tuple[str, str]:
    """A WORKER=ENDPOINT flag value; the worker is split at the last '=' before the endpoint's scheme."""
    worker, sep, endpoint = text.rpartition("=")
    if not sep or not worker or not endpoint:
        raise argparse.ArgumentTypeError("expected WORKER=tcp://HOST:PORT, got %r" % text)
    return worker, endpoint


#: The path of each load format's endpoint on a worker.
_LOAD_PATHS = {"sglang": "/get_load", "sglang_loads": "/v1/loads", "vllm": "/metrics"}


def _start_feeds(router: Router, args: argparse.Namespace) -> List[Feed]:
    """The feeds the flags ask for, started (ValueError names what is wrong)."""
    started: List[Feed] = []
    if args.kv_events:
        started.append(router.subscribe_kv_events(dict(args.kv_events), dict(args.kv_events_replay)))
    elif args.kv_events_replay:
        raise ValueError("--kv-events-replay needs --kv-events for the same worker")
    if args.load_poll:
        endpoints = {w.url: w.url.rstrip("/") + _LOAD_PATHS[args.load_poll] for w in router.workers()}
        started.append(router.poll_loads(endpoints, format=args.load_poll, interval_secs=args.load_poll_interval_secs))
    elif args.load_poll_interval_secs is not None:
        raise ValueError("--load-poll-interval-secs needs --load-poll")
    if args.peer_routes_publish or args.peer_routes:
        try:
            started.append(router.share_routes(args.peer_routes_publish, args.peer_routes))
        except ValueError as e:
            raise ValueError("--peer-routes-publish / --peer-routes: %s" % e) from None
    return started


def main(argv: Optional[List[str]] = None) -> int:
    top, parser = _parser()
    args = top.parse_args(argv)
    router, options = router_and_options(parser, args, worker_api=True)
    try:
        _start_feeds(router, args)  # stopped when serving ends and the router closes
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
