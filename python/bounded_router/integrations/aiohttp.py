"""aiohttp: forward requests to the worker the router chooses, streaming the answer.

Install with ``pip install 'bounded-router[aiohttp]'``. :meth:`AiohttpProxy.handle` is an aiohttp request handler::

    from aiohttp import web
    from bounded_router import Router
    from bounded_router.integrations.aiohttp import AiohttpProxy

    router = Router(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], policy="bounded_consistent_hashing")
    proxy = AiohttpProxy(router)

    app = web.Application()
    app.router.add_post("/v1/completions", proxy.handle)   # or add_route("*", "/{tail:.*}", proxy.handle)
    app.on_cleanup.append(proxy.on_cleanup)            # closes the proxy's client session

Per request the handler routes from the incoming headers (contract: "Inputs and precedence"), sends the request to
the chosen worker, and streams the worker's status, headers and body back as they arrive. The
lease is held until the body has been sent completely, the worker's stream fails, or the client
disconnects, and released exactly once in the handler's ``finally``. A client that disconnects
is noticed at the next write to it (aiohttp reports it then) or at once when the server cancels
handlers on disconnect (``web.run_app(..., handler_cancellation=True)``).

Errors: no worker can be chosen -> 503 with the branch; the worker cannot be reached or fails
before its response starts -> 502 naming the worker; the worker fails mid-stream -> the client's
response is cut off and :class:`WorkerStreamError` reaches aiohttp's error log.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional, cast

from ..errors import NoWorkerAvailableError
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
    from aiohttp import ClientSession, web

    from ..router import Router

__all__ = ["AiohttpProxy", "WorkerStreamError"]


def _require() -> Any:
    try:
        import aiohttp
        from aiohttp import web  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "bounded_router.integrations.aiohttp needs aiohttp, which is not installed (%s): "
            "pip install 'bounded-router[aiohttp]'" % e
        ) from None
    return aiohttp


# Fail at import, with the install command, when the framework is missing.
_require()


class AiohttpProxy:
    """Forwards each request to the worker a router chooses; :meth:`handle` is the aiohttp handler.

    Args:
        router: the router choosing the worker of each request.
        session: the ``aiohttp.ClientSession`` to reach workers with; by default the proxy
            creates one on first use (no automatic decompression, so bodies pass through as
            sent) and closes it in :meth:`close` / :meth:`on_cleanup`.
        expose_routing_headers: add ``X-Bounded-Router-Worker`` and ``X-Bounded-Router-Branch``
            to every response (off by default: they reveal worker addresses to clients).
    """

    FINISHED = "finished"
    FAILED = "failed"
    DISCONNECTED = "disconnected"

    def __init__(self, router: Router, session: Optional[ClientSession] = None, *, expose_routing_headers: bool = False) -> None:
        _require()
        self.router = router
        self._session = session
        self._own_session = session is None
        self.expose_routing_headers = expose_routing_headers
        #: How the most recent responses ended (for tests and logs): a bounded record.
        self.endings: "list[str]" = []

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            aiohttp = _require()
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=600.0),
                connector=aiohttp.TCPConnector(limit=0),
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        """Close the client session if the proxy created it."""
        if self._own_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def on_cleanup(self, app: web.Application) -> None:
        """For ``app.on_cleanup``."""
        await self.close()

    def _ended(self, how: str) -> None:
        self.endings.append(how)
        del self.endings[:-1000]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The request handler: route, forward, stream back, release."""
        aiohttp = _require()
        aioweb = aiohttp.web
        try:
            lease = self.router.route(headers=request.headers)
        except NoWorkerAvailableError as e:
            return cast("web.StreamResponse", aioweb.Response(body=no_worker_body(e), status=503, content_type="application/json"))
        ending = self.FAILED
        upstream = None
        try:
            try:
                body = await request.read()
                url = worker_target(lease.worker_url, request.path, request.query_string)
                upstream = await self.session.request(
                    request.method,
                    url,
                    headers=forward_headers(request.headers.items()),
                    data=body,
                    allow_redirects=False,
                )
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                failed = aioweb.Response(
                    body=worker_failed_body(lease.worker_url, e, lease.branch), status=502, content_type="application/json"
                )
                return cast("web.StreamResponse", failed)
            response = aioweb.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in forward_headers(upstream.headers.items()):
                response.headers.add(name, value)
            if self.expose_routing_headers:
                response.headers[WORKER_HEADER] = lease.worker_url
                response.headers[BRANCH_HEADER] = lease.branch or ""
            try:
                await response.prepare(request)
                while True:
                    try:
                        chunk = await upstream.content.readany()
                    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                        raise WorkerStreamError(lease.worker_url, e) from e
                    if not chunk:
                        break
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, asyncio.CancelledError):
                ending = self.DISCONNECTED
                raise
            ending = self.FINISHED
            return cast("web.StreamResponse", response)
        finally:
            self._ended(ending)  # first, so whoever sees the lease released sees how it ended
            lease.release()
            if upstream is not None:
                upstream.close()  # drops the connection if the body was not read to the end
