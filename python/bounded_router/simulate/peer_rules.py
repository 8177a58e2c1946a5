"""The peers' published routing rules, and rules that see the prefill queue, as rows of the trace replay.

Each rule here reads the simulated workers themselves (their real block caches, as KV events
would give them, and their queues), chooses a worker index, and counts the request with
``acquire`` on a ``consistent_hashing`` router (as the oracle does), so its loads, leaks and
spills are measured like every other row's. docs/trace-replay.md ("The peers' rules") cites the
sources each rule is written from.

* ``llm_d``: llm-d's default scheduling profile. Each worker scores
  ``3 x prefix + 2 x queue + 2 x kv``: ``prefix`` is its matched leading blocks over the request's
  blocks (prefix-cache-scorer), ``queue`` is ``(max_waiting - waiting) / (max_waiting -
  min_waiting)``, 1 when all are equal (queue-scorer), ``kv`` is ``1 - KV-cache utilisation``
  (kv-cache-utilization-scorer); the highest score wins, ties at random (max-score-picker).
* ``dynamo``: NVIDIA Dynamo's KV router cost ``overlap_weight x potential_prefill_blocks +
  potential_decode_blocks``, lowest wins (temperature 0), ties at random. Potential prefill
  tokens are the uncached prompt tokens the router has sent to the worker that have not had
  their first token, plus this request's (``input - overlap x block_size``); potential decode
  blocks are the distinct prompt blocks of the worker's requests in flight plus this request's
  blocks not among them.
* ``oracle_prefill``: the oracle (:mod:`.oracle`) with the prefill queue (requests waiting for
  their first token) as its load instead of the requests in flight.
* ``prefill_bounded`` and ``prefill_cache_aware``: Python prototypes of the library's rules
  (docs/contract.md, "The bounded rule" with a least-loaded spill, and "cache_aware" without a
  key, over the real caches) whose load is one of :data:`LOADS`; ties go to the fewest requests
  in flight, then to the lowest worker index.

A rule's view of the queues and KV utilisation is live, or with ``report_ms`` as of the last
report (every ``report_ms`` of simulated time) plus the requests this router sent since, as a
polled load report gives it. Requests in flight are the router's own leases, always live.
``replicated`` (llm-d only) runs the rule as the replay's R router replicas, each request sent to
one drawn at random, each with its own view: the reports plus what it sent itself.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from ..lease import Lease
from ..router import Router
from .oracle import oracle_choice
from .replay_policies import ReplayPolicy, Routing

if TYPE_CHECKING:
    from .batching import BatchingWorker, Job

__all__ = [
    "PEER_POLICIES",
    "LOADS",
    "DEFAULT_PREFILL_MARGIN",
    "PeerPolicy",
    "WorkerView",
    "llm_d_scores",
    "dynamo_logits",
    "pick_highest",
    "pick_lowest",
    "bounded_choice",
    "cache_aware_choice",
    "peer_rows",
    "replicated_llm_d",
    "parse_prototype",
]

#: The rows this module adds.
PEER_POLICIES = ("llm_d", "dynamo", "oracle_prefill", "prefill_bounded", "prefill_cache_aware")
#: What a prototype counts as a worker's load: requests in flight, requests waiting for their
#: first token, those requests' prompt tokens, or ``waiting_weight x waiting + in flight``.
LOADS = ("in_flight", "waiting", "waiting_tokens", "mixed")

#: llm-d's default scorer weights: prefix-cache-scorer, queue-scorer, kv-cache-utilization-scorer.
LLM_D_WEIGHTS = (3.0, 2.0, 2.0)
#: Dynamo's default ``--kv-overlap-score-weight``.
DYNAMO_OVERLAP_WEIGHT = 1.0
#: cache_aware's default ``cache_threshold`` (SMG's), used by the cache_aware prototype.
CACHE_THRESHOLD = 0.3
#: The prefill-queue oracle's margin unless told (requests waiting above the least waiting worker).
DEFAULT_PREFILL_MARGIN = 2


# -- the rules, as pure functions ------------------------------------------------------------


def llm_d_scores(matched: Sequence[int], request_blocks: int, waiting: Sequence[int], kv_usage: Sequence[float]) -> List[float]:
    """Each worker's llm-d score from its matched leading blocks, queue and KV-cache utilisation (0 to 1)."""
    low, high = min(waiting), max(waiting)
    prefix_w, queue_w, kv_w = LLM_D_WEIGHTS
    scores = []
    for m, q, used in zip(matched, waiting, kv_usage):
        prefix = m / request_blocks if request_blocks else 0.0
        queue = 1.0 if high == low else (high - q) / (high - low)
        scores.append(prefix_w * prefix + queue_w * queue + kv_w * (1.0 - used))
    return scores


def dynamo_logits(
    overlap_blocks: Sequence[int],
    input_tokens: int,
    block_size: int,
    active_prefill_tokens: Sequence[int],
    potential_decode_blocks: Sequence[int],
    overlap_weight: float = DYNAMO_OVERLAP_WEIGHT,
) -> List[float]:
    """Each worker's Dynamo cost: ``overlap_weight x potential prefill blocks + potential decode blocks``."""
    logits = []
    for overlap, active, decode in zip(overlap_blocks, active_prefill_tokens, potential_decode_blocks):
        new_tokens = max(0, input_tokens - overlap * block_size)
        logits.append(overlap_weight * (active + new_tokens) / block_size + decode)
    return logits


def pick_highest(scores: Sequence[float], rng: random.Random) -> int:
    """The index of the highest score, ties drawn at random."""
    best = max(scores)
    return rng.choice([i for i, s in enumerate(scores) if s == best])


def pick_lowest(costs: Sequence[float], rng: random.Random) -> int:
    """The index of the lowest cost, ties drawn at random."""
    best = min(costs)
    return rng.choice([i for i, c in enumerate(costs) if c == best])


def _passes(loads: Sequence[int], gap: int, skew: float) -> List[bool]:
    """Which workers are not overloaded by the bounded test: ``load - min > gap`` and ``load > skew x mean``."""
    low = min(loads)
    bound = skew * sum(loads) / len(loads)
    return [not (load - low > gap and load > bound) for load in loads]


def _least(candidates: Sequence[int], loads: Sequence[int], in_flight: Sequence[int]) -> int:
    return min(candidates, key=lambda i: (loads[i], in_flight[i], i))


def bounded_choice(preferred: int, loads: Sequence[int], in_flight: Sequence[int], gap: int, skew: float) -> int:
    """The bounded rule with a least-loaded spill: ``preferred`` unless it fails the test, else the
    least loaded of the workers at most ``skew x mean`` (ties: fewest in flight, lowest index)."""
    if _passes(loads, gap, skew)[preferred]:
        return preferred
    bound = skew * sum(loads) / len(loads)
    eligible = [i for i, load in enumerate(loads) if load <= bound]
    return _least(eligible, loads, in_flight) if eligible else preferred


def cache_aware_choice(
    cached: Sequence[int],
    request_blocks: int,
    loads: Sequence[int],
    in_flight: Sequence[int],
    gap: int,
    skew: float,
    threshold: float = CACHE_THRESHOLD,
) -> int:
    """cache_aware without a key over real caches: among the workers that pass the bounded test,
    those holding the longest prefix when it is over ``threshold`` of the request, else all of
    them; of those the least loaded (ties: fewest in flight, lowest index)."""
    passing = [i for i, ok in enumerate(_passes(loads, gap, skew)) if ok]
    depth = max(cached[i] for i in passing)
    if depth > threshold * request_blocks:
        passing = [i for i in passing if cached[i] == depth]
    return _least(passing, loads, in_flight)


# -- the rows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerPolicy(ReplayPolicy):
    """A row of this module: ``policy`` is one of :data:`PEER_POLICIES`.

    ``margin`` applies to ``oracle_prefill``; ``load``, ``min_load_gap``, ``max_load_skew`` and
    ``waiting_weight`` (with ``load="mixed"``) to the two prototypes; ``report_ms`` (0: live) to
    every row but ``dynamo``, which counts what it sent itself.
    """

    load: str = "waiting"
    waiting_weight: int = 0
    report_ms: float = 0.0
    replicated: bool = False

    def __post_init__(self) -> None:
        if self.policy not in PEER_POLICIES:
            raise ValueError("unknown peer policy %r: expected one of %s" % (self.policy, ", ".join(PEER_POLICIES)))
        if self.load not in LOADS:
            raise ValueError("load must be one of %s, got %r" % (", ".join(LOADS), self.load))
        if isinstance(self.report_ms, bool) or not isinstance(self.report_ms, (int, float)) or not self.report_ms >= 0:
            raise ValueError("report_ms must be a number of milliseconds >= 0, got %r" % (self.report_ms,))
        if self.policy == "oracle_prefill" and (not isinstance(self.margin, int) or isinstance(self.margin, bool) or self.margin < 0):
            raise ValueError("oracle_prefill's margin must be an integer >= 0, got %r" % (self.margin,))
        if self.policy.startswith("prefill_"):
            if not isinstance(self.min_load_gap, int) or self.min_load_gap < 0:
                raise ValueError("%s needs min_load_gap, an integer >= 0, got %r" % (self.policy, self.min_load_gap))
            if not isinstance(self.max_load_skew, (int, float)) or not self.max_load_skew >= 1:
                raise ValueError("%s needs max_load_skew, a number >= 1, got %r" % (self.policy, self.max_load_skew))
        if self.replicated and (self.policy != "llm_d" or not self.report_ms):
            raise ValueError("only llm_d runs replicated, and with report_ms > 0 (each replica's view is the reports plus its own routes)")
        if (self.waiting_weight > 0) != (self.load == "mixed"):
            raise ValueError("waiting_weight (> 0) goes with load='mixed' and only with it, got %r" % (self.waiting_weight,))

    def make_router(self, urls: List[str], cache_blocks: int) -> Optional[Router]:
        return None  # nothing for the library to judge

    def make_routing(
        self, urls: List[str], workers: "Sequence[BatchingWorker]", seed: int, cache_blocks: int, replicas: int = 1, peer_routes_ms: Optional[float] = None
    ) -> Routing:
        """The peer's rule (``peer_routes_ms`` is the library's feed: the peers' replicas share nothing)."""
        router = Router(urls, policy="consistent_hashing")
        rng = random.Random(seed * 1000003 + 29)
        view = WorkerView(workers, cache_blocks, self.report_ms)
        if self.policy == "llm_d" and self.replicated:
            parts = [_LlmdRouting(router, urls, WorkerView(workers, cache_blocks, self.report_ms), rng) for _ in range(replicas)]
            return _PeerReplicas(parts, seed)
        if self.policy == "llm_d":
            return _LlmdRouting(router, urls, view, rng)
        if self.policy == "dynamo":
            return _DynamoRouting(router, urls, view, rng)
        if self.policy == "oracle_prefill":
            assert self.margin is not None
            margin = self.margin
            return _ChoosingRouting(router, urls, view, lambda r, key, cached, n: oracle_choice(cached, view.waiting(), margin))
        assert self.min_load_gap is not None and self.max_load_skew is not None
        gap, skew = self.min_load_gap, self.max_load_skew
        if self.policy == "prefill_bounded":
            return _ChoosingRouting(
                router, urls, view, lambda r, key, cached, n: bounded_choice(r.ring_index(key), r.loads(self), r.in_flight, gap, skew)
            )
        return _ChoosingRouting(
            router, urls, view, lambda r, key, cached, n: cache_aware_choice(cached, n, r.loads(self), r.in_flight, gap, skew)
        )

    @property
    def label(self) -> str:
        report = " report=%gms" % self.report_ms if self.report_ms else ""
        if self.policy == "llm_d":
            return "llm-d (prefix 3, queue 2, kv 2)" + (" replicas" if self.replicated else "") + report
        if self.policy == "dynamo":
            return "dynamo (overlap %g)" % DYNAMO_OVERLAP_WEIGHT
        if self.policy == "oracle_prefill":
            return "oracle margin=%d load=waiting%s" % (self.margin or 0, report)
        load = "mixed(%d)" % self.waiting_weight if self.load == "mixed" else self.load
        return "%s load=%s gap=%d skew=%g%s" % (self.policy, load, self.min_load_gap or 0, self.max_load_skew or 0, report)


def peer_rows(prefill_margins: Sequence[int] = (DEFAULT_PREFILL_MARGIN,), report_ms: float = 0.0) -> List[PeerPolicy]:
    """The peers' rows: llm-d's default scorers, Dynamo's KV router, the prefill-queue oracles."""
    rows = [PeerPolicy("llm_d", report_ms=report_ms), PeerPolicy("dynamo")]
    return rows + [PeerPolicy("oracle_prefill", margin=m, report_ms=report_ms) for m in prefill_margins]


def replicated_llm_d(report_ms: float) -> PeerPolicy:
    """llm-d's row run as the replay's router replicas, each seeing the loads reported every
    ``report_ms`` plus its own routes (and, as the single view, the workers' real caches)."""
    return PeerPolicy("llm_d", report_ms=report_ms, replicated=True)


def parse_prototype(text: str, report_ms: float = 0.0) -> PeerPolicy:
    """A prototype row from ``RULE:LOAD:GAP:SKEW``: RULE ``cache_aware`` or ``bounded``, LOAD one of
    :data:`LOADS` (``mixed`` as ``mixedK``, K the waiting weight), e.g. ``cache_aware:waiting_tokens:100000:1``."""
    parts = text.split(":")
    rules = ("cache_aware", "bounded")
    if len(parts) != 4 or parts[0] not in rules:
        raise ValueError("--prefill-prototypes: expected RULE:LOAD:GAP:SKEW with RULE one of %s, got %r" % (", ".join(rules), text))
    rule, load, gap, skew = parts
    weight = 0
    if load.startswith("mixed") and load[5:].isdigit():
        load, weight = "mixed", int(load[5:])
    try:
        gap_value, skew_value = int(gap), float(skew)
    except ValueError:
        raise ValueError("--prefill-prototypes: GAP must be an integer and SKEW a number, got %r" % text) from None
    try:
        return PeerPolicy(
            "prefill_" + rule, min_load_gap=gap_value, max_load_skew=skew_value, load=load, waiting_weight=weight, report_ms=report_ms
        )
    except ValueError as e:
        raise ValueError("--prefill-prototypes %r: %s" % (text, e)) from None


class WorkerView:
    """What a rule sees of each worker's prefill queue and KV utilisation: live, or as of the
    last report (every ``report_ms``) plus what this router sent there since."""

    def __init__(self, workers: "Sequence[BatchingWorker]", cache_blocks: int, report_ms: float) -> None:
        self.workers = workers
        # The running batch's KV against a pool the size of the block cache (the model keeps them apart).
        self.kv_tokens = cache_blocks * workers[0].block_size if workers else 0
        self.report_ms = report_ms
        self.next_report = 0.0
        self._waiting, self._tokens, self._kv = self._read()

    def _read(self) -> Tuple[List[int], List[int], List[float]]:
        kv = [min(1.0, w.context / self.kv_tokens) if self.kv_tokens else float(w.context > 0) for w in self.workers]
        return [w.waiting for w in self.workers], [w.waiting_tokens for w in self.workers], kv

    def observe(self, now: float) -> None:
        if self.report_ms and now >= self.next_report:
            self._waiting, self._tokens, self._kv = self._read()
            self.next_report = (math.floor(now / self.report_ms) + 1) * self.report_ms

    def routed(self, worker: int, input_tokens: int) -> None:
        if self.report_ms:
            self._waiting[worker] += 1
            self._tokens[worker] += input_tokens

    def waiting(self) -> List[int]:
        return self._waiting if self.report_ms else [w.waiting for w in self.workers]

    def waiting_tokens(self) -> List[int]:
        return self._tokens if self.report_ms else [w.waiting_tokens for w in self.workers]

    def kv_usage(self) -> List[float]:
        return self._kv if self.report_ms else self._read()[2]


class _PeerRouting(Routing):
    """Chooses a worker index in Python (:meth:`choose`) and counts the request with ``acquire``."""

    def __init__(self, router: Router, urls: List[str], view: WorkerView) -> None:
        super().__init__(router, urls)
        self.view = view
        self.index = {url: i for i, url in enumerate(urls)}
        self.in_flight = [0] * len(urls)

    def choose(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> int:
        raise NotImplementedError

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        chosen = self.choose(key, blocks, input_tokens)
        self.in_flight[chosen] += 1
        self.view.routed(chosen, input_tokens)
        url = self.urls[chosen]
        return self.router.acquire(url, key), url != self.ring_worker(key)

    def observe(self, now: float) -> None:
        self.view.observe(now)

    def finished(self, worker: int, job: "Job") -> None:
        self.in_flight[worker] -= 1

    def ring_index(self, key: str) -> int:
        return self.index[self.ring_worker(key)]

    def cached(self, blocks: Sequence[Hashable]) -> List[int]:
        return [w.cached_blocks(blocks) for w in self.view.workers]

    def loads(self, policy: PeerPolicy) -> List[int]:
        """Each worker's load in the prototype's unit (:data:`LOADS`)."""
        if policy.load == "in_flight":
            return self.in_flight
        if policy.load == "waiting_tokens":
            return self.view.waiting_tokens()
        waiting = self.view.waiting()
        if policy.load == "waiting":
            return waiting
        return [policy.waiting_weight * q + f for q, f in zip(waiting, self.in_flight)]


class _ChoosingRouting(_PeerRouting):
    """A rule given as ``rule(routing, key, cached prefix per worker, request blocks) -> index``."""

    def __init__(self, router: Router, urls: List[str], view: WorkerView, rule: "Callable[[_PeerRouting, str, List[int], int], int]") -> None:
        super().__init__(router, urls, view)
        self.rule = rule

    def choose(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> int:
        return self.rule(self, key, self.cached(blocks), len(blocks))


class _PeerReplicas(Routing):
    """R routings of a peer rule, one drawn at random per request; they count their leases on
    one router (the first part's), so only their views differ."""

    def __init__(self, parts: Sequence[_PeerRouting], seed: int) -> None:
        super().__init__(parts[0].router, parts[0].urls)
        self.parts = list(parts)
        self.rng = random.Random(seed * 7919 + 5)

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        return self.parts[self.rng.randrange(len(self.parts))].route(key, blocks, input_tokens)

    def observe(self, now: float) -> None:
        for part in self.parts:
            part.observe(now)


class _LlmdRouting(_PeerRouting):
    def __init__(self, router: Router, urls: List[str], view: WorkerView, rng: random.Random) -> None:
        super().__init__(router, urls, view)
        self.rng = rng

    def choose(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> int:
        scores = llm_d_scores(self.cached(blocks), len(blocks), self.view.waiting(), self.view.kv_usage())
        return pick_highest(scores, self.rng)


class _DynamoRouting(_PeerRouting):
    """Dynamo's router keeps its own count of what it sent: prefill tokens until the first token,
    prompt blocks until the request finishes."""

    def __init__(self, router: Router, urls: List[str], view: WorkerView, rng: random.Random) -> None:
        super().__init__(router, urls, view)
        self.rng = rng
        self.block_size = view.workers[0].block_size
        self.prefill_tokens = [0] * len(urls)
        self.active: List["Counter[Hashable]"] = [Counter() for _ in urls]
        self.charged: Dict[int, int] = {}  # id(lease) -> prefill tokens charged to its worker
        self.last_charge = 0

    def choose(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> int:
        overlap = self.cached(blocks)
        distinct = set(blocks)
        decode = [len(active) + sum(1 for b in distinct if b not in active) for active in self.active]
        logits = dynamo_logits(overlap, input_tokens, self.block_size, self.prefill_tokens, decode)
        chosen = pick_lowest(logits, self.rng)
        self.last_charge = max(0, input_tokens - overlap[chosen] * self.block_size)
        self.prefill_tokens[chosen] += self.last_charge
        self.active[chosen].update(distinct)
        return chosen

    def route(self, key: str, blocks: Sequence[Hashable], input_tokens: int) -> Tuple[Lease, bool]:
        lease, spilled = super().route(key, blocks, input_tokens)
        self.charged[id(lease)] = self.last_charge
        return lease, spilled

    def first_token(self, worker: int, job: "Job") -> None:
        self.prefill_tokens[worker] -= self.charged.pop(id(job.payload))

    def finished(self, worker: int, job: "Job") -> None:
        super().finished(worker, job)
        active = self.active[worker]
        active.subtract(set(job.blocks))
        for block in set(job.blocks):
            if active[block] <= 0:
                del active[block]
