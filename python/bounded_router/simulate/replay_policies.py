"""The rows of a trace replay: the library's policies and the oracle, and how each routes.

Every row counts its requests in a real :class:`~bounded_router.Router` (a lease from arrival to
the last output token), so the library's policies see the loads a proxy would. The library's
policies choose with ``router.route(key)``; ``cache_aware`` with
``router.route(prefix_blocks=hash_ids)`` (and the key too when ``keyed``): a trace's block ids
already name whole prefixes (block *i* stands for the prefix through block *i*), which is what
chained hashes give, so they are passed as they are. ``random`` draws from the replay's seeded generator
and counts with ``router.acquire`` (same distribution, repeatable figures; it predates
``RandomConfig(seed=...)`` and is kept so the figures of docs/trace-replay.md stay reproducible).
The ``oracle`` chooses in Python and counts with ``acquire`` on a ``consistent_hashing`` router,
whose ring also names the key's preferred worker.

A ``bounded_consistent_hashing`` or ``cache_aware`` row with ``weights="tokens"`` routes with
``weight=prompt tokens``: the request's ``input_length`` is its lease weight. The replay marks each
lease's first token (``Lease.first_token``) when its request gets its first token, so a
``cache_aware`` row with ``balance_by="prefill"`` sees each worker's prefill queue
(docs/contract.md, "Prefill load").
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Deque, Hashable, List, Optional, Sequence, Tuple

from ..lease import Lease
from ..policy import CacheAwareConfig
from ..router import Router
from .engine import PolicySpec
from .oracle import DEFAULT_MARGIN, oracle_choice

if TYPE_CHECKING:
    from .batching import BatchingWorker, Job

__all__ = ["ReplayPolicy", "DEFAULT_REPLAY_POLICIES", "Routing", "WEIGHTS", "make_routing"]

_LIBRARY = ("random", "round_robin", "consistent_hashing", "bounded_consistent_hashing", "power_of_two", "least_load", "manual", "cache_aware")
#: What a lease weighs: one unit per request (the library's default), or the request's prompt tokens.
WEIGHTS = ("requests", "tokens")


@dataclass(frozen=True)
class ReplayPolicy:
    """A row of the replay: a library policy, or ``oracle`` (with its margin).

    ``min_load_gap``, ``max_load_skew``, ``spill_target``, ``key_memory`` and ``weights`` apply to
    ``bounded_consistent_hashing`` (with ``weights="tokens"`` the gap is in prompt tokens);
    ``min_load_gap``, ``max_load_skew``, ``weights`` and ``balance_by`` (``balance_by`` to
    ``bounded_consistent_hashing`` too) to ``cache_aware`` too, and ``blocks_per_worker`` and
    ``keyed`` (route with the routing key as well as the blocks) and ``events`` (each router also
    learns the blocks the simulated workers report storing and evicting, after
    ``ReplayConfig.events_delay_ms``) and ``hit_wait_factor`` (with ``balance_by="prefill"``) to
    ``cache_aware`` only (``blocks_per_worker`` None: each simulated worker's cache capacity);
    ``margin`` to the oracle.
    """

    policy: str
    min_load_gap: Optional[int] = None
    max_load_skew: Optional[float] = None
    margin: Optional[int] = None
    spill_target: str = "clockwise"
    key_memory: int = 0
    weights: str = "requests"
    blocks_per_worker: Optional[int] = None
    keyed: bool = False
    balance_by: str = "in_flight"
    events: bool = False
    hit_wait_factor: float = 0.0

    def __post_init__(self) -> None:
        if self.policy not in _LIBRARY + ("oracle",):
            raise ValueError("unknown replay policy %r: expected one of %s, oracle" % (self.policy, ", ".join(_LIBRARY)))
        if self.weights not in WEIGHTS:
            raise ValueError("weights must be one of %s, got %r" % (", ".join(WEIGHTS), self.weights))
        if self.weights != "requests" and self.policy not in ("bounded_consistent_hashing", "cache_aware"):
            raise ValueError("weights apply only to bounded_consistent_hashing and cache_aware, not %s" % self.policy)
        if self.policy == "oracle":
            if self.margin is None or isinstance(self.margin, bool) or not isinstance(self.margin, int) or self.margin < 0:
                raise ValueError("the oracle's margin must be an integer >= 0, got %r" % (self.margin,))
        elif self.margin is not None:
            raise ValueError("margin applies only to the oracle, not %s" % self.policy)
        if (self.blocks_per_worker is not None or self.keyed or self.events or self.hit_wait_factor) and self.policy != "cache_aware":
            raise ValueError("blocks_per_worker, keyed, events and hit_wait_factor apply only to cache_aware, not %s" % self.policy)
        if self.balance_by != "in_flight" and self.policy not in ("bounded_consistent_hashing", "cache_aware"):
            raise ValueError("balance_by applies only to bounded_consistent_hashing and cache_aware, not %s" % self.policy)
        if self.policy == "cache_aware":
            if self.min_load_gap is None or self.max_load_skew is None:
                raise ValueError("cache_aware needs min_load_gap and max_load_skew")
        else:
            self.library_spec()  # validates the gap and skew of the library's rows

    def library_spec(self) -> Optional[PolicySpec]:
        """The library policy of this row as the synthetic simulator knows it, or None for
        ``cache_aware`` (see :meth:`make_router`) and the oracle."""
        if self.policy in ("oracle", "cache_aware"):
            return None
        return PolicySpec(
            self.policy,
            self.min_load_gap,
            self.max_load_skew,
            spill_target=self.spill_target,
            key_memory=self.key_memory,
            balance_by=self.balance_by,
        )

    def make_router(self, urls: List[str], cache_blocks: int) -> Optional[Router]:
        """A router of this row's library policy over ``urls`` (validated by the library: a bad
        setting raises ValueError), or None for the oracle. ``cache_blocks`` is each simulated
        worker's cache capacity, cache_aware's default ``blocks_per_worker``."""
        if self.policy == "cache_aware":
            assert self.max_load_skew is not None and self.min_load_gap is not None
            blocks = cache_blocks if self.blocks_per_worker is None else self.blocks_per_worker
            config = CacheAwareConfig(
                max_load_skew=self.max_load_skew,
                min_load_gap=self.min_load_gap,
                blocks_per_worker=blocks,
                balance_by=self.balance_by,
                hit_wait_factor=self.hit_wait_factor,
            )
            return Router(urls, config)
        spec = self.library_spec()
        return spec.make_router(urls) if spec is not None else None

    def make_routing(
        self, urls: List[str], workers: "Sequence[BatchingWorker]", seed: int, cache_blocks: int, replicas: int = 1, peer_routes_ms: Optional[float] = None
    ) -> "Routing":
        """How this row routes over ``urls`` (see :func:`make_routing`); a row of another kind overrides it."""
        return make_routing(self, urls, workers, seed, cache_blocks, replicas, peer_routes_ms)

    @property
    def label(self) -> str:
        if self.policy == "cache_aware":
            extra = "" if self.blocks_per_worker is None else " blocks=%d" % self.blocks_per_worker
            extra += " keyed" if self.keyed else ""
            extra += " events" if self.events else ""
            extra += " load=prefill" if self.balance_by == "prefill" else ""
            extra += " hit_wait=%g" % self.hit_wait_factor if self.hit_wait_factor else ""
            extra += " weights=tokens" if self.weights == "tokens" else ""
            return "cache_aware gap=%d skew=%g%s" % (self.min_load_gap or 0, self.max_load_skew or 0, extra)
        if self.policy == "oracle":
            return "oracle margin=%d" % (self.margin or 0)
        spec = self.library_spec()
        label = spec.label if spec is not None else self.policy
        return label + " weights=tokens" if self.weights == "tokens" else label


#: The rows of the default replay: the baselines, strict and bounded hashing (gap 2, skew 1.5,
#: the library's defaults) and the oracle.
DEFAULT_REPLAY_POLICIES: Tuple[ReplayPolicy, ...] = (
    ReplayPolicy("random"),
    ReplayPolicy("round_robin"),
    ReplayPolicy("consistent_hashing"),
    ReplayPolicy("bounded_consistent_hashing", 2, 1.5),
    ReplayPolicy("oracle", margin=DEFAULT_MARGIN),
)


class Routing:
    """How a row routes: :meth:`route` at arrival returns the lease and whether the request spilled.

    ``token_weights``: each lease weighs the request's prompt tokens, not 1."""

    def __init__(self, router: Router, urls: List[str], token_weights: bool = False) -> None:
        self.router = router
        self.urls = urls
        self.token_weights = token_weights

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        lease = self.router.route(key, weight=self.weight(input_tokens))
        return lease, lease.spilled

    def weight(self, input_tokens: int) -> Optional[int]:
        """The lease weight of a request of ``input_tokens`` (None: the default, 1)."""
        return input_tokens if self.token_weights else None

    def observe(self, now: float) -> None:
        """The replay's clock reached ``now`` (ms), before the event at that time is handled."""

    def first_token(self, worker: int, job: "Job") -> None:
        """``job`` got its first token on ``worker``: it left the worker's prefill queue."""

    def finished(self, worker: int, job: "Job") -> None:
        """``job`` left ``worker`` (its lease is released by the caller)."""

    @property
    def routers(self) -> List[Router]:
        """Every router of the row (one, unless replicated)."""
        return [self.router]

    def ring_worker(self, key: str) -> str:
        """The worker the key's ring position names (for rows that route on a strict hashing router)."""
        url = self.router.select(key).worker_url
        assert url is not None  # every simulated worker is healthy
        return url


class _CacheAwareRouting(Routing):
    def __init__(self, router: Router, urls: List[str], keyed: bool, token_weights: bool) -> None:
        super().__init__(router, urls, token_weights)
        self.keyed = keyed

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        weight = self.weight(input_tokens)
        lease = self.router.route(key if self.keyed else None, prefix_blocks=blocks, weight=weight)  # type: ignore[arg-type]  # trace ids are ints
        return lease, lease.spilled


class _RandomRouting(Routing):
    def __init__(self, router: Router, urls: List[str], seed: int) -> None:
        super().__init__(router, urls)
        self.rng = random.Random(seed * 1000003 + 17)

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        return self.router.acquire(self.urls[self.rng.randrange(len(self.urls))], key), False


class _OracleRouting(Routing):
    def __init__(self, router: Router, urls: List[str], workers: "Sequence[BatchingWorker]", margin: int) -> None:
        super().__init__(router, urls)
        self.workers = workers
        self.margin = margin
        self.loads = [0] * len(urls)

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        cached = [worker.cached_blocks(blocks) for worker in self.workers]
        chosen = oracle_choice(cached, self.loads, self.margin)
        self.loads[chosen] += 1
        url = self.urls[chosen]
        return self.router.acquire(url, key), url != self.ring_worker(key)

    def finished(self, worker: int, job: "Job") -> None:
        self.loads[worker] -= 1


class _Replicas(Routing):
    """R independent routings of one library row, as R router processes in front of the same
    workers: each request goes to one of them drawn uniformly (from the replay's seed), and each
    counts only its own leases and records only its own routes, unless ``peer_routes_ms`` is set:
    then each route reaches the other replicas that many ms later (``Router.peer_route``)."""

    def __init__(self, parts: List[Routing], seed: int, peer_routes_ms: Optional[float] = None) -> None:
        super().__init__(parts[0].router, parts[0].urls)
        self.parts = parts
        self.rng = random.Random(seed * 7919 + 5)
        self.peer_routes_ms = peer_routes_ms
        self.now = 0.0
        # Routes on their way to the other replicas, in the order they were taken (one delay for
        # all, so also in the order they arrive): (arrival, sender, worker URL, weight, blocks).
        self.peer_routes: Deque[Tuple[float, Routing, str, Optional[int], Sequence[Hashable]]] = collections.deque()

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        part = self.parts[self.rng.randrange(len(self.parts))]
        lease, spilled = part.route(key, blocks, input_tokens)
        if self.peer_routes_ms is not None:
            assert lease.worker_url is not None
            weight = part.weight(input_tokens)
            self.peer_routes.append((self.now + self.peer_routes_ms, part, lease.worker_url, weight, blocks))
        return lease, spilled

    def observe(self, now: float) -> None:
        self.now = now
        while self.peer_routes and self.peer_routes[0][0] <= now:
            _, sender, url, weight, blocks = self.peer_routes.popleft()
            for part in self.parts:
                if part is not sender:
                    part.router.peer_route(url, weight=weight, prefix_blocks=blocks or None)  # type: ignore[arg-type]  # trace ids are ints

    @property
    def routers(self) -> List[Router]:
        return [part.router for part in self.parts]


def _library_routing(policy: ReplayPolicy, urls: List[str], cache_blocks: int) -> Routing:
    library_router = policy.make_router(urls, cache_blocks)
    assert library_router is not None
    if policy.policy == "cache_aware":
        return _CacheAwareRouting(library_router, urls, policy.keyed, token_weights=policy.weights == "tokens")
    return Routing(library_router, urls, token_weights=policy.weights == "tokens")


def make_routing(
    policy: ReplayPolicy,
    urls: List[str],
    workers: "Sequence[BatchingWorker]",
    seed: int,
    cache_blocks: int,
    replicas: int = 1,
    peer_routes_ms: Optional[float] = None,
) -> Routing:
    """The routing of a row over ``urls`` whose simulated caches hold ``cache_blocks`` blocks each,
    by ``replicas`` independent routers for the library's rows (the caller closes ``routing.routers``),
    which hear each other's routes ``peer_routes_ms`` later when set.
    The oracle and ``random`` see no router state, so they are never replicated."""
    if policy.policy not in ("oracle", "random"):
        if replicas == 1:
            return _library_routing(policy, urls, cache_blocks)
        return _Replicas([_library_routing(policy, urls, cache_blocks) for _ in range(replicas)], seed, peer_routes_ms)
    router = Router(urls, policy="consistent_hashing")
    if policy.policy == "random":
        return _RandomRouting(router, urls, seed)
    assert policy.margin is not None
    return _OracleRouting(router, urls, workers, policy.margin)
