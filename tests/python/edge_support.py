"""The three HTTP edges under attack in test_http_adversarial.py, each in front of echo workers:

- ``asgi``: a FastAPI app whose route ``/v1/{path:path}`` calls ``ASGIProxy.forward``;
- ``aiohttp``: an aiohttp app whose route ``/v1/{tail:.*}`` is ``AiohttpProxy.handle``;
- ``serve``: ``python -m bounded_router.integrations.serve`` as a process (every path forwarded);
- ``gateway``: the native gateway, ``python -m bounded_router serve``, as a process (likewise).

For the first two the router lives in this process; for the processes its counts are read from
the metrics port. Requests are written as raw bytes on a socket, so no client library normalises a
path or adds a header on the way.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import httpx
from aiohttp import web
from echo_worker import WAIT_S
from fastapi import FastAPI, Request
from integration_support import serve_aiohttp, serve_asgi

from bounded_router import Router
from bounded_router.integrations.aiohttp import AiohttpProxy
from bounded_router.integrations.asgi import ASGIProxy
from bounded_router.testing.fleet import ServerProcess

KINDS = ("asgi", "aiohttp", "serve", "gateway")
# The command of each edge that runs as a process: (module, leading arguments).
PROCESSES = {"serve": ("bounded_router.integrations.serve", []), "gateway": ("bounded_router", ["serve"])}
#: The limits every edge is started with in these tests, small enough to hit quickly.
TEST_LIMITS: Dict[str, Any] = {"max_body_size": 65536}


@dataclass
class RawResponse:
    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def header(self, name: str) -> List[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]


def read_response(sock: socket.socket, head_only: bool = False) -> RawResponse:
    """Read one response from ``sock``: all of its body, or with ``head_only`` what came with the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the edge closed the connection before answering: %r" % data)
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [(n.strip(), v.strip()) for n, v in (line.split(":", 1) for line in lines[1:])]
    length = [int(v) for n, v in headers if n.lower() == "content-length"]
    if head_only:
        return RawResponse(status, headers, body)
    if length:
        while len(body) < length[0]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    elif any(n.lower() == "transfer-encoding" for n, _ in headers):
        while not body.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        body = _dechunk(body)
    return RawResponse(status, headers, body)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, rest = data.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return out


def connect(base_url: str) -> socket.socket:
    host, port = base_url.rsplit("/", 1)[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    return sock


def raw_request(base_url: str, request: bytes, head_only: bool = False) -> RawResponse:
    """Send ``request`` (bytes, as they go on the wire) and read one response."""
    with contextlib.closing(connect(base_url)) as sock:
        sock.sendall(request)
        return read_response(sock, head_only)


def http_request(method: str, target: str, headers: Sequence[Tuple[str, str]] = (), body: bytes = b"") -> bytes:
    """A request as raw bytes: ``target`` exactly as given, ``Connection: close``."""
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: edge", "Connection: close"]
    lines += ["%s: %s" % (n, v) for n, v in headers]
    if body or method in ("POST", "PUT"):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for: %s" % what)
        time.sleep(0.01)


class Edge:
    """One edge being tested: its URL and the counts of the router behind it."""

    def __init__(self, kind: str, url: str, router: Optional[Router], metrics_url: str = "") -> None:
        self.kind = kind
        self.url = url
        self.router = router
        self.metrics_url = metrics_url

    def _metric(self, name: str) -> float:
        text = httpx.get(self.metrics_url + "/metrics", trust_env=False).text
        values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
        return sum(values)

    def active_leases(self) -> int:
        if self.router is not None:
            return self.router.active_leases()
        return int(self._metric("bounded_router_active_leases"))

    def leaked_leases(self) -> int:
        if self.router is not None:
            return self.router.leaked_leases()
        return int(self._metric("bounded_router_leaked_leases_total"))

    def routed(self) -> int:
        """How many requests the router has routed (leases ever taken through routing)."""
        if self.router is not None:
            return sum(self.router.branch_counts().values())
        return int(self._metric("bounded_router_requests_total"))

    def wait_released(self) -> None:
        wait_until(lambda: self.active_leases() == 0, "every lease to be released")
        assert self.leaked_leases() == 0, "a lease was released by the safety net, not by the proxy"


def _serve_flags(options: Dict[str, Any]) -> List[str]:
    flags: List[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return flags


@contextlib.contextmanager
def start_edge(kind: str, worker_urls: Sequence[str], **options: Any) -> Iterator[Edge]:
    """Serve edge ``kind`` in front of ``worker_urls`` (policy consistent_hashing) with ``options``."""
    merged = dict(TEST_LIMITS, **options)
    if kind in PROCESSES:
        module, command = PROCESSES[kind]
        args = command + ["--port", "0", "--metrics-port", "0", "--policy", "consistent_hashing", "--worker-urls"] + list(worker_urls)
        with ServerProcess(kind, module, args + _serve_flags(merged)) as process:
            yield Edge(kind, process.url, None, process.metrics_url)
        return
    with Router(list(worker_urls), policy="consistent_hashing") as router:
        if kind == "asgi":
            proxy: Any = ASGIProxy(router, **merged)
            app: Any = FastAPI()

            @app.api_route("/v1/{path:path}", methods=["GET", "POST", "HEAD", "PUT", "DELETE"])
            async def forward(request: Request) -> Any:
                return await proxy.forward(request)

            serve: Any = serve_asgi
        else:
            proxy = AiohttpProxy(router, **merged)
            app = web.Application()
            app.router.add_route("*", "/v1/{tail:.*}", proxy.handle)
            app.on_cleanup.append(proxy.on_cleanup)
            serve = serve_aiohttp
        with serve(app) as url:
            yield Edge(kind, url, router)
