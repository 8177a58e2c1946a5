"""The discrete-event engine: groups of streaming siblings on simulated workers, routed by a real
:class:`~bounded_router.Router`.

Every routing decision is the library's: each request takes a lease with ``router.route(key)``
when it arrives and releases it after its last output token, so the router sees exactly the
loads a proxy in front of real workers would. The ``random`` policy's router is seeded from the
workload's seed (``RandomConfig(seed=...)``), so that every run prints the same figures.
``power_of_two`` and ``manual`` with random assignment draw in the library unseeded, so their
figures vary a little from run to run.

Time is simulated (milliseconds), so a run of 3,200 requests takes well under a second.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Hashable, List, Optional, Tuple

from ..lease import Lease
from ..policy import DEFAULT_HASH_RING, BoundedConsistentHashingConfig, ConsistentHashingConfig, ManualConfig, RandomConfig
from ..router import Router
from .model import CostModel, PrefixCache, Workload

__all__ = ["PolicySpec", "Result", "run", "DEFAULT_POLICIES", "placement_label"]

_HASHING = ("consistent_hashing", "bounded_consistent_hashing")
_POLICIES = _HASHING + ("round_robin", "random", "power_of_two", "least_load", "manual")


@dataclass(frozen=True)
class PolicySpec:
    """A routing policy to simulate, with its settings: ``min_load_gap``, ``max_load_skew``,
    ``spill_target``, ``key_memory`` and ``balance_by`` for ``bounded_consistent_hashing``, ``hash_ring``
    (``"xxh64"`` or ``"smg"``) for both hashing policies, ``assignment_mode`` and ``max_keys``
    for ``manual`` (None: the defaults)."""

    policy: str
    min_load_gap: Optional[int] = None
    max_load_skew: Optional[float] = None
    hash_ring: str = DEFAULT_HASH_RING
    spill_target: str = "clockwise"
    key_memory: int = 0
    assignment_mode: Optional[str] = None
    max_keys: Optional[int] = None
    balance_by: str = "in_flight"

    def __post_init__(self) -> None:
        if self.policy not in _POLICIES:
            raise ValueError("unknown policy %r: expected one of %s" % (self.policy, ", ".join(_POLICIES)))
        bounded = self.policy == "bounded_consistent_hashing"
        if bounded and (self.min_load_gap is None or self.max_load_skew is None):
            raise ValueError("bounded_consistent_hashing needs min_load_gap and max_load_skew")
        if not bounded and (self.min_load_gap, self.max_load_skew, self.spill_target, self.key_memory, self.balance_by) != (
            None,
            None,
            "clockwise",
            0,
            "in_flight",
        ):
            raise ValueError(
                "min_load_gap, max_load_skew, spill_target, key_memory and balance_by apply only to bounded_consistent_hashing, not %s"
                % self.policy
            )
        if self.policy != "manual" and (self.assignment_mode, self.max_keys) != (None, None):
            raise ValueError("assignment_mode and max_keys apply only to manual, not %s" % self.policy)
        if self.policy not in _HASHING and self.hash_ring != DEFAULT_HASH_RING:
            raise ValueError("hash_ring applies only to consistent_hashing and bounded_consistent_hashing, not %s" % self.policy)

    @property
    def label(self) -> str:
        ring = "" if self.hash_ring == DEFAULT_HASH_RING else " ring=%s" % self.hash_ring
        if self.min_load_gap is not None and self.max_load_skew is not None:
            spill = "" if self.spill_target == "clockwise" else " spill=%s" % self.spill_target
            memory = " memory=%d" % self.key_memory if self.key_memory else ""
            memory += " load=prefill" if self.balance_by == "prefill" else ""
            return "bounded gap=%d skew=%g%s%s%s" % (self.min_load_gap, self.max_load_skew, spill, memory, ring)
        if self.policy == "manual":
            config = self.manual_config()
            return "manual %s" % config.assignment_mode + ("" if self.max_keys is None else " keys=%d" % config.max_keys)
        return self.policy + ring

    def manual_config(self) -> ManualConfig:
        """The config of a ``manual`` spec, its unset settings at their defaults."""
        defaults = ManualConfig()
        return ManualConfig(self.assignment_mode or defaults.assignment_mode, self.max_keys or defaults.max_keys)

    def make_router(self, worker_urls: List[str], seed: Optional[int] = None) -> Router:
        """A router with this policy (validated by the library: a bad setting raises ValueError);
        ``seed`` seeds a ``random`` router's choices and is ignored by the other policies."""
        if self.policy == "bounded_consistent_hashing":
            assert self.max_load_skew is not None and self.min_load_gap is not None
            config = BoundedConsistentHashingConfig(
                self.max_load_skew, self.min_load_gap, self.hash_ring, self.spill_target, self.key_memory, self.balance_by
            )
            return Router(worker_urls, config)
        if self.policy == "consistent_hashing":
            return Router(worker_urls, ConsistentHashingConfig(self.hash_ring))
        if self.policy == "random":
            return Router(worker_urls, RandomConfig(seed=seed))
        if self.policy == "manual":
            return Router(worker_urls, self.manual_config())
        return Router(worker_urls, policy=self.policy)


#: The policies of the default run: strict, bounded with gaps 1, 2, 4 at skew 1.5 (the upstream
#: A/B), round robin and random.
DEFAULT_POLICIES: Tuple[PolicySpec, ...] = (
    PolicySpec("consistent_hashing"),
    PolicySpec("bounded_consistent_hashing", 1, 1.5),
    PolicySpec("bounded_consistent_hashing", 2, 1.5),
    PolicySpec("bounded_consistent_hashing", 4, 1.5),
    PolicySpec("round_robin"),
    PolicySpec("random"),
)


def placement_label(counts: List[int]) -> str:
    """``"6:2"``: how a group's siblings were spread over the workers, largest share first."""
    return ":".join(str(c) for c in sorted(counts, reverse=True))


def _percentile(sorted_values: List[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


class CacheAndLatency:
    """The figures every simulated run reports from its prompt tokens and times to first token."""

    prompt_tokens: int
    cached_tokens: int
    ttft_ms: List[float]

    @property
    def cached_token_fraction(self) -> float:
        """Prompt tokens served from a cache over all prompt tokens."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def mean_ttft_ms(self) -> float:
        return sum(self.ttft_ms) / len(self.ttft_ms) if self.ttft_ms else math.nan

    @property
    def p99_ttft_ms(self) -> float:
        return _percentile(sorted(self.ttft_ms), 99)


@dataclass
class Result(CacheAndLatency):
    """What one simulated run measured."""

    spec: PolicySpec
    workload: Workload
    cost: CostModel
    placement: Dict[str, int]
    requests: int
    spilled: int
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: List[float] = field(repr=False)
    duration_ms: float
    branches: Dict[str, int]
    leaked_leases: int
    final_loads: Dict[str, int]

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens prefilled (not served from a prefix cache)."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def spill_fraction(self) -> float:
        return self.spilled / self.requests if self.requests else 0.0


    @property
    def throughput_rps(self) -> float:
        """Completed requests per second, from the first arrival to the last token."""
        return self.requests / (self.duration_ms / 1000.0) if self.duration_ms > 0 else math.nan

    def row(self) -> Dict[str, Any]:
        """The JSON row of this run (``--json``)."""
        return {
            "policy": self.spec.policy,
            "min_load_gap": self.spec.min_load_gap,
            "max_load_skew": self.spec.max_load_skew,
            "hash_ring": self.spec.hash_ring,
            "label": self.spec.label,
            "requests": self.requests,
            "placement": dict(self.placement),
            "spill_fraction": self.spill_fraction,
            "cached_token_fraction": self.cached_token_fraction,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prefill_tokens_computed": self.computed_tokens,
            "mean_ttft_ms": self.mean_ttft_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
            "throughput_rps": self.throughput_rps,
            "duration_s": self.duration_ms / 1000.0,
            "branches": {k: v for k, v in self.branches.items() if v},
            "leaked_leases": self.leaked_leases,
            "workload": self.workload.to_dict(),
            "cost": self.cost.to_dict(),
        }


class _Request:
    __slots__ = ("group", "sibling", "arrival", "keys", "worker", "lease", "cached")

    def __init__(self, group: int, sibling: int, arrival: float, keys: List[Hashable]) -> None:
        self.group = group
        self.sibling = sibling
        self.arrival = arrival
        self.keys = keys
        self.worker = -1
        self.lease: Optional[Lease] = None
        self.cached = 0


class _Worker:
    __slots__ = ("cache", "queue", "busy")

    def __init__(self, cost: CostModel) -> None:
        self.cache = PrefixCache(cost.cache_tokens, cost.block_size)
        self.queue: Deque[_Request] = deque()
        self.busy = False


class _Tally:
    __slots__ = ("spilled", "cached", "prompt", "last", "next_group", "done")

    def __init__(self) -> None:
        self.spilled = self.cached = self.prompt = self.next_group = self.done = 0
        self.last = 0.0


def _block_keys(workload: Workload, block_size: int, group: int, sibling: int) -> List[Hashable]:
    # Block j covers tokens [j*B, (j+1)*B); it is shared by the group only if it lies entirely in
    # the shared prefix, otherwise it contains tokens of this sibling alone.
    shared = workload.shared_prefix_tokens
    keys: List[Hashable] = []
    for j in range(workload.prompt_tokens // block_size):
        if (j + 1) * block_size <= shared:
            keys.append((group, -1, j))
        else:
            keys.append((group, sibling, j))
    return keys


def run(spec: PolicySpec, workload: Workload = Workload(), cost: CostModel = CostModel()) -> Result:
    """Simulate ``workload`` on ``workload.workers`` workers routed by ``spec``."""
    urls = ["http://sim-worker-%d" % i for i in range(workload.workers)]
    index = {url: i for i, url in enumerate(urls)}
    rng = random.Random(workload.seed)
    workers = [_Worker(cost) for _ in urls]
    events: List[Tuple[float, int, Callable[[Any], None], Any]] = []
    seq = 0
    now = 0.0
    ttfts: List[float] = []
    placements: "Counter[str]" = Counter()
    group_workers: Dict[int, List[int]] = {}
    remaining: Dict[int, int] = {}
    stats = _Tally()
    prompt_tokens = workload.prompt_tokens

    def schedule(at: float, action: Callable[[Any], None], arg: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, action, arg))

    with spec.make_router(urls, seed=workload.seed * 1000003 + 17) as router:

        def start_group(_: Any) -> None:
            group = stats.next_group
            if group >= workload.groups:
                return
            stats.next_group = group + 1
            group_workers[group] = [0] * workload.workers
            remaining[group] = workload.siblings
            for sibling in range(workload.siblings):
                keys = _block_keys(workload, cost.block_size, group, sibling)
                schedule(now + sibling * workload.sibling_interval_ms, arrive, _Request(group, sibling, 0.0, keys))

        def arrive(request: _Request) -> None:
            request.arrival = now
            key = "group-%d" % request.group
            lease = router.route(key)
            request.lease = lease
            stats.spilled += lease.spilled
            w = index[lease.worker_url]
            request.worker = w
            group_workers[request.group][w] += 1
            worker = workers[w]
            worker.queue.append(request)
            if not worker.busy:
                start_prefill(worker)

        def start_prefill(worker: _Worker) -> None:
            request = worker.queue.popleft()
            worker.busy = True
            cached = min(worker.cache.lookup(request.keys), prompt_tokens)
            request.cached = cached
            schedule(now + cost.prefill_ms(prompt_tokens - cached), prefill_done, request)

        def prefill_done(request: _Request) -> None:
            worker = workers[request.worker]
            worker.cache.insert(request.keys)
            stats.cached += request.cached
            stats.prompt += prompt_tokens
            ttfts.append(now - request.arrival)
            schedule(now + workload.output_tokens * cost.decode_ms_per_token, finish, request)
            worker.busy = False
            if worker.queue:
                start_prefill(worker)

        def finish(request: _Request) -> None:
            assert request.lease is not None
            request.lease.release()
            stats.last = now
            stats.done += 1
            remaining[request.group] -= 1
            if remaining[request.group] == 0:
                placements[placement_label(group_workers.pop(request.group))] += 1
                del remaining[request.group]
                if workload.rate is None:
                    start_group(None)

        if workload.rate is None:
            for _ in range(min(workload.concurrency, workload.groups)):
                schedule(0.0, start_group, None)
        else:
            at = 0.0
            for _ in range(workload.groups):
                schedule(at, start_group, None)
                at += rng.expovariate(workload.rate) * 1000.0

        while events:
            now, _, action, arg = heapq.heappop(events)
            action(arg)

        if stats.done != workload.requests:  # pragma: no cover - an engine bug
            raise RuntimeError("simulation ended with %d of %d requests finished" % (stats.done, workload.requests))
        result = Result(
            spec=spec,
            workload=workload,
            cost=cost,
            placement=dict(sorted(placements.items(), key=lambda kv: [-int(x) for x in kv[0].split(":")])),
            requests=workload.requests,
            spilled=stats.spilled,
            prompt_tokens=stats.prompt,
            cached_tokens=stats.cached,
            ttft_ms=ttfts,
            duration_ms=stats.last,
            branches=router.branch_counts(),
            leaked_leases=router.leaked_leases(),
            final_loads=router.loads(),
        )
    return result
