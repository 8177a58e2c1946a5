"""Router replicas end to end, the CI-sized version of scripts/e2e_replicas.py (issue 21): 2 mock
worker processes publishing KV events over ZeroMQ on loopback, a native gateway process that
subscribes to them (docs/contract.md, "Reported blocks"; "HTTP proxies", token prefix blocks).

A session's first turn goes to a worker through another router (straight to it: this gateway
never sees it), its second turn through the gateway: it must land on the worker holding the first
turn's blocks, which the gateway knows only from that worker's events. Where it landed and what
was cached are the mock workers' own counters (GET /stats), not the router's."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import httpx
import pytest

# requirements-dev.txt installs the kv-events extra: without it these tests fail, not skip.
import msgpack  # noqa: E402, F401
import zmq  # noqa: E402, F401

from bounded_router.simulate.model import CostModel  # noqa: E402
from bounded_router.testing.fleet import ServerProcess  # noqa: E402
from bounded_router.testing.replicas import (  # noqa: E402
    Mode, ReplicaSessions, await_events, complete, indexed_blocks, peer_route_flags, session_token_prompts, start_gateways,
    start_workers,
)  # fmt: skip

BLOCK = 16
WORKLOAD = ReplicaSessions(workers=2, sessions=4, turns=2, document_tokens=70, question_tokens=10, answer_tokens=3, cost=CostModel(block_size=BLOCK), time_scale=0.01)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Tuple[List[ServerProcess], ServerProcess]]:
    with start_workers(WORKLOAD, lifetime=300) as workers:
        with start_gateways(Mode("1 gateway, events", 1, events=True), workers, BLOCK, lifetime=300) as gateways:
            await_events(gateways, workers, BLOCK)
            yield workers, gateways[0]


def _stats(worker: ServerProcess) -> Dict[str, Any]:
    return httpx.get(worker.url + "/stats", trust_env=False).json()  # type: ignore[no-any-return]


def _generate(url: str, ids: List[int]) -> None:
    """SGLang's /generate with input_ids, as slime and verl send it."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}}
    httpx.post(url + "/generate", json=body, trust_env=False, timeout=60.0).raise_for_status()


@pytest.mark.parametrize("send", [complete, _generate], ids=["completions", "generate"])
@pytest.mark.parametrize("holder", [0, 1])
def test_a_second_turn_through_the_gateway_lands_on_the_worker_holding_its_first_turn(
    fleet: Tuple[List[ServerProcess], ServerProcess], holder: int, send: Callable[[str, List[int]], Any]
) -> None:
    workers, gateway = fleet
    # Sessions 0 and 1 for completions, 2 and 3 for /generate: no case finds another's blocks.
    session = holder + (2 if send is _generate else 0)
    first, second = session_token_prompts(WORKLOAD, session, WORKLOAD.document_tokens)
    assert second[: len(first)] == first and len(first) == 80  # 70 document ids, 10 question ids: 5 blocks
    indexed = indexed_blocks(gateway).get(workers[holder].url, 0)
    complete(workers[holder].url, first)
    for _ in range(500):  # bounded: until the worker's events of the first turn reached the gateway
        if indexed_blocks(gateway).get(workers[holder].url, 0) >= indexed + 5:
            break
        time.sleep(0.01)
    before = [_stats(w) for w in workers]
    send(gateway.url, second)
    after = [_stats(w) for w in workers]
    requests = [a["requests"] - b["requests"] for a, b in zip(after, before)]
    cached = [a["cached_tokens"] - b["cached_tokens"] for a, b in zip(after, before)]
    assert requests[holder] == 1 and requests[1 - holder] == 0
    assert cached[holder] == 5 * BLOCK  # the first turn's 5 whole blocks


def test_the_gateway_is_started_with_each_workers_event_endpoints_once(fleet: Tuple[List[ServerProcess], ServerProcess]) -> None:
    workers, gateway = fleet
    args = list(gateway.process.args)  # type: ignore[arg-type]
    assert args.count("--kv-events") == args.count("--kv-events-replay") == len(workers)
    assert args.count("--prefix-blocks") == 1



def test_each_gateway_publishes_on_its_own_endpoint_and_follows_the_others() -> None:
    endpoints = ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"]
    assert peer_route_flags(endpoints, 1) == ["--peer-routes-publish", endpoints[1], "--peer-routes", endpoints[0], endpoints[2]]
    assert peer_route_flags(endpoints[:1], 0) == ["--peer-routes-publish", endpoints[0]]


def test_a_route_through_one_gateway_reaches_the_others_index() -> None:
    """docs/contract.md, "Sharing routes over the wire": no KV events, so the second gateway can
    learn the first's route only from the feed."""
    with start_workers(WORKLOAD, lifetime=120) as workers:
        with start_gateways(Mode("2 gateways, peer routes", 2, peer_routes=True), workers, BLOCK, lifetime=120) as (first, second):
            prompt = session_token_prompts(WORKLOAD, 5, WORKLOAD.document_tokens)[0]  # 80 ids: 5 blocks
            complete(first.url, prompt)
            routed = {url: n for url, n in indexed_blocks(first).items() if n}
            assert list(routed.values()) == [5], routed
            for _ in range(500):  # bounded: until the route reached the second gateway
                if indexed_blocks(second) == indexed_blocks(first):
                    break
                time.sleep(0.01)
            assert indexed_blocks(second) == indexed_blocks(first)
