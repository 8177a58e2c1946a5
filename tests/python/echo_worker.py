"""A worker that answers with exactly what it received, for testing what the proxies forward.

It is a raw asyncio TCP server with a minimal HTTP/1.1 parser of its own, so what it records
(the request line byte for byte, every header line in order, the body) does not pass through
the HTTP libraries the proxies use. It runs in a thread of the test process on 127.0.0.1.

The last segment of the path picks a behaviour (everything else is echoed as JSON):

- ``/_set_cookie``: the echo, with ``Set-Cookie: a=1`` and ``Set-Cookie: b=2``.
- ``/_hop``: the echo, with hop-by-hop headers and one named in ``Connection``.
- ``/_dated``: the echo, with the worker's own ``Date`` and ``Server``.
- ``/_hang``: never answers; the connection is recorded as closed when the proxy drops it.
- ``/_stream``: answers the headers and one chunk, then nothing until the proxy drops it.
- ``/_garbage``: answers bytes that are not HTTP, then closes.
- ``HEAD`` on any path: the echo's headers (with its ``Content-Length``) and no body.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

WAIT_S = 30.0


@dataclass
class Received:
    """One request as it arrived: the request line's parts, header lines in order, the body."""

    method: bytes
    target: bytes
    headers: List[Tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> List[bytes]:
        """The values of every header line named ``name`` (case-insensitive)."""
        key = name.lower().encode()
        return [v for n, v in self.headers if n.lower() == key]

    @property
    def header_names(self) -> List[str]:
        return [n.decode("latin-1").lower() for n, _ in self.headers]


@dataclass
class EchoWorker:
    """The server's address and what it has seen."""

    url: str = ""
    received: List[Received] = field(default_factory=list)
    probes: List[Received] = field(default_factory=list)
    connections_opened: int = 0
    connections_closed: int = 0
    closed: "threading.Condition" = field(default_factory=threading.Condition)
    _loop: Optional[asyncio.AbstractEventLoop] = None
    _server: Optional[asyncio.AbstractServer] = None
    _writers: Set[asyncio.StreamWriter] = field(default_factory=set)

    def paths(self) -> List[bytes]:
        return [r.target for r in self.received]

    def wait_connections_closed(self, count: int) -> None:
        """Wait until ``count`` connections have been closed (by either side); fail after WAIT_S."""
        with self.closed:
            if not self.closed.wait_for(lambda: self.connections_closed >= count, WAIT_S):
                raise AssertionError("the proxy did not drop its connection to the worker (%d closed)" % self.connections_closed)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_opened += 1
        self._writers.add(writer)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with self.closed:
                self.connections_closed += 1
                self.closed.notify_all()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        method, target, _ = lines[0].split(b" ", 2)
        headers = [tuple(part.strip() for part in line.split(b":", 1)) for line in lines[1:]]
        length = sum(int(v) for n, v in headers if n.lower() == b"content-length")
        body = await reader.readexactly(length) if length else b""
        got = Received(method, target, [(n, v) for n, v in headers], body)
        # The gateway's health probes (contract: Worker failures) are kept apart from the
        # requests clients sent through it.
        (self.probes if (method, target) == (b"GET", b"/health") else self.received).append(got)
        path = target.split(b"?", 1)[0].rsplit(b"/", 1)[-1]
        if path == b"_hang":
            await reader.read()  # returns when the proxy closes the connection
            return False
        if path == b"_garbage":
            writer.write(b"THIS IS NOT HTTP\r\n\r\n")
            await writer.drain()
            return False
        if path == b"_stream":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"6\r\ndata: \r\n")
            await writer.drain()
            await reader.read()
            return False
        payload = json.dumps(
            {
                "method": method.decode("latin-1"),
                "target": target.decode("latin-1"),
                "headers": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in headers],
                "body": body.decode("latin-1"),
            }
        ).encode()
        extra = _EXTRA_HEADERS.get(path, b"")
        typed = b"" if path == b"_untyped" else b"Content-Type: application/json\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n%s\r\n" % (typed, len(payload), extra))
        if method != b"HEAD":
            writer.write(payload)
        await writer.drain()
        return True

    def start(self) -> "EchoWorker":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.url = "http://127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            for writer in self._writers:
                writer.transport.abort()  # each connection's task then ends by itself
            connections = asyncio.all_tasks(loop)
            if connections:
                loop.run_until_complete(asyncio.wait(connections))
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(WAIT_S), "the echo worker did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(WAIT_S)


_EXTRA_HEADERS: Dict[bytes, bytes] = {
    b"_set_cookie": b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n",
    b"_hop": (
        b"Connection: X-Hop-Named\r\nX-Hop-Named: secret\r\nKeep-Alive: timeout=5\r\n"
        b"Proxy-Authenticate: Basic\r\nUpgrade: h2c\r\nTrailer: X-Checksum\r\nX-Kept: yes\r\n"
    ),
    b"_dated": b"Date: Mon, 01 Jan 2001 00:00:00 GMT\r\nServer: echo-worker\r\n",
}
