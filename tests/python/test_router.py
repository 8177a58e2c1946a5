"""Router: membership, health, statistics, the other policies, closing, threads (contract: "Workers and membership", "Other policies", "Validation")."""

from __future__ import annotations

import collections
import gc
import threading

import pytest

from bounded_router import (
    Decision,
    NoWorkerAvailableError,
    PolicyType,
    Router,
    RouterClosedError,
    WorkerInfo,
)
from reference_model import normal_worker_url
from support import W, assert_uniform, key_preferring, unraisable_exceptions, urls

BRANCHES = [
    "no_healthy_workers",
    "target_worker_hit",
    "target_worker_miss",
    "explicit_routing_key_hit",
    "explicit_routing_key_spillover",
    "explicit_routing_key_no_eligible_candidate",
    "implicit_routing_key_hit",
    "random_fallback",
    "routing_key_hit",
    "random",
    "round_robin",
    "explicit_routing_key_remembered",
    "power_of_two",
    "least_load",
    "manual_occupied_hit",
    "manual_occupied_miss",
    "manual_vacant",
    "manual_no_routing_key",
    "cache_aware_prefix_hit",
    "cache_aware_key_hit",
    "cache_aware_balance",
    "cache_aware_no_match",
    "failover",
]


# -- membership --------------------------------------------------------------------------------


def test_membership_operations(make_router):
    router = make_router(2)
    assert list(router.loads()) == W[:2]
    router.add_worker(W[2])
    assert list(router.loads()) == W[:3]
    router.remove_worker(W[0])
    assert list(router.loads()) == W[1:3]
    router.set_workers([W[3], W[1]])
    assert list(router.loads()) == [W[3], W[1]]  # membership order is the given order
    router.set_workers([])
    assert router.loads() == {}
    with pytest.raises(NoWorkerAvailableError) as info:
        router.route("k")
    assert info.value.branch == "no_healthy_workers"
    router.add_worker(W[5])
    assert router.route("k").worker_url == W[5]


def test_membership_errors(make_router):
    router = make_router(2)
    with pytest.raises(ValueError, match="http://w0:8000"):
        router.add_worker(W[0])
    with pytest.raises(ValueError):
        router.add_worker("")
    with pytest.raises(KeyError, match="http://w9"):
        router.remove_worker("http://w9")
    with pytest.raises(KeyError):
        router.set_healthy("http://w9", False)
    with pytest.raises(ValueError):
        router.set_workers([W[0], W[0]])
    with pytest.raises(ValueError):
        router.set_workers([W[0], ""])
    for bad in (None, b"http://x", 5):
        with pytest.raises(TypeError):
            router.add_worker(bad)
        with pytest.raises(TypeError):
            router.remove_worker(bad)
        with pytest.raises(TypeError):
            router.set_healthy(bad, True)
    with pytest.raises(TypeError):
        router.set_workers("http://w0:8000")
    with pytest.raises(TypeError):
        router.set_workers([W[0], None])
    assert list(router.loads()) == W[:2]  # nothing changed


def test_urls_are_normalised(make_router):
    """contract: "Workers and membership": the same worker cannot be listed twice, and a member
    is found under any spelling of its URL; the expected forms are the model's (urllib.parse)."""
    router = make_router(1)
    for spelling in (W[0] + "/", W[0].upper(), "http://W0:8000//"):
        with pytest.raises(ValueError, match="already a member, as"):
            router.add_worker(spelling)
    router.add_worker("HTTP://Extra:80/")
    assert [w.url for w in router.workers()] == [W[0], normal_worker_url("HTTP://Extra:80/")] == [W[0], "http://extra"]
    router.set_healthy("http://extra:80", False)
    assert router.acquire(W[0] + "/").worker_url == W[0]
    router.remove_worker("http://EXTRA/")
    with pytest.raises(ValueError, match="are the same worker"):
        Router([W[0], W[0] + "/"])


@pytest.mark.parametrize(
    "bad, rule",
    [
        ("127.0.0.1:18101", "has no scheme: write it as http://127.0.0.1:18101"),
        ("http://127.0.0.1:18101,http://127.0.0.1:18102", "contains a comma"),
        ("ftp://w0:21", "the scheme must be http or https"),
        ("http://", "has no host"),
        ("http://user:pw@w0:8000", "must not contain user info"),
        ("http://w0:8000?x=1", "must not have a query"),
        ("http://w0:8000#top", "must not have a fragment"),
        ("http://w0:70000", "the port must be from 1 to 65535"),
    ],
)
def test_bad_urls_are_refused_naming_url_and_rule(make_router, bad, rule):
    router = make_router(1)
    for call in (lambda: Router([bad]), lambda: router.add_worker(bad), lambda: router.set_workers([bad])):
        with pytest.raises(ValueError) as refused:
            call()
        assert rule in str(refused.value) and bad in str(refused.value)
        with pytest.raises(ValueError):
            normal_worker_url(bad)  # the model refuses it too
    assert [w.url for w in router.workers()] == W[:1]  # nothing changed


def test_set_workers_keeps_state_of_workers_that_stay(make_router):
    router = make_router(3)
    held = [router.acquire(W[1]) for _ in range(2)]
    router.set_healthy(W[2], False)
    router.set_workers([W[2], W[1], W[4]])
    info = {w.url: w for w in router.workers()}
    assert info[W[1]] == WorkerInfo(W[1], True, 2, 0, 2, routed=2, prefill_load=2, prefill_requests=2)
    assert info[W[2]] == WorkerInfo(W[2], False, 0, 0, 0, condition="unhealthy_user")
    assert info[W[4]] == WorkerInfo(W[4], True, 0, 0, 0)
    for lease in held:
        lease.release()


def test_ring_depends_on_the_set_not_the_order():
    a = Router(urls(5), policy="consistent_hashing")
    b = Router(list(reversed(urls(5))), policy="consistent_hashing")
    c = Router([], policy="consistent_hashing")
    for url in [W[3], W[0], W[4], W[1], W[2]]:
        c.add_worker(url)
    d = Router(urls(6), policy="consistent_hashing")
    d.remove_worker(W[5])
    keys = ["session-%d" % i for i in range(300)]
    answers = [[r.select(k).worker_url for k in keys] for r in (a, b, c, d)]
    assert answers[0] == answers[1] == answers[2] == answers[3]
    assert len(set(answers[0])) == 5
    for r in (a, b, c, d):
        r.close()


def test_adding_a_worker_moves_few_keys(make_router):
    router = make_router(4, policy="consistent_hashing")
    keys = ["k%d" % i for i in range(1000)]
    before = [router.select(k).worker_url for k in keys]
    router.add_worker(W[4])
    after = [router.select(k).worker_url for k in keys]
    moved = [(b, a) for b, a in zip(before, after) if b != a]
    assert all(a == W[4] for _, a in moved)  # keys only move to the new worker
    assert 100 < len(moved) < 320  # about a fifth


# -- health --------------------------------------------------------------------------------------


def test_set_healthy(make_router):
    router = make_router(3)
    key = key_preferring(router, W[0])
    router.set_healthy(W[0], False)
    assert [w.healthy for w in router.workers()] == [False, True, True]
    assert router.select(key).worker_url != W[0]
    assert all(router.select("k%d" % i).worker_url != W[0] for i in range(100))
    assert all(router.route(headers={"X-SMG-Target-Worker": "0"}).worker_url == W[1] for _ in range(3))
    router.set_healthy(W[0], False)  # idempotent
    router.set_healthy(W[0], True)
    assert router.select(key).worker_url == W[0]


def test_unhealthy_workers_do_not_count_in_statistics(make_router):
    # w1 is unhealthy with a high load: it must not raise the mean that the bound uses.
    router = make_router(3)
    key = key_preferring(router, W[0])
    held = [router.acquire(W[1]) for _ in range(30)]
    held += [router.acquire(W[0]) for _ in range(3)]
    assert router.select(key).branch == "explicit_routing_key_hit"  # mean 11, no spill
    router.set_healthy(W[1], False)
    decision = router.select(key)  # available: w0 3, w2 0: mean 1.5, bound 2.25, gap 3 > 2
    assert (decision.worker_url, decision.branch) == (W[2], "explicit_routing_key_spillover")
    assert router.loads()[W[1]] == 30  # loads of unhealthy workers are still reported
    for lease in held:
        lease.release()


# -- statistics ----------------------------------------------------------------------------------


def test_workers_loads_and_branch_counts(make_router):
    router = make_router(3)
    assert router.workers() == [WorkerInfo(url, True, 0, 0, 0) for url in W[:3]]
    assert router.branch_counts() == dict.fromkeys(BRANCHES, 0)
    assert list(router.branch_counts()) == BRANCHES
    key = key_preferring(router, W[0])
    leases = [router.route(key), router.route(key), router.route()]
    leases.append(router.route(headers={"X-SMG-Target-Worker": "1"}))
    with pytest.raises(NoWorkerAvailableError):
        router.route(headers={"X-SMG-Target-Worker": "7"})
    router.select(key)  # select counts nothing
    counts = router.branch_counts()
    assert counts["explicit_routing_key_hit"] == 2
    assert counts["random_fallback"] == 1
    assert counts["target_worker_hit"] == 1
    assert counts["target_worker_miss"] == 1
    assert sum(counts.values()) == 5
    loads = router.loads()
    assert sum(loads.values()) == 4 and loads[W[0]] >= 2
    assert router.active_leases() == 4
    for lease in leases:
        lease.release()
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def routed_branch(router, *args, **kwargs):
    try:
        return router.route(*args, **kwargs).branch
    except NoWorkerAvailableError as e:
        return e.branch


def test_branch_codes_match_the_library_branch_names(make_router):
    # The binding maps branch codes to names with its own table; the statistics carry the
    # library's names. Every reachable branch must agree.
    bounded, strict = make_router(2), make_router(2, policy="consistent_hashing")
    rand, rr, empty = make_router(2, policy="random"), make_router(2, policy="round_robin"), make_router(0)
    key, other = key_preferring(bounded, W[0]), key_preferring(bounded, W[1])
    held = [bounded.acquire(W[0]) for _ in range(5)]
    cases = [
        (empty, (), {}, "no_healthy_workers"),
        (bounded, (), {"headers": {"X-SMG-Target-Worker": "1"}}, "target_worker_hit"),
        (bounded, (), {"headers": {"X-SMG-Target-Worker": "2"}}, "target_worker_miss"),
        (bounded, (other,), {}, "explicit_routing_key_hit"),
        (bounded, (key,), {}, "explicit_routing_key_spillover"),
        (bounded, (), {"headers": {"Cookie": key}}, "implicit_routing_key_hit"),
        (bounded, (), {}, "random_fallback"),
        (strict, ("k",), {}, "routing_key_hit"),
        (rand, ("k",), {}, "random"),
        (rr, ("k",), {}, "round_robin"),
    ]
    for router, args, kwargs, expected in cases:
        before = router.branch_counts()
        assert routed_branch(router, *args, **kwargs) == expected
        after = router.branch_counts()
        assert {name: after[name] - before[name] for name in BRANCHES if after[name] != before[name]} == {expected: 1}
    del held


def test_json_answers_larger_than_the_first_buffer(make_router):
    many = ["http://worker-%04d.example.internal:8000/some/long/path" % i for i in range(300)]
    with Router(many, virtual_nodes=4) as router:
        infos = router.workers()
        assert [w.url for w in infos] == many
        lease = router.route("k")
        assert lease.worker_url in many
        assert sum(router.loads().values()) == 1


# -- other policies ------------------------------------------------------------------------------


def test_round_robin(make_router):
    router = make_router(3, policy=PolicyType.RoundRobin)
    got = []
    for _ in range(6):
        lease = router.route("ignored-key")
        assert lease.branch == "round_robin"
        got.append(lease.worker_url)
    assert got == W[:3] * 2
    assert router.branch_counts()["round_robin"] == 6


def test_random(make_router):
    router = make_router(4, policy="random")
    counts = collections.Counter()
    for _ in range(4000):
        with router.route("same-key") as lease:
            assert lease.branch == "random" and lease.preferred_url == lease.worker_url
            counts[lease.worker_url] += 1
    assert_uniform(counts, W[:4])


@pytest.mark.parametrize("policy", ["random", "bounded_consistent_hashing", "consistent_hashing"])
def test_random_choices_are_uniform_over_the_available_workers_only(make_router, policy):
    # contract: "Inputs and precedence": without a key the choice is uniform over the available
    # (healthy) workers; an unhealthy worker is never chosen.
    router = make_router(4, policy=policy)
    router.set_healthy(W[2], False)
    counts = collections.Counter()
    for _ in range(3000):
        with router.route() as lease:
            counts[lease.worker_url] += 1
    assert W[2] not in counts
    assert_uniform(counts, [W[0], W[1], W[3]])


def test_consistent_hashing_never_spills(make_router):
    router = make_router(3, policy="consistent_hashing")
    key = key_preferring(router, W[0])
    leases = [router.route(key) for _ in range(20)]
    assert {(lease.worker_url, lease.branch) for lease in leases} == {(W[0], "routing_key_hit")}
    assert router.route(headers={"Cookie": key}).branch == "routing_key_hit"


# -- closing -------------------------------------------------------------------------------------

CLOSED_CALLS = {
    "route": lambda r: r.route("k"),
    "route_headers": lambda r: r.route(headers={"Cookie": "c"}),
    "select": lambda r: r.select("k"),
    "acquire": lambda r: r.acquire(W[0]),
    "add_worker": lambda r: r.add_worker(W[5]),
    "remove_worker": lambda r: r.remove_worker(W[0]),
    "set_workers": lambda r: r.set_workers([W[0]]),
    "set_healthy": lambda r: r.set_healthy(W[0], False),
    "loads": lambda r: r.loads(),
    "workers": lambda r: r.workers(),
    "branch_counts": lambda r: r.branch_counts(),
    "leaked_leases": lambda r: r.leaked_leases(),
    "active_leases": lambda r: r.active_leases(),
    "enter": lambda r: r.__enter__(),
}


@pytest.mark.parametrize("call", list(CLOSED_CALLS.values()), ids=list(CLOSED_CALLS))
def test_closed_router_raises(call):
    router = Router(urls(2))
    assert not router.closed
    router.close()
    assert router.closed
    with pytest.raises(RouterClosedError, match="closed"):
        call(router)
    router.close()  # double close is fine
    assert router.policy.to_dict()["type"] == "bounded_consistent_hashing"  # still readable


def test_native_handle_closed_under_the_python_flag():
    # The Go side rejects a closed handle too (BR_ERR_INVALID_HANDLE -> RouterClosedError).
    router = Router(urls(2))
    router._native.lib.br_router_free(router._native.handle)
    with pytest.raises(RouterClosedError):
        router.route("k")
    with pytest.raises(RouterClosedError):
        router.add_worker(W[4])
    with pytest.raises(RouterClosedError):
        router.loads()
    router.close()  # freeing an already freed handle is ignored


def test_context_manager():
    with Router(urls(2)) as router:
        assert router.route("k").release()
    assert router.closed
    with pytest.raises(RouterClosedError):
        router.route("k")


def test_garbage_collected_router_is_closed_quietly(capfd):
    router = Router(urls(2))
    handle, lib = router._native.handle, router._native.lib
    capfd.readouterr()
    with unraisable_exceptions() as raised:
        del router
        gc.collect()
    assert raised == [] and capfd.readouterr() == ("", "")
    assert lib.br_router_free(handle) == -1  # already freed by __del__


def test_repr(make_router):
    router = make_router(2)
    assert "BoundedConsistentHashingConfig" in repr(router)
    router.close()
    assert "closed" in repr(router)


def test_decision_dataclass():
    decision = Decision("a", "b", "explicit_routing_key_spillover")
    assert decision.spilled
    assert not Decision(None, None, "no_healthy_workers").spilled
    with pytest.raises(AttributeError):
        decision.branch = "x"  # type: ignore[misc]


# -- worker id -> URL map ----------------------------------------------------------------------


def test_route_with_a_stale_url_map_asks_the_lease(make_router):
    # White-box: an empty map is what a route sees when another thread changed the membership
    # but has not refreshed the map yet.
    router = make_router(3)
    key = key_preferring(router, W[1])
    router._native.urls = {}
    lease = router.route(key)
    assert (lease.worker_url, lease.preferred_url) == (W[1], W[1])
    router._native.urls = {}
    lease2 = router.route(headers={"X-SMG-Routing-Key": key})
    assert lease2.worker_url == W[1]
    router._native.urls = {}
    assert router.select(key).worker_url == W[1]
    lease.release()
    lease2.release()


def test_routing_during_membership_churn(make_router):
    # A fixed amount of work on each side, no timer: the churn thread makes ROUNDS membership
    # rounds; each routing thread routes until the churn is done and at least ROUTES times (at most
    # a bounded number), so both sides overlap whatever the machine's speed.
    ROUNDS, ROUTES, CAP = 100, 300, 10**6
    router = make_router(4, policy="consistent_hashing")
    stable = set(W[:2])
    churned = threading.Event()
    errors = []
    done = {"churn": 0}

    def churn():
        try:
            for _ in range(ROUNDS):
                router.set_workers(W[:2] + W[4:6])
                router.remove_worker(W[4])
                router.add_worker(W[6])
                router.set_workers(W[:4])
                done["churn"] += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            churned.set()

    def route(name):
        n = 0
        try:
            while n < CAP and (n < ROUTES or not churned.is_set()):
                with router.route("key-%s-%d" % (name, n)) as lease:
                    assert lease.worker_url in W[:7] and lease.preferred_url in W[:7]
                decision = router.select("abc")
                assert decision.worker_url in W[:7]
                n += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        done[name] = n

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=route, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert done["churn"] == ROUNDS
    assert all(ROUTES <= done[i] < CAP for i in range(3)), done
    assert router.active_leases() == 0 and router.leaked_leases() == 0
    assert router.loads() == {url: 0 for url in W[:4]}
    assert stable <= set(router.loads())
    assert router.branch_counts()["routing_key_hit"] == sum(done[i] for i in range(3))


def test_threads_route_in_parallel_with_their_own_results(make_router):
    router = make_router(4, policy="consistent_hashing")
    keys = {url: key_preferring(router, url) for url in W[:4]}
    errors = []
    per_thread = 3000

    def work(url):
        key = keys[url]
        try:
            for _ in range(per_thread):
                lease = router.route(key)
                if lease.worker_url != url:
                    errors.append((url, lease.worker_url))
                lease.release()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(url,)) for url in W[:4] for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert router.branch_counts()["routing_key_hit"] == per_thread * len(threads)
    assert router.active_leases() == 0 and set(router.loads().values()) == {0}
