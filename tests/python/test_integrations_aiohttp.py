"""The aiohttp helper over real HTTP: an aiohttp server in a thread (the router lives in this
process), mock worker processes behind it, httpx in front.

Each of the three ways a stream ends -- finished, failed at the worker, client disconnected --
must release the request's lease exactly once."""

from __future__ import annotations

from typing import Any, Tuple

import httpx
import pytest
from aiohttp import web
from integration_support import (
    completion,
    events,
    fast_worker,  # noqa: F401 - fixture
    serve_aiohttp,
    slow_worker,  # noqa: F401 - fixture
    streamed_text,
    wait_for,
    wait_released,
    worker_stats,
)

from bounded_router import Router
from bounded_router.integrations.aiohttp import AiohttpProxy
from bounded_router.testing.mock_worker import expected_text


def aiohttp_app(router: Router, **kwargs: Any) -> Tuple[web.Application, AiohttpProxy]:
    proxy = AiohttpProxy(router, expose_routing_headers=True, **kwargs)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    app.on_cleanup.append(proxy.on_cleanup)
    return app, proxy


@pytest.fixture
def client() -> Any:
    with httpx.Client(trust_env=False, timeout=60.0) as c:
        yield c


def test_finished_stream_holds_the_lease_until_the_body_ends(slow_worker: Any, client: httpx.Client) -> None:
    with Router([slow_worker.url], policy="consistent_hashing") as router:
        app, proxy = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            with client.stream("POST", url + "/v1/completions", json=completion("a b c", 20), headers={"X-SMG-Routing-Key": "g1"}) as r:
                assert r.status_code == 200
                assert r.headers["x-mock-worker"] == "slow"
                assert r.headers["x-bounded-router-worker"] == slow_worker.url
                assert r.headers["x-bounded-router-branch"] == "routing_key_hit"
                assert r.headers["content-type"] == "text/event-stream"
                lines = r.iter_lines()
                first = next(line for line in lines if line.startswith("data: "))
                assert router.loads() == {slow_worker.url: 1}, "the lease must be held while the body streams"
                rest = list(lines)
            assert streamed_text([first] + rest) == expected_text("a b c", 20)
            assert events(rest)[-1] == "[DONE]"
            wait_released(router)
            assert proxy.endings == ["finished"]
            assert router.leaked_leases() == 0


def test_worker_failing_mid_stream_cuts_the_response_and_releases(fast_worker: Any, client: httpx.Client) -> None:
    before = worker_stats(fast_worker)["failed"]
    with Router([fast_worker.url]) as router:
        app, proxy = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            received = []
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                with client.stream("POST", url + "/v1/completions", json=completion("x y", 50, fail_after_tokens=3)) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        received.append(line)
            assert len([e for e in events(received) if isinstance(e, dict)]) <= 3
            wait_released(router)
            assert proxy.endings == ["failed"]
            assert router.leaked_leases() == 0
    assert worker_stats(fast_worker)["failed"] == before + 1


def test_client_disconnecting_mid_stream_releases_and_stops_the_worker(fast_worker: Any, client: httpx.Client) -> None:
    before = worker_stats(fast_worker)["cancelled"]
    with Router([fast_worker.url]) as router:
        app, proxy = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            with client.stream("POST", url + "/v1/completions", json=completion("p q", 100000)) as r:
                data = (line for line in r.iter_lines() if line.startswith("data: "))
                for _ in range(3):
                    next(data)
                assert router.active_leases() == 1
            wait_released(router)
            assert proxy.endings == ["disconnected"]
            assert router.leaked_leases() == 0
    wait_for(lambda: worker_stats(fast_worker)["cancelled"] == before + 1, "the worker to see the proxy hang up")


def test_client_disconnecting_before_the_first_token_releases_with_handler_cancellation(
    slow_worker: Any, client: httpx.Client
) -> None:
    prompt = " ".join("v%d" % i for i in range(2048))  # 2 s of prefill on the slow worker
    with Router([slow_worker.url]) as router:
        app, proxy = aiohttp_app(router)
        with serve_aiohttp(app, handler_cancellation=True) as url:
            with client.stream("POST", url + "/v1/completions", json=completion(prompt, 4)) as r:
                assert r.status_code == 200
                assert router.active_leases() == 1
            wait_released(router)
            assert proxy.endings == ["disconnected"]


def test_routes_from_the_incoming_headers(fast_worker: Any, slow_worker: Any, client: httpx.Client) -> None:
    with Router([fast_worker.url, slow_worker.url], policy="bounded_consistent_hashing") as router:
        app, _ = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            body = completion("k", 1)
            r = client.post(url + "/v1/completions", json=body, headers={"X-SMG-Target-Worker": "1"})
            assert r.headers["x-bounded-router-worker"] == slow_worker.url
            assert r.headers["x-bounded-router-branch"] == "target_worker_hit"
            r = client.post(url + "/v1/completions", json=body, headers={"x-smg-routing-key": "session-9"})
            assert r.headers["x-bounded-router-branch"] == "explicit_routing_key_hit"
            r = client.post(url + "/v1/completions", json=body, headers={"Cookie": "c=1"})
            assert r.headers["x-bounded-router-branch"] == "implicit_routing_key_hit"
            r = client.get(url + "/stats?verbose=1")
            assert r.json()["worker"] in ("fast", "slow")
            assert r.headers["x-bounded-router-branch"] == "random_fallback"
            wait_released(router)


def test_no_worker_is_a_503_and_unreachable_worker_a_502(client: httpx.Client) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    with Router([dead]) as router:
        app, _ = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            r = client.post(url + "/v1/completions", json=completion())
            assert r.status_code == 502
            assert r.json()["worker"] == dead and dead in r.json()["error"]
            assert router.active_leases() == 0
            r = client.post(url + "/v1/completions", json=completion(), headers={"X-SMG-Target-Worker": "+7"})
            assert r.status_code == 503
            assert r.json()["branch"] == "target_worker_miss"
            assert router.active_leases() == 0
