"""contract: "Inputs and precedence": routing inputs from HTTP headers, through route(headers=...) and select(headers=...)."""

from __future__ import annotations

import email.message
import wsgiref.headers
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded_router import NoWorkerAvailableError, Router
from reference_model import ReferenceRouter
from support import W, assert_uniform, key_preferring, urls

TARGET = "X-SMG-Target-Worker"
ROUTING_KEY = "X-SMG-Routing-Key"
IMPLICIT = ["Authorization", "X-Forwarded-For", "Cookie"]


@pytest.fixture
def router(make_router):
    return make_router(4)


@pytest.fixture
def keys(router):
    """Keys preferring w0 and w1 (the same hash for explicit and implicit keys)."""
    return key_preferring(router, W[0]), key_preferring(router, W[1])


@pytest.mark.parametrize("value, index", [("0", 0), ("1", 1), ("+1", 1), ("3", 3), ("+0003", 3)])
def test_target_index_hit(router, value, index):
    lease = router.route(headers={TARGET: value})
    assert (lease.worker_url, lease.preferred_url, lease.branch) == (W[index], W[index], "target_worker_hit")
    lease.release()


@pytest.mark.parametrize("value", [" 1", "1 ", "-1", "++1", "1a", "0x1", "4", "99", "99999999999999999999999999"])
def test_target_index_miss_is_strict(router, keys, value):
    headers = {TARGET: value, ROUTING_KEY: keys[0]}  # no fallback to the routing key
    with pytest.raises(NoWorkerAvailableError) as info:
        router.route(headers=headers)
    assert info.value.branch == "target_worker_miss"
    decision = router.select(headers=headers)
    assert (decision.worker_url, decision.preferred_url, decision.branch) == (None, None, "target_worker_miss")
    assert router.branch_counts()["target_worker_miss"] == 1
    assert router.active_leases() == 0


@pytest.mark.parametrize("value", ["", "\x01", "1\n"])
def test_invalid_target_counts_as_absent(router, keys, value):
    lease = router.route(headers={TARGET: value, ROUTING_KEY: keys[1]})
    assert (lease.worker_url, lease.branch) == (W[1], "explicit_routing_key_hit")


def test_target_indexes_available_workers_in_membership_order(router):
    router.set_healthy(W[0], False)
    assert router.select(headers={TARGET: "0"}).worker_url == W[1]
    assert router.select(headers={TARGET: "2"}).worker_url == W[3]
    assert router.select(headers={TARGET: "3"}).branch == "target_worker_miss"


def test_target_beats_keys(router, keys):
    lease = router.route(keys[0], headers={TARGET: "2", "Authorization": keys[0]})
    assert (lease.worker_url, lease.branch) == (W[2], "target_worker_hit")


def test_routing_key_header(router, keys):
    lease = router.route(headers={ROUTING_KEY: keys[1]})
    assert (lease.worker_url, lease.branch) == (W[1], "explicit_routing_key_hit")
    # the header key is counted as the lease's explicit key
    assert {w.url: w.active_keys for w in router.workers()}[W[1]] == 1


def test_routing_key_beats_implicit_key(router, keys):
    lease = router.route(headers={"Authorization": keys[0], ROUTING_KEY: keys[1]})
    assert (lease.worker_url, lease.branch) == (W[1], "explicit_routing_key_hit")


def test_explicit_argument_overrides_routing_key_header(router, keys):
    lease = router.route(keys[0], headers={ROUTING_KEY: keys[1]})
    assert (lease.worker_url, lease.branch) == (W[0], "explicit_routing_key_hit")
    assert router.select(keys[0].encode(), headers={ROUTING_KEY: keys[1]}).worker_url == W[0]
    # an empty argument is absent and does not override
    assert router.select("", headers={ROUTING_KEY: keys[1]}).worker_url == W[1]


@pytest.mark.parametrize("name", IMPLICIT)
def test_implicit_key_from_each_header(router, keys, name):
    for key, worker in zip(keys, W[:2]):
        lease = router.route(headers={name: key})
        assert (lease.worker_url, lease.preferred_url, lease.branch) == (worker, worker, "implicit_routing_key_hit")
        # an implicit key is not an explicit key: no active key is counted
        assert sum(w.active_keys for w in router.workers()) == 0
        lease.release()


@pytest.mark.parametrize("first", range(3))
@pytest.mark.parametrize("value", ["", "bad\x7fvalue", "caf\u00e9"])
def test_implicit_headers_do_not_fall_through(router, keys, first, value):
    headers = [(IMPLICIT[first], value)] + [(name, keys[0]) for name in IMPLICIT[first + 1 :]]
    lease = router.route(headers=headers)
    assert lease.branch == "random_fallback"


def test_implicit_headers_in_order(router, keys):
    headers = [("Cookie", keys[0]), ("X-Forwarded-For", keys[1])]
    assert router.select(headers=headers).worker_url == W[1]
    headers.append(("Authorization", keys[0]))
    assert router.select(headers=headers).worker_url == W[0]


def test_empty_routing_key_header_falls_through_to_implicit(router, keys):
    decision = router.select(headers={ROUTING_KEY: "", "Cookie": keys[1]})
    assert (decision.worker_url, decision.branch) == (W[1], "implicit_routing_key_hit")


@pytest.mark.parametrize(
    "name", ["x-smg-routing-key", "X-SMG-ROUTING-KEY", "x-Smg-Routing-kEY", b"X-Smg-Routing-Key"]
)
def test_names_are_case_insensitive(router, keys, name):
    assert router.select(headers=[(name, keys[1])]).branch == "explicit_routing_key_hit"
    assert router.select(headers=[(name, keys[1])]).worker_url == W[1]


@pytest.mark.parametrize("name", ["AUTHORIZATION", "x-forwarded-for", "cOOKIE"])
def test_implicit_names_are_case_insensitive(router, keys, name):
    assert router.select(headers=[(name, keys[1])]).branch == "implicit_routing_key_hit"


def test_non_ascii_lookalike_names_do_not_match(router, keys):
    # KELVIN SIGN lower-cases to "k" in Unicode; HTTP names compare ASCII case only.
    decision = router.select(headers=[("X-SMG-Routing-\u212aey", keys[1])])
    assert decision.branch == "random_fallback"


def test_repeated_names_first_wins(router, keys):
    headers = [(ROUTING_KEY, keys[0]), (ROUTING_KEY.lower(), keys[1])]
    assert router.select(headers=headers).worker_url == W[0]
    headers = [("authorization", keys[1]), ("Authorization", keys[0])]
    assert router.select(headers=headers).worker_url == W[1]
    # the first occurrence decides even when it is invalid
    headers = [(ROUTING_KEY, ""), (ROUTING_KEY, keys[0]), ("Cookie", keys[1])]
    assert router.select(headers=headers).worker_url == W[1]


def test_random_fallback(router):
    counts = {url: 0 for url in urls(4)}
    for _ in range(4000):
        lease = router.route(headers={"Content-Type": "application/json", "X-Other": "1"})
        assert lease.branch == "random_fallback"
        counts[lease.worker_url] += 1
        lease.release()
    assert_uniform(counts, urls(4))
    assert router.branch_counts()["random_fallback"] == 4000
    assert router.route(headers={}).branch == "random_fallback"
    assert router.route(headers=[]).branch == "random_fallback"


def test_values_are_not_trimmed(router, keys):
    model = ReferenceRouter(urls(4))
    spaced = next(" key-%d" % i for i in range(1000) if model.preferred(b" key-%d" % i) != model.preferred(b"key-%d" % i))
    decision = router.select(headers={ROUTING_KEY: spaced})
    assert (decision.worker_url, decision.branch) == (model.preferred(spaced.encode()), "explicit_routing_key_hit")
    assert decision.worker_url != model.preferred(spaced.strip().encode())  # a trimmed key would go elsewhere
    # a tab is a valid header value byte
    assert router.select(headers={ROUTING_KEY: "a\tb"}).branch == "explicit_routing_key_hit"


class MultiDict(Mapping):
    """Like aiohttp's CIMultiDict / Starlette's Headers: a Mapping whose items() keeps duplicates."""

    def __init__(self, pairs):
        self._pairs = list(pairs)

    def __getitem__(self, name):
        for key, value in self._pairs:
            if key.lower() == name.lower():
                return value
        raise KeyError(name)

    def __iter__(self):
        return (key for key, _ in self._pairs)

    def __len__(self):
        return len(self._pairs)

    def items(self):
        return list(self._pairs)


def test_header_containers(router, keys):
    pairs = [("Host", "x"), (ROUTING_KEY, keys[1]), (ROUTING_KEY, keys[0])]
    message = email.message.Message()
    for name, value in pairs:
        message[name] = value
    containers = [
        MultiDict(pairs),
        message,
        wsgiref.headers.Headers(list(pairs)),
        pairs,
        tuple(pairs),
        iter(pairs),
        [[name.encode("latin-1"), value.encode("latin-1")] for name, value in pairs],  # ASGI scope
        [(name.encode(), bytearray(value.encode())) for name, value in pairs],
    ]
    for headers in containers:
        decision = router.select(headers=headers)
        assert (decision.worker_url, decision.branch) == (W[1], "explicit_routing_key_hit"), headers


def test_latin1_header_values(router):
    # str values are encoded latin-1 as HTTP does: U+00E9 is the byte 0xE9, which is invalid.
    assert router.select(headers={ROUTING_KEY: "caf\u00e9"}).branch == "random_fallback"
    assert router.select(headers={ROUTING_KEY: b"caf\xe9"}).branch == "random_fallback"
    assert router.select(headers={ROUTING_KEY: "\u20ac"}).branch == "random_fallback"


@pytest.mark.parametrize(
    "headers", ["X-SMG-Routing-Key: a", b"raw", 42, [("only-name",)], [("a", "b", "c")], [(1, "v")], [("Cookie", 5)]]
)
def test_bad_header_types(router, headers):
    with pytest.raises(TypeError):
        router.route(headers=headers)
    with pytest.raises(TypeError):
        router.select(headers=headers)
    assert router.active_leases() == 0


def test_irrelevant_headers_are_not_inspected(router):
    # values of headers that carry no routing input are never converted
    assert router.select(headers=[("X-Count", 5)]).branch == "random_fallback"


# -- differential test against the reference model (tests/reference_model.py) ------------------

NAMES = [TARGET, ROUTING_KEY] + IMPLICIT + ["Content-Type", "X-Routing-Key"]
VALUES = ["", "0", "+1", " 1", "-1", "3", "4", "18446744073709551616", "k1", "k2", "k 3", "a\tb", "bad\x01", "\u00e9"]


@settings(max_examples=300, deadline=None)
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(NAMES).flatmap(lambda n: st.sampled_from([n, n.lower(), n.upper()])),
            st.sampled_from(VALUES),
        ),
        max_size=6,
    ),
    unhealthy=st.sets(st.sampled_from(W[:4]), max_size=2),
)
def test_precedence_matches_the_model(headers, unhealthy):
    with Router(urls(4)) as router:
        check_against_model(router, headers, unhealthy)


def check_against_model(router, headers, unhealthy):
    model = ReferenceRouter(urls(4))
    for url in unhealthy:
        router.set_healthy(url, False)
        model.set_healthy(url, False)
    decision = router.select(headers=headers)
    random_choice = decision.worker_url if decision.branch == "random_fallback" else None
    expected = model.select(headers=headers, random_choice=random_choice)
    assert (decision.worker_url, decision.preferred_url, decision.branch) == (
        expected.worker_url,
        expected.preferred_url,
        expected.branch,
    )


# -- the cache of header names (bounded_router._encoding._names) ---------------------------------


def test_names_of_every_kind_route_alike_with_and_without_the_cache(router, keys):
    from bounded_router import _encoding as _headers

    names = [ROUTING_KEY, ROUTING_KEY.lower(), ROUTING_KEY.encode(), bytearray(ROUTING_KEY.encode()), memoryview(b"x-smg-routing-key")]
    for _ in range(2):  # the second time from the cache (bytearray and memoryview are never cached)
        for name in names:
            decision = router.select(headers=[(name, keys[1])])
            assert (decision.worker_url, decision.branch) == (W[1], "explicit_routing_key_hit"), name
    assert all(type(name) in (str, bytes) for name in _headers._names)
    for _ in range(2):  # a name of a wrong type is never remembered as harmless
        with pytest.raises(TypeError):
            router.select(headers=[(1, "v")])


def test_the_name_cache_is_bounded(router, keys, monkeypatch):
    from bounded_router import _encoding as _headers

    monkeypatch.setattr(_headers, "_NAMES_MAX", 8)
    monkeypatch.setattr(_headers, "_names", {})
    for i in range(50):  # clients choose header names: they must not grow the cache without end
        decision = router.select(headers=[("X-Client-%d" % i, "v"), (ROUTING_KEY, keys[0])])
        assert decision.worker_url == W[0]
        assert len(_headers._names) <= 8
