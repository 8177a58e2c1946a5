"""The HTTP edges against hostile clients and failing workers (docs/contract.md, "HTTP proxies").

Each test runs against the three edges of edge_support.py (``asgi``, ``aiohttp``, ``serve``) in
front of echo workers that record exactly what reached them. Everything is on 127.0.0.1, every
wait is bounded by WAIT_S, and the serve process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any, Iterator, List

import pytest
from echo_worker import EchoWorker
from edge_support import KINDS, Edge, connect, http_request, raw_request, read_response, start_edge, wait_until

pytestmark = pytest.mark.parametrize("kind", KINDS)


@pytest.fixture
def workers() -> Iterator[List[EchoWorker]]:
    started = [EchoWorker().start(), EchoWorker().start()]
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture
def edge(kind: str, workers: List[EchoWorker]) -> Iterator[Edge]:
    with start_edge(kind, [w.url for w in workers]) as e:
        yield e


def echoed(response: Any) -> Any:
    assert response.status == 200, response.body
    return json.loads(response.body)


def to_worker(index: int) -> List[Any]:
    return [("X-SMG-Target-Worker", str(index))]


def received_count(workers: List[EchoWorker]) -> int:
    return sum(len(w.received) for w in workers)


# --- no state shared between clients ------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])  # cookie jars treat IPs and names apart
def test_a_cookie_set_for_one_client_never_reaches_a_worker_for_another(kind: str, workers: List[EchoWorker], host: str) -> None:
    with start_edge(kind, [w.url.replace("127.0.0.1", host) for w in workers]) as edge:
        first = raw_request(edge.url, http_request("GET", "/v1/_set_cookie", to_worker(0)))
        assert sorted(first.header("set-cookie")) == ["a=1", "b=2"], "the client that was answered gets its cookies"
        for index in (0, 1, 0):
            echoed(raw_request(edge.url, http_request("GET", "/v1/after", to_worker(index))))
        for worker in workers:
            for request in worker.received:
                assert request.header("cookie") == [], "a cookie reached %s for a client that sent none" % request.target
        edge.wait_released()


def test_the_clients_own_headers_are_forwarded_untouched_and_nothing_is_added(edge: Edge, workers: List[EchoWorker]) -> None:
    own = [("X-SMG-Target-Worker", "0"), ("Authorization", "Bearer t0"), ("X-Trace", "a"), ("X-Trace", "b"), ("Accept", "*/*")]
    got = echoed(raw_request(edge.url, http_request("POST", "/v1/chat", own, b'{"x": 1}')))
    assert got["body"] == '{"x": 1}'
    forwarded = [(n.lower(), v) for n, v in got["headers"] if n.lower() not in ("host", "content-length")]
    # The values of one header keep their order; the gateway (Go's header map) may reorder names.
    expected = [(n.lower(), v) for n, v in own]
    if edge.kind == "gateway":
        forwarded, expected = sorted(forwarded, key=lambda h: h[0]), sorted(expected, key=lambda h: h[0])
    assert forwarded == expected
    assert [v for n, v in got["headers"] if n.lower() == "content-length"] == ["8"]
    edge.wait_released()


def test_hop_by_hop_headers_are_dropped_both_ways(edge: Edge, workers: List[EchoWorker]) -> None:
    hop = [
        ("Connection", "X-Client-Hop, close"),
        ("X-Client-Hop", "secret"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic eA=="),
        ("Proxy-Connection", "keep-alive"),
        ("X-Kept", "yes"),
    ]
    response = raw_request(edge.url, http_request("GET", "/v1/_hop", hop))
    got = echoed(response)
    names = {n.lower() for n, _ in got["headers"]}
    assert names.isdisjoint({"x-client-hop", "keep-alive", "te", "proxy-authorization", "proxy-connection"})
    assert ("x-kept", "yes") in [(n.lower(), v) for n, v in got["headers"]]
    answered = {n.lower() for n, _ in response.headers}
    assert answered.isdisjoint({"x-hop-named", "keep-alive", "proxy-authenticate", "upgrade", "trailer"})
    assert response.header("x-kept") == ["yes"]
    edge.wait_released()


@pytest.mark.parametrize("trailer", [b"", b"X-Checksum: 1\r\n", b"Host: evil\r\n", b"Content-Length: 50\r\n", b"Transfer-Encoding: chunked\r\n"])
def test_a_chunked_request_reaches_the_worker_with_its_length_and_no_trailers(edge: Edge, workers: List[EchoWorker], trailer: bytes) -> None:
    # Step 5: the buffered body goes with its Content-Length; the client's chunked framing and
    # trailers stay on its hop, whatever they name.
    request = (
        b"POST /v1/chunked HTTP/1.1\r\nHost: edge\r\nConnection: close\r\nX-SMG-Target-Worker: 0\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n" + trailer + b"\r\n"
    )
    response = raw_request(edge.url, request)
    name = trailer.split(b":")[0]
    if (edge.kind == "aiohttp" and name in (b"Content-Length", b"Transfer-Encoding")) or (
        edge.kind == "gateway" and name in (b"Host", b"Content-Length", b"Transfer-Encoding")
    ):
        # aiohttp's parser refuses a trailer that names the framing, and the gateway's (fasthttp)
        # every field RFC 9110 (6.5.1) forbids in a trailer, before any handler runs.
        assert response.status == 400 and received_count(workers) == 0
        return
    got = echoed(response)
    headers = [(n.lower(), v) for n, v in got["headers"]]
    assert got["body"] == "abc"
    assert [v for n, v in headers if n == "content-length"] == ["3"]
    assert [n for n, _ in headers if n in ("transfer-encoding", "trailer", "x-checksum")] == []
    assert [v for n, v in headers if n == "host"] != ["evil"]
    assert received_count(workers) == 1
    edge.wait_released()


def test_an_answer_without_a_content_type_gets_none(edge: Edge, workers: List[EchoWorker]) -> None:
    # A proxy adds no type guessed from the body to an untyped answer (contract: HTTP proxies,
    # step 7); aiohttp gives it its default, the type RFC 9110 (8.3) lets a client assume.
    response = raw_request(edge.url, http_request("GET", "/v1/_untyped", to_worker(0)))
    assert response.status == 200
    assert json.loads(response.body)["target"] == "/v1/_untyped"
    allowed = ([], ["application/octet-stream"]) if edge.kind == "aiohttp" else ([],)
    assert response.header("content-type") in allowed
    edge.wait_released()


# --- paths ---------------------------------------------------------------------------------------

ESCAPING = [
    "/v1/..%2Fadmin",
    "/v1/%2E%2E%2Fadmin",
    "/v1/x/..%2F..%2Fadmin",
    "/v1/%2e%2e/admin",
    "/v1/.%2e/admin",
    "/v1/x/%2E/y",
    "/v1/a%00b",
    "/v1/a%zzb",
]


@pytest.mark.parametrize("target", ESCAPING)
def test_a_path_leaving_the_prefix_is_refused_before_any_lease(edge: Edge, workers: List[EchoWorker], target: str) -> None:
    response = raw_request(edge.url, http_request("GET", target))
    assert response.status == 400, (target, response.body)
    if response.header("content-type") == ["application/json"]:  # Go's server refuses a bad escape itself, in text
        assert "path" in json.loads(response.body)["error"]
    assert received_count(workers) == 0
    assert edge.routed() == 0, "no lease may be taken for a refused path"


@pytest.mark.parametrize(
    "target",
    [
        "/v1/completions%3Fx=1?y=%2F&z=%23w", "/v1/a%2Fb/%7Euser/%41?q=%3F%26&q=2", "/v1/x;p=1/y", "/v1/%20?a=%20+b",
        # Regression (found by a review): httpx percent-encoded these for ASGIProxy and serve, and
        # every Python edge cut the target at the "#" (which HTTP does not allow in a target, but
        # the gateway forwards as the client sent it).
        "/v1/a{b}", '/v1/q?x="y"', "/v1/a`b|c^d", "/v1/a#b?k=v",
    ],
)
def test_the_raw_path_and_query_reach_the_worker_byte_for_byte(edge: Edge, workers: List[EchoWorker], target: str) -> None:
    got = echoed(raw_request(edge.url, http_request("GET", target, to_worker(1))))
    assert got["target"] == target
    edge.wait_released()


# --- bodies --------------------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_refused_without_reading_it(edge: Edge, workers: List[EchoWorker]) -> None:
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(b"POST /v1/big HTTP/1.1\r\nHost: e\r\nContent-Length: 52428800\r\n\r\n" + b"x" * 1000)
        response = read_response(sock)
    assert response.status == 413
    assert "max_body_size" in json.loads(response.body)["error"]
    assert received_count(workers) == 0 and edge.routed() == 0


def test_a_chunked_body_over_the_limit_is_refused(edge: Edge, workers: List[EchoWorker]) -> None:
    chunk = b"%x\r\n%s\r\n" % (16384, b"y" * 16384)
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(b"POST /v1/big HTTP/1.1\r\nHost: e\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):  # the edge may answer and close before it is all sent
            for _ in range(8):  # 128 KiB, twice the test limit
                sock.sendall(chunk)
        response = read_response(sock)
    assert response.status == 413
    assert received_count(workers) == 0 and edge.routed() == 0


def test_a_body_still_arriving_holds_no_lease(edge: Edge, workers: List[EchoWorker]) -> None:
    body = b'{"prompt": "slow"}'
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(b"POST /v1/slow HTTP/1.1\r\nHost: e\r\nX-SMG-Routing-Key: k\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.sendall(body[:5])
        probe = echoed(raw_request(edge.url, http_request("GET", "/v1/probe", to_worker(0))))  # the edge is serving
        assert probe["target"] == "/v1/probe"
        edge.wait_released()
        assert edge.routed() == 1, "only the probe was routed"
        sock.sendall(body[5:])
        got = echoed(read_response(sock))
    assert got["body"] == body.decode()
    edge.wait_released()


def test_a_body_that_never_finishes_times_out_with_408(kind: str, workers: List[EchoWorker]) -> None:
    with start_edge(kind, [w.url for w in workers], body_timeout=1.0) as edge:
        with contextlib.closing(connect(edge.url)) as sock:
            sock.sendall(b"POST /v1/slow HTTP/1.1\r\nHost: e\r\nContent-Length: 100\r\n\r\npartial")
            response = read_response(sock)
            if kind == "gateway":
                # It closes the connection at once rather than wait for the rest (step 3): a
                # read gets its end, not the socket's timeout (WAIT_S). The Python edges leave
                # that to their servers' own timeouts (5-11 s here).
                assert sock.recv(1) == b""
        assert response.status == 408
        assert "body_timeout" in json.loads(response.body)["error"]
        assert received_count(workers) == 0 and edge.routed() == 0


def test_a_client_leaving_during_its_upload_takes_no_lease(edge: Edge, workers: List[EchoWorker]) -> None:
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(b"POST /v1/gone HTTP/1.1\r\nHost: e\r\nContent-Length: 1000\r\n\r\n0123456789")
    probe = echoed(raw_request(edge.url, http_request("GET", "/v1/probe", to_worker(1))))
    assert probe["target"] == "/v1/probe"
    assert [w.paths() for w in workers] == [[], [b"/v1/probe"]]
    assert edge.routed() == 1
    edge.wait_released()


# --- headers -------------------------------------------------------------------------------------


def test_ten_thousand_headers_are_refused(edge: Edge, workers: List[EchoWorker]) -> None:
    many = [("X-H%d" % i, "v") for i in range(10000)]
    response = raw_request(edge.url, http_request("GET", "/v1/many", many))
    assert response.status in (400, 431), "refused by the proxy (431) or by its HTTP server's own parser (400)"
    assert received_count(workers) == 0 and edge.routed() == 0


# --- disconnects and timeouts ---------------------------------------------------------------------


def test_a_client_leaving_while_the_worker_thinks_releases_and_cancels(edge: Edge, workers: List[EchoWorker]) -> None:
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(http_request("POST", "/v1/_hang", to_worker(0), b"{}"))
        wait_until(lambda: len(workers[0].received) == 1, "the request to reach the worker")
        assert edge.active_leases() == 1
    edge.wait_released()
    workers[0].wait_connections_closed(1)


def test_a_client_leaving_mid_stream_releases_and_cancels(edge: Edge, workers: List[EchoWorker]) -> None:
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(http_request("GET", "/v1/_stream", to_worker(1)))
        response = read_response(sock, head_only=True)
        assert response.status == 200
        assert edge.active_leases() == 1
    edge.wait_released()
    workers[1].wait_connections_closed(1)


def test_a_worker_silent_past_the_first_byte_timeout_is_a_504(kind: str, workers: List[EchoWorker]) -> None:
    with start_edge(kind, [workers[0].url], first_byte_timeout=0.5) as edge:
        response = raw_request(edge.url, http_request("GET", "/v1/_hang"))
        assert response.status == 504
        assert "first_byte_timeout" in json.loads(response.body)["error"]
        edge.wait_released()
    workers[0].wait_connections_closed(1)


def test_a_stream_idle_past_the_idle_timeout_is_cut_and_released(kind: str, workers: List[EchoWorker]) -> None:
    with start_edge(kind, [workers[0].url], idle_timeout=0.5) as edge:
        with contextlib.closing(connect(edge.url)) as sock:
            sock.sendall(http_request("GET", "/v1/_stream"))
            response = read_response(sock, head_only=True)
            assert response.status == 200
            rest = _read_until_closed(sock)
        assert not rest.endswith(b"0\r\n\r\n"), "an idle stream must be cut, not ended as if complete"
        edge.wait_released()
    workers[0].wait_connections_closed(1)


# --- errors and what they reveal -----------------------------------------------------------------


def test_a_broken_worker_is_a_502_that_names_nothing_internal(edge: Edge, workers: List[EchoWorker]) -> None:
    response = raw_request(edge.url, http_request("GET", "/v1/_garbage", to_worker(0)))
    assert response.status == 502
    assert b"THIS IS NOT HTTP" not in response.body and b"NOT HTTP" not in response.body
    assert workers[0].url.encode() not in response.body and b"127.0.0.1" not in response.body
    assert json.loads(response.body)["error"]
    assert not [n for n, _ in response.headers if n.lower().startswith("x-bounded-router")]
    edge.wait_released()


def test_exposed_routing_headers_name_the_worker_in_errors_too(kind: str, workers: List[EchoWorker]) -> None:
    with start_edge(kind, [workers[0].url], expose_routing_headers=True) as edge:
        response = raw_request(edge.url, http_request("GET", "/v1/_garbage"))
        assert response.status == 502
        assert json.loads(response.body)["worker"] == workers[0].url
        assert response.header("x-bounded-router-worker") == [workers[0].url]
        edge.wait_released()


def test_an_unreachable_worker_is_a_502_without_its_address(kind: str) -> None:
    # Bound and never listening: a connection is refused, and no other process can take the port
    # while the test runs (closed first, another test's server could, and answer in its place).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d" % s.getsockname()[1]
        with start_edge(kind, [dead]) as edge:
            response = raw_request(edge.url, http_request("GET", "/v1/x"))
            assert response.status == 502
            assert dead.encode() not in response.body
            edge.wait_released()


def test_one_date_and_one_server_header(edge: Edge, workers: List[EchoWorker]) -> None:
    response = raw_request(edge.url, http_request("GET", "/v1/_dated"))
    assert len(response.header("date")) == 1
    assert len(response.header("server")) <= 1
    edge.wait_released()


def test_head_keeps_the_workers_content_length(edge: Edge, workers: List[EchoWorker]) -> None:
    response = raw_request(edge.url, http_request("HEAD", "/v1/h", to_worker(0)), head_only=True)
    assert response.status == 200
    lengths = response.header("content-length")
    assert len(lengths) == 1 and int(lengths[0]) > 0
    assert response.body == b""
    edge.wait_released()


# --- request smuggling ----------------------------------------------------------------------------


def test_a_smuggled_request_never_reaches_a_worker_as_its_own(edge: Edge, workers: List[EchoWorker]) -> None:
    smuggled = (
        b"POST /v1/front HTTP/1.1\r\nHost: e\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /v1/admin HTTP/1.1\r\nHost: e\r\n\r\n"
    )
    with contextlib.closing(connect(edge.url)) as sock:
        sock.sendall(smuggled)
        _read_until_closed(sock, limit_s=2.0)
    for worker in workers:
        for request in worker.received:
            assert len(request.header("content-length")) <= 1
            assert request.header("transfer-encoding") == []
            assert b"/v1/admin" not in request.body, "a request was forwarded inside another's body"
    edge.wait_released()


def _read_until_closed(sock: socket.socket, limit_s: float = 30.0) -> bytes:
    sock.settimeout(limit_s)
    data = b""
    with contextlib.suppress(socket.timeout, ConnectionError):
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data
