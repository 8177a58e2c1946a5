"""Router.share_routes from Python (docs/contract.md, "Sharing routes over the wire"): two routers
in one process over loopback ZeroMQ, the settings checked, the counters in the metrics (read
with prometheus_client's parser), the serve flags. Bad input on the wire is tested in Go
(peerroutes/feed_test.go) against a raw ZeroMQ publisher."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from typing import Callable, List

import pytest

from bounded_router import Router
from bounded_router.feeds import PeerRoutesFeed
from support import parse_metrics

W0, W1 = "http://127.0.0.1:9/w0", "http://127.0.0.1:9/w1"
# The publishing routers here have a third worker the subscribing ones lack: routes to it tell
# that a subscriber has joined (ZeroMQ's late joiner misses what came before) and change nothing.
WARM_UP = "http://127.0.0.1:9/warm-up"


def _free_endpoint() -> str:
    """A loopback tcp:// endpoint nothing listens on yet."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "tcp://127.0.0.1:%d" % s.getsockname()[1]


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    """Poll condition every 10 ms, at most 1000 times."""
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def _joined(publisher: Router, feed: PeerRoutesFeed, peer: str, counter: str = "unknown_worker") -> None:
    def seen() -> bool:
        publisher.acquire(WARM_UP if counter == "unknown_worker" else W0)
        return bool(feed.statistics()[peer][counter] > 0)

    _wait_for("the subscriber to join", seen)


def test_a_peers_routes_count_on_a_standing_report_and_in_the_metrics() -> None:
    with Router([WARM_UP, W0, W1], policy="least_load") as a, Router([W0, W1], policy="least_load") as b:
        published = a.share_routes(publish="tcp://127.0.0.1:0")
        assert published.endpoint is not None and published.endpoint.startswith("tcp://127.0.0.1:")
        assert not published.endpoint.endswith(":0"), "the port the system picked"
        received = b.share_routes(peers=[published.endpoint])
        assert received.endpoint is None and received.publisher_statistics() == {"published": 0, "dropped": 0}
        _joined(a, received, published.endpoint)
        # contract "Peer routes", vectors: reports 0 and 1, then two peer routes to w0.
        b.report_load(W0, 0)
        b.report_load(W1, 1)
        a.acquire(W0)
        a.acquire(W0)
        _wait_for("a's two routes", lambda: received.statistics()[published.endpoint]["routes"] == 2)
        assert b.select().worker_url == W1, "loads 2 (the peer's) and 1"
        assert b.loads() == {W0: 0, W1: 0}, "b's own leases are unchanged"
        b.report_load(W0, 0)
        assert b.select().worker_url == W0, "the next report counts them"

        peer = received.statistics()[published.endpoint]
        assert peer["invalid"] == peer["malformed"] == peer["gaps"] == peer["own"] == 0
        sent = published.publisher_statistics()
        assert sent["dropped"] == 0 and sent["published"] == a.statistics().workers[0].routed + 2
        a_metrics, b_metrics = parse_metrics(a.metrics_text()), parse_metrics(b.metrics_text())
        assert a_metrics[("bounded_router_peer_routes_published_total", ())] == sent["published"]
        assert a_metrics[("bounded_router_peer_routes_dropped_total", ())] == 0
        on = (("peer", published.endpoint),)
        assert b_metrics[("bounded_router_peer_routes_received_total", on)] == 2
        for kind in ("unknown_worker", "invalid", "malformed", "gaps"):
            assert b_metrics[("bounded_router_peer_routes_problems_total", (("kind", kind),) + on)] == peer[kind]
        assert peer["unknown_worker"] > 0, "the warm-up routes: a worker b does not have"
        assert ("bounded_router_peer_routes_published_total", ()) not in b_metrics, "b does not publish"
        received.stop()
        assert not [name for name, _ in parse_metrics(b.metrics_text()) if "peer_routes" in name], "a stopped feed leaves the metrics"


def test_a_router_skips_its_own_routes() -> None:
    endpoint = _free_endpoint()
    with Router([W0, W1], policy="least_load") as router:
        feed = router.share_routes(publish=endpoint, peers=[endpoint])
        assert feed.endpoint == endpoint
        router.report_load(W0, 0)
        _joined(router, feed, endpoint, counter="own")
        assert feed.statistics()[endpoint]["routes"] == 0 and feed.statistics()[endpoint]["batches"] == 0


@pytest.mark.parametrize(
    "publish, peers, error, text",
    [
        (None, [], ValueError, "give publish, peers or both"),
        ("ipc:///tmp/routes", [], ValueError, 'publish must be tcp://host:port, got "ipc:///tmp/routes"'),
        (None, ["tcp://127.0.0.1:0"], ValueError, 'peers must be tcp://host:port, got "tcp://127.0.0.1:0"'),
        (None, ["tcp://127.0.0.1:5", "tcp://127.0.0.1:5"], ValueError, 'peers names "tcp://127.0.0.1:5" twice'),
        (None, "tcp://127.0.0.1:5", TypeError, "peers must be a list"),
    ],
)
def test_bad_settings_are_refused(publish: str, peers: List[str], error: type, text: str) -> None:
    with Router([W0, W1]) as router:
        with pytest.raises(error, match=text):
            router.share_routes(publish, peers)


def test_one_publisher_per_router_and_the_feed_ends_with_the_router() -> None:
    router = Router([W0, W1])
    feed = router.share_routes(publish="tcp://127.0.0.1:0")
    with pytest.raises(ValueError, match="this router publishes its routes already"):
        router.share_routes(publish="tcp://127.0.0.1:0")
    feed.stop()
    again = router.share_routes(publish="tcp://127.0.0.1:0")
    router.close()
    assert not again.running and again.statistics() == {}


def test_serve_shares_routes() -> None:
    # Nothing listens on the peer's port: the feed starts, keeps dialling, stops cleanly.
    done = subprocess.run(
        [sys.executable, "-m", "bounded_router", "serve", "--worker-urls", "http://127.0.0.1:9", "--port", "0", "--lifetime", "0.5",
         "--peer-routes-publish", "tcp://127.0.0.1:0", "--peer-routes", _free_endpoint(), _free_endpoint()],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "gateway listening on" in done.stdout and "Traceback" not in done.stderr


def test_statistics_read_while_the_feed_stops_are_the_last_or_empty() -> None:
    # A stop that lands while the counters are read (a router closed during a scrape) waits
    # for the read; before, it freed the handle under it and the read failed.
    router = Router([W0, W1])
    feed = router.share_routes(publish="tcp://127.0.0.1:0")
    real = feed._lib.read_json
    stopper = threading.Thread(target=feed.stop)

    def read_while_stopping(export: str, handle: int) -> object:
        stopper.start()
        stopper.join(0.5)  # with the read holding the feed's lock, stop waits
        return real(export, handle)

    feed._lib.read_json = read_while_stopping  # type: ignore[method-assign]  # the process's library: put back below
    try:
        assert feed.publisher_statistics() == {"published": 0, "dropped": 0}
    finally:
        del feed._lib.read_json
    stopper.join(10)
    assert not stopper.is_alive() and not feed.running and feed.statistics() == {}
    router.close()


def test_a_router_follows_each_peer_on_one_feed() -> None:
    # Two feeds following one peer would write two series of each of its metrics.
    router = Router([W0, W1])
    first, second = _free_endpoint(), _free_endpoint()
    with pytest.raises(TypeError, match="not one str"):
        router.share_routes(peers=first)  # type: ignore[arg-type]  # the mistake under test
    feed = router.share_routes(peers=[first])
    with pytest.raises(ValueError, match="follows %s already" % first):
        router.share_routes(peers=[second, first])
    other = router.share_routes(peers=[second])
    feed.stop()
    again = router.share_routes(peers=[first])
    assert {peer for f in (other, again) for peer in f.statistics()} == {first, second}
    router.close()
