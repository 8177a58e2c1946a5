"""The scenarios both framework helpers share, over real HTTP, each run once per helper (the
``serve_proxy`` fixture): the Starlette/FastAPI helper behind uvicorn and the aiohttp helper behind
an aiohttp server, each in a thread (the router lives in this process, so its loads can be read),
mock worker processes behind them, httpx in front.

Each of the three ways a stream ends -- finished, failed at the worker, client disconnected --
must release the request's lease exactly once. What only one helper has is tested in
test_integrations_asgi.py and test_integrations_aiohttp.py."""

from __future__ import annotations

import contextlib
import socket
from typing import Any, List

import httpx
import pytest
from edge_support import connect, http_request
from integration_support import (  # noqa: F401 - client, endings, fast_worker, serve_proxy, slow_worker are fixtures
    ProxyServer,
    aiohttp_app,
    client,
    completion,
    endings,
    events,
    fast_worker,
    serve_aiohttp,
    serve_asgi,
    serve_proxy,
    slow_worker,
    streamed_text,
    wait_for,
    wait_released,
    worker_stats,
)
from reference_model import ReferenceRouter

from echo_worker import EchoWorker

from bounded_router import Router
from bounded_router.integrations.asgi import ASGIProxy

from bounded_router.testing.mock_worker import expected_text


def test_finished_stream_holds_the_lease_until_the_body_ends(slow_worker: Any, serve_proxy: ProxyServer, client: httpx.Client, endings: List[str]) -> None:
    # 20 tokens at 20 ms each: the stream is still running when the first token arrives.
    with serve_proxy([slow_worker.url], policy="consistent_hashing") as (url, proxy, router):
        with client.stream("POST", url + "/v1/completions", json=completion("a b c", 20), headers={"X-SMG-Routing-Key": "g1"}) as r:
            assert r.status_code == 200
            assert r.headers["x-mock-worker"] == "slow"
            assert r.headers["x-bounded-router-worker"] == slow_worker.url
            assert r.headers["x-bounded-router-branch"] == "routing_key_hit"
            assert r.headers["content-type"] == "text/event-stream"
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert router.loads() == {slow_worker.url: 1}, "the lease must be held while the body streams"
            assert router.workers()[0].active_keys == 1
            rest = list(lines)
        assert streamed_text([first] + rest) == expected_text("a b c", 20)
        assert events(rest)[-1] == "[DONE]"
        wait_released(router)
        assert endings == ["finished"]
        assert router.loads() == {slow_worker.url: 0}
        assert router.leaked_leases() == 0


def test_worker_failing_mid_stream_cuts_the_response_and_releases(fast_worker: Any, serve_proxy: ProxyServer, client: httpx.Client, endings: List[str]) -> None:
    before = worker_stats(fast_worker)["failed"]
    with serve_proxy([fast_worker.url]) as (url, proxy, router):
        received = []
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            with client.stream("POST", url + "/v1/completions", json=completion("x y", 50, fail_after_tokens=3)) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    received.append(line)
        assert len([e for e in events(received) if isinstance(e, dict)]) <= 3
        wait_released(router)
        assert endings == ["failed"]
        assert router.leaked_leases() == 0
    assert worker_stats(fast_worker)["failed"] == before + 1


def test_client_disconnecting_mid_stream_releases_and_stops_the_worker(fast_worker: Any, serve_proxy: ProxyServer, client: httpx.Client, endings: List[str]) -> None:
    before = worker_stats(fast_worker)["cancelled"]
    with serve_proxy([fast_worker.url]) as (url, proxy, router):
        # 100,000 tokens would stream for 20 s; the client leaves after three.
        with client.stream("POST", url + "/v1/completions", json=completion("p q", 100000)) as r:
            data = (line for line in r.iter_lines() if line.startswith("data: "))
            for _ in range(3):
                next(data)
            assert router.active_leases() == 1
        wait_released(router)
        assert endings == ["disconnected"]
        assert router.leaked_leases() == 0
    wait_for(lambda: worker_stats(fast_worker)["cancelled"] == before + 1, "the worker to see the proxy hang up")


def test_routes_from_the_incoming_headers(fast_worker: Any, slow_worker: Any, serve_proxy: ProxyServer, client: httpx.Client) -> None:
    with serve_proxy([fast_worker.url, slow_worker.url], policy="bounded_consistent_hashing") as (url, _, router):
        body = completion("k", 1)
        r = client.post(url + "/v1/completions", json=body, headers={"X-SMG-Target-Worker": "1"})
        assert r.headers["x-bounded-router-worker"] == slow_worker.url
        assert r.headers["x-bounded-router-branch"] == "target_worker_hit"
        r = client.post(url + "/v1/completions", json=body, headers={"x-smg-routing-key": "session-9"})
        assert r.headers["x-bounded-router-branch"] == "explicit_routing_key_hit"
        model = ReferenceRouter([fast_worker.url, slow_worker.url])
        assert r.headers["x-bounded-router-worker"] == model.preferred(b"session-9")
        r = client.post(url + "/v1/completions", json=body, headers={"Authorization": "Bearer t"})
        assert r.headers["x-bounded-router-branch"] == "implicit_routing_key_hit"
        assert r.headers["x-bounded-router-worker"] == model.preferred(b"Bearer t")
        r = client.post(url + "/v1/completions", json=body, headers={"Cookie": "c=1"})
        assert r.headers["x-bounded-router-branch"] == "implicit_routing_key_hit"
        assert r.headers["x-bounded-router-worker"] == model.preferred(b"c=1")
        r = client.post(url + "/v1/completions", json=body)
        assert r.headers["x-bounded-router-branch"] == "random_fallback"
        wait_released(router)


def test_no_worker_is_a_503_naming_the_branch(fast_worker: Any, serve_proxy: ProxyServer, client: httpx.Client) -> None:
    with serve_proxy([fast_worker.url]) as (url, _, router):
        for target in ("5", "+7"):
            r = client.post(url + "/v1/completions", json=completion(), headers={"X-SMG-Target-Worker": target})
            assert r.status_code == 503
            assert r.json()["branch"] == "target_worker_miss"
            assert router.active_leases() == 0
        router.set_healthy(fast_worker.url, False)
        r = client.post(url + "/v1/completions", json=completion())
        assert r.status_code == 503
        assert r.json()["branch"] == "no_healthy_workers"
        assert "no healthy workers" in r.json()["error"]
        assert router.active_leases() == 0


def test_unreachable_worker_is_a_502_naming_it_when_exposed_and_releases(serve_proxy: ProxyServer, client: httpx.Client) -> None:
    with socket.socket() as s:  # bound, never listening: refused, and no other server can take it
        s.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d" % s.getsockname()[1]
        with serve_proxy([dead]) as (url, _, router):  # routing headers exposed
            r = client.post(url + "/v1/completions", json=completion())
            assert r.status_code == 502
            assert r.json()["worker"] == dead
            assert r.json()["error"] == "worker did not answer"
            assert "Connect" in r.json()["detail"]
            assert router.active_leases() == 0


@pytest.mark.parametrize("framework", ["asgi", "aiohttp"])
@pytest.mark.parametrize("phase, waiting", [("_hang", 1), ("_stream", 0)])
def test_the_workers_first_body_byte_marks_the_first_token(framework: str, phase: str, waiting: int) -> None:
    # docs/contract.md, "Prefill load": /v1/_hang never answers, so its lease waits for its first
    # token; /v1/_stream sends its head and one chunk, which the client reads: the lease is past
    # its first token and still held. No timing: each state is reached before it is read. The
    # proxies serve every path here (the ASGI proxy as the app itself).
    worker = EchoWorker().start()
    try:
        with Router([worker.url]) as router:
            app = ASGIProxy(router) if framework == "asgi" else aiohttp_app(router)[0]
            with (serve_asgi if framework == "asgi" else serve_aiohttp)(app) as url:
                with contextlib.closing(connect(url)) as sock:
                    sock.sendall(http_request("POST", "/v1/" + phase, body=b"{}"))
                    wait_for(lambda: len(worker.received) == 1, "the request to reach the worker")
                    received = b""
                    while phase == "_stream" and b"data: " not in received:
                        received += sock.recv(4096)
                    (info,) = router.workers()
                    assert (info.requests, info.prefill_requests, info.prefill_load) == (1, waiting, waiting)
                wait_released(router)
                assert router.workers()[0].prefill_requests == 0
    finally:
        worker.stop()
