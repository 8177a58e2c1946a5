"""An independent reference model of bounded-router, written from docs/contract.md alone.

Pure Python: the ring positions come from the ``xxhash`` and ``blake3`` packages on PyPI
(test-only dependencies), everything else from the contract's words (sections "Workers and
membership", "The hash ring", "Inputs and precedence", "The bounded rule", "Leases", "The ring",
"Spill target", "Key memory", "Weighted leases", "power_of_two", "least_load", "manual", "Ties by
the key"). It
mirrors the public
``bounded_router.Router`` API so that the differential tests can run the same operations on both
and compare every decision and every load, and so that scripts/bench.py can time it as the pure-Python implementation of the policy.

Random choices (``random_fallback``, the ``random`` policy, ``power_of_two``'s draw,
``manual``'s random assignment and the keyless ties of ``least_load`` and ``min_load``) cannot be reproduced from outside, so ``route``/``select`` take
``random_choice=url``: the worker the library chose, which the model checks is one the rule
allows (an available worker; for ``power_of_two`` one that some other available worker's load
is at least equal to) and then uses, keeping loads comparable. Without it the
model picks with its own ``random.Random``. ``round_robin`` is modelled exactly: the shared
counter counts the routes that chose a worker, and a route takes available worker number
``counter % len(available)``.

The model is deliberately straightforward: a sorted list of (position, url) entries searched
with ``bisect``, plain dicts for workers, a list for the membership order. ``cache_aware``
(contract: "cache_aware") keeps each worker's block index as an ``OrderedDict`` in recency order
and computes every match by looking blocks up worker by worker.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random as _random
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import blake3
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
    "smg_position",
    "valid_header_value",
    "parse_target_index",
]

POLICIES = ("random", "round_robin", "consistent_hashing", "bounded_consistent_hashing", "power_of_two", "least_load", "manual", "cache_aware")

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
)

TARGET_HEADER = b"x-smg-target-worker"
ROUTING_KEY_HEADER = b"x-smg-routing-key"
IMPLICIT_HEADERS = (b"authorization", b"x-forwarded-for", b"cookie")

HeadersLike = Union[Mapping[object, object], Iterable[Tuple[object, object]]]


def xxh64(data: bytes) -> int:
    """XXH64 with seed 0 (contract: "The hash ring")."""
    return xxhash.xxh64_intdigest(data, 0)


_MASK64 = (1 << 64) - 1


def fmix64(k: int) -> int:
    """MurmurHash3's 64-bit finalizer (contract: "cache_aware", step 4)."""
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK64
    return k ^ (k >> 33)


class NoWorkerAvailableError(RuntimeError):
    """The model could not choose a worker; ``branch`` says why."""

    def __init__(self, branch: str) -> None:
        super().__init__("no worker available (%s)" % branch)
        self.branch = branch


def smg_position(data: bytes) -> int:
    """SMG's ring position: the first 8 bytes of BLAKE3, little-endian (contract: "The ring")."""
    return int.from_bytes(blake3.blake3(data).digest()[:8], "little")


RINGS: Dict[str, Callable[[bytes], int]] = {"xxh64": lambda data: xxh64(data), "smg": smg_position}
SPILL_TARGETS = ("clockwise", "least_loaded")
BALANCE_BY = ("in_flight", "prefill")
MAX_LEASE_WEIGHT = 1 << 30
MAX_ENGINE_LOAD = 1 << 40  # contract: "Engine load reports"


@dataclass
class ModelWorker:
    """One worker. A removed worker object lives on in the leases that point at it; a worker
    re-added under the same URL is a new object."""

    url: str
    healthy: bool = True
    load: int = 0  # the sum of the weights of its leases
    requests: int = 0  # the number of its leases
    prefill_load: int = 0  # contract: "Prefill load": the weights of its leases before their first token
    prefill_requests: int = 0  # and their number
    outages: int = 0  # times it turned unhealthy: key memory and manual forget keys held on it before
    keys: Dict[bytes, int] = field(default_factory=dict)  # explicit key -> leases holding it
    # cache_aware: the blocks sent here, least recent first
    blocks: "OrderedDict[int, None]" = field(default_factory=OrderedDict)
    # cache_aware: the engine's names of the blocks it reported (contract: "Reported blocks")
    engine_names: Dict[int, int] = field(default_factory=dict)  # engine name -> block
    # contract: "Engine load reports": the standing report's figures (None: not reported) and
    # the leases taken since it, by id
    reported_requests: Optional[int] = None
    reported_waiting: Optional[int] = None
    since: Dict[int, "ModelLease"] = field(default_factory=dict)
    peer: int = 0  # contract: "Peer routes": the peers' weight since the standing report

    @property
    def routing_load(self) -> int:
        """The load the policies compare: the report plus the leases taken since and the peers'
        routes since, else the leases."""
        if self.reported_requests is None:
            return self.load
        return self.reported_requests + sum(lease.weight for lease in self.since.values()) + self.peer

    @property
    def routing_prefill(self) -> int:
        """The prefill load the policies compare: the report plus the leases taken since and not
        past their first token and the peers' routes since, else the leases not past it."""
        if self.reported_waiting is None:
            return self.prefill_load
        return self.reported_waiting + sum(lease.weight for lease in self.since.values() if lease.waiting) + self.peer

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
    weight: int
    waiting: bool = True  # not yet past its first token


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


# -- worker URLs (contract: "Workers and membership") -----------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normal_worker_url(url: str) -> str:
    """``scheme://host[:port][/path]``: scheme and host lower-cased, the scheme's default port and
    trailing slashes dropped; ValueError for what is not an http(s) server's URL. Written with
    urllib.parse, independently of the library's Go (net/url)."""
    if not url:
        raise ValueError("a worker URL must not be empty")
    if "," in url or "://" not in url or "#" in url or "?" in url:
        raise ValueError("worker URL %r: a comma, no scheme, a query or a fragment" % url)
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or "@" in parts.netloc or not parts.hostname:
        raise ValueError("worker URL %r: not http(s), user info or no host" % url)
    port = parts.port  # ValueError when not a number below 65536
    if port == 0:
        raise ValueError("worker URL %r: port 0" % url)
    netloc = parts.netloc.lower()
    if port in (None, _DEFAULT_PORTS[scheme]):
        netloc = netloc[: netloc.rindex("]") + 1] if netloc.startswith("[") else netloc.split(":")[0]
    return "%s://%s%s" % (scheme, netloc, parts.path.rstrip("/"))


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
        hash_ring: str = "xxh64",
        spill_target: str = "clockwise",
        key_memory: int = 0,
        assignment_mode: str = "random",
        max_keys: int = 65536,
        routing_key_headers: Sequence[str] = ("X-SMG-Routing-Key",),
        blocks_per_worker: int = 32768,
        cache_threshold: float = 0.3,
        balance_by: str = "in_flight",
        hit_wait_factor: float = 0.0,
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
        if hash_ring not in RINGS:
            raise ValueError("hash_ring must be one of %s, got %r" % (", ".join(RINGS), hash_ring))
        if spill_target not in SPILL_TARGETS:
            raise ValueError("spill_target must be one of %s, got %r" % (", ".join(SPILL_TARGETS), spill_target))
        if isinstance(key_memory, bool) or not isinstance(key_memory, int) or key_memory < 0:
            raise ValueError("key_memory must be an integer >= 0, got %r" % (key_memory,))
        if balance_by not in BALANCE_BY:
            raise ValueError("balance_by must be one of %s, got %r" % (", ".join(BALANCE_BY), balance_by))
        self.balance_by = balance_by
        if not (math.isfinite(hit_wait_factor) and hit_wait_factor >= 0):
            raise ValueError("hit_wait_factor must be a finite number >= 0, got %r" % (hit_wait_factor,))
        if hit_wait_factor and balance_by != "prefill":
            raise ValueError("hit_wait_factor applies only with balance_by prefill")
        self.hit_wait_factor = float(hit_wait_factor)
        self.position = RINGS[hash_ring]
        self.spill_target = spill_target
        # key position -> (worker, its outages then), least recently routed first
        self.memory_capacity = key_memory if policy == "bounded_consistent_hashing" else 0
        self.memory: "OrderedDict[int, Tuple[ModelWorker, int]]" = OrderedDict()
        if assignment_mode not in ("random", "min_load"):
            raise ValueError("assignment_mode: %r" % (assignment_mode,))
        self.policy = policy
        self.assignment_mode = assignment_mode
        self.max_keys = max_keys
        # manual's held keys, least recently routed first: key -> (worker, its outages then)
        self._held: "OrderedDict[bytes, Tuple[ModelWorker, int]]" = OrderedDict()
        self.key_headers = [name.lower().encode("ascii") for name in routing_key_headers]
        self.max_load_skew = float(max_load_skew)
        self.min_load_gap = min_load_gap
        self.virtual_nodes = virtual_nodes
        self.blocks_per_worker = blocks_per_worker
        self.cache_threshold = cache_threshold
        self.prefix_blocks = 0  # cache_aware's counters
        self.prefix_blocks_matched = 0
        self._depth: int = 0  # the latest cache_aware decision's depth and candidates, for _record
        self._candidates: List[str] = []
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
        """The member form of a worker URL (contract: "Workers and membership"), or ValueError."""
        if not isinstance(url, str):
            raise TypeError("a worker URL must be a str, got %s" % type(url).__name__)
        return normal_worker_url(url)

    def _member(self, url: str) -> str:
        """The member ``url`` names, in its normal form; KeyError when it names none."""
        try:
            normal = normal_worker_url(url)
        except ValueError:
            raise KeyError(url) from None
        if normal not in self._workers:
            raise KeyError(url)
        return normal

    def _rebuild_ring(self) -> None:
        """Entries (hash(url + "#" + i), url) for the SET of URLs, sorted by (position, url)."""
        entries = sorted(
            (self.position(("%s#%d" % (url, i)).encode("utf-8")), url)
            for url in self._workers
            for i in range(self.virtual_nodes)
        )
        self._positions = [position for position, _ in entries]
        self._owners = [url for _, url in entries]

    def add_worker(self, url: str) -> None:
        url = self._check_url(url)
        if url in self._workers:
            raise ValueError("duplicate worker URL %r" % url)
        self._workers[url] = ModelWorker(url)
        self._order.append(url)
        self._rebuild_ring()

    def remove_worker(self, url: str) -> None:
        url = self._member(url)
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
        url = self._member(url)
        worker = self._workers[url]
        if worker.healthy and not healthy:
            worker.outages += 1
        worker.healthy = bool(healthy)

    # -- statistics ------------------------------------------------------------------------------

    def loads(self) -> Dict[str, int]:
        return {url: self._workers[url].load for url in self._order}

    def workers(self) -> List[Tuple[str, bool, int, int]]:
        """(url, healthy, load, active_keys) of every member, in membership order."""
        return [(w.url, w.healthy, w.load, w.active_keys) for w in (self._workers[u] for u in self._order)]

    def prefill(self) -> List[Tuple[int, int]]:
        """(prefill load, prefill requests) of every member, in membership order."""
        return [(w.prefill_load, w.prefill_requests) for w in (self._workers[u] for u in self._order)]

    def _measured(self, url: str) -> int:
        """contract: "Prefill load": the load the bound weighs under balance_by."""
        w = self._workers[url]
        return w.routing_prefill if self.balance_by == "prefill" else w.routing_load

    def _rank(self, url: str) -> Tuple[int, int]:
        """The order of a least-loaded choice: the measured load, then (prefill) the leases in flight."""
        w = self._workers[url]
        return (w.routing_prefill, w.requests) if self.balance_by == "prefill" else (w.routing_load, 0)

    def in_flight(self) -> Dict[str, int]:
        """The number of leases of every member, whatever their weights."""
        return {url: self._workers[url].requests for url in self._order}

    def active_leases(self) -> int:
        return len(self._leases)

    def available(self) -> List[str]:
        """Healthy workers, in membership order."""
        return [url for url in self._order if self._workers[url].healthy]

    # -- the ring (contract: "The hash ring") -----------------------------------------------------

    def clockwise(self, key: bytes) -> Iterator[str]:
        """Every worker once, clockwise from the key's position (wrapping around)."""
        return self.clockwise_from(self.position(key))

    def clockwise_from(self, position: int) -> Iterator[str]:
        """Every worker once, clockwise from a ring position (wrapping around)."""
        n = len(self._positions)
        if n == 0:
            return
        start = bisect.bisect_left(self._positions, position)
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
        prefix_blocks: Sequence[int] = (),
        weight: int = 1,
    ) -> Tuple[Optional[str], Optional[str], str, Optional[bytes]]:
        """(worker, preferred, branch, explicit key) for a request, counting nothing."""
        key = _key_bytes(routing_key)
        first = _first_headers(headers) if headers is not None else {}
        explicit: Optional[bytes] = key or None
        # The routing-key headers in their configured order: the first usable value is the key.
        for name in self.key_headers if explicit is None else ():
            header_key = first.get(name)
            if header_key is not None and valid_header_value(header_key):
                explicit = header_key
                break
        available = self.available()
        if not available:
            return None, None, "no_healthy_workers", explicit
        if self.policy == "random":
            url = self._random_pick(available, random_choice)
            return url, url, "random", explicit
        if self.policy == "round_robin":
            url = available[self._rr % len(available)]
            return url, url, "round_robin", explicit
        if self.policy == "power_of_two":
            url = self._power_of_two(available, random_choice)
            return url, url, "power_of_two", explicit
        if self.policy == "least_load":
            url = self._least_loaded(available, explicit, random_choice)
            return url, url, "least_load", explicit
        if self.policy == "manual":
            url, branch = self._manual(explicit, available, random_choice)
            return url, url, branch, explicit

        # 1. X-SMG-Target-Worker: strict, no fallback.
        target = first.get(TARGET_HEADER)
        if target is not None and valid_header_value(target):
            index = parse_target_index(target)
            if index is not None and index < len(available):
                url = available[index]
                return url, url, "target_worker_hit", explicit
            return None, None, "target_worker_miss", explicit

        if self.policy == "cache_aware":
            url, branch = self._cache_aware(available, list(prefix_blocks), explicit or self._implicit_key(first), weight)
            return url, url, branch, explicit

        # 2. The explicit key: the only input that may spill.
        if explicit is not None:
            preferred = self.preferred(explicit)
            assert preferred is not None
            if self.policy == "consistent_hashing":
                return preferred, preferred, "routing_key_hit", explicit
            return self._bounded(explicit, preferred, available) + (explicit,)

        # 3. The implicit key: the first PRESENT header; no fall-through to the next one.
        implicit = self._implicit_key(first)
        if implicit is not None:
            url = self.preferred(implicit)
            branch = "routing_key_hit" if self.policy == "consistent_hashing" else "implicit_routing_key_hit"
            return url, url, branch, None

        # 4. No key: a uniformly random available worker.
        url = self._random_pick(available, random_choice)
        return url, url, "random_fallback", None

    @staticmethod
    def _implicit_key(first: Dict[bytes, bytes]) -> Optional[bytes]:
        """The first PRESENT implicit-key header's value if valid (no fall-through), else None."""
        for name in IMPLICIT_HEADERS:
            value = first.get(name)
            if value is not None:
                return value if valid_header_value(value) else None
        return None

    def _cache_aware(self, available: Sequence[str], blocks: List[int], key: Optional[bytes], weight: int = 1) -> Tuple[str, str]:
        """contract: "cache_aware", steps 1-5, with "Prefill load" under balance_by prefill."""
        loads = [self._measured(url) for url in available]
        least, bound = min(loads), sum(loads) / len(loads) * self.max_load_skew
        passing = [url for url, load in zip(available, loads) if not (load > bound and load - least > self.min_load_gap)]

        def holders(block: int, among: Sequence[str]) -> List[str]:
            return [url for url in among if block in self._workers[url].blocks]

        depth = 0
        while depth < len(blocks) and holders(blocks[depth], passing):
            depth += 1
        hit = depth > 0 and depth > self.cache_threshold * len(blocks)  # more than the threshold's share
        if hit:
            candidates, branch = holders(blocks[depth - 1], passing), "cache_aware_prefix_hit"
        else:
            candidates, branch = passing, "cache_aware_key_hit" if key is not None else "cache_aware_no_match"
        if depth < len(blocks) and holders(blocks[depth], available):
            branch = "cache_aware_balance"
        # A prefix hit's candidates hold the first depth blocks; _record looks any other worker up.
        self._depth, self._candidates = (depth, candidates) if hit else (0, [])
        if hit and self.hit_wait_factor:
            # "Prefill load", rule 5: a hit whose worker queues more than the factor times the
            # weight of its matched blocks above the least prefill load is routed as a miss
            chosen = self._among(candidates, blocks, key)
            if self._measured(chosen) - least > self.hit_wait_factor * weight * depth / len(blocks):
                hit, branch = False, "cache_aware_balance"
        if not hit and (key is not None or blocks):
            order = self.clockwise(key) if key is not None else self.clockwise_from(fmix64(blocks[min(depth, len(blocks) - 1)]))
            if self.balance_by == "in_flight":  # step 4: a ring, among workers not above the mean
                mean = sum(loads) / len(loads)
                return next(url for url in order if url in available and self._workers[url].routing_load <= mean), branch
            # "Prefill load", rule 3: the same walk, among the workers within half a mean lease of
            # the least prefill load with no more leases in flight than their mean
            workers = [self._workers[url] for url in available]
            held, leases = sum(w.load for w in workers), sum(w.requests for w in workers)
            bound = least + (held // leases // 2 if leases else 0)
            near = [w for w in workers if self._measured(w.url) <= bound]
            mean = sum(w.requests for w in near) / len(near)
            return next(url for url in order if url in available and self._measured(url) <= bound and self._workers[url].requests <= mean), branch
        return self._among(candidates, blocks, key), branch

    def _among(self, candidates: Sequence[str], blocks: List[int], key: Optional[bytes]) -> str:
        """The least ranked candidate, ties clockwise from the key, else from the first block."""
        low = min(self._rank(url) for url in candidates)  # "Prefill load": below the threshold too
        tied = [url for url in candidates if self._rank(url) == low]
        if len(tied) > 1 and key is not None:
            return next(url for url in self.clockwise(key) if url in tied)
        if len(tied) > 1 and blocks:
            return next(url for url in self.clockwise_from(fmix64(blocks[0])) if url in tied)
        return tied[0]  # candidates keep membership order

    def _record(self, worker: ModelWorker, blocks: Sequence[int]) -> None:
        """contract: "cache_aware", the index: count the matched blocks, then record them all."""
        if self.policy != "cache_aware" or not blocks:
            return
        if self._depth and worker.url in self._candidates:
            matched = self._depth
        else:
            matched = next((i for i, b in enumerate(blocks) if b not in worker.blocks), len(blocks))
        self.prefix_blocks += len(blocks)
        self.prefix_blocks_matched += matched
        self._touch_all(worker, blocks)

    def _touch_all(self, worker: ModelWorker, blocks: Sequence[int]) -> None:
        for block in reversed(blocks):  # each the most recent in turn, from the last to the first
            worker.blocks.pop(block, None)
            worker.blocks[block] = None
            if len(worker.blocks) > self.blocks_per_worker:
                forgotten, _ = worker.blocks.popitem(last=False)
                self._unname(worker, forgotten)

    @staticmethod
    def _unname(worker: ModelWorker, block: int) -> None:
        for name in [name for name, held in worker.engine_names.items() if held == block]:
            del worker.engine_names[name]

    # -- blocks the engines report (contract: "Reported blocks") ---------------------------------

    def _reporting(self, url: str) -> ModelWorker:
        if self.policy != "cache_aware":
            raise ValueError("block reports apply only to cache_aware, not %s" % self.policy)
        return self._workers[self._member(url)]

    def store_blocks(self, url: str, blocks: Sequence[int], engine_hashes: Optional[Sequence[int]] = None) -> None:
        names = list(blocks if engine_hashes is None else engine_hashes)
        if len(names) != len(blocks):
            raise ValueError("engine_hashes must name each of the %d blocks" % len(blocks))
        worker = self._reporting(url)
        self._touch_all(worker, blocks)
        for block, name in zip(blocks, names):
            if block in worker.blocks:
                self._unname(worker, block)
                worker.engine_names[name] = block

    def remove_blocks(self, url: str, engine_hashes: Sequence[int]) -> None:
        worker = self._reporting(url)
        for name in engine_hashes:
            block = worker.engine_names.get(name, name)
            if block in worker.blocks:
                self._unname(worker, block)
                del worker.blocks[block]

    def clear_blocks(self, url: str) -> None:
        worker = self._reporting(url)
        worker.blocks.clear()
        worker.engine_names.clear()

    def indexed_blocks(self) -> List[int]:
        """cache_aware: each member's number of indexed blocks, in membership order."""
        return [len(self._workers[url].blocks) for url in self._order]

    def _bounded(self, key: bytes, preferred: str, available: Sequence[str]) -> Tuple[str, str, str]:
        """contract: "The bounded rule", steps 2-6, over the available workers, not counting this
        request, with "Key memory" before it and "Spill target" for step 4. Loads are weighted
        sums (contract: "Weighted leases")."""
        loads = [self._measured(url) for url in available]
        min_load = min(loads)
        mean_load = sum(loads) / len(loads)
        bound = mean_load * self.max_load_skew

        def overloaded(url: str) -> bool:
            load = self._measured(url)
            return load - min_load > self.min_load_gap and load > bound

        last = self._remembered(key)
        if last is not None and last != preferred and not overloaded(last):
            return last, preferred, "explicit_routing_key_remembered"
        if not overloaded(preferred):
            return preferred, preferred, "explicit_routing_key_hit"
        eligible = [url for url in self.clockwise(key) if self._workers[url].healthy and self._measured(url) <= bound]
        if not eligible:
            return preferred, preferred, "explicit_routing_key_no_eligible_candidate"
        if self.spill_target == "clockwise":
            return eligible[0], preferred, "explicit_routing_key_spillover"
        least = min(self._rank(url) for url in eligible)
        return next(url for url in eligible if self._rank(url) == least), preferred, "explicit_routing_key_spillover"

    # -- key memory (contract: "Key memory") -------------------------------------------------------

    def _remembered(self, key: bytes) -> Optional[str]:
        """The key's last worker while it is valid: the same worker object still a member, healthy,
        and not unhealthy in between."""
        entry = self.memory.get(self.position(key))
        if entry is None:
            return None
        worker, outages = entry
        if self._workers.get(worker.url) is worker and worker.healthy and worker.outages == outages:
            return worker.url
        return None

    def _remember(self, key: bytes, url: str) -> None:
        if not self.memory_capacity:
            return
        position = self.position(key)
        if position in self.memory:
            self.memory.move_to_end(position)
        elif len(self.memory) == self.memory_capacity:
            self.memory.popitem(last=False)
        worker = self._workers[url]
        self.memory[position] = (worker, worker.outages)

    def _least_loaded(self, available: Sequence[str], key: Optional[bytes], choice: Optional[str]) -> str:
        """contract: "Ties by the key": the least load; among ties the first clockwise from the
        explicit key, or without one any tied worker (the library's draw)."""
        least = min(self._workers[url].routing_load for url in available)
        tied = [url for url in available if self._workers[url].routing_load == least]
        if key is not None:
            return next(url for url in self.clockwise(key) if url in tied)
        return self._random_pick(tied, choice)

    def _power_of_two(self, available: Sequence[str], choice: Optional[str]) -> str:
        """contract: "power_of_two": the less loaded of two distinct random workers, ties to the
        first drawn. Any worker can be drawn first, so a worker can be chosen exactly when it is
        alone or some other available worker carries at least its load."""
        load = {url: self._workers[url].routing_load for url in available}
        allowed = [url for url in available if len(available) == 1 or any(load[o] >= load[url] for o in available if o != url)]
        if choice is not None:
            if choice not in allowed:
                raise AssertionError("power_of_two chose %r (loads %r): not the less loaded of any pair" % (choice, load))
            return choice
        first, second = self._rng.sample(list(available), 2) if len(available) > 1 else (available[0], available[0])
        return second if load[second] < load[first] else first

    def _manual(self, key: Optional[bytes], available: Sequence[str], choice: Optional[str]) -> Tuple[str, str]:
        """contract: "manual": a held key keeps its worker while that worker stays available."""
        if key is None:
            return self._assign(available, key, choice), "manual_no_routing_key"
        held = self._held.get(key)
        if held is None:
            return self._assign(available, key, choice), "manual_vacant"
        worker, outages = held
        if self._workers.get(worker.url) is worker and worker.outages == outages:
            return worker.url, "manual_occupied_hit"
        return self._assign(available, key, choice), "manual_occupied_miss"

    def _assign(self, available: Sequence[str], key: Optional[bytes], choice: Optional[str]) -> str:
        if self.assignment_mode == "min_load":
            return self._least_loaded(available, key, choice)
        return self._random_pick(available, choice)

    def _hold(self, key: bytes, url: str) -> None:
        """The key's worker is url now, and the key the most recently routed; beyond max_keys the
        least recently routed key is forgotten."""
        worker = self._workers[url]
        self._held[key] = (worker, worker.outages)
        self._held.move_to_end(key)
        if len(self._held) > self.max_keys:
            self._held.popitem(last=False)

    # -- the public API --------------------------------------------------------------------------

    def select(
        self,
        routing_key: Union[str, bytes, None] = None,
        headers: Optional[HeadersLike] = None,
        random_choice: Optional[str] = None,
        prefix_blocks: Sequence[int] = (),
        weight: int = 1,
    ) -> ModelDecision:
        """Choose without counting (never raises for want of a worker)."""
        worker, preferred, branch, _ = self.decide(routing_key, headers, random_choice, prefix_blocks, weight)
        return ModelDecision(worker, preferred, branch)

    def route(
        self,
        routing_key: Union[str, bytes, None] = None,
        headers: Optional[HeadersLike] = None,
        random_choice: Optional[str] = None,
        prefix_blocks: Sequence[int] = (),
        weight: int = 1,
    ) -> ModelDecision:
        """Choose and count in one step; raises NoWorkerAvailableError (with .branch) if none."""
        _check_weight(weight)
        self._depth, self._candidates = 0, []
        worker, preferred, branch, explicit = self.decide(routing_key, headers, random_choice, prefix_blocks, weight)
        self.branch_counts[branch] += 1
        if worker is None:
            raise NoWorkerAvailableError(branch)
        self._rr += 1  # the round-robin counter advances with every route that chose a worker
        if explicit is not None and branch.startswith("explicit_routing_key_"):
            self._remember(explicit, worker)
        if self.policy == "manual" and explicit is not None:
            self._hold(explicit, worker)
        lease_id = self._take(self._workers[worker], explicit, weight)
        self._record(self._workers[worker], prefix_blocks)
        return ModelDecision(worker, preferred, branch, lease_id)

    def acquire(self, worker_url: str, routing_key: Union[str, bytes, None] = None, weight: int = 1) -> int:
        """Count a request on a member chosen elsewhere (healthy or not); the lease id."""
        _check_weight(weight)
        return self._take(self._workers[self._member(worker_url)], _key_bytes(routing_key) or None, weight)

    def _take(self, worker: ModelWorker, key: Optional[bytes], weight: int) -> int:
        worker.load += weight
        worker.requests += 1
        worker.prefill_load += weight
        worker.prefill_requests += 1
        if key is not None:
            worker.keys[key] = worker.keys.get(key, 0) + 1
        lease_id = next(self._ids)
        self._leases[lease_id] = worker.since[lease_id] = ModelLease(worker, key, weight)
        return lease_id

    def release(self, lease_id: int) -> bool:
        """Undo a lease's count, once; False for an unknown or already released lease."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return False
        worker = lease.worker
        worker.since.pop(lease_id, None)
        worker.load -= lease.weight
        worker.requests -= 1
        if lease.waiting:
            worker.prefill_load -= lease.weight
            worker.prefill_requests -= 1
        assert worker.load >= 0 and worker.requests >= 0, "negative load on %s" % worker.url
        if lease.key is not None:
            count = worker.keys[lease.key] - 1
            if count:
                worker.keys[lease.key] = count
            else:
                del worker.keys[lease.key]
        return True


    def first_token(self, lease_id: int) -> bool:
        """contract: "Prefill load": the lease leaves its worker's prefill load, once; False for an
        unknown, released or already marked lease."""
        lease = self._leases.get(lease_id)
        if lease is None or not lease.waiting:
            return False
        lease.waiting = False
        lease.worker.prefill_load -= lease.weight
        lease.worker.prefill_requests -= 1
        return True


    # -- loads the engines report (contract: "Engine load reports") ------------------------------

    def report_load(self, url: str, load: Optional[int] = None, waiting: Optional[int] = None, waiting_requests: Optional[int] = None) -> None:
        """The report replaces the standing one whole; a figure it leaves out is the leases'.
        Without waiting, waiting_requests times the mean weight of the leases held (rounded down;
        1 when none is held), at most 2^40."""
        for name, value in (("load", load), ("waiting", waiting), ("waiting requests", waiting_requests)):
            if value is not None and not 0 <= value <= MAX_ENGINE_LOAD:
                raise ValueError("engine %s must be from 0 to %d, got %d" % (name, MAX_ENGINE_LOAD, value))
        worker = self._workers[self._member(url)]
        if waiting is None and waiting_requests is not None:
            held = list(self._leases.values())
            mean = sum(lease.weight for lease in held) // len(held) if held else 1
            waiting = min(waiting_requests * mean, MAX_ENGINE_LOAD)
        worker.reported_requests, worker.reported_waiting, worker.since, worker.peer = load, waiting, {}, 0

    def forget_load(self, url: str) -> None:
        worker = self._workers[self._member(url)]
        worker.reported_requests = worker.reported_waiting = None
        worker.peer = 0

    def peer_route(self, url: str, weight: Optional[int] = None, blocks: Sequence[int] = ()) -> None:
        """contract: "Peer routes": the weight joins a standing report's figures (at most 2^40
        per worker between reports); the blocks join a cache_aware index as a route's do."""
        if weight is not None:
            _check_weight(weight)
        worker = self._workers[self._member(url)]
        worker.peer = min(worker.peer + (1 if weight is None else weight), MAX_ENGINE_LOAD)
        if self.policy == "cache_aware" and blocks:
            self._touch_all(worker, blocks)


def _check_weight(weight: object) -> None:
    """contract: "Weighted leases": an integer from 1 to 2^30."""
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise TypeError("weight must be an integer from 1 to %d, got %r" % (MAX_LEASE_WEIGHT, weight))
    if not 1 <= weight <= MAX_LEASE_WEIGHT:
        raise ValueError("weight must be an integer from 1 to %d, got %d" % (MAX_LEASE_WEIGHT, weight))
