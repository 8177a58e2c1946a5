"""The rows of a trace replay: the library's policies, the oracle and the prototype, and how each routes.

Every row counts its requests in a real :class:`~bounded_router.Router` (a lease from arrival to
the last output token), so the library's policies see the loads a proxy would. The library's
policies choose with ``router.route(key)``; ``cache_aware`` with ``router.route(prefix_blocks=hash_ids)``
(and the key too when ``keyed``): a trace's block ids already name whole prefixes (block *i*
stands for the prefix through block *i*), which is what chained hashes give, so they are passed as
they are. ``random`` draws from the replay's seeded generator
and counts with ``router.acquire`` (the native generator cannot be seeded: same distribution,
repeatable figures). The ``oracle`` and the ``prototype`` choose in Python and count with
``acquire`` on a ``consistent_hashing`` router, whose ring also names the key's preferred worker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, List, Optional, Sequence, Tuple

from ..lease import Lease
from ..policy import CacheAwareConfig
from ..router import Router
from .engine import PolicySpec
from .oracle import DEFAULT_MARGIN, oracle_choice
from .prototype import PrototypeRouting

if TYPE_CHECKING:
    from .batching import BatchingWorker

__all__ = ["ReplayPolicy", "DEFAULT_REPLAY_POLICIES", "Routing", "make_routing"]

_LIBRARY = ("random", "round_robin", "consistent_hashing", "bounded_consistent_hashing", "cache_aware")
_PSEUDO = ("oracle", "prototype")


@dataclass(frozen=True)
class ReplayPolicy:
    """A row of the replay: a library policy, ``oracle`` (with its margin) or ``prototype``.

    ``min_load_gap`` and ``max_load_skew`` apply to ``bounded_consistent_hashing``,
    ``cache_aware`` and the ``prototype`` (whose gap is in mean prompts, see :mod:`.prototype`),
    ``spill_target`` and ``key_memory`` to ``bounded_consistent_hashing``; ``blocks_per_worker``
    and ``keyed`` (route with the routing key as well as the blocks) to ``cache_aware``
    (``blocks_per_worker`` None: each simulated worker's cache capacity); ``margin`` to the oracle.
    """

    policy: str
    min_load_gap: Optional[int] = None
    max_load_skew: Optional[float] = None
    margin: Optional[int] = None
    spill_target: str = "clockwise"
    key_memory: int = 0
    blocks_per_worker: Optional[int] = None
    keyed: bool = False

    def __post_init__(self) -> None:
        if self.policy not in _LIBRARY + _PSEUDO:
            raise ValueError("unknown replay policy %r: expected one of %s" % (self.policy, ", ".join(_LIBRARY + _PSEUDO)))
        if self.policy == "oracle":
            if self.margin is None or isinstance(self.margin, bool) or not isinstance(self.margin, int) or self.margin < 0:
                raise ValueError("the oracle's margin must be an integer >= 0, got %r" % (self.margin,))
        elif self.margin is not None:
            raise ValueError("margin applies only to the oracle, not %s" % self.policy)
        if (self.blocks_per_worker is not None or self.keyed) and self.policy != "cache_aware":
            raise ValueError("blocks_per_worker and keyed apply only to cache_aware, not %s" % self.policy)
        if self.policy in ("prototype", "cache_aware"):
            if self.min_load_gap is None or self.max_load_skew is None:
                raise ValueError("%s needs min_load_gap and max_load_skew" % self.policy)
        else:
            self.library_spec()  # validates the gap and skew of the library's rows

    def library_spec(self) -> Optional[PolicySpec]:
        """The library policy of this row as the synthetic simulator knows it, or None for
        ``cache_aware`` (see :meth:`make_router`), the oracle and the prototype."""
        if self.policy in _PSEUDO or self.policy == "cache_aware":
            return None
        return PolicySpec(
            self.policy, self.min_load_gap, self.max_load_skew, spill_target=self.spill_target, key_memory=self.key_memory
        )

    def make_router(self, urls: List[str], cache_blocks: int) -> Optional[Router]:
        """A router of this row's library policy over ``urls`` (validated by the library: a bad
        setting raises ValueError), or None for the oracle and the prototype. ``cache_blocks``
        is each simulated worker's cache capacity, cache_aware's default ``blocks_per_worker``."""
        if self.policy == "cache_aware":
            assert self.max_load_skew is not None and self.min_load_gap is not None
            blocks = cache_blocks if self.blocks_per_worker is None else self.blocks_per_worker
            return Router(urls, CacheAwareConfig(max_load_skew=self.max_load_skew, min_load_gap=self.min_load_gap, blocks_per_worker=blocks))
        spec = self.library_spec()
        return spec.make_router(urls) if spec is not None else None

    @property
    def label(self) -> str:
        if self.policy == "cache_aware":
            blocks = "" if self.blocks_per_worker is None else " blocks=%d" % self.blocks_per_worker
            return "cache_aware gap=%d skew=%g%s%s" % (self.min_load_gap or 0, self.max_load_skew or 0, blocks, " keyed" if self.keyed else "")
        if self.policy == "oracle":
            return "oracle margin=%d" % (self.margin or 0)
        if self.policy == "prototype":
            return "prototype gap=%d skew=%g" % (self.min_load_gap or 0, self.max_load_skew or 0)
        spec = self.library_spec()
        return spec.label if spec is not None else self.policy


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
    """How a row routes: :meth:`route` at arrival returns the lease and whether the request spilled."""

    def __init__(self, router: Router, urls: List[str]) -> None:
        self.router = router
        self.urls = urls

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        lease = self.router.route(key)
        return lease, lease.spilled

    def finished(self, worker: int, input_tokens: int) -> None:
        """A request of ``input_tokens`` prompt tokens left ``worker``."""

    def ring_worker(self, key: str) -> str:
        """The worker the key's ring position names (the router of the oracle and the prototype is strict hashing)."""
        url = self.router.select(key).worker_url
        assert url is not None  # every simulated worker is healthy
        return url


class _CacheAwareRouting(Routing):
    def __init__(self, router: Router, urls: List[str], keyed: bool) -> None:
        super().__init__(router, urls)
        self.keyed = keyed

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        lease = self.router.route(key if self.keyed else None, prefix_blocks=blocks)  # type: ignore[arg-type]  # trace ids are ints
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

    def finished(self, worker: int, input_tokens: int) -> None:
        self.loads[worker] -= 1


class _PrototypeRouting(Routing):
    def __init__(self, router: Router, urls: List[str], rule: PrototypeRouting) -> None:
        super().__init__(router, urls)
        self.rule = rule
        self.index = {url: i for i, url in enumerate(urls)}

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        preferred = self.index[self.ring_worker(key)]
        chosen = self.rule.choose(key, preferred, input_tokens)
        return self.router.acquire(self.urls[chosen], key), chosen != preferred

    def finished(self, worker: int, input_tokens: int) -> None:
        self.rule.finished(worker, input_tokens)


def make_routing(
    policy: ReplayPolicy, urls: List[str], workers: "Sequence[BatchingWorker]", seed: int, mean_prompt: float, cache_blocks: int
) -> Routing:
    """The routing of a row over ``urls`` whose simulated caches hold ``cache_blocks`` blocks each
    (the caller closes ``routing.router``)."""
    if policy.policy not in _PSEUDO + ("random",):
        library_router = policy.make_router(urls, cache_blocks)
        assert library_router is not None
        if policy.policy == "cache_aware":
            return _CacheAwareRouting(library_router, urls, policy.keyed)
        return Routing(library_router, urls)
    router = Router(urls, policy="consistent_hashing")
    if policy.policy == "random":
        return _RandomRouting(router, urls, seed)
    if policy.policy == "oracle":
        assert policy.margin is not None
        return _OracleRouting(router, urls, workers, policy.margin)
    assert policy.min_load_gap is not None and policy.max_load_skew is not None
    rule = PrototypeRouting(len(urls), policy.min_load_gap * mean_prompt, policy.max_load_skew)
    return _PrototypeRouting(router, urls, rule)
