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
