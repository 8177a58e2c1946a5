"""Router.poll_loads against a loopback HTTP server answering SGLang's /get_load and vLLM's
/metrics shapes (docs/contract.md, "Engine load reports")."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from bounded_router import Router
from bounded_router.feeds import Feed

ANSWERS: Dict[str, Tuple[str, str]] = {
    "/w0/get_load": ("application/json", '[{"num_reqs": 9, "num_waiting_reqs": 4, "num_tokens": 0, "dp_rank": 0}]'),
    "/w1/get_load": ("application/json", '[{"num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0, "dp_rank": 0}]'),
    "/w0/metrics": ("text/plain", 'vllm:num_requests_running{model_name="m"} 0\nvllm:num_requests_waiting{model_name="m"} 0\n'),
    "/w1/metrics": ("text/plain", 'vllm:num_requests_running{model_name="m"} 5\nvllm:num_requests_waiting{model_name="m"} 1\n'),
    "/w0/v1/loads": ("application/json", '{"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 1, "num_waiting_uncached_tokens": 900}]}'),
    "/w1/v1/loads": ("application/json", '{"loads": [{"dp_rank": 0, "num_running_reqs": 6, "num_waiting_reqs": 2, "num_waiting_uncached_tokens": 100}]}'),
    "/garbage": ("text/html", "<html>"),
}
# Worker URLs are loopback ports nothing listens on: only the endpoints are polled.
W0, W1 = "http://127.0.0.1:9/w0", "http://127.0.0.1:9/w1"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        content_type, body = ANSWERS.get(self.path, ("text/plain", ""))
        self.send_response(200 if self.path in ANSWERS else 404)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body.encode())
        except ConnectionError:
            pass  # a poll the test's end stopped mid-answer (its poller closed the connection)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def _wait_for(poller: Feed, done: Callable[[Dict[str, Dict[str, Any]]], bool]) -> None:
    for _ in range(1000):  # bounded: 1000 x 10 ms
        if done(poller.statistics()):
            return
        time.sleep(0.01)
    raise AssertionError("the polls did not get there: %r" % poller.statistics())


# Polls every 10 ms, but each may take 5 s and a report stands a minute: on a busy machine a
# slow poll is then late, never a failure that would expire a report mid-test.
FAST = dict(interval_secs=0.01, timeout_secs=5, expiry_secs=60)


@pytest.mark.parametrize("fmt, path, expected", [("sglang", "get_load", W1), ("vllm", "metrics", W0)])
def test_reported_loads_steer_routing(endpoint: str, fmt: str, path: str, expected: str) -> None:
    with Router([W0, W1], policy="least_load") as router:
        with router.poll_loads({W0: "%s/w0/%s" % (endpoint, path), W1: "%s/w1/%s" % (endpoint, path)}, format=fmt, **FAST) as poller:
            _wait_for(poller, lambda stats: all(s["reports"] > 0 for s in stats.values()))
            assert router.select().worker_url == expected
            assert all(s["standing"] for s in poller.statistics().values())
        assert not poller.running and poller.statistics() == {}
        # Stopped: the reports are forgotten, both are idle, and a keyless tie goes to either at
        # random (docs/contract.md, "Ties by the key").
        assert {router.select().worker_url for _ in range(200)} == {W0, W1}


@pytest.mark.parametrize("lease_weights, expected", [("requests", W0), ("tokens", W1)])
def test_waiting_tokens_steer_a_token_weighted_prefill_router(endpoint: str, lease_weights: str, expected: str) -> None:
    # balance_by prefill, gap 0: the smaller prefill queue wins. In requests w0 has 1 waiting and
    # w1 2; in tokens w0 has 900 uncached and w1 100.
    with Router([W0, W1], policy="cache_aware", balance_by="prefill", min_load_gap=0, max_load_skew=1.0) as router:
        endpoints = {W0: endpoint + "/w0/v1/loads", W1: endpoint + "/w1/v1/loads"}
        with router.poll_loads(endpoints, format="sglang_loads", lease_weights=lease_weights, **FAST) as poller:
            _wait_for(poller, lambda stats: all(s["reports"] > 0 for s in stats.values()))
            assert router.select(prefix_blocks=[1]).worker_url == expected


def test_garbage_is_counted_and_nothing_reported(endpoint: str) -> None:
    with Router([W0], policy="least_load") as router:
        with router.poll_loads({W0: endpoint + "/garbage"}, **FAST) as poller:
            _wait_for(poller, lambda stats: sum(stats[W0]["failures"].values()) > 0)
            stats = poller.statistics()[W0]
            assert stats["reports"] == 0 and stats["failures"]["garbage"] >= 1 and not stats["standing"]


def test_bad_settings_are_refused() -> None:
    with Router([W0], policy="least_load") as router:
        with pytest.raises(ValueError, match="not a worker of this router"):
            router.poll_loads({"http://127.0.0.1:9/other": "http://127.0.0.1:9/get_load"})
        with pytest.raises(ValueError, match="format must be one of sglang, sglang_loads, vllm"):
            router.poll_loads({W0: "http://127.0.0.1:9/get_load"}, format="triton")
        with pytest.raises(ValueError, match="interval_secs"):
            router.poll_loads({W0: "http://127.0.0.1:9/get_load"}, interval_secs=0)
        with pytest.raises(ValueError, match="lease_weights must be one of requests, tokens"):
            router.poll_loads({W0: "http://127.0.0.1:9/get_load"}, lease_weights="bytes")
        with pytest.raises(ValueError, match="endpoints must name at least one worker"):
            router.poll_loads({})


class _Counting(_Handler):
    polls = 0

    def do_GET(self) -> None:
        type(self).polls += 1
        super().do_GET()


def test_a_router_freed_stops_its_feeds() -> None:
    # Regression (found by an audit): freeing the native router (a Router garbage-collected
    # without close(), or br_router_free from C) left its load poll running for good.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        router = Router([W0], policy="least_load")
        poller = router.poll_loads({W0: "http://127.0.0.1:%d/w0/get_load" % server.server_address[1]}, **FAST)
        _wait_for(poller, lambda s: s[W0]["reports"] > 0)
        router._native.close()  # what __del__ does
        time.sleep(0.1)  # a poll already out may still land
        before = _Counting.polls
        time.sleep(0.3)  # 30 intervals
        assert _Counting.polls == before, "the feed polled on after its router was freed"
        poller.stop()  # its handle went with the router: stopping it again is harmless
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_router_garbage_collected_stops_the_feed_whose_object_is_still_held() -> None:
    # Regression (found by a review): the Feed object held the native router, so a Router
    # garbage-collected unclosed while its feed (or a lease) was still referenced kept its poll
    # running (docs/contract.md, "Feeds end with their router").
    import gc

    router = Router(["http://127.0.0.1:9"], policy="least_load")
    feed = router.poll_loads({"http://127.0.0.1:9": "http://127.0.0.1:9/get_load"}, **FAST)
    lease = router.route("k")
    del router
    gc.collect()
    assert not feed.running
    assert feed.statistics() == {}
    assert lease.release()  # the lease still releases against its router
    feed.stop()


def test_a_handle_of_one_kind_never_names_another() -> None:
    # Regression (found by an audit): routers, feeds and gateways were numbered from 1 each, so
    # a feed's handle freed the router of the same number and a router's stopped a feed.
    from bounded_router import _native

    lib = _native.library()
    with Router([W0], policy="least_load") as a, Router([W0], policy="least_load") as b:
        feed = b.share_routes(publish="tcp://127.0.0.1:0")
        try:
            assert lib.br_feed_stop(a._native.handle) < 0, "a router's handle stopped a feed"
            assert lib.br_router_free(feed._handle) == lib.status["invalid_handle"], "a feed's handle freed a router"
            assert feed.statistics() is not None and feed.running
            assert a.route("k").worker_url == W0
        finally:
            feed.stop()


def test_a_member_is_named_in_any_spelling(endpoint: str) -> None:
    # Regression (found by an audit): the feeds compared the URLs named with the members' as
    # written, where every other call takes any spelling of a member's URL.
    with Router([W0, W1], policy="least_load") as router:
        poller = router.poll_loads({"HTTP://127.0.0.1:9/w0/": endpoint + "/w0/get_load"}, **FAST)
        _wait_for(poller, lambda s: s[W0]["reports"] > 0)  # its counters name it in its normal form
        assert router.route("k").worker_url == W1  # w0 reports 9 requests


def _metric_workers(text: str, family: str) -> List[str]:
    from prometheus_client.parser import text_string_to_metric_families

    return sorted(s.labels["worker"] for f in text_string_to_metric_families(text) for s in f.samples if f.name == family)


def test_a_feeds_rows_name_the_worker_in_its_normal_form() -> None:
    # Regression (found by a review): the rows carried the worker as the caller spelled it, so
    # they did not join bounded_router_worker_load{worker=...}, and two spellings of one worker
    # were two series (and two polls of it).
    with Router(["http://127.0.0.1:1"]) as router:
        with router.poll_loads({"HTTP://127.0.0.1:1/": "http://127.0.0.1:1/get_load"}, interval_secs=60):
            assert _metric_workers(router.metrics_text(), "bounded_router_engine_load_standing") == ["http://127.0.0.1:1"]
        with pytest.raises(ValueError, match="names the worker http://127.0.0.1:1 twice"):
            router.poll_loads({"http://127.0.0.1:1": "http://127.0.0.1:1/get_load", "http://127.0.0.1:1/": "http://127.0.0.1:1/get_load"})


def test_a_worker_polled_already_is_refused_a_second_poll() -> None:
    # Regression (found by a review): two polls of one worker gave duplicate series, which
    # Prometheus refuses, and two polls in flight where the contract keeps one.
    with Router(["http://127.0.0.1:1", "http://127.0.0.1:2"]) as router:
        first = router.poll_loads({"http://127.0.0.1:1": "http://127.0.0.1:1/get_load"}, interval_secs=60)
        with pytest.raises(ValueError, match="http://127.0.0.1:1 is polled already"):
            router.poll_loads({"http://127.0.0.1:1/": "http://127.0.0.1:1/get_load"}, interval_secs=60)
        router.poll_loads({"http://127.0.0.1:2": "http://127.0.0.1:2/get_load"}, interval_secs=60)
        first.stop()
        router.poll_loads({"http://127.0.0.1:1": "http://127.0.0.1:1/get_load"}, interval_secs=60)  # stopped: free again
