"""contract: "Reference vectors": the reference vectors, through the public API.

Each test finds a key whose preferred worker is w0 (with the reference model, never the router
under test), sets the loads by holding leases, and checks where the key goes; where a key spills,
the expected worker is the model's clockwise walk.
"""

from __future__ import annotations

import pytest

from bounded_router import NoWorkerAvailableError, PolicyType
from reference_model import ReferenceRouter
from support import W, hold, key_preferring, urls

W0 = W[0]


def next_clockwise_without_w0(n, key):
    """The first worker after w0 clockwise from the key, by the reference model's ring."""
    order = list(ReferenceRouter(urls(n)).clockwise(key.encode()))
    assert order[0] == W0
    return order[1]


@pytest.mark.parametrize(
    "loads, skew, gap",
    [
        ([0, 0, 0, 0], 1.5, 2),
        ([1, 0, 0, 0], 1.5, 2),  # gap 1 is not > 2
        ([2, 0, 0, 0], 1.5, 2),  # relative test holds, gap 2 is not > 2
        ([4, 3, 3, 3], 1.5, 0),  # 4 <= 3.25 * 1.5
        ([1, 0, 0], 1.0, 2),
        ([1, 1, 1], 1.5, 2),
    ],
)
def test_stays_on_preferred(make_router, loads, skew, gap):
    router = make_router(len(loads), max_load_skew=skew, min_load_gap=gap)
    key = key_preferring(router, W0)
    held = hold(router, loads, urls(len(loads)))
    lease = router.route(key)
    assert (lease.worker_url, lease.preferred_url, lease.branch) == (W0, W0, "explicit_routing_key_hit")
    assert not lease.spilled
    assert router.loads()[W0] == loads[0] + 1
    for item in held + [lease]:
        assert item.release()


@pytest.mark.parametrize("loads", [[3, 0, 0, 0], [5, 0, 0]])
def test_spills_to_first_clockwise_worker_under_the_bound(make_router, loads):
    router = make_router(len(loads))  # skew 1.5, gap 2
    key = key_preferring(router, W0)
    target = next_clockwise_without_w0(len(loads), key)
    assert target != W0
    held = hold(router, loads, urls(len(loads)))
    decisions = {router.select(key) for _ in range(5)}  # the same target on every repeat
    assert len(decisions) == 1
    decision = decisions.pop()
    assert (decision.worker_url, decision.preferred_url, decision.branch) == (
        target,
        W0,
        "explicit_routing_key_spillover",
    )
    assert decision.spilled
    lease = router.route(key)
    assert (lease.worker_url, lease.preferred_url, lease.spilled) == (target, W0, True)
    assert router.loads()[target] == 1


def test_spill_walk_skips_workers_over_the_bound(make_router):
    router = make_router(4)
    key = key_preferring(router, W0)
    order = list(ReferenceRouter(urls(4)).clockwise(key.encode()))
    assert order[0] == W0
    held = hold(router, [3, 0, 0, 0], urls(4))
    assert router.select(key).worker_url == order[1]  # mean 0.75, bound 1.125
    held += [router.acquire(order[1]) for _ in range(2)]
    # w0 3, order[1] 2, others 0: mean 1.25, bound 1.875; order[1] is over it, order[2] is not.
    decision = router.select(key)
    assert (decision.worker_url, decision.branch) == (order[2], "explicit_routing_key_spillover")
    for lease in held:
        lease.release()


def test_one_worker_under_any_load(make_router):
    router = make_router(1, max_load_skew=1.0, min_load_gap=2)
    held = hold(router, [100], urls(1))
    lease = router.route("any-key")
    assert (lease.worker_url, lease.branch) == (W0, "explicit_routing_key_hit")


@pytest.mark.parametrize("policy", list(PolicyType))
def test_all_unhealthy_means_no_worker(make_router, policy):
    router = make_router(3, policy=policy)
    for url in urls(3):
        router.set_healthy(url, False)
    with pytest.raises(NoWorkerAvailableError) as info:
        router.route("key")
    assert info.value.branch == "no_healthy_workers"
    decision = router.select("key")
    assert (decision.worker_url, decision.preferred_url, decision.branch) == (None, None, "no_healthy_workers")
    assert router.branch_counts()["no_healthy_workers"] == 1
    assert router.active_leases() == 0


def test_preferred_unhealthy_goes_clockwise_and_comes_back(make_router):
    router = make_router(4)
    key = key_preferring(router, W0)
    router.set_healthy(W0, False)
    lease = router.route(key)
    expected = next_clockwise_without_w0(4, key)
    # w0 is not available, so not preferred: the next worker clockwise is, and is a hit
    assert (lease.worker_url, lease.preferred_url, lease.branch) == (expected, expected, "explicit_routing_key_hit")
    router.set_healthy(W0, True)
    back = router.route(key)
    assert (back.worker_url, back.branch) == (W0, "explicit_routing_key_hit")


def test_target_index_ignores_load(make_router):
    router = make_router(4)
    held = hold(router, [10, 0, 0, 0], urls(4))
    lease = router.route(headers={"X-SMG-Target-Worker": "0"})
    assert (lease.worker_url, lease.branch) == (W0, "target_worker_hit")


@pytest.mark.parametrize("header", ["Authorization", "X-Forwarded-For", "Cookie"])
def test_implicit_key_never_spills(make_router, header):
    router = make_router(4)
    key = key_preferring(router, W0)
    held = hold(router, [5, 0, 0, 0], urls(4))
    assert router.select(key).spilled  # the same key as an explicit key would spill
    lease = router.route(headers={header: key})
    assert (lease.worker_url, lease.preferred_url, lease.branch) == (W0, W0, "implicit_routing_key_hit")


@pytest.mark.parametrize("gap", [1, 2, 4])
def test_sequential_requests_of_one_key(make_router, gap):
    router = make_router(4, max_load_skew=1.5, min_load_gap=gap)
    key = key_preferring(router, W0)
    leases = [router.route(key) for _ in range(gap + 2)]
    assert [lease.worker_url for lease in leases[: gap + 1]] == [W0] * (gap + 1)
    assert all(lease.branch == "explicit_routing_key_hit" for lease in leases[: gap + 1])
    last = leases[-1]
    assert last.worker_url != W0 and last.spilled and last.preferred_url == W0
    assert sorted(router.loads().values(), reverse=True) == [gap + 1, 1, 0, 0]
    assert all(lease.release() for lease in leases)
    assert set(router.loads().values()) == {0}
    assert router.active_leases() == 0


@pytest.mark.parametrize(
    "policy, gap, expected",
    [("bounded_consistent_hashing", g, (6, 2)) for g in range(0, 5)]
    + [("bounded_consistent_hashing", g, (7, 1)) for g in (5, 6)]
    + [("bounded_consistent_hashing", g, (8, 0)) for g in (7, 8)]
    + [("consistent_hashing", None, (8, 0))],
)
def test_eight_sibling_burst(make_router, policy, gap, expected):
    kwargs = {"policy": policy} if gap is None else {"policy": policy, "max_load_skew": 1.5, "min_load_gap": gap}
    router = make_router(2, **kwargs)
    key = key_preferring(router, W0)
    leases = [router.route(key) for _ in range(8)]
    assert all(lease.preferred_url == W0 for lease in leases)
    loads = router.loads()
    assert (loads[W[0]], loads[W[1]]) == expected
    # the decisions are replayable: all the siblings count one active key per worker used
    active = {info.url: info.active_keys for info in router.workers()}
    assert active == {url: (1 if n else 0) for url, n in loads.items()}
    for lease in leases:
        lease.release()
    assert router.loads() == {W[0]: 0, W[1]: 0}
