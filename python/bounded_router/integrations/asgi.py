"""Starlette / FastAPI: forward requests to the worker the router chooses, streaming the answer.

Install with ``pip install 'bounded-router[fastapi]'`` (fastapi, httpx, uvicorn). Two ways to use
it::

    from fastapi import FastAPI, Request
    from bounded_router import Router
    from bounded_router.integrations.asgi import ASGIProxy

    router = Router(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], policy="bounded_consistent_hashing")
    proxy = ASGIProxy(router)

    app = FastAPI()

    @app.post("/v1/completions")                  # 1. inside your own routes
    async def completions(request: Request):
        return await proxy.forward(request)

    app.mount("/raw", proxy)                      # 2. or as an ASGI app that forwards everything

Per request the helper routes from the incoming headers (``X-SMG-Target-Worker``,
``X-SMG-Routing-Key``, ``Authorization``, ``X-Forwarded-For``, ``Cookie``; contract: "Inputs and precedence"), sends
the request to the chosen worker with httpx, and streams the worker's status, headers and body
back as they arrive. The lease is held until the body has been sent completely, the worker's
stream fails, or the client disconnects -- whichever comes first -- and then released exactly
once. The release is done in the ``finally`` of the response's own ``__call__``, not in a
background task (Starlette does not run background tasks when a response is cancelled), and a
disconnect is noticed while waiting for the worker too, not only at the next write.

Errors: no worker can be chosen -> 503 with the branch (``no_healthy_workers``,
``target_worker_miss``); the worker cannot be reached or fails before its response starts ->
502 naming the worker; the worker fails mid-stream -> the client's response is cut off (the
status was already sent) and :class:`WorkerStreamError` reaches the server's error log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, cast

from ..errors import NoWorkerAvailableError
from ..lease import Lease
from ..metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ._common import (
    BRANCH_HEADER,
    WORKER_HEADER,
    WorkerStreamError,
    forward_headers,
    no_worker_body,
    worker_failed_body,
    worker_target,
)

if TYPE_CHECKING:  # pragma: no cover
    import httpx
    from starlette.requests import Request
    from starlette.responses import Response

    from ..router import Router

__all__ = ["ASGIProxy", "WorkerStreamError"]

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]


def _require() -> Tuple[Any, Any, Any]:
    try:
        import anyio
        import httpx
        import starlette.responses
    except ImportError as e:
        raise ImportError(
            "bounded_router.integrations.asgi needs Starlette (or FastAPI) and httpx, which are not "
            "installed (%s): pip install 'bounded-router[fastapi]'" % e
        ) from None
    return anyio, httpx, starlette.responses



# Fail at import, with the install command, when the framework is missing.
_require()

#: Default upstream timeouts: a worker may take long to produce a first token, so only
#: connecting and waiting for a pooled connection are bounded tightly.
DEFAULT_TIMEOUT: Dict[str, Optional[float]] = {"connect": 10.0, "read": 600.0, "write": 60.0, "pool": 60.0}


class _Stream:
    """A worker's response being sent on to the client; releases the lease when it ends."""

    # The endings, recorded for tests and logs.
    FINISHED = "finished"
    FAILED = "failed"
    DISCONNECTED = "disconnected"

    def __init__(
        self,
        upstream: httpx.Response,
        lease: Lease,
        headers: List[Tuple[bytes, bytes]],
        on_end: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.on_end = on_end
        self.upstream = upstream
        self.lease = lease
        self.status_code = upstream.status_code
        self.raw_headers = headers
        self.ending: Optional[str] = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        anyio, httpx, _ = _require()
        failure: Optional[WorkerStreamError] = None
        try:
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            self.ending = self.ending or self.DISCONNECTED
                            group.cancel_scope.cancel()
                            return

                group.start_soon(watch_disconnect)
                try:
                    await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                    try:
                        async for chunk in self.upstream.aiter_raw():
                            if chunk:
                                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    except httpx.HTTPError as e:
                        # Raised after the task group, so that it is not wrapped in an exception group.
                        self.ending = self.FAILED
                        failure = WorkerStreamError(self.lease.worker_url, e)
                        failure.__cause__ = e
                    else:
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        self.ending = self.ending or self.FINISHED
                except OSError:  # ASGI 2.4 servers raise it from send() once the client is gone
                    self.ending = self.ending or self.DISCONNECTED
                group.cancel_scope.cancel()
            if failure is not None:
                raise failure
        except BaseException:
            if self.ending is None:
                self.ending = self.FAILED
            raise
        finally:
            if self.on_end is not None:  # first, so whoever sees the lease released sees how it ended
                self.on_end(self.ending or self.FAILED)
            self.lease.release()
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()


class ASGIProxy:
    """Forwards HTTP requests to the workers of a :class:`~bounded_router.Router`.

    Args:
        router: the router choosing the worker of each request.
        client: the ``httpx.AsyncClient`` to reach workers with; by default the proxy creates
            one on first use (timeouts :data:`DEFAULT_TIMEOUT`) and closes it in :meth:`aclose`
            or at ASGI lifespan shutdown.
        expose_routing_headers: add ``X-Bounded-Router-Worker`` and ``X-Bounded-Router-Branch``
            to every response (off by default: they reveal worker addresses to clients).
        metrics_path: when the proxy is used as an ASGI app, answer ``GET`` on this path with
            :meth:`Router.metrics_text` instead of forwarding (e.g. ``"/metrics"``).

    The proxy is an ASGI application (``app.mount("/", proxy)`` or served directly) and
    :meth:`forward` is the same thing for use inside a Starlette or FastAPI route.
    """

    def __init__(
        self,
        router: Router,
        client: Optional[httpx.AsyncClient] = None,
        *,
        expose_routing_headers: bool = False,
        metrics_path: Optional[str] = None,
    ) -> None:
        _require()
        self.router = router
        self._client = client
        self._own_client = client is None
        self.expose_routing_headers = expose_routing_headers
        self.metrics_path = metrics_path
        #: How the most recent streamed responses ended ("finished", "failed", "disconnected"),
        #: the last 1,000 of them, for tests and logs.
        self.endings: List[str] = []

    def _ended(self, how: str) -> None:
        self.endings.append(how)
        del self.endings[:-1000]

    @property
    def client(self) -> httpx.AsyncClient:
        """The httpx client used to reach the workers."""
        if self._client is None:
            _, httpx, _ = _require()
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(**DEFAULT_TIMEOUT),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the httpx client if the proxy created it."""
        if self._own_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def forward(self, request: Request, path: Optional[str] = None) -> Response:
        """Route ``request``, send it to the chosen worker and return the streaming response.

        Args:
            request: the incoming Starlette/FastAPI request (its body is read here).
            path: the path to request on the worker (default: the request's own path); the
                query string is kept.

        Returns:
            A response for the framework to send: the worker's status, headers and body,
            holding the lease until the body ends, fails or the client disconnects; or a 503
            (no worker) or 502 (worker unreachable) JSON error.
        """
        _, httpx, responses = _require()
        try:
            lease = self.router.route(headers=request.headers.raw)
        except NoWorkerAvailableError as e:
            return cast("Response", responses.Response(no_worker_body(e), status_code=503, media_type="application/json"))
        upstream = None
        try:
            body = await request.body()
            url = worker_target(lease.worker_url, request.url.path if path is None else path, request.url.query)
            outgoing = self.client.build_request(
                request.method, url, headers=forward_headers(request.headers.raw), content=body
            )
            upstream = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as e:
            lease.release()
            failed = responses.Response(
                worker_failed_body(lease.worker_url, e, lease.branch), status_code=502, media_type="application/json"
            )
            return cast("Response", failed)
        except BaseException:
            lease.release()
            if upstream is not None:
                await upstream.aclose()
            raise
        headers = [(k.lower(), v) for k, v in forward_headers(upstream.headers.raw)]
        if self.expose_routing_headers:
            headers.append((WORKER_HEADER.encode(), lease.worker_url.encode("latin-1", "replace")))
            headers.append((BRANCH_HEADER.encode(), (lease.branch or "").encode()))
        return cast("Response", _LeasedResponse(_Stream(upstream, lease, headers, self._ended)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        _, _, responses = _require()
        if scope["type"] != "http":
            raise ValueError("ASGIProxy forwards HTTP requests only, not %r" % scope["type"])
        from starlette.requests import Request

        request = Request(scope, receive, cast(Any, send))
        if self.metrics_path is not None and scope["path"] == self.metrics_path and scope["method"] in ("GET", "HEAD"):
            response: Any = responses.Response(self.router.metrics_text(), media_type=METRICS_CONTENT_TYPE)
        else:
            response = await self.forward(request)
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _leased_response_class() -> Any:
    _, _, responses = _require()

    class LeasedResponse(responses.Response):  # type: ignore[misc, name-defined]
        """A Starlette response streaming a worker's answer; see :class:`ASGIProxy`."""

        def __init__(self, stream: _Stream) -> None:
            # Not Response.__init__: status and headers come from the worker, as they are.
            self.stream = stream
            self.status_code = stream.status_code
            self.background = None
            self.body = b""
            self.raw_headers = stream.raw_headers

        @property
        def lease(self) -> Lease:
            return self.stream.lease

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await self.stream(scope, receive, send)

    return LeasedResponse


_LEASED_RESPONSE: Any = None


def _LeasedResponse(stream: _Stream) -> Any:
    global _LEASED_RESPONSE
    if _LEASED_RESPONSE is None:
        _LEASED_RESPONSE = _leased_response_class()
    return _LEASED_RESPONSE(stream)
