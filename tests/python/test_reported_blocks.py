"""Blocks the engines report (docs/contract.md, "Reported blocks"): Router.store_blocks,
remove_blocks and clear_blocks through the real library, checked against the contract's vectors."""

from __future__ import annotations

import pytest

from bounded_router import Router, prefix_blocks
from support import W


def test_a_worker_holds_what_its_engine_reports(make_router):
    router = make_router(4, policy="cache_aware")
    tokens = list(range(64))  # four blocks of 16 tokens
    blocks = prefix_blocks(tokens, 16)
    router.store_blocks(W[2], blocks[:3], engine_hashes=[101, 102, 103])
    decision = router.select(prefix_blocks=blocks)
    assert (decision.worker_url, decision.branch) == (W[2], "cache_aware_prefix_hit")
    assert [w.indexed_blocks for w in router.workers()] == [0, 0, 3, 0]
    router.remove_blocks(W[2], [101, 999])  # 999 was never reported: ignored
    assert [w.indexed_blocks for w in router.workers()] == [0, 0, 2, 0]
    assert router.select(prefix_blocks=blocks).branch == "cache_aware_no_match", "the first block is gone"
    router.clear_blocks(W[2])
    assert router.statistics().indexed_blocks == 0


def test_a_route_since_the_last_report_counts_beside_it(make_router):
    router = make_router(2, policy="cache_aware")
    router.store_blocks(W[0], [1, 2])
    lease = router.route(headers={"X-SMG-Target-Worker": "1"}, prefix_blocks=[1, 2, 3])
    lease.release()
    # No event from w1 yet: what this router sent there counts, and it holds the longer prefix.
    assert router.select(prefix_blocks=[1, 2, 3]).worker_url == W[1]
    router.remove_blocks(W[1], [3, 2])  # named as we name them: found by our hash
    assert router.select(prefix_blocks=[1, 2, 3]).worker_url == W[0]


def test_reports_are_bounded_by_blocks_per_worker():
    with Router(W[:1], policy="cache_aware", blocks_per_worker=4) as router:
        router.store_blocks(W[0], list(range(1, 11)), engine_hashes=list(range(1001, 1011)))
        assert router.workers()[0].indexed_blocks == 4


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda r: r.store_blocks("http://127.0.0.1:9", [1]), KeyError, "127.0.0.1:9"),
        (lambda r: r.store_blocks(W[0], [1, 2], engine_hashes=[1]), ValueError, "engine_hashes must name each of the 2 blocks, got 1"),
        (lambda r: r.store_blocks(W[0], [-1]), ValueError, "blocks[0]"),
        (lambda r: r.remove_blocks(W[0], ["x"]), TypeError, "engine_hashes"),
        (lambda r: r.remove_blocks(W[0], [0] * 65537), ValueError, "at most 65536"),
    ],
)
def test_bad_reports_name_the_field(make_router, call, error, text):
    router = make_router(2, policy="cache_aware")
    with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
        call(router)


def test_other_policies_refuse_reports(make_router):
    router = make_router(2, policy="consistent_hashing")
    with pytest.raises(ValueError, match="block reports apply only to cache_aware, not consistent_hashing"):
        router.clear_blocks(W[0])
