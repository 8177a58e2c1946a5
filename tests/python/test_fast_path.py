"""White-box tests of the request path's shortcuts (see _native.thread_buffers and Router.route):
per-thread buffers, the decision cache, and the loader's two handles."""

from __future__ import annotations

import ctypes
import threading

from bounded_router import Router, _native
from support import W, key_preferring, urls


def test_release_survives_a_release_nested_in_its_call(make_router):
    # A finalizer run by a garbage collection while the release call is set up may release
    # another lease first: both must end up released.
    router = make_router(2)
    first, second = router.route("a"), router.route("b")
    lib = router._lib
    original = lib.fast_release_parts

    def nested(*args):
        lib.fast_release_parts = original
        assert second.release() is True
        return original(*args)

    lib.fast_release_parts = nested
    try:
        assert first.release() is True
    finally:
        lib.fast_release_parts = original
    assert router.active_leases() == 0
    assert (first.released, second.released) == (True, True)


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
    assert (W[1], W[1]) in router._decided.values()
    router.remove_worker(W[1])
    assert router._decided == {}  # started again with the membership
    lease = router.route(key)
    assert lease.worker_url != W[1] and lease.preferred_url == lease.worker_url
    router.add_worker(W[1])
    assert router.route(key).worker_url == W[1]  # a new worker id, looked up afresh
    lease.release()


def test_decision_cache_is_bounded(monkeypatch):
    from bounded_router import router as router_module

    monkeypatch.setattr(router_module, "_DECIDED_MAX", 2)
    router = Router(urls(4))
    for url in W[:4]:
        router.route(key_preferring(router, url)).release()
        assert len(router._decided) <= 2
    router.close()


def test_request_path_keeps_the_gil_and_the_rest_releases_it():
    lib = _native.library()
    keeps_gil = ctypes._FUNCFLAG_PYTHONAPI  # what PyDLL sets on its functions
    assert lib.fast_route_key._flags_ & keeps_gil and lib.fast_release_parts._flags_ & keeps_gil
    assert not lib.br_add_worker._flags_ & keeps_gil and not lib.br_workers_json._flags_ & keeps_gil


def test_starlette_headers_are_read_raw_with_the_same_result():
    from starlette.datastructures import Headers

    from bounded_router._headers import encode_headers

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
