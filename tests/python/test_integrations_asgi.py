"""What only the Starlette/FastAPI helper has, over real HTTP: a uvicorn server in a thread (the
router lives in this process, so its loads can be read), mock worker processes behind it, httpx in
front. test_integrations.py runs the scenarios it shares with the aiohttp helper (how a stream
ends, routing from headers, 502 and 503) for it as well."""

from __future__ import annotations

import contextlib
from typing import Any, List

import httpx
import pytest
from edge_support import connect, http_request
from integration_support import client, endings, fast_worker  # noqa: F401 - fixtures
from integration_support import completion, serve_asgi, streamed_text, wait_for, wait_released
from starlette.requests import Request

from echo_worker import EchoWorker
from fastapi import FastAPI

from bounded_router import Router
from bounded_router.integrations.asgi import ASGIProxy
from bounded_router.testing.mock_worker import expected_text


@pytest.mark.parametrize("phase, ending", [("_hang", []), ("_stream", ["disconnected"])])
def test_client_disconnecting_releases_in_every_phase(client: httpx.Client, endings: List[str], phase: str, ending: List[str]) -> None:
    # Through FastAPI and proxy.forward(), with an echo worker that never finishes: /v1/_hang never
    # answers (the client leaves while the proxy waits for the response head), /v1/_stream sends
    # its head and one chunk, then nothing (the client leaves mid-stream). No timing is involved.
    worker = EchoWorker().start()
    try:
        with Router([worker.url]) as router:
            proxy = ASGIProxy(router)
            app = FastAPI()

            @app.api_route("/v1/{name}", methods=["GET", "POST"])
            async def forward(request: Request) -> Any:
                return await proxy.forward(request)

            with serve_asgi(app) as url:
                with contextlib.closing(connect(url)) as sock:
                    sock.sendall(http_request("POST", "/v1/" + phase, body=b"{}"))
                    wait_for(lambda: len(worker.received) == 1, "the request to reach the worker")
                    if phase == "_stream":
                        assert sock.recv(12) == b"HTTP/1.1 200"
                    assert router.active_leases() == 1
                wait_released(router)  # and no lease released by the safety net
                assert endings == ending  # a stream that had begun logs how it ended
            worker.wait_connections_closed(1)  # the request to the worker was cancelled
    finally:
        worker.stop()


def test_asgi_app_forwards_everything_and_serves_metrics(fast_worker: Any, client: httpx.Client) -> None:
    with Router([fast_worker.url]) as router:
        proxy = ASGIProxy(router, metrics_path="/metrics")
        with serve_asgi(proxy) as url:
            r = client.post(url + "/v1/completions", json=completion("m n", 5), headers={"X-SMG-Routing-Key": "g"})
            assert r.status_code == 200
            assert streamed_text(r.text.splitlines()) == expected_text("m n", 5)
            assert "x-bounded-router-worker" not in r.headers  # not exposed unless asked for
            r = client.get(url + "/stats?x=1")  # any path and method are forwarded, query kept
            assert r.json()["worker"] == "fast"
            r = client.get(url + "/nowhere")
            assert r.status_code == 404 and r.headers["x-mock-worker"] == "fast"
            wait_released(router)
            r = client.get(url + "/metrics")
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert 'bounded_router_requests_total{branch="explicit_routing_key_hit"} 1' in r.text
            assert 'bounded_router_worker_load{worker="%s"} 0' % fast_worker.url in r.text


def test_mounted_under_a_prefix_it_forwards_and_serves_metrics_relative_to_it(client: httpx.Client) -> None:
    worker = EchoWorker().start()
    try:
        with Router([worker.url]) as router:
            app = FastAPI()
            app.mount("/raw", ASGIProxy(router, metrics_path="/metrics"))
            with serve_asgi(app) as url:
                r = client.get(url + "/raw/v1/models?x=%2F")
                assert r.json()["target"] == "/v1/models?x=%2F"
                r = client.get(url + "/raw/metrics")
                assert "bounded_router_active_leases" in r.text
                assert client.get(url + "/metrics").status_code == 404  # only below the mount
                wait_released(router)
        assert worker.paths() == [b"/v1/models?x=%2F"]
    finally:
        worker.stop()


def test_asgi_proxy_reads_the_routers_routing_key_headers(fast_worker: Any, client: httpx.Client) -> None:
    with Router([fast_worker.url], "consistent_hashing", routing_key_headers=["X-Session-Id"]) as router:
        with serve_asgi(ASGIProxy(router)) as url:
            r = client.post(url + "/v1/completions", json=completion("a", 1), headers={"X-Session-Id": "s"})
            assert r.status_code == 200
            r = client.post(url + "/v1/completions", json=completion("a", 1), headers={"X-SMG-Routing-Key": "s"})
            assert r.status_code == 200
            wait_released(router)
            assert router.branch_counts()["routing_key_hit"] == 1  # X-Session-Id
            assert router.branch_counts()["random_fallback"] == 1  # X-SMG-Routing-Key is not a key header here


class _SlowClose(httpx.AsyncByteStream):
    """A failed answer whose close takes long: the request is cancelled while it closes."""

    async def __aiter__(self) -> Any:
        yield b"busy"

    async def aclose(self) -> None:
        import anyio

        await anyio.sleep(5)


class _FirstBusy(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.port == 9:
            return httpx.Response(503, stream=_SlowClose())
        return httpx.Response(200, content=b"ok")


def _post_and_stay() -> Any:
    """An ASGI scope and receive of a client that POSTs "{}" to /v1/x and stays connected."""
    import anyio

    scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/v1/x", "raw_path": b"/v1/x", "root_path": "",
             "query_string": b"", "headers": [(b"content-length", b"2")], "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}
    messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Any:
        if messages:
            return messages.pop()
        await anyio.sleep_forever()

    return scope, receive


def test_a_request_cancelled_while_its_failed_answer_closes_leaks_no_lease() -> None:
    # Regression (found by an audit): after a 503 the retry's lease was taken, then the failed
    # answer closed outside any handler, so a cancel there left the new lease to the safety net.
    import gc

    import anyio

    with Router(["http://127.0.0.1:9", "http://127.0.0.1:10"], policy="round_robin") as router:
        proxy = ASGIProxy(router, transport=_FirstBusy())
        scope, receive = _post_and_stay()

        async def send(message: Any) -> None:
            pass

        async def main() -> None:
            with anyio.move_on_after(1):
                await proxy(scope, receive, send)

        anyio.run(main)
        gc.collect()
        assert (router.active_leases(), router.leaked_leases()) == (0, 0)


class _OneChunkThenSilence(httpx.AsyncByteStream):
    async def __aiter__(self) -> Any:
        import anyio

        yield b"data: x\n\n"
        await anyio.sleep_forever()


class _StreamsForever(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_OneChunkThenSilence())


def test_a_server_cancelling_a_stream_is_not_the_workers_failure() -> None:
    # Regression (found by a review): a stream cancelled by the server (uvicorn at the end of
    # timeout_graceful_shutdown, a timeout middleware) while the client was still reading counted
    # as the worker's failure, so a few such cancels ejected a healthy worker; the same cancel
    # before the response head, and AiohttpProxy's, count neutral (docs/contract.md, "Outcomes").
    import anyio

    with Router(["http://127.0.0.1:9"]) as router:
        proxy = ASGIProxy(router, transport=_StreamsForever())
        sent: List[Any] = []
        scope, receive = _post_and_stay()

        async def send(message: Any) -> None:
            sent.append(message)

        async def main() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(proxy, scope, receive, send)
                with anyio.fail_after(10):
                    while not any(m.get("body") for m in sent):
                        await anyio.sleep(0.01)
                group.cancel_scope.cancel()  # the client is still there

        anyio.run(main)
        assert router.active_leases() == 0
        outcomes = router.workers()[0].outcomes
        assert (outcomes["failure"], outcomes["neutral"]) == (0, 1), outcomes
