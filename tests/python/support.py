"""Helpers shared by the Python tests: worker URLs, key search (with the reference model), holding
loads, reading metrics with prometheus_client, a chi-square uniformity check, collecting
unraisable exceptions. The model of the contract (docs/contract.md) is tests/reference_model.py
(ReferenceRouter)."""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Sequence, Tuple

from prometheus_client.parser import text_string_to_metric_families

from bounded_router import Lease, Router, _native
from reference_model import ReferenceRouter

W = ["http://w%d:8000" % i for i in range(8)]


def urls(n: int) -> List[str]:
    return list(W[:n])


def model_of(router: Router, virtual_nodes: int = 150) -> ReferenceRouter:
    """The reference model over ``router``'s members and their health (idle: loads are not
    copied; the ring of ``virtual_nodes`` per worker)."""
    model = ReferenceRouter([w.url for w in router.workers()], virtual_nodes=virtual_nodes)
    for w in router.workers():
        model.set_healthy(w.url, w.healthy)
    return model


def key_preferring(router: Router, url: str, prefix: str = "key", skip: Iterable[str] = ()) -> str:
    """A key whose preferred worker is ``url``, searched with the reference model over the
    router's members (never with the router under test)."""
    model = model_of(router)
    skipped = set(skip)
    for i in range(100000):
        key = "%s-%d" % (prefix, i)
        if key not in skipped and model.preferred(key.encode()) == url:
            return key
    raise AssertionError("no key prefers %s" % url)


def parse_metrics(text: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """{(sample name, sorted label pairs): value} of a Prometheus text exposition, read with
    prometheus_client's parser (the format's reference parser, not bounded_router.metrics.parse);
    a sample that appears twice is an error."""
    samples: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, "sample %r appears twice" % (key,)
            samples[key] = sample.value
    return samples


# The chi-square statistic's critical value for df = k - 1 degrees of freedom at which the
# chi-square distribution's upper tail is below 1e-9 (checked by chi2_sf in assert_uniform).
CHI2_CRITICAL = {1: 37.33, 2: 41.45, 3: 44.85, 4: 47.88, 5: 50.72, 6: 53.42, 7: 56.0}
FALSE_FAILURE = 1e-9


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X chi-square with ``df`` degrees of freedom (closed forms for integer df)."""
    if df % 2 == 0:
        term, total = 1.0, 0.0
        for i in range(df // 2):
            total += term
            term *= (x / 2) / (i + 1)
        return math.exp(-x / 2) * total
    total = math.erfc(math.sqrt(x / 2))
    term = math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    for i in range((df - 1) // 2):
        total += term
        term *= x / (2 * i + 3)
    return total


def assert_uniform(counts: Mapping[str, int], categories: Sequence[str]) -> None:
    """Pearson's chi-square test of ``counts`` against the uniform distribution over
    ``categories``, at a fixed critical value whose chi-square tail is below 1e-9.

    The library's random choice cannot be seeded, so a uniform choice fails this test with
    probability about 1e-9 (the chi-square approximation of the multinomial, accurate here because
    the callers draw at least 500 expected samples per category); a worker that is never chosen,
    or chosen twice as often as another, fails it with certainty at those sample sizes.
    """
    assert set(counts) <= set(categories), counts
    n = sum(counts.values())
    expected = n / len(categories)
    assert expected >= 500, "too few samples for the chi-square approximation"
    statistic = sum((counts.get(c, 0) - expected) ** 2 / expected for c in categories)
    df = len(categories) - 1
    critical = CHI2_CRITICAL[df]
    assert chi2_sf(critical, df) < FALSE_FAILURE
    assert statistic < critical, "not uniform: chi-square %.1f >= %.2f (df %d) for %r" % (statistic, critical, df, dict(counts))


@contextlib.contextmanager
def unraisable_exceptions() -> Iterator[List[Any]]:
    """Collect what reaches sys.unraisablehook (exceptions in __del__, weakref callbacks and the
    like, which Python only prints) in the list yielded, for the test to assert on."""
    raised: List[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda info: raised.append((info.exc_type, info.exc_value, info.object))
    try:
        yield raised
    finally:
        sys.unraisablehook = previous


def hold(router: Router, loads: Sequence[int], worker_urls: Sequence[str]) -> List[Lease]:
    """Hold ``loads[i]`` leases (without routing key) on ``worker_urls[i]``.

    Keep the returned list alive: a dropped lease is released by the safety net.
    """
    leases = []
    for url, n in zip(worker_urls, loads):
        leases += [router.acquire(url) for _ in range(n)]
    assert router.loads() == dict(zip(worker_urls, loads))
    return leases


# The C API's signatures, written from capi/bounded_router.h (pointers as c_void_p, so tests can
# pass NULL, bytes or buffers), for tests that call the library without the package's binding.
_C_SIGNATURES = {
    "br_last_error": (c_char_p, []),
    "br_router_new": (c_int32, [c_void_p, c_size_t, POINTER(c_uint64)]),
    "br_router_free": (c_int32, [c_uint64]),
    "br_add_worker": (c_int32, [c_uint64, c_void_p, c_size_t]),
    "br_remove_worker": (c_int32, [c_uint64, c_void_p, c_size_t]),
    "br_set_workers": (c_int32, [c_uint64, c_void_p, c_size_t]),
    "br_set_healthy": (c_int32, [c_uint64, c_void_p, c_size_t, c_int32]),
    "br_route_key": (c_int32, [c_uint64, c_void_p, c_size_t, c_void_p]),
    "br_route": (c_int32, [c_uint64, c_void_p, c_size_t, c_void_p, c_size_t, c_int32, c_void_p]),
    "br_route_keys": (c_int32, [c_uint64, c_void_p, c_size_t, c_void_p, c_uint32, c_void_p]),
    "br_acquire": (c_int32, [c_uint64, c_void_p, c_size_t, c_void_p, c_size_t, c_int64, c_void_p]),
    "br_release": (c_int32, [c_uint64, c_uint64]),
    "br_release_abandoned": (c_int32, [c_uint64, c_uint64]),
    "br_lease_workers_json": (c_int64, [c_uint64, c_uint64, c_void_p, c_size_t]),
    "br_workers_json": (c_int64, [c_uint64, c_void_p, c_size_t]),
    "br_members_json": (c_int64, [c_uint64, c_void_p, c_size_t]),
    "br_stats_json": (c_int64, [c_uint64, c_void_p, c_size_t]),
}


def c_api() -> Any:
    """The installed library with the C API's signatures set from the public header."""
    lib = ctypes.CDLL(_native.library_path())
    for name, (restype, argtypes) in _C_SIGNATURES.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib
