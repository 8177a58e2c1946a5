"""The engine-state and router-replica flags of both serve commands (the native gateway's and
``integrations.serve``'s): KV events, load polls and peer routes (docs/contract.md, "Reported
blocks", "Engine load reports", "Sharing routes over the wire"), and the feeds they start."""

from __future__ import annotations

import argparse
from typing import List, Tuple

from .args import seconds_at_most
from .feeds import LOAD_FORMATS, MAX_FEED_SECONDS, Feed
from .router import Router

__all__ = ["add_feed_args", "start_feeds"]

#: The path of each load format's endpoint on a worker.
_LOAD_PATHS = {"sglang": "/get_load", "sglang_loads": "/v1/loads", "vllm": "/metrics"}


def add_feed_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--kv-events``, ``--load-poll``, ``--peer-routes`` and their companions to ``parser``."""
    feeds = parser.add_argument_group("engine state (docs/contract.md, \"Reported blocks\", \"Engine load reports\")")
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
        "--load-poll-interval-secs",
        type=seconds_at_most(MAX_FEED_SECONDS),
        default=None,
        help="seconds between polls, at most %d (default 0.2)" % MAX_FEED_SECONDS,
    )
    peers = parser.add_argument_group("router replicas (docs/contract.md, \"Sharing routes over the wire\")")
    peers.add_argument(
        "--peer-routes-publish",
        metavar="tcp://HOST:PORT",
        default=None,
        help="publish every route this server takes on this endpoint, for its peers (bind a private interface); off by default",
    )
    peers.add_argument(
        "--peer-routes",
        metavar="tcp://HOST:PORT",
        nargs="+",
        default=[],
        help="apply the routes these peers publish (their --peer-routes-publish endpoints; this server's own is skipped); "
        "they count while engine load reports stand (--load-poll)",
    )


def _worker_endpoint(text: str) -> Tuple[str, str]:
    """A WORKER=ENDPOINT flag value; the worker is split at the last '=' before the endpoint's scheme."""
    worker, sep, endpoint = text.rpartition("=")
    if not sep or not worker or not endpoint:
        raise argparse.ArgumentTypeError("expected WORKER=tcp://HOST:PORT, got %r" % text)
    return worker, endpoint


def start_feeds(router: Router, args: argparse.Namespace) -> List[Feed]:
    """The feeds the flags of :func:`add_feed_args` ask for, started on ``router`` (stopped when
    it closes); ValueError names what is wrong."""
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
