"""Peer routes (docs/contract.md, "Peer routes"): Router.peer_route through the real library,
with loads worked out by hand from the contract's rules."""

from __future__ import annotations

import pytest

from support import W


def test_a_peer_route_adds_to_a_standing_report_until_the_next(make_router):
    router = make_router(2, policy="least_load")
    held = router.acquire(W[1])  # w0 0, w1 1: no tie for least_load to break at random
    router.peer_route(W[0], weight=5)
    assert router.select().worker_url == W[0], "no report stands: the peer's route adds nothing"
    router.report_load(W[0], 0)
    router.report_load(W[1], 1)  # counts the lease held
    router.peer_route(W[0])  # weight 1
    router.peer_route(W[0])
    assert router.select().worker_url == W[1], "0 + 2 from peers on w0 against 1 on w1"
    router.report_load(W[0], 0)  # the engine counts every replica's requests: the additions go
    assert router.select().worker_url == W[0]
    router.peer_route(W[0], weight=2)
    router.forget_load(W[0])
    assert router.select().worker_url == W[0], "forgetting the report drops the peers' weight"
    assert router.loads() == {W[0]: 0, W[1]: 1}, "loads() counts this router's leases alone"
    held.release()


def test_a_peer_routes_blocks_join_the_index(make_router):
    router = make_router(3, policy="cache_aware")
    router.peer_route(W[2], prefix_blocks=[11, 12, 13])
    lease = router.route(prefix_blocks=[11, 12, 13, 14])
    assert (lease.worker_url, lease.branch) == (W[2], "cache_aware_prefix_hit")
    lease.release()
    assert [w.indexed_blocks for w in router.workers()] == [0, 0, 4]


@pytest.mark.parametrize("weight, error", [(0, ValueError), (1 << 30 | 1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_weights_are_refused(make_router, weight, error):
    router = make_router(1)
    with pytest.raises(error, match="weight"):
        router.peer_route(W[0], weight=weight)


def test_bad_blocks_and_unknown_workers_are_refused(make_router):
    router = make_router(1, policy="cache_aware")
    with pytest.raises(ValueError, match="prefix_blocks"):
        router.peer_route(W[0], prefix_blocks=[-1])
    with pytest.raises(KeyError):
        router.peer_route("http://127.0.0.1:9")
