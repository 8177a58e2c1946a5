"""Router.route_many / release_many: batches behave exactly like successive route() / release()
calls, taken as one step."""

from __future__ import annotations

import gc
import threading

import pytest

from bounded_router import Lease, NoWorkerAvailableError, Router, RouterClosedError
from support import W, key_preferring, urls


def snapshot(router: Router):
    """Everything a batch may change: loads, active keys, branch counters, lease counts."""
    return (
        [(w.url, w.load, w.active_keys) for w in router.workers()],
        router.branch_counts(),
        router.active_leases(),
        router.leaked_leases(),
    )


def described(leases):
    return [(lease.worker_url, lease.preferred_url, lease.branch, lease.spilled) for lease in leases]


@pytest.mark.parametrize("policy", ["bounded_consistent_hashing", "consistent_hashing", "round_robin"])
def test_route_many_equals_successive_routes(policy):
    kwargs = {"min_load_gap": 1} if policy == "bounded_consistent_hashing" else {}
    batched, single = Router(urls(4), policy, **kwargs), Router(urls(4), policy, **kwargs)
    try:
        hot = key_preferring(single, W[0])
        # A repeated key piles load on its worker until it spills; str, bytes and a key that
        # prefers another worker; and the keys of the previous batch are still held.
        keys = [hot, hot, hot.encode(), "other", hot, hot, "\u00e9t\u00e9", b"\xff\x00bin", hot]
        for _ in range(2):
            got = batched.route_many(keys)
            want = [single.route(key) for key in keys]
            assert described(got) == described(want)
            assert snapshot(batched) == snapshot(single)
        if policy == "bounded_consistent_hashing":
            assert any(lease.spilled for lease in got)
    finally:
        batched.close()
        single.close()


def test_route_many_returns_leases_in_key_order(make_router):
    router = make_router(4)
    keys = [key_preferring(router, url) for url in W[:4]] * 2
    leases = router.route_many(keys)
    assert all(isinstance(lease, Lease) for lease in leases)
    assert [lease.worker_url for lease in leases] == W[:4] * 2
    assert router.release_many(leases) == 8


def test_route_many_accepts_any_iterable_and_no_key(make_router):
    router = make_router(3)
    leases = router.route_many(key for key in ["a", None, "", b"b"])
    assert [lease.branch for lease in leases] == [
        "explicit_routing_key_hit",
        "random_fallback",
        "random_fallback",
        "explicit_routing_key_hit",
    ]
    assert router.route_many([]) == []
    assert router.release_many(leases) == 4


def test_release_many_counts_what_it_released(make_router):
    router = make_router(4)
    leases = router.route_many(["a", "b", "a", "c"])
    assert router.active_leases() == 4
    assert leases[0].release() is True
    # Released before, listed twice: counted once, nothing else happens.
    assert router.release_many(leases + [leases[1]]) == 3
    assert all(lease.released for lease in leases)
    assert router.active_leases() == 0
    assert set(router.loads().values()) == {0}
    assert all(w.active_keys == 0 for w in router.workers())
    assert router.leaked_leases() == 0
    assert router.release_many(leases) == 0
    assert [lease.release() for lease in leases] == [False] * 4
    assert router.release_many([]) == 0


def test_release_many_mixes_single_route_and_acquire(make_router):
    router = make_router(2)
    leases = [router.route("k"), router.acquire(W[1], "k"), router.route(headers={"X-SMG-Routing-Key": "k"})]
    assert router.release_many(iter(leases)) == 3
    assert router.active_leases() == 0


def test_released_batch_leases_are_not_leaks(make_router):
    router = make_router(2)
    router.release_many(router.route_many(["a"] * 10))
    gc.collect()
    assert router.leaked_leases() == 0
    router.route_many(["a"] * 3)  # dropped unreleased: the safety net releases them
    gc.collect()
    assert router.leaked_leases() == 3
    assert router.active_leases() == 0


def test_route_many_without_workers_holds_nothing(make_router):
    router = make_router(2)
    for url in W[:2]:
        router.set_healthy(url, False)
    with pytest.raises(NoWorkerAvailableError) as info:
        router.route_many(["a", "b", None])
    assert info.value.branch == "no_healthy_workers"
    assert router.active_leases() == 0
    assert router.branch_counts()["no_healthy_workers"] == 3  # counted as three routes


def test_route_many_bad_keys_route_nothing(make_router):
    router = make_router(2)
    with pytest.raises(TypeError):
        router.route_many(["a", 5])
    with pytest.raises(ValueError, match="routing_key"):
        router.route_many(["a", "\ud800"])
    for single in ("abc", b"abc"):
        with pytest.raises(TypeError, match="iterable of keys"):
            router.route_many(single)  # type: ignore[arg-type]
    assert router.active_leases() == 0
    assert sum(router.branch_counts().values()) == 0


def test_release_many_rejects_foreign_leases_and_non_leases(make_router):
    router, other = make_router(2), make_router(2)
    mine, theirs = router.route("a"), other.route("a")
    with pytest.raises(ValueError, match="this router"):
        router.release_many([mine, theirs])
    with pytest.raises(TypeError, match="Lease"):
        router.release_many([mine, "lease"])  # type: ignore[list-item]
    assert not mine.released and not theirs.released  # nothing was released
    assert router.release_many([mine]) == 1 and other.release_many([theirs]) == 1


def test_batches_on_a_closed_router(make_router):
    router = make_router(2)
    leases = router.route_many(["a", "b"])
    router.close()
    with pytest.raises(RouterClosedError):
        router.route_many(["a"])
    assert router.release_many(leases) == 0
    assert all(lease.released for lease in leases)


def test_batches_and_single_routes_from_two_threads():
    # Each batch routes one key 4 times (gap 2): 3 stay on its worker and the 4th spills, as
    # with successive routes, while another thread routes and releases keys that prefer the
    # other workers (at most one lease of theirs is held, so the minimum load stays 0).
    router = Router(urls(4), min_load_gap=2)
    hot = key_preferring(router, W[0])
    cold = [key_preferring(router, url, prefix="cold") for url in W[1:4]]
    errors = []

    def batches():
        for _ in range(300):
            leases = router.route_many([hot] * 4)
            spilled = [lease.spilled for lease in leases]
            if spilled != [False, False, False, True]:
                errors.append(spilled)
            router.release_many(leases)

    def singles():
        for i in range(3000):
            router.route(cold[i % 3]).release()

    threads = [threading.Thread(target=batches), threading.Thread(target=singles)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert router.active_leases() == 0
    router.close()


def test_release_many_and_release_claim_each_lease_once_at_any_thread_switch(make_router):
    # Regression (found by a review): release_many read the lease ids in one pass and cleared
    # them in another, so a release() by another thread in between was counted by both (the
    # library still released the lease once). A trace hook plays that other thread's release at
    # each line release_many runs, in turn.
    import sys

    from bounded_router import Router

    code = Router.release_many.__code__
    for switch_at in range(40):
        router = make_router(2)
        leases = router.route_many(["a", "b"])
        other = []
        lines = [0]

        def tracer(frame, event, arg):
            if frame.f_code is not code:
                return None

            def local(frame, event, arg):
                if event == "line":
                    if lines[0] == switch_at and not other:
                        other.append(leases[0].release())  # "the other thread"
                    lines[0] += 1
                return local

            return local

        sys.settrace(tracer)
        try:
            many = router.release_many(leases)
        finally:
            sys.settrace(None)
        claimed = many + sum(other)
        assert claimed == 2, "at line %d: release_many counted %d, release() said %r" % (switch_at, many, other)
        assert router.active_leases() == 0
        if not other:  # release_many ran fewer lines than switch_at
            break
    else:
        raise AssertionError("release_many ran more than 40 lines")
