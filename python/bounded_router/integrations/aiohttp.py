"""aiohttp: forward requests to the worker the router chooses, streaming the answer.

Install with ``pip install 'bounded-router[aiohttp]'``. :meth:`AiohttpProxy.handle` is an aiohttp request handler::

    from aiohttp import web
    from bounded_router import Router
    from bounded_router.integrations.aiohttp import AiohttpProxy

    router = Router(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], policy="bounded_consistent_hashing")
    proxy = AiohttpProxy(router)

    app = web.Application()
    app.router.add_route("*", "/v1/{tail:.*}", proxy.handle)   # the whole path is sent on
    app.on_cleanup.append(proxy.on_cleanup)                  # closes the proxy's client session

Per request the handler checks the request (path, header size, body size; see
:class:`~bounded_router.integrations.options.ProxyOptions`), reads the whole body, then routes
from the incoming headers (docs/contract.md, "Inputs and precedence"; with ``prefix_blocks="text"``
or ``"tokens"`` also from the body's prompt or token ids, see :class:`ProxyOptions`) and sends the request to the chosen
worker: the raw path and query byte for byte, the client's headers minus hop-by-hop ones, nothing
added but ``Host`` and ``Content-Length``. The client session keeps no cookies. The worker's
status, headers and body are streamed back as they arrive. The lease is held until the body has
been sent completely, the worker's stream fails or goes idle, or the client disconnects, and
released exactly once in the handler's ``finally``. A client that disconnects is noticed at once
when the server cancels handlers on disconnect (``handler_cancellation=True``), and otherwise
within :data:`DISCONNECT_CHECK_S` by a check of the connections in flight.

Errors: a refused request -> 400, 408, 413 or 431 with no lease taken; no worker can be chosen
-> 503 with the branch; the worker cannot be reached or fails before its response starts -> 502,
or 504 past ``first_byte_timeout`` (the worker and the cause are named to the client only with
``expose_routing_headers``); the worker fails mid-stream -> the client's response is cut off and
:class:`WorkerStreamError` reaches aiohttp's error log.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import NoWorkerAvailableError
from ..health import RetryConfig
from ..lease import Lease
from ._forwarding import (
    REQUEST_RESET,
    WORKER_IDLE_TIMEOUT,
    Refused,
    Tries,
    WorkerStreamError,
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
    import aiohttp
    from aiohttp import web
    from yarl import URL
except ImportError as e:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "bounded_router.integrations.aiohttp needs aiohttp, which is not installed (%s): "
        "pip install 'bounded-router[aiohttp]'" % e
    ) from None

if sys.version_info >= (3, 11):
    timeout = asyncio.timeout
else:  # pragma: no cover - aiohttp depends on async-timeout before Python 3.11
    from async_timeout import timeout

if TYPE_CHECKING:  # pragma: no cover
    from ..router import Router

__all__ = ["AiohttpProxy", "ProxyOptions", "WorkerStreamError"]

#: How often the proxy looks for clients that have gone, when aiohttp does not cancel their
#: handlers itself.
DISCONNECT_CHECK_S = 0.2
# aiohttp adds these to a request unless told not to; the proxy adds nothing of its own.
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class _DisconnectWatch:
    """Cancels the handlers of requests whose client connection has closed.

    One task checks every request in flight each :data:`DISCONNECT_CHECK_S`, and runs only
    while there is one.
    """

    def __init__(self) -> None:
        self._watched: Dict["asyncio.Task[Any]", web.Request] = {}
        self._checker: Optional["asyncio.Task[None]"] = None

    @contextlib.contextmanager
    def watching(self, request: web.Request) -> Iterator[None]:
        task = asyncio.current_task()
        assert task is not None
        self._watched[task] = request
        if self._checker is None:
            self._checker = asyncio.ensure_future(self._check())
        try:
            yield
        finally:
            del self._watched[task]

    async def stop(self) -> None:
        """End the checking task, if it runs (when the proxy closes)."""
        checker = self._checker
        if checker is not None:
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker

    async def _check(self) -> None:
        try:
            while self._watched:
                await asyncio.sleep(DISCONNECT_CHECK_S)
                for task, request in list(self._watched.items()):
                    if request.transport is None or request.transport.is_closing():
                        task.cancel()
        finally:
            self._checker = None


class AiohttpProxy:
    """Forwards each request to the worker a router chooses; :meth:`handle` is the aiohttp handler.

    Args:
        router: the router choosing the worker of each request.
        session: the ``aiohttp.ClientSession`` to reach workers with; by default the proxy
            creates one on first use (no cookie jar, no automatic decompression, so bodies pass
            through as sent) and closes it in :meth:`close` / :meth:`on_cleanup`. A session
            given here must not keep cookies (``cookie_jar=aiohttp.DummyCookieJar()``).
        retries: how often a request its worker failed before the first byte is sent to
            another worker (docs/contract.md, "Worker failures"; default: twice).
        **options: the limits and timeouts of :class:`ProxyOptions` (``max_body_size``,
            ``first_byte_timeout``, ``expose_routing_headers``, ...).
    """

    def __init__(
        self, router: Router, session: Optional[aiohttp.ClientSession] = None, retries: RetryConfig = RetryConfig(), **options: Any
    ) -> None:
        self.router = router
        self.retries = retries
        self.options = ProxyOptions(**options)
        self._session = session
        self._own_session = session is None
        self._disconnects = _DisconnectWatch()

    @property
    def expose_routing_headers(self) -> bool:
        return self.options.expose_routing_headers

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.options.connect_timeout),
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=WORKER_IDLE_TIMEOUT),
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        """Stop watching for disconnects; close the client session if the proxy created it."""
        await self._disconnects.stop()
        if self._own_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def on_cleanup(self, app: web.Application) -> None:
        """For ``app.on_cleanup``."""
        await self.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The request handler: check, route, forward, stream back, release."""
        raw_path, _, raw_query = request.raw_path.partition("?")
        try:
            check_path(raw_path.encode("latin-1"))
            check_header_size(request.raw_headers, self.options)
            body = await self._read_body(request)
        except Refused as e:
            return _json(e.status, e.body())
        except ConnectionError:
            return web.Response(status=499)  # the client left during its upload; nobody reads this
        try:
            blocks = await request_prefix_blocks(body, self.options, asyncio.to_thread)
            tries = Tries(self.router, self.retries, request.headers, blocks)
            lease = tries.first()
        except NoWorkerAvailableError as e:
            return _json(503, no_worker_body(e))
        ending = "failed"
        status = 0
        upstream: Optional[aiohttp.ClientResponse] = None
        try:
            with self._disconnects.watching(request):
                while True:
                    try:
                        upstream = await self._exchange(request, lease, raw_path.encode("latin-1"), raw_query.encode("latin-1"), body)
                    except Refused as e:
                        if retry := tries.after_refusal(lease, e):
                            lease = retry
                            continue
                        raise
                    status = upstream.status
                    retry = tries.after_answer(lease, status)
                    if retry is None:
                        break
                    upstream.close()
                    upstream, lease = None, retry
                response = self._response_for(upstream, lease)
                await response.prepare(request)
                await self._copy_body(upstream, response, lease)
                await response.write_eof()
                ending = "finished"
                return response
        except Refused as e:
            return _json(e.status, e.body(), e.headers)
        except (ConnectionError, asyncio.CancelledError):
            ending = "disconnected"
            raise
        finally:
            log.debug("response from %s ended: %s", lease.worker_url, ending)
            lease.release(outcome=final_outcome(status, ending))
            if upstream is not None:
                upstream.close()  # drops the connection if the body was not read to the end

    async def _read_body(self, request: web.Request) -> bytes:
        check_declared_body(request.content_length, self.options)
        chunks: List[bytes] = []
        size = 0
        try:
            async with timeout(self.options.body_timeout):
                while chunk := await request.content.readany():
                    size += len(chunk)
                    count_body(size, self.options)
                    chunks.append(chunk)
        except asyncio.TimeoutError:
            raise body_timed_out(self.options) from None
        return b"".join(chunks)

    async def _exchange(
        self, request: web.Request, lease: Lease, raw_path: bytes, raw_query: bytes, body: bytes
    ) -> aiohttp.ClientResponse:
        """The worker's response, its headers received."""
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in forward_headers(request.raw_headers, REQUEST_RESET)]
        if body or "Content-Length" in request.headers:
            headers.append(("Content-Length", str(len(body))))
        worker, path = URL(lease.worker_url), worker_path(lease.worker_url, raw_path)
        url = URL.build(scheme=worker.scheme, authority=worker.raw_authority, path=path, query_string=raw_query.decode("latin-1"), encoded=True)
        try:
            async with timeout(self.options.first_byte_timeout):
                return await self.session.request(
                    request.method, url, headers=headers, data=body or None, allow_redirects=False, skip_auto_headers=_NO_AUTO_HEADERS
                )
        except aiohttp.ClientError as e:  # first: a connect timeout is one too, and a 502
            raise worker_failed(502, lease.worker_url, e, lease.branch, self.options) from e
        except asyncio.TimeoutError as e:
            raise worker_failed(504, lease.worker_url, e, lease.branch, self.options) from e

    def _response_for(self, upstream: aiohttp.ClientResponse, lease: Lease) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in forward_headers(upstream.raw_headers):
            response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
        if self.options.expose_routing_headers:
            response.headers.update(routing_headers(lease.worker_url, lease.branch))
        return response

    async def _copy_body(self, upstream: aiohttp.ClientResponse, response: web.StreamResponse, lease: Lease) -> None:
        first = True
        while True:
            try:
                async with timeout(self.options.idle_timeout):
                    chunk = await upstream.content.readany()
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                raise WorkerStreamError(lease.worker_url, e) from e
            if not chunk:
                return
            if first:  # the worker's first body byte (contract: Prefill load)
                first = False
                lease.first_token()
            await response.write(chunk)


def _json(status: int, body: bytes, headers: Sequence[Tuple[str, str]] = ()) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json", headers=dict(headers))
