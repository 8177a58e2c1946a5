"""Router(kv_events=...) and Router.subscribe_kv_events from Python (docs/contract.md,
"Reported blocks"): settings checked, counters reported, the feed ended with the router. The
stream itself is tested in Go (kvevents/subscriber_test.go) against a ZeroMQ publisher."""

from __future__ import annotations

import socket

import pytest

from bounded_router import Router

W0, W1 = "http://127.0.0.1:9/w0", "http://127.0.0.1:9/w1"


def _silent_endpoint() -> str:
    """A loopback tcp:// endpoint nothing listens on (the subscriber keeps redialling it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "tcp://127.0.0.1:%d" % s.getsockname()[1]


def test_a_silent_worker_is_stale_and_the_feed_ends_with_the_router() -> None:
    router = Router([W0, W1], policy="cache_aware", kv_events={W0: _silent_endpoint()})
    assert router.kv_events is not None and router.kv_events.running
    stats = router.kv_events.statistics()
    assert list(stats) == [W0]
    assert stats[W0]["stale"] is True and stats[W0]["batches"] == 0 and stats[W0]["malformed"] == 0
    router.close()
    assert not router.kv_events.running


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(policy="cache_aware", kv_events={"http://127.0.0.1:9/other": "tcp://127.0.0.1:9"}), "not a worker of this router"),
        (dict(policy="cache_aware", kv_events={W0: "http://127.0.0.1:9"}), "must be tcp://host:port"),
        (dict(policy="cache_aware", kv_events={}), "endpoints must name at least one worker"),
        (dict(policy="least_load", kv_events={W0: "tcp://127.0.0.1:9"}), "kv_events apply only to cache_aware, not least_load"),
    ],
)
def test_bad_subscriptions_are_refused(kwargs: dict, text: str) -> None:
    with pytest.raises(ValueError, match=text):
        Router([W0, W1], **kwargs)


def test_replay_endpoints_must_name_subscribed_workers() -> None:
    with Router([W0, W1], policy="cache_aware") as router:
        with pytest.raises(ValueError, match="replay_endpoints names"):
            router.subscribe_kv_events({W0: "tcp://127.0.0.1:9"}, replay_endpoints={W1: "tcp://127.0.0.1:9"})


def test_feed_counters_are_in_the_metrics() -> None:
    from bounded_router.metrics import parse

    with Router([W0, W1], policy="cache_aware") as router:
        plain = router.metrics_text()
        assert "kv_events" not in plain and "engine_load" not in plain, "no feed: no feed families"
        router.subscribe_kv_events({W0: _silent_endpoint()})
        loads = router.poll_loads({W1: "http://127.0.0.1:9/get_load"})  # nothing listens: unreachable
        metrics = parse(router.metrics_text())
        assert metrics[("bounded_router_kv_events_stale", (("worker", W0),))] == 1
        assert metrics[("bounded_router_kv_events_batches_total", (("worker", W0),))] == 0
        assert metrics[("bounded_router_kv_events_problems_total", (("kind", "malformed"), ("worker", W0)))] == 0
        assert metrics[("bounded_router_engine_load_standing", (("worker", W1),))] == 0
        assert ("bounded_router_engine_load_failures_total", (("kind", "unreachable"), ("worker", W1))) in metrics
        loads.stop()
        left = parse(router.metrics_text())
        assert not [name for name, _ in left if "engine_load" in name], "a stopped feed leaves the metrics"
    assert not loads.running
