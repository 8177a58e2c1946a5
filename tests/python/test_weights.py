"""Weighted leases and prefix blocks from Python (docs/contract.md, "Weighted leases"):
route(weight=), acquire(weight=), route_many(weights=, prefix_blocks=), select(prefix_blocks=),
loads() as weighted sums and in_flight() as counts, and errors that name the field."""

from __future__ import annotations

import threading
from array import array
from fractions import Fraction

import pytest

from bounded_router import MAX_LEASE_WEIGHT, MAX_PREFIX_BLOCKS, NoWorkerAvailableError, Router
from support import W, key_preferring, urls

# A gap nothing reaches: no request spills, so a key's worker does not depend on the weights.
NO_SPILL = 10**15


def test_a_lease_counts_its_weight_until_released(make_router):
    router = make_router(3, min_load_gap=NO_SPILL)
    key = key_preferring(router, W[1])
    heavy = router.route(key, weight=700)
    light = router.route(key)
    assert heavy.worker_url == light.worker_url == W[1]
    assert router.loads() == {W[0]: 0, W[1]: 701, W[2]: 0}
    assert router.in_flight() == {W[0]: 0, W[1]: 2, W[2]: 0}
    heavy.release()
    assert router.loads()[W[1]] == 1 and router.in_flight()[W[1]] == 1
    light.release()
    assert router.loads() == router.in_flight() == {W[0]: 0, W[1]: 0, W[2]: 0}


def test_the_spill_test_reads_weighted_loads(make_router):
    # Gap 2: a single lease of weight 3 on the key's worker makes the next request spill, where
    # three leases of weight 1 would be needed.
    router = make_router(3, min_load_gap=2)
    key = key_preferring(router, W[0])
    held = router.route(key, weight=3)
    assert held.worker_url == W[0] and not held.spilled
    assert router.route(key).spilled


def test_weight_1_and_the_struct_path_decide_as_the_fast_path():
    # The same operations on two routers, one through route(key), one through
    # route(key, weight=1, prefix_blocks=...): same workers, branches, loads and counters.
    fast, slow = Router(urls(4), min_load_gap=1), Router(urls(4), min_load_gap=1)
    try:
        keys = ["a", "b", "a", "a", "c", "a", "a", b"\xffbin", "a"]
        fast_leases = [fast.route(k) for k in keys]  # held: the load piles up until "a" spills
        slow_leases = [slow.route(k, weight=1, prefix_blocks=[i, 2**64 - 1]) for i, k in enumerate(keys)]
        got = [(lease.worker_url, lease.preferred_url, lease.branch) for lease in fast_leases]
        assert got == [(lease.worker_url, lease.preferred_url, lease.branch) for lease in slow_leases]
        assert fast.loads() == slow.loads() and fast.branch_counts() == slow.branch_counts()
        assert any(branch == "explicit_routing_key_spillover" for _, _, branch in got)
    finally:
        fast.close()
        slow.close()


def test_route_with_headers_and_a_weight(make_router):
    router = make_router(3, min_load_gap=NO_SPILL)
    lease = router.route(headers={"X-SMG-Target-Worker": "2"}, weight=9)
    assert lease.worker_url == W[2] and lease.branch == "target_worker_hit"
    assert router.loads()[W[2]] == 9


def test_select_with_prefix_blocks_counts_nothing(make_router):
    router = make_router(3)
    key = key_preferring(router, W[2])
    decision = router.select(key, prefix_blocks=[1, 2, 3])
    assert decision.worker_url == W[2] and decision == router.select(key)
    assert sum(router.in_flight().values()) == 0


@pytest.mark.parametrize(
    "weight, error, text",
    [
        (0, ValueError, "weight must be an integer from 1 to 1073741824, got 0"),
        (-5, ValueError, "got -5"),
        (MAX_LEASE_WEIGHT + 1, ValueError, "got 1073741825"),
        (2**64, ValueError, "got 18446744073709551616"),
        (True, TypeError, "got True"),
        (1.0, TypeError, "got 1.0"),
        ("3", TypeError, "got '3'"),
        (Fraction(3, 1), TypeError, "weight must be an integer"),
    ],
)
def test_bad_weights_are_refused_naming_the_field(make_router, weight, error, text):
    router = make_router(2)
    with pytest.raises(error, match=text.replace("(", r"\(")):
        router.route("k", weight=weight)
    with pytest.raises(error, match="weight"):
        router.acquire(W[0], weight=weight)
    with pytest.raises(error, match=r"weights\[1\]"):
        router.route_many(["a", "b"], weights=[1, weight])
    assert router.active_leases() == 0


def test_the_largest_weight_is_accepted(make_router):
    router = make_router(2, min_load_gap=NO_SPILL)
    lease = router.route("k", weight=MAX_LEASE_WEIGHT)
    acquired = router.acquire(W[1], weight=MAX_LEASE_WEIGHT)
    assert sum(router.loads().values()) == 2 * MAX_LEASE_WEIGHT
    lease.release()
    acquired.release()


@pytest.mark.parametrize(
    "blocks, error, text",
    [
        ([1, -1], ValueError, r"prefix_blocks\[1\] must be an integer from 0 to 2\*\*64-1, got -1"),
        ([2**64], ValueError, r"prefix_blocks\[0\] .* got 18446744073709551616"),
        ([1, 2, True], TypeError, r"prefix_blocks\[2\]"),
        ([2**64 - 1, False], TypeError, r"prefix_blocks\[1\]"),  # a bool among hashes found anywhere
        ([1, True], TypeError, r"prefix_blocks\[1\]"),
        ([1.5], TypeError, r"prefix_blocks\[0\]"),
        ("abc", TypeError, "prefix_blocks must be a sequence"),
        (5, TypeError, "prefix_blocks must be a sequence"),
        ([0] * (MAX_PREFIX_BLOCKS + 1), ValueError, "prefix_blocks may hold at most 65536 blocks, got 65537"),
    ],
)
def test_bad_prefix_blocks_are_refused_naming_the_field(make_router, blocks, error, text):
    router = make_router(2)
    with pytest.raises(error, match=text):
        router.route("k", prefix_blocks=blocks)
    with pytest.raises(error, match=text):
        router.select("k", prefix_blocks=blocks)
    assert router.active_leases() == 0


def test_prefix_blocks_accept_any_sequence_up_to_the_limit(make_router):
    router = make_router(2)
    for blocks in ([], (1, 2), [0, 1, 2**64 - 1], array("Q", [2**64 - 1, 0, 1]), range(MAX_PREFIX_BLOCKS), iter([3, 4])):
        router.route("k", prefix_blocks=blocks).release()
    assert router.active_leases() == 0


@pytest.mark.parametrize("with_blocks", [False, True])
def test_route_many_with_weights_equals_successive_weighted_routes(with_blocks):
    batched, single = Router(urls(4), min_load_gap=3), Router(urls(4), min_load_gap=3)
    try:
        # No keyless request: its random choice would differ between the two routers.
        keys = ["a", "a", "b", "a", b"d", "c", "a", "a"]
        weights = [5, 1, 2, 7, 3, 3, 1, 4]
        blocks = [[i] * i for i in range(len(keys))] if with_blocks else None
        got = batched.route_many(keys, weights=weights, prefix_blocks=blocks)
        want = [single.route(k, weight=w) for k, w in zip(keys, weights)]
        assert [(g.worker_url, g.branch) for g in got] == [(w.worker_url, w.branch) for w in want]
        assert sum(batched.loads().values()) == sum(weights)
        assert sum(batched.in_flight().values()) == len(keys)
        assert any(lease.spilled for lease in got)
        assert batched.release_many(got) == len(keys)
        assert sum(batched.loads().values()) == 0
    finally:
        batched.close()
        single.close()


def test_route_many_with_weights_is_all_or_nothing(make_router):
    router = make_router(3)
    with pytest.raises(ValueError, match=r"weights\[2\] must be an integer from 1 to 1073741824, got 0"):
        router.route_many(["a", "b", "c"], weights=[1, 2, 0])
    for bad, error, text in [
        ([1, True], TypeError, r"weights\[1\] must be an integer"),
        ([2.0, 1], TypeError, r"weights\[0\] must be an integer"),
        ([1, 2**30 + 1], ValueError, r"weights\[1\] must be an integer from 1 to 1073741824, got 1073741825"),
        ([2**70, 1], ValueError, r"weights\[0\] must be an integer"),
    ]:
        with pytest.raises(error, match=text):
            router.route_many(["a", "b"], weights=bad)
    with pytest.raises(ValueError, match=r"prefix_blocks\[1\]\[0\]"):
        router.route_many(["a", "b"], prefix_blocks=[None, [-1]])
    with pytest.raises(ValueError, match="weights has 2 items but there are 3 keys"):
        router.route_many(["a", "b", "c"], weights=[1, 2])
    assert router.active_leases() == 0 and sum(router.branch_counts().values()) == 0
    for url in W[:3]:
        router.set_healthy(url, False)
    with pytest.raises(NoWorkerAvailableError):
        router.route_many(["a", "b"], weights=[4, 5])
    assert router.active_leases() == 0
    assert router.route_many([], weights=[]) == []


def test_acquire_with_a_weight(make_router):
    router = make_router(2)
    lease = router.acquire(W[1], "k", weight=40)
    assert lease.worker_url == W[1] and lease.branch is None
    assert router.loads() == {W[0]: 0, W[1]: 40} and router.in_flight() == {W[0]: 0, W[1]: 1}
    lease.release()
    assert router.loads()[W[1]] == 0


def test_long_keys_and_headers_take_the_weighted_path_like_the_key_path(make_router):
    # The weighted path copies the key and the headers into a per-thread buffer, which grows for
    # long ones: the decisions must still be the key path's.
    router = make_router(8, min_load_gap=NO_SPILL)
    for n in (1, 4000, 4097, 70000):
        key = "k" * n
        headers = {"Cookie": "c" * n}
        assert router.route(key, weight=3, headers=headers).worker_url == router.select(key).worker_url
        assert router.route(headers=headers, weight=2).worker_url == router.select(headers=headers).worker_url
    assert router.leaked_leases() == 2 * 4  # every lease above was dropped: the safety net released them


def test_threads_routing_with_weights_leave_nothing_behind(make_router):
    router = make_router(6, min_load_gap=50)
    errors = []

    def work(seed: int) -> None:
        try:
            for i in range(400):
                key = "t%d-%d" % (seed, i % 13)
                with router.route(key, weight=1 + (i * seed) % 97, prefix_blocks=[seed, i]) as lease:
                    assert lease.worker_url in W[:6]
                    decision = router.select(key, prefix_blocks=[i])
                    assert decision.worker_url in W[:6]
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(router.loads().values()) == 0 and sum(router.in_flight().values()) == 0
    assert router.active_leases() == 0 and router.leaked_leases() == 0
