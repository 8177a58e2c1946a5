"""Helpers shared by the Python tests: worker URLs, key search, and an independent model of
the hash ring (SPEC §4) built on a pure-Python XXH64."""

from __future__ import annotations

import bisect
from typing import Iterable, List, Optional, Sequence, Tuple

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


# -- XXH64 (seed 0) and the ring, written from the specification, independent of the Go code --

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_M = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def _merge(acc: int, value: int) -> int:
    acc ^= _round(0, value)
    return (acc * _P1 + _P4) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


class RingModel:
    """The ring of SPEC §4: virtual node i of url at XXH64(url + "#" + i), sorted by (position, url)."""

    def __init__(self, worker_urls: Sequence[str], virtual_nodes: int = 150) -> None:
        entries: List[Tuple[int, str]] = []
        for url in worker_urls:
            for i in range(virtual_nodes):
                entries.append((xxh64(("%s#%d" % (url, i)).encode("utf-8")), url))
        entries.sort()
        self.positions = [p for p, _ in entries]
        self.owners = [u for _, u in entries]

    def clockwise(self, key: bytes) -> List[str]:
        """Every worker once, in clockwise order from the key's position."""
        start = bisect.bisect_left(self.positions, xxh64(key))
        order: List[str] = []
        seen = set()
        n = len(self.owners)
        for j in range(n):
            owner = self.owners[(start + j) % n]
            if owner not in seen:
                seen.add(owner)
                order.append(owner)
        return order

    def first(self, key: bytes, available: Optional[Iterable[str]] = None) -> Optional[str]:
        allowed = None if available is None else set(available)
        for url in self.clockwise(key):
            if allowed is None or url in allowed:
                return url
        return None


