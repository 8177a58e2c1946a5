"""What only the aiohttp helper has, over real HTTP: an aiohttp server in a thread (the router
lives in this process), mock worker processes behind it, httpx in front. Its runs of the scenarios
both helpers share (how a stream ends, routing from headers, 502 and 503) are in
test_integrations.py."""

from __future__ import annotations

import contextlib
from typing import Any, List

import httpx
from echo_worker import EchoWorker
from edge_support import connect, http_request
from integration_support import aiohttp_app, serve_aiohttp, wait_for, wait_released
from integration_support import client, endings, fast_worker, slow_worker  # noqa: F401 - fixtures

from bounded_router import Router


def test_client_disconnecting_before_the_worker_answers_releases_with_handler_cancellation(
    client: httpx.Client, endings: List[str]) -> None:
    # The echo worker never answers /v1/_hang: the client leaves while the proxy waits for the
    # response head, and the server's handler cancellation releases at once.
    worker = EchoWorker().start()
    try:
        with Router([worker.url]) as router:
            app, proxy = aiohttp_app(router)
            with serve_aiohttp(app, handler_cancellation=True) as url:
                with contextlib.closing(connect(url)) as sock:
                    sock.sendall(http_request("POST", "/v1/_hang", body=b"{}"))
                    wait_for(lambda: len(worker.received) == 1, "the request to reach the worker")
                    assert router.active_leases() == 1
                wait_released(router)  # and no lease released by the safety net
                assert endings == ["disconnected"]
            worker.wait_connections_closed(1)  # the request to the worker was cancelled
    finally:
        worker.stop()


def test_forwards_any_path_and_method_with_its_query(fast_worker: Any, slow_worker: Any, client: httpx.Client) -> None:
    # The app routes every path to the proxy; a request without routing headers falls back at random.
    with Router([fast_worker.url, slow_worker.url], policy="bounded_consistent_hashing") as router:
        app, _ = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            r = client.get(url + "/stats?verbose=1")
            assert r.json()["worker"] in ("fast", "slow")
            assert r.headers["x-bounded-router-branch"] == "random_fallback"
            wait_released(router)


def test_reads_the_routers_routing_key_headers(fast_worker: Any, client: httpx.Client) -> None:
    with Router([fast_worker.url], routing_key_headers=["X-Session-Id"]) as router:
        app, _ = aiohttp_app(router)
        with serve_aiohttp(app) as url:
            r = client.get(url + "/stats", headers={"X-Session-Id": "s"})
            assert r.headers["x-bounded-router-branch"] == "explicit_routing_key_hit"
            r = client.get(url + "/stats", headers={"X-SMG-Routing-Key": "s"})
            assert r.headers["x-bounded-router-branch"] == "random_fallback"
            wait_released(router)
