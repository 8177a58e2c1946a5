"""Helpers for the integration tests: mock worker processes, servers in threads, waiting for a lease,
and the two framework helpers (ASGI and aiohttp) served in front of a router.

Everything listens on 127.0.0.1 with ephemeral ports; every server is stopped in a ``finally``
and every mock worker process also exits by itself (``--lifetime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI, Request

from bounded_router import Router
from bounded_router.integrations.aiohttp import AiohttpProxy
from bounded_router.integrations.asgi import ASGIProxy
from bounded_router.simulate.model import CostModel
from bounded_router.testing.fleet import ServerProcess, start_mock_worker

# A condition that holds eventually is polled for at most this long (a generous bound for a
# loaded CI machine; the tests never assert how long anything took).
WAIT_S = 30.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` if it never does."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for: %s" % what)
        time.sleep(0.01)


def wait_released(router: Router) -> None:
    """Wait until no lease is held, and check that none was released by the safety net."""
    wait_for(lambda: router.active_leases() == 0, "every lease to be released (loads %s)" % router.loads())
    assert router.leaked_leases() == 0, "a lease was released by the safety net, not by the proxy"


class _Endings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("response from"):
            self.seen.append(str(record.args[-1]))  # type: ignore[index]


@pytest.fixture
def endings() -> Iterator[List[str]]:
    """How each forwarded response ended ("finished", "failed", "disconnected"), in order, as the
    proxies log it (logger ``bounded_router.integrations``, DEBUG) just before they release."""
    logger = logging.getLogger("bounded_router.integrations")
    handler, level = _Endings(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(scope="session")
def fast_worker() -> Iterator[ServerProcess]:
    """A mock worker at 1/100 of modelled time: 2,048-token prefill 20 ms, 0.2 ms per token."""
    with start_mock_worker("fast", CostModel(), time_scale=0.01, lifetime=600) as worker:
        yield worker


@pytest.fixture(scope="session")
def slow_worker() -> Iterator[ServerProcess]:
    """A mock worker at modelled time: 1 ms per prompt token, 20 ms per output token."""
    with start_mock_worker("slow", CostModel(), time_scale=1.0, lifetime=600) as worker:
        yield worker


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=60.0) as c:
        yield c


def worker_stats(worker: ServerProcess) -> Dict[str, Any]:
    return httpx.get(worker.url + "/stats", trust_env=False).json()  # type: ignore[no-any-return]


def completion(prompt: str = "hello world", max_tokens: int = 8, **extra: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
    body.update(extra)
    return body


def events(lines: List[str]) -> List[Any]:
    """The JSON events of an SSE body (``[DONE]`` as the string)."""
    out: List[Any] = []
    for line in lines:
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def streamed_text(lines: List[str]) -> str:
    return "".join(c["text"] for e in events(lines) if isinstance(e, dict) for c in e.get("choices", ()))


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP, so asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextlib.contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread; yields its base URL."""
    import uvicorn

    sock = _listening_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), "uvicorn to start")
        assert server.started, "uvicorn did not start"
        yield "http://127.0.0.1:%d" % sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


@contextlib.contextmanager
def serve_aiohttp(app: Any, **runner_kwargs: Any) -> Iterator[str]:
    """Serve an aiohttp application in a thread with its own event loop; yields its base URL."""
    sock = _listening_socket()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: "asyncio.Future[None]" = loop.create_future()

    async def main() -> None:
        runner = web.AppRunner(app, **runner_kwargs)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        started.set()
        try:
            await stop
        finally:
            await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        assert started.wait(WAIT_S), "aiohttp did not start"
        yield "http://127.0.0.1:%d" % sock.getsockname()[1]
    finally:
        loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))
        thread.join(WAIT_S)
        loop.close()
        sock.close()


def fastapi_app(router: Router, **kwargs: Any) -> Tuple[FastAPI, ASGIProxy]:
    """A FastAPI app forwarding ``POST /v1/completions`` through an ``ASGIProxy``, and the proxy."""
    # FastAPI resolves the endpoint's (string) annotations in this module's globals: Request must
    # be imported at module level for the endpoint to receive the request.
    proxy = ASGIProxy(router, expose_routing_headers=True, **kwargs)
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await proxy.forward(request)

    return app, proxy


def aiohttp_app(router: Router, **kwargs: Any) -> Tuple[web.Application, AiohttpProxy]:
    """An aiohttp application forwarding every path and method through an ``AiohttpProxy``, and the proxy."""
    proxy = AiohttpProxy(router, expose_routing_headers=True, **kwargs)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    app.on_cleanup.append(proxy.on_cleanup)
    return app, proxy


#: Each framework helper: how to build its app over a router, and how to serve that app.
FRAMEWORKS: Dict[str, Tuple[Callable[..., Tuple[Any, Any]], Callable[[Any], ContextManager[str]]]] = {
    "asgi": (fastapi_app, serve_asgi),
    "aiohttp": (aiohttp_app, serve_aiohttp),
}

ProxyServer = Callable[..., ContextManager[Tuple[str, Any, Router]]]


@pytest.fixture(params=sorted(FRAMEWORKS))
def serve_proxy(request: Any) -> ProxyServer:
    """Each test using it runs once per framework helper (ids ``aiohttp`` and ``asgi``).

    ``with serve_proxy(worker_urls, proxy_options={...}, **router_kwargs) as (url, proxy, router)``
    builds a router over ``worker_urls``, serves the framework's app over it (routing headers
    exposed, and ``proxy_options`` of :class:`ProxyOptions` if given) and yields
    the server's base URL, the proxy and the router; on exit the server
    stops, then the router closes.
    """
    make_app, serve = FRAMEWORKS[request.param]

    @contextlib.contextmanager
    def start(worker_urls: Sequence[str], proxy_options: Optional[Dict[str, Any]] = None, **router_kwargs: Any) -> Iterator[Tuple[str, Any, Router]]:
        with Router(list(worker_urls), **router_kwargs) as router:
            app, proxy = make_app(router, **(proxy_options or {}))
            with serve(app) as url:
                yield url, proxy, router

    return start
