"""Starlette / FastAPI: forward requests to the worker the router chooses, streaming the answer.

Install with ``pip install 'bounded-router[fastapi]'`` (fastapi, httpx, uvicorn). Two ways to use
it::

    from fastapi import FastAPI, Request
    from bounded_router import Router
    from bounded_router.integrations.asgi import ASGIProxy

    router = Router(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], policy="bounded_consistent_hashing")
    proxy = ASGIProxy(router)

    app = FastAPI()

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])   # 1. inside your own routes
    async def v1(request: Request):
        return await proxy.forward(request)

    app.mount("/raw", proxy)      # 2. or as an ASGI app: /raw/v1/models is sent on as /v1/models

Per request the helper checks the request (path, header size, body size; see
:class:`~bounded_router.integrations.options.ProxyOptions`), reads the whole body, then routes
from the incoming headers (docs/contract.md, "Inputs and precedence"; with ``prefix_blocks="text"``
or ``"tokens"`` also from the body's prompt or token ids, see :class:`ProxyOptions`) and sends the request to the chosen
worker: the raw path and query byte for byte (relative to the mount path), the client's headers
minus hop-by-hop ones, nothing added but ``Host`` and ``Content-Length``. No state is kept
between clients (no cookie jar). The worker's status, headers and body are streamed back as they
arrive. The lease is held until the body has been sent completely, the worker's stream fails or
goes idle, or the client disconnects -- in any phase, including while the worker has not answered
yet -- and then released exactly once, and the request to the worker is cancelled.

Errors: a refused request -> 400, 408, 413 or 431 with no lease taken; no worker can be chosen
-> 503 with the branch; the worker cannot be reached or fails before its response starts -> 502,
or 504 past ``first_byte_timeout`` (the worker and the cause are named to the client only with
``expose_routing_headers``, and always in the ``bounded_router.integrations`` log); the worker
fails mid-stream -> the client's response is cut off and :class:`WorkerStreamError` reaches the
server's error log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterable, List, Optional, Sequence, Tuple, cast
from urllib.parse import quote

from ..errors import NoWorkerAvailableError
from ..health import RetryConfig
from ..lease import Lease
from ..metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ._forwarding import (
    HOP_BY_HOP,
    REQUEST_RESET,
    WORKER_IDLE_TIMEOUT,
    Refused,
    Tries,
    WorkerStreamError,
    below_mount,
    body_timed_out,
    check_declared_body,
    check_header_size,
    check_path,
    count_body,
    final_outcome,
    forward_headers,
    log,
    no_worker_body,
    routing_headers,
    worker_failed,
    worker_path,
)
from ._prompt import request_prefix_blocks
from .options import ProxyOptions

try:
    import anyio
    import httpx
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send
except ImportError as e:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "bounded_router.integrations.asgi needs Starlette (or FastAPI) and httpx, which are not "
        "installed (%s): pip install 'bounded-router[fastapi]'" % e
    ) from None

if TYPE_CHECKING:  # pragma: no cover
    from ..router import Router

__all__ = ["ASGIProxy", "ProxyOptions", "WorkerStreamError"]

# The ASGI server adds its own Date and Server headers; the worker's would be sent twice.
_RESPONSE_DROPPED = HOP_BY_HOP | {"date", "server"}
# Characters kept as they are when a path given to forward() is percent-encoded.
_PATH_SAFE = "/%:@!$&'()*+,;=~"


class _ClientTargetURL(httpx.URL):
    """A worker's URL whose request target is the one given, byte for byte: httpx would
    percent-encode what it finds unsafe in a path or query, and cut the target at a "#"."""

    def __init__(self, worker_url: str, target: bytes) -> None:
        super().__init__(worker_url)
        self._target = target

    @property
    def raw_path(self) -> bytes:  # what httpx's transports send as the request target
        return self._target


class _ClientWatch:
    """Waits for the client to disconnect, then cancels ``scope`` and remembers it left."""

    def __init__(self, receive: Receive, scope: anyio.CancelScope) -> None:
        self.receive = receive
        self.scope = scope
        self.left = False

    async def run(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.left = True
        self.scope.cancel()


async def _next_chunk(chunks: Any, idle_timeout: float) -> Optional[bytes]:
    """The worker's next body chunk, None at the end; TimeoutError after ``idle_timeout``."""
    with anyio.fail_after(idle_timeout):
        try:
            return await chunks.__anext__()  # type: ignore[no-any-return]
        except StopAsyncIteration:
            return None


class _LeasedResponse(Response):
    """A worker's response being sent on to the client; releases the lease when it ends."""

    def __init__(self, upstream: httpx.Response, lease: Lease, headers: List[Tuple[bytes, bytes]], idle_timeout: float) -> None:
        # Not Response.__init__: status and headers come from the worker, as they are.
        self.upstream = upstream
        self.lease = lease
        self.status_code = upstream.status_code
        self.raw_headers = headers
        self.background = None
        self.body = b""
        self.idle_timeout = idle_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ending = "failed"
        failure: Optional[WorkerStreamError] = None
        try:
            async with anyio.create_task_group() as group:
                watch = _ClientWatch(receive, group.cancel_scope)
                group.start_soon(watch.run)
                try:
                    await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                    chunks = cast(AsyncIterable[bytes], self.upstream.stream).__aiter__()
                    first = True
                    while (chunk := await _next_chunk(chunks, self.idle_timeout)) is not None:
                        if chunk and first:  # the worker's first body byte (contract: Prefill load)
                            first = False
                            self.lease.first_token()
                        if chunk:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    ending = "finished"
                except (httpx.HTTPError, TimeoutError) as e:
                    # Raised after the task group, so that it is not wrapped in an exception group.
                    failure = WorkerStreamError(self.lease.worker_url, e)
                    failure.__cause__ = e
                except OSError:  # ASGI 2.4 servers raise it from send() once the client is gone
                    ending = "disconnected"
                group.cancel_scope.cancel()
            if watch.left and ending == "failed" and failure is None:
                ending = "disconnected"
            if failure is not None:
                raise failure
        except anyio.get_cancelled_exc_class():
            if ending == "failed" and failure is None:
                ending = "cancelled"  # by the server (its shutdown, a timeout), not the worker
            raise
        finally:
            log.debug("response from %s ended: %s", self.lease.worker_url, ending)
            self.lease.release(outcome=final_outcome(self.status_code, ending))
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()


def _json(status: int, body: bytes, headers: Sequence[Tuple[str, str]] = ()) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=dict(headers))


class ASGIProxy:
    """Forwards HTTP requests to the workers of a :class:`~bounded_router.Router`.

    Args:
        router: the router choosing the worker of each request.
        transport: the httpx transport to reach workers with (its connection pool); by default
            the proxy creates one on first use and closes it in :meth:`aclose` or at ASGI
            lifespan shutdown. A transport keeps no cookies, unlike an ``httpx.AsyncClient``.
        metrics_path: when the proxy is used as an ASGI app, answer ``GET`` on this path
            (relative to where it is mounted) with :meth:`Router.metrics_text` instead of
            forwarding (e.g. ``"/metrics"``). Off by default: metrics name every worker.
        retries: how often a request its worker failed before the first byte is sent to
            another worker (docs/contract.md, "Worker failures"; default: twice).
        **options: the limits and timeouts of :class:`ProxyOptions` (``max_body_size``,
            ``first_byte_timeout``, ``expose_routing_headers``, ...).

    The proxy is an ASGI application (``app.mount("/", proxy)`` or served directly) and
    :meth:`forward` is the same thing for use inside a Starlette or FastAPI route.
    """

    def __init__(
        self,
        router: Router,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        *,
        metrics_path: Optional[str] = None,
        retries: RetryConfig = RetryConfig(),
        **options: Any,
    ) -> None:
        self.router = router
        self.retries = retries
        self.options = ProxyOptions(**options)
        self.metrics_path = metrics_path
        self._transport = transport
        self._own_transport = transport is None
        o = self.options
        self._timeouts = {"connect": o.connect_timeout, "read": None, "write": o.idle_timeout, "pool": o.connect_timeout}

    @property
    def expose_routing_headers(self) -> bool:
        return self.options.expose_routing_headers

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The httpx transport used to reach the workers."""
        if self._transport is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=WORKER_IDLE_TIMEOUT)
            self._transport = httpx.AsyncHTTPTransport(limits=limits, retries=0)
        return self._transport

    async def aclose(self) -> None:
        """Close the transport if the proxy created it."""
        if self._own_transport and self._transport is not None:
            transport, self._transport = self._transport, None
            await transport.aclose()

    async def forward(self, request: Request, path: Optional[str] = None) -> Response:
        """Check and route ``request``, send it to the chosen worker, return the streaming response.

        Args:
            request: the incoming Starlette/FastAPI request (its body is read here).
            path: the path to request on the worker, as it goes on the wire (percent-escapes
                kept); by default the request's raw path relative to where the app is mounted.
                The query string is kept either way.

        Returns:
            A response for the framework to send: the worker's status, headers and body,
            holding the lease until the body ends, fails or the client disconnects; or a JSON
            error (400, 408, 413, 431, 502, 503, 504).
        """
        scope = request.scope
        try:
            raw_path = check_path(self._raw_path(scope, path))
            check_header_size(scope["headers"], self.options)
            body = await self._read_body(request)
        except Refused as e:
            return _json(e.status, e.body())
        except ClientDisconnect:
            return Response(status_code=499)  # nobody is left to read it
        try:
            blocks = await request_prefix_blocks(body, self.options, anyio.to_thread.run_sync)
            tries = Tries(self.router, self.retries, scope["headers"], blocks)
            lease = tries.first()
        except NoWorkerAvailableError as e:
            return _json(503, no_worker_body(e))
        while True:
            try:
                upstream = await self._exchange(request, lease, raw_path, body)
            except Refused as e:
                if retry := tries.after_refusal(lease, e):
                    lease = retry
                    continue
                lease.release(outcome="failure")
                return _json(e.status, e.body(), e.headers)
            except BaseException:
                lease.release(outcome="neutral")
                raise
            if upstream is None:
                lease.release(outcome="neutral")
                return Response(status_code=499)
            retry = tries.after_answer(lease, upstream.status_code)
            if retry is None:
                break
            lease = retry
            try:
                await upstream.aclose()  # the failed answer's; a cancel here ends the retry's lease
            except BaseException:
                lease.release(outcome="neutral")
                raise
        headers = [(n.lower(), v) for n, v in forward_headers(upstream.headers.raw, _RESPONSE_DROPPED)]
        if self.options.expose_routing_headers:
            headers += [(n.encode(), v.encode("latin-1", "replace")) for n, v in routing_headers(lease.worker_url, lease.branch)]
        return _LeasedResponse(upstream, lease, headers, self.options.idle_timeout)

    @staticmethod
    def _raw_path(scope: Scope, path: Optional[str]) -> bytes:
        if path is not None:
            return quote(path, safe=_PATH_SAFE).encode("ascii")
        raw = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
        return below_mount(raw, scope.get("root_path", ""))

    async def _read_body(self, request: Request) -> bytes:
        length = request.headers.get("content-length")
        check_declared_body(int(length) if length and length.isdigit() else None, self.options)
        chunks: List[bytes] = []
        size = 0
        try:
            with anyio.fail_after(self.options.body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    count_body(size, self.options)
                    chunks.append(chunk)
        except TimeoutError:
            raise body_timed_out(self.options) from None
        return b"".join(chunks)

    async def _exchange(self, request: Request, lease: Lease, raw_path: bytes, body: bytes) -> Optional[httpx.Response]:
        """The worker's response (headers received), or None if the client left first."""
        headers = forward_headers(request.scope["headers"], REQUEST_RESET)
        if body or "content-length" in request.headers:
            headers.append((b"content-length", str(len(body)).encode()))
        outgoing = httpx.Request(request.method, lease.worker_url, headers=headers, content=body, extensions={"timeout": self._timeouts})
        query: bytes = request.scope["query_string"]
        target = worker_path(lease.worker_url, raw_path).encode("latin-1") + (b"?" + query if query else b"")
        outgoing.url = _ClientTargetURL(lease.worker_url, target)
        response: Optional[httpx.Response] = None
        failure: Optional[Refused] = None
        async with anyio.create_task_group() as group:
            group.start_soon(_ClientWatch(request.receive, group.cancel_scope).run)
            try:
                with anyio.fail_after(self.options.first_byte_timeout):
                    response = await self.transport.handle_async_request(outgoing)
            except TimeoutError as e:
                failure = worker_failed(504, lease.worker_url, e, lease.branch, self.options)
            except httpx.HTTPError as e:
                failure = worker_failed(502, lease.worker_url, e, lease.branch, self.options)
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError("ASGIProxy forwards HTTP requests only, not %r" % scope["type"])
        if self._is_metrics(scope):
            response: Response = Response(self.router.metrics_text(), media_type=METRICS_CONTENT_TYPE)
        else:
            response = await self.forward(Request(scope, receive, send))
        await response(scope, receive, send)

    def _is_metrics(self, scope: Scope) -> bool:
        if self.metrics_path is None or scope["method"] not in ("GET", "HEAD"):
            return False
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        return bool(path == self.metrics_path)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
