"""Trace replay: the requests of a trace on simulated batching workers, routed by each row's policy.

Arrivals keep the trace's timing, stretched or compressed by one factor so that the offered
prefill work per worker is ``load`` times a worker's prefill capacity: the trace's prompt tokens,
prefilled in full chunks with no cache (:meth:`StepCosts.prefill_ms_at_capacity`), divided by
``workers`` times the arrival span. Caches cut the work actually done, decode adds to it, so the
achieved utilisation (the fraction of worker time spent in steps) is reported beside it.

Each request is routed when it arrives and released when its last token is out, so the leases
in the router are the requests in flight. Time is simulated; the run is repeatable for a seed.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from .batching import EVENTS_AT, BatchingWorker, Job, StepCosts
from .engine import CacheAndLatency
from .model import _check_number
from .replay_policies import ReplayPolicy
from .trace import Trace

__all__ = ["ReplayConfig", "ReplayResult", "replay", "arrival_scale"]

#: Per-worker cache capacity when neither --cache-blocks nor --cache-fraction is given: this
#: fraction of the trace's distinct blocks.
DEFAULT_CACHE_FRACTION = 0.02
#: The offered prefill load of a replay unless told: the heavy load of docs/trace-replay.md.
DEFAULT_LOAD = 0.8
#: What an engine load report can say of the prefill queue (``ReplayConfig.load_waiting``).
LOAD_WAITING = ("tokens", "uncached", "requests")


@dataclass(frozen=True)
class ReplayConfig:
    """The fleet and the load of a replay.

    Attributes:
        workers: number of workers.
        load: offered prefill work per worker as a fraction of its capacity (None: the trace's own timing).
        cache_blocks: block-cache capacity of each worker; None: ``cache_fraction`` of the trace's distinct blocks.
        cache_fraction: see ``cache_blocks``.
        costs: what a step costs.
        seed: seeds the ``random`` row.
        ring_layout: names the workers ``http://replay-worker-<i>`` (0) or
            ``http://replay-worker-<i>.<ring_layout>``; the hashing policies place workers on the ring
            by URL, so each layout is another draw of the ring (how much a figure owes to one draw).
        replicas: independent routers of each library row, each request sent to a random one
            (router replicas in front of the same workers; see ``make_routing``).
        events_delay_ms: how long a worker's KV cache events (blocks stored, blocks evicted) take
            to reach every router, for the rows with ``events``.
        events_at: when a worker reports a prompt's blocks stored (``batching.EVENTS_AT``; the
            default, ``step-end``, is vLLM's and SGLang's).
        load_interval_ms: when set, every router of the library's rows is told each worker's
            load this often, as a poll of the engines' load endpoints would (``Router.report_load``):
            its requests in flight (running and waiting, every replica's; rows whose leases count
            requests) and its prefill queue (see ``load_waiting``); None: no reports.
        load_waiting: what the reports say of the prefill queue to rows whose leases weigh prompt
            tokens (unit-weight rows get its requests): ``"tokens"``, the prompt tokens of the
            requests waiting for their first token; ``"uncached"``, those not in the cache (SGLang's
            ``num_waiting_uncached_tokens``); ``"requests"``, their number alone (vLLM's
            ``num_requests_waiting``; the router weighs each as its mean lease).
        peer_routes_ms: when set (with ``replicas`` > 1), each route a replica takes reaches the
            other replicas this many ms later (``Router.peer_route``, docs/contract.md "Peer
            routes"), as a peer-route feed between them would; None: replicas share nothing.
        spread_ticks: requests that share a timestamp arrive at random times (from ``seed``)
            between it and the trace's next timestamp, in their order, as they would have before
            a trace rounded them to its ticks (see ``arrival_times``); False: together.
    """

    workers: int = 8
    load: Optional[float] = DEFAULT_LOAD
    cache_blocks: Optional[int] = None
    cache_fraction: float = DEFAULT_CACHE_FRACTION
    costs: StepCosts = StepCosts()
    seed: int = 1
    ring_layout: int = 0
    replicas: int = 1
    events_delay_ms: float = 0.0
    load_interval_ms: Optional[float] = None
    events_at: str = EVENTS_AT[0]
    load_waiting: str = "uncached"
    peer_routes_ms: Optional[float] = None
    spread_ticks: bool = False

    def __post_init__(self) -> None:
        _check_number("workers", self.workers, 1, integer=True)
        if self.load is not None:
            _check_number("load", self.load, 0.0, strict=True)
        if self.cache_blocks is not None:
            _check_number("cache_blocks", self.cache_blocks, 0, integer=True)
        _check_number("cache_fraction", self.cache_fraction, 0.0)
        _check_number("seed", self.seed, 0, integer=True)
        _check_number("ring_layout", self.ring_layout, 0, integer=True)
        _check_number("replicas", self.replicas, 1, integer=True)
        _check_number("events_delay_ms", self.events_delay_ms, 0.0)
        if self.load_interval_ms is not None:
            _check_number("load_interval_ms", self.load_interval_ms, 0.0, strict=True)
        if self.peer_routes_ms is not None:
            _check_number("peer_routes_ms", self.peer_routes_ms, 0.0)
            if self.replicas == 1:
                raise ValueError("peer_routes_ms needs replicas > 1: one router has no peers")
        if not isinstance(self.spread_ticks, bool):
            raise ValueError("spread_ticks must be True or False, got %r" % (self.spread_ticks,))
        if self.events_at not in EVENTS_AT:
            raise ValueError("events_at must be one of %s, got %r" % (", ".join(EVENTS_AT), self.events_at))
        if self.load_waiting not in LOAD_WAITING:
            raise ValueError("load_waiting must be one of %s, got %r" % (", ".join(LOAD_WAITING), self.load_waiting))

    def cache_capacity(self, trace: Trace) -> int:
        """Blocks each worker's cache holds for ``trace``."""
        if self.cache_blocks is not None:
            return self.cache_blocks
        return int(round(self.cache_fraction * trace.unique_blocks))

    def to_dict(self) -> Dict[str, Any]:
        return {
            "workers": self.workers,
            "load": self.load,
            "cache_blocks": self.cache_blocks,
            "cache_fraction": self.cache_fraction,
            "costs": self.costs.to_dict(),
            "seed": self.seed,
            "ring_layout": self.ring_layout,
            "replicas": self.replicas,
            "events_delay_ms": self.events_delay_ms,
            "load_interval_ms": self.load_interval_ms,
            "events_at": self.events_at,
            "load_waiting": self.load_waiting,
            "peer_routes_ms": self.peer_routes_ms,
            "spread_ticks": self.spread_ticks,
        }

    def worker_urls(self) -> List[str]:
        """The simulated workers' URLs (see ``ring_layout``)."""
        suffix = ".%d" % self.ring_layout if self.ring_layout else ""
        return ["http://replay-worker-%d%s" % (i, suffix) for i in range(self.workers)]


def arrival_scale(trace: Trace, config: ReplayConfig) -> float:
    """The factor applied to the trace's timestamps so that the offered prefill load is ``config.load``."""
    if config.load is None:
        return 1.0
    if trace.span_ms <= 0:
        raise ValueError("the trace's requests all arrive at the same time: --load needs a span of arrivals")
    offered_ms = config.costs.prefill_ms_at_capacity(trace.prompt_tokens)
    return offered_ms / (config.workers * config.load * trace.span_ms)


def arrival_times(trace: Trace, scale: float, spread_ticks: bool = False, seed: int = 1) -> List[float]:
    """Each request's arrival in the replay, in ms from the first: its timestamp, scaled. With
    ``spread_ticks`` the requests at one timestamp are spread over the time to the next one (drawn
    uniformly, then sorted so the trace's order stays), since a trace that records arrivals in
    ticks (the Mooncake conversation trace's 3 s) puts at one instant requests that came apart;
    the requests at the last timestamp keep it, having no next one."""
    stamps = [r.timestamp_ms for r in trace.requests]
    start = stamps[0] if stamps else 0.0
    times = [(t - start) * scale for t in stamps]
    if not spread_ticks:
        return times
    rng = random.Random(seed * 104729 + 3)
    first = 0
    while first < len(stamps):
        end = first
        while end < len(stamps) and stamps[end] == stamps[first]:
            end += 1
        if end < len(stamps):
            tick = (stamps[end] - stamps[first]) * scale
            offsets = sorted(rng.random() * tick for _ in range(end - first))
            for i, offset in zip(range(first, end), offsets):
                times[i] += offset
        first = end
    return times


@dataclass
class ReplayResult(CacheAndLatency):
    """What one row of a replay measured."""

    policy: ReplayPolicy
    config: ReplayConfig
    trace_requests: int
    cache_blocks: int
    requests: int
    spilled: int
    spill_excess: List[int] = field(repr=False)
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: List[float] = field(repr=False)
    duration_ms: float
    busy_ms: List[float]
    prefill_busy_ms: List[float]
    arrival_span_ms: float
    branches: Dict[str, int]
    leaked_leases: int
    final_loads: Dict[str, int]
    placements: List[int] = field(repr=False)

    @property
    def spill_fraction(self) -> float:
        return self.spilled / self.requests if self.requests else 0.0

    @property
    def spills_to_least_loaded(self) -> float:
        """Fraction of spills that went to a worker with the fewest requests in flight."""
        return sum(1 for e in self.spill_excess if e == 0) / len(self.spill_excess) if self.spill_excess else math.nan

    @property
    def mean_spill_excess(self) -> float:
        """Requests in flight on a spill's target above the least loaded worker, on average."""
        return sum(self.spill_excess) / len(self.spill_excess) if self.spill_excess else math.nan


    def _fraction(self, ms: float) -> float:
        return ms / self.duration_ms if self.duration_ms > 0 else 0.0

    @property
    def utilisation(self) -> float:
        """Achieved prefill utilisation: mean fraction of worker time in steps that prefill (from 0 to the last token).

        The counterpart of the offered ``load``: a worker with a waiting prompt prefills in every
        step, so this reaches 1 on a worker that never catches up.
        """
        return self._fraction(sum(self.prefill_busy_ms) / len(self.prefill_busy_ms))

    @property
    def max_utilisation(self) -> float:
        """The achieved prefill utilisation of the busiest worker."""
        return self._fraction(max(self.prefill_busy_ms))

    @property
    def busy_fraction(self) -> float:
        """Mean fraction of worker time in any step (decode included): what a GPU busy meter shows."""
        return self._fraction(sum(self.busy_ms) / len(self.busy_ms))

    def row(self) -> Dict[str, Any]:
        """The JSON row of this result (``--json``)."""
        return {
            "policy": self.policy.policy,
            "label": self.policy.label,
            "min_load_gap": self.policy.min_load_gap,
            "max_load_skew": self.policy.max_load_skew,
            "margin": self.policy.margin,
            "spill_target": self.policy.spill_target,
            "key_memory": self.policy.key_memory,
            "weights": self.policy.weights,
            "blocks_per_worker": self.policy.blocks_per_worker,
            "keyed": self.policy.keyed,
            "events": self.policy.events,
            "requests": self.requests,
            "mean_ttft_ms": self.mean_ttft_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
            "cached_token_fraction": self.cached_token_fraction,
            "spill_fraction": self.spill_fraction,
            "spills_to_least_loaded": self.spills_to_least_loaded,
            "mean_spill_excess": self.mean_spill_excess,
            "utilisation": self.utilisation,
            "max_utilisation": self.max_utilisation,
            "busy_fraction": self.busy_fraction,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "duration_s": self.duration_ms / 1000.0,
            "arrival_span_s": self.arrival_span_ms / 1000.0,
            "cache_blocks_per_worker": self.cache_blocks,
            "branches": {k: v for k, v in self.branches.items() if v},
            "leaked_leases": self.leaked_leases,
            "config": self.config.to_dict(),
        }


_ARRIVE = 0
_STEP_END = 1
_EVENTS = 2
_LOAD_REPORT = 3


class _Run:
    """The state of one replay: the event queue, the workers, the routing and the tallies."""

    def __init__(self, policy: ReplayPolicy, trace: Trace, config: ReplayConfig) -> None:
        self.trace = trace
        urls = config.worker_urls()
        self.index = {url: i for i, url in enumerate(urls)}
        self.capacity = config.cache_capacity(trace)
        self.workers = [BatchingWorker(config.costs, self.capacity, trace.block_size) for _ in urls]
        self.scale = arrival_scale(trace, config)
        arrivals = arrival_times(trace, self.scale, config.spread_ticks, config.seed)
        # (time, order, kind, subject, version): the order keeps ties first come, first served.
        self.events = [(at, i, _ARRIVE, i, 0) for i, at in enumerate(arrivals)]
        heapq.heapify(self.events)
        self.order = len(self.events)
        self.routing = policy.make_routing(urls, self.workers, config.seed, self.capacity, config.replicas, config.peer_routes_ms)
        self.urls = urls
        self.events_delay_ms = config.events_delay_ms
        # The KV cache events in flight to the routers: (worker, stored, evicted), by number.
        self.pending_reports: Dict[int, Tuple[int, List[Any], List[Any]]] = {}
        if policy.events:
            for worker in self.workers:
                worker.reports = []
                worker.events_at = config.events_at
        # Load reports go to the library's rows, in the unit of their lease weights.
        self.load_interval_ms = config.load_interval_ms
        if policy.policy in ("oracle", "random"):
            self.load_interval_ms = None
        self.load_waiting = config.load_waiting if policy.weights == "tokens" else None
        self.served = 0
        if self.load_interval_ms is not None:
            heapq.heappush(self.events, (0.0, -1, _LOAD_REPORT, 0, 0))
        self.ttfts: List[float] = []
        self.placements = [-1] * len(trace.requests)
        self.cached = self.prompt = 0
        # Requests in flight per worker, to see where spills land: the first worker clockwise
        # under the load bound need not be one with room.
        self.in_flight = [0] * config.workers
        self.spill_excess: List[int] = []
        self.last = 0.0
        self.arrived: Set[int] = set()  # workers given a request at this instant, to start

    def schedule(self, w: int, end: Optional[float]) -> None:
        if end is not None:
            self.order += 1
            heapq.heappush(self.events, (end, self.order, _STEP_END, w, self.workers[w].version))

    def arrive(self, i: int, now: float) -> None:
        request = self.trace.requests[i]
        lease, spilled = self.routing.route(self.trace.keys[i], request.blocks, request.input_tokens)
        w = self.index[lease.worker_url]
        if spilled:
            self.spill_excess.append(self.in_flight[w] - min(self.in_flight))
        self.in_flight[w] += 1
        self.placements[i] = w
        worker = self.workers[w]
        job = Job(i, now, request.input_tokens, request.output_tokens, request.blocks, lease)
        self.schedule(w, worker.add(job, now))
        self.arrived.add(w)
        if not self.arrival_next(now):
            # An idle worker starts once every arrival of this instant has queued, so the ones
            # that arrive together share its first step, as they would a step starting now.
            for w in sorted(self.arrived):
                self.schedule(w, self.workers[w].start(now))
                self.publish(w, now)  # a step scheduled now may report its blocks (events_at "schedule")
            self.arrived.clear()

    def arrival_next(self, now: float) -> bool:
        """Whether the next event is another arrival at ``now`` (arrivals come first among ties)."""
        return bool(self.events) and self.events[0][0] == now and self.events[0][2] == _ARRIVE

    def step_end(self, w: int, now: float) -> None:
        worker = self.workers[w]
        first, finished = worker.complete(now)
        for job in first:
            job.payload.first_token()  # the lease leaves its worker's prefill load, as a proxy says so
            self.routing.first_token(w, job)
            self.ttfts.append(now - job.arrival)
            self.cached += job.cached
            self.prompt += job.input_tokens
        self.served += len(finished)
        for job in finished:
            job.payload.release()
            self.routing.finished(w, job)
            self.in_flight[w] -= 1
            self.last = now
        self.publish(w, now)
        self.schedule(w, worker.start(now))
        self.publish(w, now)

    def publish(self, w: int, now: float) -> None:
        """Send the worker's new cache reports on their way to every router."""
        reports = self.workers[w].reports
        if not reports:
            return
        for stored, evicted in reports:
            self.order += 1
            self.pending_reports[self.order] = (w, stored, evicted)
            heapq.heappush(self.events, (now + self.events_delay_ms, self.order, _EVENTS, self.order, 0))
        reports.clear()

    def deliver(self, number: int) -> None:
        w, stored, evicted = self.pending_reports.pop(number)
        url = self.urls[w]
        for router in self.routing.routers:
            if stored:
                router.store_blocks(url, stored)
            if evicted:
                router.remove_blocks(url, evicted)

    def engine_report(self, w: int) -> Dict[str, int]:
        """What worker w's engine would report, in the unit of the row's lease weights: its
        requests in flight and prefill queue to unit-weight rows, else the prefill queue as
        ReplayConfig.load_waiting says (a count of requests is not a load in tokens)."""
        worker = self.workers[w]
        if self.load_waiting is None:
            return {"load": self.in_flight[w], "waiting": worker.waiting}
        if self.load_waiting == "requests":
            return {"waiting_requests": worker.waiting}
        if self.load_waiting == "tokens":
            return {"waiting": worker.waiting_tokens}
        # A job's cached prefix is known once its prefill started; before, look it up as a
        # scheduler scanning its queue would.
        return {"waiting": sum(job.remaining if job.cached >= 0 else max(1, job.input_tokens - worker.cache.lookup(job.blocks)) for job in worker.queue)}

    def report_loads(self, now: float) -> None:
        """Tell every router each worker's load, and poll again unless all is done."""
        reports = [self.engine_report(w) for w in range(len(self.urls))]
        for router in self.routing.routers:
            for url, report in zip(self.urls, reports):
                router.report_load(url, **report)
        if self.served < len(self.trace.requests):
            assert self.load_interval_ms is not None
            self.order += 1
            heapq.heappush(self.events, (now + self.load_interval_ms, self.order, _LOAD_REPORT, 0, 0))

    def run(self) -> None:
        events = self.events
        while events:
            now, _, kind, subject, version = heapq.heappop(events)
            self.routing.observe(now)
            if kind == _ARRIVE:
                self.arrive(subject, now)
            elif kind == _EVENTS:
                self.deliver(subject)
            elif kind == _LOAD_REPORT:
                self.report_loads(now)
            elif version == self.workers[subject].version:  # else: a decode segment cut short, its new end is queued
                self.step_end(subject, now)
        if len(self.ttfts) != len(self.trace.requests):  # pragma: no cover - an engine bug
            raise RuntimeError("replay ended with %d of %d requests served" % (len(self.ttfts), len(self.trace.requests)))


def replay(policy: ReplayPolicy, trace: Trace, config: ReplayConfig = ReplayConfig()) -> ReplayResult:
    """Replay ``trace`` over ``config.workers`` simulated workers routed by ``policy``."""
    state = _Run(policy, trace, config)
    with contextlib.ExitStack() as stack:
        routers = [stack.enter_context(router) for router in state.routing.routers]
        state.run()
        return ReplayResult(
            policy=policy,
            config=config,
            trace_requests=len(trace.requests),
            cache_blocks=state.capacity,
            requests=len(state.ttfts),
            spilled=len(state.spill_excess),
            spill_excess=state.spill_excess,
            prompt_tokens=state.prompt,
            cached_tokens=state.cached,
            ttft_ms=state.ttfts,
            duration_ms=state.last,
            busy_ms=[w.busy_ms for w in state.workers],
            prefill_busy_ms=[w.prefill_busy_ms for w in state.workers],
            arrival_span_ms=trace.span_ms * state.scale,
            branches=_summed([router.branch_counts() for router in routers]),
            leaked_leases=sum(router.leaked_leases() for router in routers),
            final_loads=_summed([router.loads() for router in routers]),
            placements=state.placements,
        )


def _summed(counts: List[Dict[str, int]]) -> Dict[str, int]:
    """The counts of every replica, added up by name."""
    total: Dict[str, int] = {}
    for part in counts:
        for name, value in part.items():
            total[name] = total.get(name, 0) + value
    return total
