"""White-box tests of the request path's shortcuts (the release path of _native_router, the
decision cache, _native.thread_buffers and the exports that keep the GIL)."""

from __future__ import annotations

import ctypes
import gc
import threading
from array import array

import pytest

from bounded_router import Lease, Router, _native
from reference_model import ReferenceRouter
from support import W, hold, key_preferring, urls


def count_calls(monkeypatch, router):
    """Record each call of the router's request-path functions, by name, in the list returned."""
    calls = []
    native = router._native
    targets = [(native, "route_key"), (native, "route_headers"), (native, "route_request"), (native.lib, "br_release_many")]
    for owner, name in targets:
        original = getattr(owner, name)

        def counted(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.fixture
def w0_at_3(make_router):
    """(router, key, held): w0 holds the 3 leases `held` and the others none, so `key`, a key of
    w0, spills (contract: "Reference vectors", gap 3 > 2); with one of them released it stays (gap 2 is not > 2)."""
    router = make_router(4)
    key = key_preferring(router, W[0])
    return router, key, hold(router, [3, 0, 0, 0], W[:4])


def test_a_release_is_handed_over_by_the_next_route(w0_at_3, monkeypatch):
    # The release makes no call of its own: the next route carries it.
    router, key, held = w0_at_3
    assert router.select(key).branch == "explicit_routing_key_spillover"
    calls = count_calls(monkeypatch, router)
    lease_id = held[0]._id
    assert held[0].release() is True
    assert calls == [] and router._native.released == [lease_id]
    lease = router.route(key)
    assert calls == ["route_key"] and router._native.released == []
    assert lease.branch == "explicit_routing_key_hit"
    assert router.loads()[W[0]] == 3
    assert held[0].release() is False and router._native.released == []


def test_a_release_is_handed_over_by_a_route_with_headers(w0_at_3, monkeypatch):
    router, key, held = w0_at_3
    calls = count_calls(monkeypatch, router)
    held[1].release()
    lease = router.route(headers={"X-SMG-Routing-Key": key})
    assert calls == ["route_headers"] and router._native.released == []
    assert lease.branch == "explicit_routing_key_hit"


@pytest.mark.parametrize("options", [{"weight": 2}, {"prefix_blocks": [7, 2**64 - 1]}, {"weight": 1, "prefix_blocks": array("Q", [9])}])
def test_a_release_is_handed_over_by_a_route_with_a_weight_or_prefix_blocks(w0_at_3, monkeypatch, options):
    # A weight or prefix blocks take the same path as a key: one call, which carries the release
    # and whose decision fills the same cache.
    router, key, held = w0_at_3
    calls = count_calls(monkeypatch, router)
    held[2].release()
    lease = router.route(key, **options)
    assert calls == ["route_request"] and router._native.released == []
    assert lease.branch == "explicit_routing_key_hit" and lease.worker_url == W[0]
    assert router.loads()[W[0]] == 2 + options.get("weight", 1)
    assert list(router._native.decided.values()) == [(W[0], W[0], "explicit_routing_key_hit")]  # cached as a key's


def test_several_releases_are_handed_over_in_one_call(w0_at_3, monkeypatch):
    router, key, held = w0_at_3
    calls = count_calls(monkeypatch, router)
    for lease in held:
        lease.release()
    assert len(router._native.released) == 3
    lease = router.route(key)
    assert lease.worker_url == W[0]
    assert calls == ["br_release_many", "route_key"] and router._native.released == []
    assert router.loads() == {W[0]: 1, W[1]: 0, W[2]: 0, W[3]: 0}


@pytest.mark.parametrize(
    "observe, before, after",
    [
        (lambda router, key: router.loads()[W[0]], 3, 2),
        (lambda router, key: next(w.load for w in router.workers() if w.url == W[0]), 3, 2),
        (lambda router, key: router.active_leases(), 3, 2),
        (lambda router, key: router.select(key).branch, "explicit_routing_key_spillover", "explicit_routing_key_hit"),
        (lambda router, key: router.route_many([key])[0].branch, "explicit_routing_key_spillover", "explicit_routing_key_hit"),
        (lambda router, key: 'bounded_router_worker_load{worker="%s"} 3' % W[0] in router.metrics_text(), True, False),
    ],
    ids=["loads", "workers", "active_leases", "select", "route_many", "metrics_text"],
)
def test_every_observer_sees_releases_made_before_it(w0_at_3, observe, before, after):
    # before and after from contract: "Reference vectors" (w0 at 3 spills, at 2 stays)
    router, key, held = w0_at_3
    assert observe(router, key) == before
    held[0].release()
    assert router._native.released
    assert observe(router, key) == after
    assert router._native.released == []


def test_a_failed_route_leaves_the_release_for_the_next_call(make_router, monkeypatch):
    # A call that fails may not have released the lease it carried: it stays to be handed
    # over again (the library skips it if it was released after all).
    router = make_router(2)
    held = router.route("a")
    held.release()
    out = _native.thread_buffers()[0]

    def failing(*args):
        out[0] = 0  # as the library does first, so that no failed call leaves a lease there
        return -5  # BR_ERR_INTERNAL

    monkeypatch.setattr(router._native, "route_key", failing)
    with pytest.raises(RuntimeError):
        router.route("b")
    assert len(router._native.released) == 1
    monkeypatch.undo()
    lease = router.route("b")
    assert router._native.released == [] and router.active_leases() == 1
    lease.release()


def test_a_burst_of_releases_is_handed_over_by_the_releasing_thread(make_router, monkeypatch):
    from bounded_router._native_router import HAND_OVER_AT as _HAND_OVER_AT

    router = make_router(2)
    leases = [router.route("k%d" % i) for i in range(_HAND_OVER_AT + 1)]
    calls = count_calls(monkeypatch, router)
    for lease in leases[:-1]:
        lease.release()
    assert calls == [] and len(router._native.released) == _HAND_OVER_AT
    leases[-1].release()  # one too many waiting: this release hands them all over
    assert calls == ["br_release_many"] and router._native.released == []
    monkeypatch.undo()
    assert router.active_leases() == 0


def test_closing_drops_the_releases_not_handed_over(make_router):
    router = make_router(2)
    lease = router.route("a")
    lease.release()
    router.close()
    assert router._native.released == []
    assert lease.released


def test_each_thread_has_its_own_buffers():
    seen = []

    def record():
        seen.append(_native.thread_buffers())

    threads = [threading.Thread(target=record) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record()
    assert len({id(buffers[0]) for buffers in seen}) == 4
    assert _native.thread_buffers() is seen[-1]


def test_decision_cache_follows_membership(make_router):
    router = make_router(3)
    key = key_preferring(router, W[1])
    router.route(key).release()
    assert (W[1], W[1], "explicit_routing_key_hit") in router._native.decided.values()
    router.remove_worker(W[1])
    assert router._native.decided == {}  # started again with the membership
    lease = router.route(key)
    expected = ReferenceRouter([W[0], W[2]]).preferred(key.encode())
    assert (lease.worker_url, lease.preferred_url) == (expected, expected)
    router.add_worker(W[1])
    assert router.route(key).worker_url == W[1]  # a new worker id, looked up afresh
    lease.release()


def test_decisions_whose_worker_ids_do_not_fit_are_read_apart_and_not_cached(make_router):
    # After 2^28 joins the library cannot pack the ids into the decision: it flags it and the
    # binding reads the ids from out[1]. Such a decision must never enter the cache, since all
    # of them look alike (the branch and the flag).
    router = make_router(3)
    lease = router.route(key_preferring(router, W[2]))
    ids = _native.thread_buffers()[0][1]  # the route's worker ids, as the library wrote them
    flagged = 1 << 62 | 3  # BR_DECISION_IDS_DONT_FIT  # explicit_routing_key_hit, ids apart
    router._native.decided.clear()
    assert router._native.decision_urls(flagged, ids, lease._id) == (W[2], W[2], "explicit_routing_key_hit")
    assert router._native.decided == {}
    lease.release()


def test_decision_cache_is_bounded(monkeypatch):
    from bounded_router import _native_router

    monkeypatch.setattr(_native_router, "_DECIDED_MAX", 2)
    router = Router(urls(4))
    for url in W[:4]:
        router.route(key_preferring(router, url)).release()
        assert len(router._native.decided) <= 2
    router.close()


def test_request_path_keeps_the_gil_and_the_rest_releases_it():
    lib = _native.library()
    keeps_gil = ctypes._FUNCFLAG_PYTHONAPI  # what PyDLL sets on its functions
    request_path = [name for name, export in _native.EXPORTS.items() if export.holds_gil]
    assert sorted(request_path) == [
        "br_first_token", "br_release_many", "br_release_then_route", "br_release_then_route_key", "br_release_then_route_request", "br_route_keys",
        "br_route_request", "br_route_requests", "br_route_weighted_keys",
    ]  # fmt: skip
    assert all(getattr(lib, name)._flags_ & keeps_gil for name in request_path)
    assert not lib.br_add_worker._flags_ & keeps_gil and not lib.br_workers_json._flags_ & keeps_gil


def test_starlette_headers_are_read_raw_with_the_same_result():
    from starlette.datastructures import Headers

    from bounded_router._encoding import encode_headers

    raw = [
        (b"host", b"h"),
        (b"accept", b"*/*"),  # the length of "cookie", but not a routing header
        (b"x-smg-routing-key", b"k1"),
        (b"x-smg-routing-key", b"k2"),  # a repeated header: the first one wins in the library
        (b"cookie", b"c=\xe9"),  # latin-1 bytes stay as they are
        (b"authorization", b""),
    ]
    headers = Headers(raw=raw)
    assert encode_headers(headers) == encode_headers(list(headers.items())) == encode_headers(raw)
    assert encode_headers(Headers(raw=[(b"host", b"h")])) == b""


def test_only_unreleased_leases_carry_the_safety_net(make_router):
    import gc

    from bounded_router import Lease

    router = make_router(2)
    leases = [router.route("a"), router.acquire(W[0]), *router.route_many(["b", "c"])]
    assert all(isinstance(lease, Lease) and type(lease) is not Lease for lease in leases)
    leases[0].release()
    router.release_many(leases[1:3])
    assert [type(lease) is Lease for lease in leases] == [True, True, True, False]
    assert all(isinstance(lease, Lease) for lease in leases)
    del leases[:3]
    gc.collect()
    assert router.leaked_leases() == 0 and router.active_leases() == 1
    leases.clear()  # the last one was never released: the safety net releases it
    gc.collect()
    assert router.leaked_leases() == 1 and router.active_leases() == 0


def test_first_token_calls_the_library_once_per_lease(make_router, monkeypatch):
    # Idempotence is checked in Python: after the mark (or the release) no call is made, and
    # the answers are the contract's ("Prefill load": True once, then False).
    router = make_router(2)
    native = router._native
    calls = []
    original = native.lib.br_first_token
    monkeypatch.setattr(native.lib, "br_first_token", lambda *args: calls.append(args) or original(*args))
    lease, other = router.route("a"), router.route("b")
    assert lease.first_token() is True and len(calls) == 1
    assert lease.first_token() is False and lease.first_token() is False and len(calls) == 1
    assert [w.prefill_requests for w in router.workers()] == [1 if other.worker_url == url else 0 for url in urls(2)]
    lease.release()
    assert type(lease) is Lease  # released: no safety net left, started or not
    assert lease.first_token() is False and len(calls) == 1
    other.release()
    assert other.first_token() is False and len(calls) == 1


def test_a_started_lease_dropped_without_release_is_still_caught(make_router):
    router = make_router(2)
    lease = router.route("a")
    lease.first_token()
    del lease
    gc.collect()
    assert router.leaked_leases() == 1 and router.active_leases() == 0
