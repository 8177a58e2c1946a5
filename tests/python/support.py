"""Helpers shared by the Python tests: worker URLs, key search, holding loads. The model of the
contract (docs/contract.md) is tests/reference_model.py (ReferenceRouter)."""

from __future__ import annotations

from typing import Iterable, List, Sequence

from bounded_router import Lease, Router

W = ["http://w%d:8000" % i for i in range(8)]


def urls(n: int) -> List[str]:
    return list(W[:n])


def key_preferring(router: Router, url: str, prefix: str = "key", skip: Iterable[str] = ()) -> str:
    """A key whose preferred worker is ``url`` (searched with select on an idle router)."""
    skipped = set(skip)
    for i in range(100000):
        key = "%s-%d" % (prefix, i)
        if key in skipped:
            continue
        decision = router.select(key)
        if decision.worker_url == url:
            assert decision.preferred_url == url
            return key
    raise AssertionError("no key prefers %s" % url)


def hold(router: Router, loads: Sequence[int], worker_urls: Sequence[str]) -> List[Lease]:
    """Hold ``loads[i]`` leases (without routing key) on ``worker_urls[i]``.

    Keep the returned list alive: a dropped lease is released by the safety net.
    """
    leases = []
    for url, n in zip(worker_urls, loads):
        leases += [router.acquire(url) for _ in range(n)]
    assert router.loads() == dict(zip(worker_urls, loads))
    return leases
