"""An independent reference model of bounded-router, written from docs/contract.md alone.

Pure Python: the ring positions come from the ``xxhash`` package on PyPI (a test-only
dependency), everything else from the contract's words (sections "Workers and membership", "The
hash ring", "Inputs and precedence", "The bounded rule", "Leases"). It mirrors the public
``bounded_router.Router`` API so that the differential tests can run the same operations on both
and compare every decision and every load, and so that scripts/bench.py can time it as the pure-Python implementation of the policy.

Random choices (``random_fallback`` and the ``random`` policy) cannot be reproduced from
outside, so ``route``/``select`` take ``random_choice=url``: the worker the library chose, which
the model checks is an available worker and then uses, keeping loads comparable. Without it the
model picks with its own ``random.Random``. ``round_robin`` is modelled exactly: the shared
counter counts the routes that chose a worker, and a route takes available worker number
``counter % len(available)``.

The model is deliberately straightforward: a sorted list of (position, url) entries searched
with ``bisect``, plain dicts for workers, a list for the membership order.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random as _random
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import xxhash

__all__ = [
    "ReferenceRouter",
    "ModelDecision",
    "ModelLease",
    "ModelWorker",
    "NoWorkerAvailableError",
    "BRANCHES",
    "POLICIES",
    "xxh64",
    "valid_header_value",
    "parse_target_index",
]

POLICIES = ("random", "round_robin", "consistent_hashing", "bounded_consistent_hashing")

BRANCHES = (
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
    "cache_aware_prefix_hit",
    "cache_aware_key_hit",
    "cache_aware_balance",
    "cache_aware_no_match",
)

TARGET_HEADER = b"x-smg-target-worker"
ROUTING_KEY_HEADER = b"x-smg-routing-key"
IMPLICIT_HEADERS = (b"authorization", b"x-forwarded-for", b"cookie")

HeadersLike = Union[Mapping[object, object], Iterable[Tuple[object, object]]]


def xxh64(data: bytes) -> int:
    """XXH64 with seed 0 (contract: "The hash ring")."""
    return xxhash.xxh64_intdigest(data, 0)


class NoWorkerAvailableError(RuntimeError):
    """The model could not choose a worker; ``branch`` says why."""

    def __init__(self, branch: str) -> None:
        super().__init__("no worker available (%s)" % branch)
        self.branch = branch


@dataclass
class ModelWorker:
    """One worker. A removed worker object lives on in the leases that point at it."""

    url: str
    healthy: bool = True
    load: int = 0
    keys: Dict[bytes, int] = field(default_factory=dict)  # explicit key -> leases holding it

    @property
    def active_keys(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class ModelDecision:
    """What ``select`` answers (and ``route`` with ``lease_id`` set)."""

    worker_url: Optional[str]
    preferred_url: Optional[str]
    branch: str
    lease_id: Optional[int] = None

    @property
    def spilled(self) -> bool:
        return self.branch == "explicit_routing_key_spillover"


@dataclass
class ModelLease:
    worker: ModelWorker
    key: Optional[bytes]


# -- request inputs (contract: "Inputs and precedence") ------------------------------------------


def valid_header_value(value: bytes) -> bool:
    """Non-empty, every byte visible ASCII (0x20-0x7E) or tab."""
    return len(value) > 0 and all(0x20 <= b <= 0x7E or b == 0x09 for b in value)


def parse_target_index(value: bytes) -> Optional[int]:
    """An unsigned decimal: optional leading '+', then one or more digits; None if unparsable."""
    digits = value[1:] if value[:1] == b"+" else value
    if not digits or not all(0x30 <= b <= 0x39 for b in digits):
        return None
    n = int(digits)
    if n >= 1 << 64:  # overflow is a parse failure (any such index is out of range anyway)
        return None
    return n


def _header_bytes(text: object) -> bytes:
    if isinstance(text, bytes):
        return text
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    if isinstance(text, str):
        try:
            return text.encode("latin-1")  # how HTTP carries header text
        except UnicodeEncodeError:
            return text.encode("utf-8", "surrogatepass")  # not visible ASCII either way
    raise TypeError("header name/value must be str or bytes, got %s" % type(text).__name__)


def _first_headers(headers: HeadersLike) -> Dict[bytes, bytes]:
    """The first occurrence of every header name (ASCII lower-cased) among ``headers``."""
    items = headers.items() if hasattr(headers, "items") else headers  # type: ignore[union-attr]
    first: Dict[bytes, bytes] = {}
    for name, value in items:  # type: ignore[misc]
        raw_name = _header_bytes(name).lower()  # bytes.lower() changes ASCII letters only
        if raw_name not in first:
            first[raw_name] = _header_bytes(value)
    return first


def _key_bytes(routing_key: Union[str, bytes, None]) -> bytes:
    if routing_key is None:
        return b""
    if isinstance(routing_key, bytes):
        return routing_key
    if isinstance(routing_key, str):
        return routing_key.encode("utf-8")
    raise TypeError("routing_key must be str, bytes or None, got %s" % type(routing_key).__name__)


# -- the router ---------------------------------------------------------------------------------


class ReferenceRouter:
    """The model. Same constructor arguments and validation as ``bounded_router.Router``."""

    def __init__(
        self,
        worker_urls: Iterable[str],
        policy: str = "bounded_consistent_hashing",
        max_load_skew: float = 1.5,
        min_load_gap: int = 2,
        virtual_nodes: int = 150,
        seed: Optional[int] = None,
    ) -> None:
        policy = getattr(policy, "value", policy)  # accept a PolicyType too
        if policy not in POLICIES:
            raise ValueError("policy: unknown policy %r" % (policy,))
        if isinstance(max_load_skew, bool) or not isinstance(max_load_skew, (int, float)):
            raise ValueError("max_load_skew must be a number, got %r" % (max_load_skew,))
        if not math.isfinite(max_load_skew) or max_load_skew < 1.0:
            raise ValueError("max_load_skew must be a finite number >= 1.0, got %r" % (max_load_skew,))
        if isinstance(min_load_gap, bool) or not isinstance(min_load_gap, int) or min_load_gap < 0:
            raise ValueError("min_load_gap must be an integer >= 0, got %r" % (min_load_gap,))
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int) or virtual_nodes < 1:
            raise ValueError("virtual_nodes must be an integer >= 1, got %r" % (virtual_nodes,))
        self.policy = policy
        self.max_load_skew = float(max_load_skew)
        self.min_load_gap = min_load_gap
        self.virtual_nodes = virtual_nodes
        self._rng = _random.Random(seed)
        self._rr = 0  # the shared round-robin counter
        self._order: List[str] = []  # membership order
        self._workers: Dict[str, ModelWorker] = {}
        self._positions: List[int] = []
        self._owners: List[str] = []
        self._leases: Dict[int, ModelLease] = {}
        self._ids = itertools.count(1)
        self.branch_counts: Dict[str, int] = {name: 0 for name in BRANCHES}
        self.set_workers(worker_urls)

    # -- membership (contract: "Workers and membership") ------------------------------------------

    @staticmethod
    def _check_url(url: object) -> str:
        if not isinstance(url, str):
            raise TypeError("a worker URL must be a str, got %s" % type(url).__name__)
        if not url:
            raise ValueError("a worker URL must not be empty")
        return url

    def _rebuild_ring(self) -> None:
        """Entries (XXH64(url + "#" + i), url) for the SET of URLs, sorted by (position, url)."""
        entries = sorted(
            (xxh64(("%s#%d" % (url, i)).encode("utf-8")), url)
            for url in self._workers
            for i in range(self.virtual_nodes)
        )
        self._positions = [position for position, _ in entries]
        self._owners = [url for _, url in entries]

    def add_worker(self, url: str) -> None:
        self._check_url(url)
        if url in self._workers:
            raise ValueError("duplicate worker URL %r" % url)
        self._workers[url] = ModelWorker(url)
        self._order.append(url)
        self._rebuild_ring()

    def remove_worker(self, url: str) -> None:
        if url not in self._workers:
            raise KeyError(url)
        del self._workers[url]  # its leases keep the worker object and release against it alone
        self._order.remove(url)
        self._rebuild_ring()

    def set_workers(self, urls: Iterable[str]) -> None:
        if isinstance(urls, (str, bytes)):
            raise TypeError("urls must be a list of URL strings")
        new = [self._check_url(url) for url in urls]
        if len(set(new)) != len(new):
            raise ValueError("duplicate worker URL in %r" % (new,))
        # Workers that stay keep their health and load; the others leave.
        self._workers = {url: self._workers.get(url) or ModelWorker(url) for url in new}
        self._order = new
        self._rebuild_ring()

    def set_healthy(self, url: str, healthy: bool) -> None:
        if url not in self._workers:
            raise KeyError(url)
        self._workers[url].healthy = bool(healthy)

    # -- statistics ------------------------------------------------------------------------------

    def loads(self) -> Dict[str, int]:
        return {url: self._workers[url].load for url in self._order}

    def workers(self) -> List[Tuple[str, bool, int, int]]:
        """(url, healthy, load, active_keys) of every member, in membership order."""
        return [(w.url, w.healthy, w.load, w.active_keys) for w in (self._workers[u] for u in self._order)]

    def active_leases(self) -> int:
        return len(self._leases)

    def available(self) -> List[str]:
        """Healthy workers, in membership order."""
        return [url for url in self._order if self._workers[url].healthy]

    # -- the ring (contract: "The hash ring") -----------------------------------------------------

    def clockwise(self, key: bytes) -> Iterator[str]:
        """Every worker once, clockwise from the key's position (wrapping around)."""
        n = len(self._positions)
        if n == 0:
            return
        start = bisect.bisect_left(self._positions, xxh64(key))
        seen = set()
        for j in range(n):
            url = self._owners[(start + j) % n]
            if url not in seen:
                seen.add(url)
                yield url
                if len(seen) == len(self._workers):
                    return

    def preferred(self, key: bytes) -> Optional[str]:
        """The first available worker clockwise from the key."""
        for url in self.clockwise(key):
            if self._workers[url].healthy:
                return url
        return None

    # -- decisions (contract: "Inputs and precedence", "The bounded rule") ------------------------

    def _random_pick(self, available: Sequence[str], choice: Optional[str]) -> str:
        if choice is not None:
            if choice not in available:
                raise AssertionError("the library chose %r, which is not an available worker %r" % (choice, available))
            return choice
        return self._rng.choice(available)

    def decide(
        self,
        routing_key: Union[str, bytes, None] = None,
        headers: Optional[HeadersLike] = None,
        random_choice: Optional[str] = None,
    ) -> Tuple[Optional[str], Optional[str], str, Optional[bytes]]:
        """(worker, preferred, branch, explicit key) for a request, counting nothing."""
        key = _key_bytes(routing_key)
        first = _first_headers(headers) if headers is not None else {}
        explicit: Optional[bytes] = key or None
        if explicit is None:
            header_key = first.get(ROUTING_KEY_HEADER)
            if header_key is not None and valid_header_value(header_key):
                explicit = header_key
        available = self.available()
        if not available:
            return None, None, "no_healthy_workers", explicit
        if self.policy == "random":
            url = self._random_pick(available, random_choice)
            return url, url, "random", explicit
        if self.policy == "round_robin":
            url = available[self._rr % len(available)]
            return url, url, "round_robin", explicit

        # 1. X-SMG-Target-Worker: strict, no fallback.
        target = first.get(TARGET_HEADER)
        if target is not None and valid_header_value(target):
            index = parse_target_index(target)
            if index is not None and index < len(available):
                url = available[index]
                return url, url, "target_worker_hit", explicit
            return None, None, "target_worker_miss", explicit

        # 2. The explicit key: the only input that may spill.
        if explicit is not None:
            preferred = self.preferred(explicit)
            assert preferred is not None
            if self.policy == "consistent_hashing":
                return preferred, preferred, "routing_key_hit", explicit
            return self._bounded(explicit, preferred, available) + (explicit,)

        # 3. The implicit key: the first PRESENT header; no fall-through to the next one.
        for name in IMPLICIT_HEADERS:
            value = first.get(name)
            if value is None:
                continue
            if valid_header_value(value):
                url = self.preferred(value)
                branch = "routing_key_hit" if self.policy == "consistent_hashing" else "implicit_routing_key_hit"
                return url, url, branch, None
            break

        # 4. No key: a uniformly random available worker.
        url = self._random_pick(available, random_choice)
        return url, url, "random_fallback", None

    def _bounded(self, key: bytes, preferred: str, available: Sequence[str]) -> Tuple[str, str, str]:
        """contract: "The bounded rule", steps 2-6, over the available workers, not counting this request."""
        loads = [self._workers[url].load for url in available]
        min_load = min(loads)
        mean_load = sum(loads) / len(loads)
        bound = mean_load * self.max_load_skew
        preferred_load = self._workers[preferred].load
        if not (preferred_load - min_load > self.min_load_gap and preferred_load > bound):
            return preferred, preferred, "explicit_routing_key_hit"
        for url in self.clockwise(key):
            worker = self._workers[url]
            if worker.healthy and worker.load <= bound:
                return url, preferred, "explicit_routing_key_spillover"
        return preferred, preferred, "explicit_routing_key_no_eligible_candidate"

    # -- the public API --------------------------------------------------------------------------

    def select(
        self,
        routing_key: Union[str, bytes, None] = None,
        headers: Optional[HeadersLike] = None,
        random_choice: Optional[str] = None,
    ) -> ModelDecision:
        """Choose without counting (never raises for want of a worker)."""
        worker, preferred, branch, _ = self.decide(routing_key, headers, random_choice)
        return ModelDecision(worker, preferred, branch)

    def route(
        self,
        routing_key: Union[str, bytes, None] = None,
        headers: Optional[HeadersLike] = None,
        random_choice: Optional[str] = None,
    ) -> ModelDecision:
        """Choose and count in one step; raises NoWorkerAvailableError (with .branch) if none."""
        worker, preferred, branch, explicit = self.decide(routing_key, headers, random_choice)
        self.branch_counts[branch] += 1
        if worker is None:
            raise NoWorkerAvailableError(branch)
        self._rr += 1  # the round-robin counter advances with every route that chose a worker
        lease_id = self._take(self._workers[worker], explicit)
        return ModelDecision(worker, preferred, branch, lease_id)

    def acquire(self, worker_url: str, routing_key: Union[str, bytes, None] = None) -> int:
        """Count a request on a member chosen elsewhere (healthy or not); the lease id."""
        if worker_url not in self._workers:
            raise KeyError(worker_url)
        return self._take(self._workers[worker_url], _key_bytes(routing_key) or None)

    def _take(self, worker: ModelWorker, key: Optional[bytes]) -> int:
        worker.load += 1
        if key is not None:
            worker.keys[key] = worker.keys.get(key, 0) + 1
        lease_id = next(self._ids)
        self._leases[lease_id] = ModelLease(worker, key)
        return lease_id

    def release(self, lease_id: int) -> bool:
        """Undo a lease's count, once; False for an unknown or already released lease."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return False
        worker = lease.worker
        worker.load -= 1
        assert worker.load >= 0, "negative load on %s" % worker.url
        if lease.key is not None:
            count = worker.keys[lease.key] - 1
            if count:
                worker.keys[lease.key] = count
            else:
                del worker.keys[lease.key]
        return True
