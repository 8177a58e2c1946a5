"""Worker failures through the proxies (docs/contract.md, "Worker failures"): each test runs once
per framework helper (ASGIProxy behind uvicorn, AiohttpProxy) and the gateway's metrics with keyed
requests of which some spill. Workers are mock worker processes and loopback ports nothing
listens on; the keys' workers come from the reference model, not from the router."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any, Iterator, List

import httpx
import pytest
from integration_support import ProxyServer, client, completion, fast_worker, serve_proxy, wait_released  # noqa: F401 - fixtures
from prometheus_client.parser import text_string_to_metric_families
from reference_model import ReferenceRouter

from bounded_router import Router
from bounded_router.testing.fleet import ServerProcess


def dead_url() -> str:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


def keys_preferring(urls: List[str], url: str, n: int) -> List[str]:
    model = ReferenceRouter(urls)
    keys = [k for k in ("key-%d" % i for i in range(5000)) if model.preferred(k.encode()) == url]
    assert len(keys) >= n
    return keys[:n]


def state(router: Router, url: str) -> Any:
    return next(w for w in router.workers() if w.url == url)


@pytest.fixture
def failing_worker() -> Iterator[ServerProcess]:
    """A mock worker switched to answer 503 to everything (its fault switch)."""
    with ServerProcess("failing", "bounded_router.testing.mock_worker", ["--name", "failing", "--port", "0", "--time-scale", "0.001"]) as worker:
        assert httpx.post(worker.url + "/fault", json={"mode": "unavailable"}, trust_env=False).json()["fault"] == "unavailable"
        yield worker


def test_a_dead_worker_costs_no_request(serve_proxy: ProxyServer, fast_worker: Any, client: httpx.Client) -> None:
    dead = dead_url()
    urls = [dead, fast_worker.url]
    with serve_proxy(urls) as (url, _, router):
        for key in keys_preferring(urls, dead, 8):
            r = client.post(url + "/v1/completions", json=completion("q", 2, stream=False), headers={"X-SMG-Routing-Key": key})
            assert r.status_code == 200, r.text
            assert r.headers["x-bounded-router-worker"] == fast_worker.url
        wait_released(router)
        w = state(router, dead)
        assert (w.condition, w.outcomes["failure"], w.ejections) == ("ejected", 5, 1), "5 failures in a row eject it"
        assert router.branch_counts()["failover"] == 5


def test_a_503_worker_costs_no_request_and_is_ejected(serve_proxy: ProxyServer, fast_worker: Any, failing_worker: Any, client: httpx.Client) -> None:
    urls = [failing_worker.url, fast_worker.url]
    with serve_proxy(urls) as (url, _, router):
        for key in keys_preferring(urls, failing_worker.url, 7):
            r = client.post(url + "/v1/completions", json=completion("q", 2, stream=True), headers={"X-SMG-Routing-Key": key})
            assert r.status_code == 200, r.text
            assert r.text.rstrip().endswith("[DONE]")
        wait_released(router)
        assert state(router, failing_worker.url).condition == "ejected"
        assert state(router, failing_worker.url).outcomes["failure"] == 5
        assert state(router, fast_worker.url).outcomes["success"] == 7
        assert httpx.get(failing_worker.url + "/stats", trust_env=False).status_code == 503


def test_no_worker_left_gives_the_last_answer(serve_proxy: ProxyServer, failing_worker: Any, client: httpx.Client) -> None:
    with serve_proxy([failing_worker.url], circuit_breaker=False) as (url, _, router):
        r = client.post(url + "/v1/completions", json=completion("q", 2, stream=False), headers={"X-SMG-Routing-Key": "k"})
        assert r.status_code == 503, "the worker's own answer: no untried worker is left"
        wait_released(router)
        assert router.branch_counts()["failover"] == 0


def test_no_retry_once_a_byte_went_to_the_client(serve_proxy: ProxyServer, fast_worker: Any, client: httpx.Client) -> None:
    with ServerProcess("cut", "bounded_router.testing.mock_worker", ["--name", "cut", "--port", "0", "--time-scale", "0.001"]) as cut:
        urls = [cut.url, fast_worker.url]
        with serve_proxy(urls) as (url, _, router):
            key = keys_preferring(urls, cut.url, 1)[0]
            with pytest.raises(httpx.HTTPError):
                body = completion("q", 8, stream=True, fail_after_tokens=2)
                client.post(url + "/v1/completions", json=body, headers={"X-SMG-Routing-Key": key}).read()
            wait_released(router)
            assert state(router, cut.url).outcomes["failure"] == 1, "a broken stream is the worker's failure"
            assert state(router, fast_worker.url).routed == 0, "never sent again after its first byte"


def test_leases_of_the_gateway_metrics_count_hits_and_spills(fast_worker: Any, client: httpx.Client) -> None:
    # Keyed requests of which some spill: the counts the test keeps against /metrics, read with
    # prometheus_client's parser (a swap of the hit and spill counts fails it).
    slow = dead_url()  # only held leases are counted on it, no request is sent there
    urls = [slow, fast_worker.url]
    to_slow, to_fast = keys_preferring(urls, slow, 3), keys_preferring(urls, fast_worker.url, 2)
    with Router(urls, min_load_gap=2, max_load_skew=1.5, health_check=False) as router, router.serve(metrics_port=0) as gateway:
        held = [router.acquire(slow) for _ in range(6)]  # load 6: far over the bound and the gap
        for key in to_slow + to_fast:
            r = client.post(gateway.url + "/v1/completions", json=completion("q", 2, stream=False), headers={"X-SMG-Routing-Key": key})
            assert r.status_code == 200
        for lease in held:
            lease.release()
        wait_released(router)
        samples = {}
        assert gateway.metrics_url is not None
        for family in text_string_to_metric_families(client.get(gateway.metrics_url).text):
            for s in family.samples:
                if s.name == "bounded_router_requests_total":
                    samples[s.labels["branch"]] = s.value
        assert samples["explicit_routing_key_spillover"] == len(to_slow)
        assert samples["explicit_routing_key_hit"] == len(to_fast)


def test_a_cancelled_stream_releases_while_the_wrapper_is_still_referenced() -> None:
    # The wrapper stays referenced throughout, so its finaliser (the safety net) cannot be what
    # released the lease.
    with Router(["http://127.0.0.1:9"]) as router:
        lease = router.route("s")
        started = asyncio.Event()

        async def chunks() -> Any:
            yield b"first"
            started.set()
            await asyncio.sleep(3600)
            yield b"never"

        wrapper = lease.wrap_aiter(chunks())

        async def consume() -> None:
            async for _ in wrapper:
                pass

        async def main() -> None:
            task = asyncio.ensure_future(consume())
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert wrapper is not None and lease.released
        assert router.active_leases() == 0
        assert router.leaked_leases() == 0
        assert json.dumps(router.branch_counts())  # the router is still usable


def test_a_retry_keeps_the_requests_prefix_blocks(serve_proxy: ProxyServer, fast_worker: Any, failing_worker: Any, client: httpx.Client) -> None:
    # Regression (found by an audit): a retry was routed without the request's prefix blocks, so
    # cache_aware placed it as a request with no prompt (here: the least loaded worker, first in
    # membership order), not on the worker holding most of its prefix as the gateway does.
    from bounded_router import prefix_blocks

    dead = dead_url()
    ids = list(range(64))
    blocks = list(prefix_blocks(ids, 16))
    urls = [dead, failing_worker.url, fast_worker.url]
    with serve_proxy(urls, proxy_options={"prefix_blocks": "tokens"}, policy="cache_aware", health_check=False) as (url, _, router):
        router.store_blocks(failing_worker.url, blocks)
        router.store_blocks(fast_worker.url, blocks[:3])
        body = dict(completion("q", 2, stream=False), input_ids=ids)
        r = client.post(url + "/v1/completions", content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.headers["x-bounded-router-worker"] == fast_worker.url
        wait_released(router)
        assert (state(router, failing_worker.url).routed, state(router, dead).routed) == (1, 0), "the retry went where the blocks say"
