"""The bad-input catalogue: every input a caller can get wrong, one test each. Each must be
answered with a clear error that names what was wrong (or, where docs/contract.md says the input is
simply absent, by ignoring it), and must leave no lease, load or crash behind."""

from __future__ import annotations

import argparse
import ctypes
import math

import pytest

from bounded_router import (
    BoundedConsistentHashingConfig,
    NoWorkerAvailableError,
    Router,
    RouterArgs,
    RouterClosedError,
    config_from_dict,
    policy_from_str,
)
from reference_model import ReferenceRouter
from support import W, c_api, key_preferring, urls

MiB = 1 << 20
ROUTING_KEY = "X-SMG-Routing-Key"


@pytest.fixture
def router():
    """A four-worker router that must be back to no leases and no loads at the end."""
    with Router(urls(4)) as r:
        yield r
        assert r.active_leases() == 0
        assert set(r.loads().values()) <= {0}
        assert r.leaked_leases() == 0


def same_choices(router, model, keys):
    for key in keys:
        assert router.select(key).worker_url == model.select(key).worker_url, key


# -- keys ------------------------------------------------------------------------------------------


def test_nul_bytes_in_keys_are_ordinary_key_bytes(router):
    # A key crosses the C API as pointer + length: nothing may stop at a NUL byte.
    keys = [b"\x00", b"\x00\x00", b"a\x00", b"a\x00b", b"\x00a", "k\x00ey", b"a" + b"\x00" * 100]
    same_choices(router, ReferenceRouter(urls(4)), keys + [b"a", "k"])
    # ... and a NUL is a distinct key: many keys differing only after a NUL spread out.
    assert len({router.select(b"prefix\x00%d" % i).worker_url for i in range(100)}) == 4
    lease = router.route(b"a\x00b")
    assert {w.url: w.active_keys for w in router.workers()}[lease.worker_url] == 1
    assert lease.release()
    # In a header, NUL is not visible ASCII: the value counts as absent.
    assert router.select(headers={ROUTING_KEY: "a\x00b"}).branch == "random_fallback"


def test_one_mib_keys(router):
    model = ReferenceRouter(urls(4))
    keys = [b"k" * MiB, "\u00e9" * (MiB // 2), bytes(range(256)) * (MiB // 256), b"x" * (MiB - 1) + b"y"]
    same_choices(router, model, keys)
    leases = [router.route(key) for key in keys]
    assert sum(w.active_keys for w in router.workers()) == 4
    # the same 1 MiB key counts once among a worker's active keys
    again = router.route(keys[0])
    assert again.worker_url == leases[0].worker_url
    assert {w.url: w.active_keys for w in router.workers()}[again.worker_url] >= 1
    assert sum(w.active_keys for w in router.workers()) == 4
    # as a header value too (visible ASCII)
    decision = router.select(headers={ROUTING_KEY: "k" * MiB})
    assert (decision.branch, decision.worker_url) == ("explicit_routing_key_hit", model.preferred(keys[0]))
    for lease in leases + [again]:
        assert lease.release()


def test_non_utf8_key_bytes_are_routed(router):
    model = ReferenceRouter(urls(4))
    same_choices(router, model, [b"\xff", b"\xfe\xff", b"\x80abc", b"\xc3\x28", b"\xed\xa0\x80"])
    with router.route(b"\xff\xfe") as lease:
        assert lease.branch == "explicit_routing_key_hit"


def test_str_key_that_is_not_unicode_text_names_the_routing_key(router):
    # A lone surrogate cannot be UTF-8 encoded: the error says it is the routing key.
    for call in (router.route, router.select):
        with pytest.raises(ValueError, match="routing_key"):
            call("abc\udc80")
        with pytest.raises(ValueError, match="routing_key"):
            call("\ud800", headers={})
    with pytest.raises(ValueError, match="routing_key"):
        router.acquire(W[0], "\udfff")


def test_non_ascii_header_values_count_as_absent(router):
    key = key_preferring(router, W[1])
    for value in ["\u043a\u043b\u044e\u0447", "caf\u00e9", "\u0661", b"\x80", b"\xff" * 10, "\udc80", "k\u200b"]:
        # routing key: absent, so the implicit key decides; target: absent, so the key decides
        decision = router.select(headers=[(ROUTING_KEY, value), ("Cookie", key)])
        assert (decision.branch, decision.worker_url) == ("implicit_routing_key_hit", W[1]), value
        decision = router.select(headers=[("X-SMG-Target-Worker", value), (ROUTING_KEY, key)])
        assert (decision.branch, decision.worker_url) == ("explicit_routing_key_hit", W[1]), value
        # the first present implicit header is invalid: no fall-through, a random worker
        assert router.select(headers=[("Authorization", value), ("Cookie", key)]).branch == "random_fallback"
        with router.route(headers={"X-Forwarded-For": value}) as lease:
            assert lease.branch == "random_fallback"


# -- worker URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("worker_urls", [[""], ["http://a", ""], ["http://a", "http://a"], ["x", "y", "x"]])
def test_empty_or_duplicate_urls_in_the_constructor(worker_urls):
    with pytest.raises(ValueError, match="worker URL"):
        Router(worker_urls)


def test_empty_or_duplicate_urls_in_membership_changes(router):
    lease = router.route("held")
    before = router.workers()
    with pytest.raises(ValueError, match="worker URL must not be empty"):
        router.add_worker("")
    with pytest.raises(ValueError, match="already a member"):
        router.add_worker(W[2])
    with pytest.raises(ValueError, match="listed twice"):
        router.set_workers([W[0], W[5], W[0]])
    with pytest.raises(ValueError, match="must not be empty"):
        router.set_workers([W[5], ""])
    # a rejected change changes nothing (no partial set_workers)
    assert router.workers() == before
    with pytest.raises(KeyError, match="not a worker"):
        router.remove_worker("")
    with pytest.raises(KeyError, match="not a worker"):
        router.set_healthy("", False)
    assert router.workers() == before
    assert lease.release()


def test_urls_are_kept_whole(router):
    # No truncation at non-ASCII text or a backslash; a NUL or a space is refused, not cut at.
    odd = ["http://w0:8000/caf%C3%A9", "http://\u00e9:8000", "http://w0:8000/a%5Cb"]
    for url in odd:
        router.add_worker(url)
    assert list(router.loads()) == urls(4) + odd
    with router.acquire(odd[0]) as lease:
        assert router.loads()[odd[0]] == 1 and router.loads()[W[0]] == 0
        assert lease.worker_url == odd[0]
    with pytest.raises(ValueError, match="already a member"):
        router.add_worker("http://w0:8000/caf\u00e9")  # a path is kept percent-encoded
    for url in odd:
        router.remove_worker(url)
    assert list(router.loads()) == urls(4)
    for bad in ("http://w0:8000\x00x", "http://w0:8000/\x00", " http://w0:8000", "http://w0:8000 "):
        with pytest.raises(ValueError, match="worker URL"):
            router.add_worker(bad)
    assert list(router.loads()) == urls(4)


def test_url_that_is_not_unicode_text_names_the_worker_url(router):
    bad = "http://w\udc80:8000"
    with pytest.raises(ValueError, match="worker URL"):
        Router([bad])
    for call in (router.add_worker, router.remove_worker, router.acquire, lambda u: router.set_healthy(u, True)):
        with pytest.raises(ValueError, match="worker URL"):
            call(bad)
    with pytest.raises(ValueError, match="worker URL"):
        router.set_workers([W[0], bad])
    assert list(router.loads()) == urls(4)


def test_ten_thousand_workers():
    many = ["http://10.%d.%d.%d:8000" % (i >> 16, (i >> 8) & 255, i & 255) for i in range(10000)]
    with Router(many, virtual_nodes=5) as router:
        model = ReferenceRouter(many, virtual_nodes=5)
        same_choices(router, model, ["key-%d" % i for i in range(300)])
        assert list(router.loads()) == many  # a JSON answer far larger than the first buffer
        leases = [router.route("key-%d" % i) for i in range(2000)]
        assert sum(router.loads().values()) == 2000
        router.add_worker("http://new:8000")
        router.set_healthy(many[0], False)
        router.remove_worker(many[1])
        router.set_workers(many[5000:])  # keeps the leases of the staying workers
        assert len(router.loads()) == 5000
        for lease in leases:
            assert lease.release()
        assert router.active_leases() == 0 and sum(router.loads().values()) == 0
    with Router(many) as router:  # and the default 150 virtual nodes: a ring of 1.5 million entries
        with router.route("k") as lease:
            assert lease.worker_url in many


# -- settings --------------------------------------------------------------------------------------

BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1, -0.5, True, False, "2", "nan", b"2", [2], 10**400]


def build_everywhere(setting, value):
    """Every way a caller sets a bounded policy setting; each must raise ValueError."""
    builders = {
        "Router": lambda: Router(urls(2), **{setting: value}),
        "RouterArgs": lambda: Router.from_args(RouterArgs(worker_urls=urls(2), **{setting: value})),
    }
    if setting != "virtual_nodes":
        builders["config"] = lambda: BoundedConsistentHashingConfig(**{setting: value})
        builders["config_from_dict"] = lambda: config_from_dict({"type": "bounded_consistent_hashing", setting: value})
    return builders


@pytest.mark.parametrize("value", BAD_NUMBERS + [0.0, 0.999, 1.0 - 1e-16], ids=repr)
def test_bad_max_load_skew_everywhere(value):
    for where, build in build_everywhere("max_load_skew", value).items():
        with pytest.raises(ValueError, match=r"max_load_skew must be a finite number >= 1\.0") as info:
            build()
        assert not isinstance(info.value, OverflowError), where


@pytest.mark.parametrize("value", BAD_NUMBERS + [2.0, 2**63, 2**64 + 1], ids=repr)
def test_bad_min_load_gap_everywhere(value):
    for where, build in build_everywhere("min_load_gap", value).items():
        with pytest.raises(ValueError, match=r"min_load_gap must be an integer") as info:
            build()
        if type(value) is int and value > 0:  # too large: the message says what the limit is
            assert "at most" in str(info.value), where


@pytest.mark.parametrize("value", BAD_NUMBERS + [0, 65537, 150.0, None], ids=repr)
def test_bad_virtual_nodes_everywhere(value):
    for where, build in build_everywhere("virtual_nodes", value).items():
        with pytest.raises(ValueError, match=r"virtual_nodes must be an integer"):
            build()


@pytest.mark.parametrize("flag, value", [("--max-load-skew", "nan"), ("--max-load-skew", "-inf"), ("--max-load-skew", "0.5"), ("--min-load-gap", "-1"), ("--virtual-nodes", "0")])
def test_bad_numbers_from_the_command_line(flag, value):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    args = RouterArgs.from_cli_args(parser.parse_args(["--worker-urls", "http://a", "%s=%s" % (flag, value)]))
    with pytest.raises(ValueError, match=flag[2:].replace("-", "_")):
        Router.from_args(args)


@pytest.mark.parametrize("flag, value", [("--min-load-gap", "1.5"), ("--virtual-nodes", "x"), ("--max-load-skew", "high")])
def test_unparsable_numbers_from_the_command_line(flag, value, capsys):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([flag, value])
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["", "bounded", "Random", "least_loaded", "cache-aware", "CacheAware", 5, None, object()])
def test_unknown_policy(policy):
    with pytest.raises(ValueError, match="polic"):
        Router(urls(2), policy=policy)
    with pytest.raises(KeyError, match="unknown policy"):
        policy_from_str(policy)
    with pytest.raises(ValueError, match="policy"):
        config_from_dict({"type": policy})
    with pytest.raises(ValueError, match="policy"):
        Router.from_args(RouterArgs(worker_urls=urls(2), policy=policy))


# -- argument types --------------------------------------------------------------------------------

WRONG_TYPES = {
    "route(int)": (lambda r: r.route(1), "routing_key"),
    "route(bytearray)": (lambda r: r.route(bytearray(b"k")), "routing_key"),
    "route(list)": (lambda r: r.route(["k"]), "routing_key"),
    "route(headers=int)": (lambda r: r.route(headers=5), "headers"),
    "route(headers=str)": (lambda r: r.route(headers="Cookie: a"), "headers"),
    "route(headers=bad pair)": (lambda r: r.route(headers=[("Cookie",)]), "header"),
    "route(headers=int value)": (lambda r: r.route(headers=[("Cookie", 5)]), "header value"),
    "select(float)": (lambda r: r.select(1.5), "routing_key"),
    "acquire(int)": (lambda r: r.acquire(5), "worker URL"),
    "acquire(bytes)": (lambda r: r.acquire(W[0].encode()), "worker URL"),
    "acquire(url, int key)": (lambda r: r.acquire(W[0], 5), "routing_key"),
    "add_worker(None)": (lambda r: r.add_worker(None), "worker URL"),
    "remove_worker(bytes)": (lambda r: r.remove_worker(W[0].encode()), "worker URL"),
    "set_workers(str)": (lambda r: r.set_workers(W[0]), "urls"),
    "set_workers(None)": (lambda r: r.set_workers(None), "urls"),
    "set_workers([None])": (lambda r: r.set_workers([W[0], None]), "worker URL"),
    "set_healthy(int url)": (lambda r: r.set_healthy(5, True), "worker URL"),
    "set_healthy(url, None)": (lambda r: r.set_healthy(W[0], None), "healthy"),
    "set_healthy(url, 'false')": (lambda r: r.set_healthy(W[0], "false"), "healthy"),
    "set_healthy(url, 2)": (lambda r: r.set_healthy(W[0], 2), "healthy"),
    "Router(None)": (lambda r: Router(None), "worker_urls"),
    "Router(str)": (lambda r: Router("http://a"), "worker_urls"),
    "Router([bytes])": (lambda r: Router([b"http://a"]), "worker URL"),
}


@pytest.mark.parametrize("name", sorted(WRONG_TYPES))
def test_wrong_argument_types(router, name):
    call, what = WRONG_TYPES[name]
    lease = router.route("held")
    before = router.workers()
    with pytest.raises(TypeError, match=what):
        call(router)
    assert router.workers() == before  # nothing changed, nothing counted
    assert router.active_leases() == 1
    assert lease.release()


# Status codes of the public header (capi/bounded_router.h).
INVALID_HANDLE, INVALID_ARGUMENT = -1, -2


def last_error(lib) -> str:
    return lib.br_last_error().decode()


# -- handles, closing, leases ----------------------------------------------------------------------


def c_calls(lib, handle):
    """Every export that takes a router handle, called with harmless arguments."""
    out = (ctypes.c_uint64 * 2)()
    buf = ctypes.create_string_buffer(256)
    return {
        "br_router_free": lambda: lib.br_router_free(handle),
        "br_add_worker": lambda: lib.br_add_worker(handle, b"http://x", 8),
        "br_remove_worker": lambda: lib.br_remove_worker(handle, b"http://x", 8),
        "br_set_workers": lambda: lib.br_set_workers(handle, b"[]", 2),
        "br_set_healthy": lambda: lib.br_set_healthy(handle, b"http://x", 8, 1),
        "br_route_key": lambda: lib.br_route_key(handle, b"k", 1, out),
        "br_route": lambda: lib.br_route(handle, b"k", 1, b"", 0, 1, out),
        "br_acquire": lambda: lib.br_acquire(handle, b"http://x", 8, b"", 0, 0, out),
        "br_release": lambda: lib.br_release(handle, 1 << 32),
        "br_release_abandoned": lambda: lib.br_release_abandoned(handle, 1 << 32),
        "br_lease_workers_json": lambda: lib.br_lease_workers_json(handle, 1 << 32, buf, 256),
        "br_workers_json": lambda: lib.br_workers_json(handle, buf, 256),
        "br_members_json": lambda: lib.br_members_json(handle, buf, 256),
        "br_stats_json": lambda: lib.br_stats_json(handle, buf, 256),
    }


@pytest.mark.parametrize("kind", ["zero", "never issued", "max", "closed"])
def test_invalid_or_closed_handle_at_the_c_level(kind):
    lib = c_api()
    live = Router(urls(2))
    lease = live.route("k")
    if kind == "closed":
        closed = Router(urls(2))
        handle = closed._native.handle
        closed.close()
    else:
        handle = {"zero": 0, "never issued": live._native.handle + 10**6, "max": 2**64 - 1}[kind]
    for name, call in c_calls(lib, handle).items():
        assert call() == INVALID_HANDLE, name
        assert "invalid router handle" in last_error(lib), name
    # the live router is untouched
    expected = ReferenceRouter(urls(2)).preferred(b"k")
    assert live.loads() == {url: int(url == expected) for url in urls(2)}
    assert lease.worker_url == expected
    assert lease.release()
    live.close()


def test_null_out_pointers_and_truncated_header_blocks_at_the_c_level(router):
    lib = c_api()
    h = router._native.handle
    assert lib.br_route_key(h, b"k", 1, None) == INVALID_ARGUMENT
    assert "out must not be NULL" in last_error(lib)
    assert lib.br_route(h, b"k", 1, b"", 0, 1, None) == INVALID_ARGUMENT
    assert lib.br_acquire(h, W[0].encode(), len(W[0]), b"", 0, 0, None) == INVALID_ARGUMENT
    out = (ctypes.c_uint64 * 2)()
    for block in [b"\x01", b"\x05\x00\x00\x00abc", b"\x01\x00\x00\x00a\x09\x00\x00\x00short", b"\xff\xff\xff\xff"]:
        assert lib.br_route(h, None, 0, block, len(block), 1, out) == INVALID_ARGUMENT
        assert "block is truncated" in last_error(lib)
    # a NULL key with a length is an invalid argument, a NULL buffer only asks for the length
    assert lib.br_route_key(h, None, 5, out) == INVALID_ARGUMENT
    assert "key is NULL but key_len is 5" in last_error(lib)
    assert lib.br_workers_json(h, None, 0) > 0
    assert lib.br_members_json(h, None, 0) > 0
    # a URL that is not UTF-8 is refused with its reason
    assert lib.br_add_worker(h, b"http://\xff", 8) == INVALID_ARGUMENT
    assert "not valid UTF-8" in last_error(lib)
    assert list(router.loads()) == urls(4)


def test_double_close():
    router = Router(urls(2))
    lease = router.route("k")
    router.close()
    router.close()  # idempotent
    assert router.closed
    with pytest.raises(RouterClosedError, match="closed"):
        router.route("k")
    assert lease.release() is False  # the router is gone, so is its lease
    lib = c_api()
    live = Router(urls(1))
    handle = live._native.handle
    assert lib.br_router_free(handle) == 0
    assert lib.br_router_free(handle) == INVALID_HANDLE  # the C level says so
    assert "invalid router handle" in last_error(lib)
    live.close()  # the Python object tolerates a handle freed underneath it
    with Router(urls(1)) as r:
        r.close()  # close inside with: the exit closes again, quietly


def test_releasing_a_lease_of_another_router_releases_nothing():
    # Lease IDs are unique in the process: the ID of router a's lease means nothing to router b.
    lib = c_api()
    with Router(urls(2)) as a, Router(urls(2)) as b:
        for _ in range(3):
            la, lb = a.route("k"), b.route("k")
            assert lib.br_release(b._native.handle, la._id) == 0
            assert lib.br_release_abandoned(a._native.handle, lb._id) == 0
            assert b.loads()[lb.worker_url] == 1 and a.loads()[la.worker_url] == 1
            assert a.leaked_leases() == 0
            # the Python batch call refuses a foreign lease outright, releasing nothing
            with pytest.raises(ValueError, match="this router"):
                b.release_many([lb, la])
            assert a.active_leases() == b.active_leases() == 1
            assert la.release() and lb.release()
        assert a.active_leases() == b.active_leases() == 0


def test_removing_a_worker_with_active_leases(router):
    leases = [router.acquire(W[1], "k%d" % i) for i in range(3)] + [router.route("x")]
    router.remove_worker(W[1])
    assert W[1] not in router.loads()
    assert router.active_leases() == 4  # still held, on the removed worker
    router.add_worker(W[1])  # a new worker under the same URL
    assert router.loads()[W[1]] == 0
    other = router.acquire(W[1])
    for lease in leases[:3]:
        assert lease.worker_url == W[1]
        assert lease.release() is True
        assert lease.release() is False
    assert router.loads()[W[1]] == 1  # the new worker's lease is untouched
    assert {w.url: w.active_keys for w in router.workers()}[W[1]] == 0
    assert other.release() and leases[3].release()


def test_set_workers_empty_then_route(router):
    lease = router.route("k")
    router.set_workers([])
    assert router.loads() == {}
    for call in (lambda: router.route("k"), lambda: router.route(), lambda: router.route(headers={"X-SMG-Target-Worker": "0"})):
        with pytest.raises(NoWorkerAvailableError, match="no healthy workers") as info:
            call()
        assert info.value.branch == "no_healthy_workers"
    decision = router.select("k")
    assert (decision.worker_url, decision.preferred_url, decision.branch) == (None, None, "no_healthy_workers")
    with pytest.raises(KeyError, match="not a worker"):
        router.acquire(W[0])
    assert router.active_leases() == 1
    assert lease.release()
    router.set_workers(urls(2))
    with router.route("k") as again:
        assert again.worker_url in urls(2)
    assert router.branch_counts()["no_healthy_workers"] == 3
