"""Chat sessions that fan out, over real HTTP: where keeping a session on one worker pays, and
where bounding it pays too.

Each session opens with a document of its own and asks follow-up questions. At each turn it
sends a **group of sibling requests** at once (parallel samples, or an agent's sub-calls): every
sibling's prompt is the session's history (the document, the earlier questions and answers), the
turn's question and a part of its own. Most sessions send one request a turn, a few send 4, 8 or
16, so a few routing keys are far heavier than the rest. The worker that served a
session before holds its history in its prefix cache (affinity pays: round robin recomputes it);
the siblings of a 16-wide turn all queue on that one worker under strict hashing while others
idle, which a load bound spreads (the bound pays on the tail).

Each policy gets its own native gateway (``python -m bounded_router serve``) in front of the
same mock workers, caches emptied first; the routing key is the session. Everything is seeded
(prompts are functions of the session and turn numbers, arrivals of the seed) and the workers
listen on fixed loopback ports, so the consistent-hashing ring is the same from run to run.
Time is the model's, not the machine's: the workers keep the client's clock (``--clock
client``), and the client moves it in the order of the model's events, so the gateway sees the
same arrivals and releases, in the same order, however busy the machine, and a run's figures
are the same every time (:class:`_Replay`). TTFT is the workers' own (in the usage chunk): their
model's queueing and prefill from the request's scheduled send.

``make demo`` (``scripts/demo.py``) runs it; :func:`run` is its entry point.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from ..metrics import parse as parse_metrics
from ..simulate.model import CostModel
from .e2e import RequestRecord, _get_json, _post, stream_completion
from .fleet import ServerProcess, start_mock_worker, start_proxy
from .mock_worker import expected_text

__all__ = [
    "Sessions", "Session", "Policy", "Figures", "Outcome", "POLICIES", "COLUMNS",
    "Run", "run", "run_policy", "session_prompts", "format_table", "conclusion", "problems",
]  # fmt: skip


@dataclass(frozen=True)
class Policy:
    """A policy as the gateway's ``--policy`` and further flags give it, and the name the table shows."""

    label: str
    policy: str
    flags: Tuple[str, ...] = ()


POLICIES: Tuple[Policy, ...] = (
    Policy("round_robin", "round_robin"),
    Policy("least_load", "least_load"),
    Policy("strict hashing", "consistent_hashing"),
    Policy("bounded gap=2 skew=1.5", "bounded_consistent_hashing", ("--min-load-gap", "2", "--max-load-skew", "1.5")),
    Policy("cache_aware", "cache_aware", ("--prefix-blocks", "text")),
)


class Session(NamedTuple):
    """One session of the schedule."""

    start_s: float
    document_tokens: int
    fanout: int


@dataclass(frozen=True)
class Sessions:
    """The workload and the mock workers' costs (times are multiplied by ``time_scale``).

    Session ``s`` starts at a seeded time within ``arrival_s`` seconds and sends turn ``t`` at
    ``t * think_s`` seconds after its start, or as soon as every sibling of turn ``t - 1`` has
    been answered if that is later (on the workers' clock, which the client keeps): every policy
    gets the same requests at the same times (as a trace replay does) unless its own answers
    come later. A session's document length is a seeded draw from ``document_tokens``; the
    fan-outs (siblings per turn)
    are those of ``fanouts`` repeated over the sessions in a seeded order, so every seed sends as
    many requests. The schedule is drawn ``draws`` times (seeds ``seed``, ``seed + 1``, ...),
    each draw replayed through every policy, and the figures pool them: a table of one draw
    would show that draw's luck. ``worker_ports`` are tried in turn as the first of ``workers``
    consecutive ports (0: any free ports, a ring of its own each run).
    """

    workers: int = 4
    sessions: int = 32
    turns: int = 4
    arrival_s: float = 4.0
    think_s: float = 1.5
    document_tokens: Tuple[int, ...] = (256, 512, 1024)
    fanouts: Tuple[int, ...] = (1,) * 13 + (4, 8, 16)
    question_tokens: int = 32
    own_tokens: int = 96
    answer_tokens: int = 1
    cost: CostModel = CostModel(prefill_ms_per_token=2.5, decode_ms_per_token=20.0, block_size=4, cache_tokens=1 << 18)
    time_scale: float = 0.1
    seed: int = 0
    draws: int = 2
    worker_ports: Tuple[int, ...] = (28431, 28531, 28631)
    request_timeout: float = 120.0

    def draw(self, n: int) -> "Sessions":
        """Draw ``n`` (from 0) of the schedule: the workload of one replay."""
        return replace(self, seed=self.seed + n, draws=1)

    def schedule(self) -> List[Session]:
        """Each session's start, document length and fan-out, seeded."""
        rng = random.Random(self.seed)
        fanouts = [self.fanouts[s % len(self.fanouts)] for s in range(self.sessions)]
        rng.shuffle(fanouts)
        return [Session(rng.uniform(0.0, self.arrival_s), rng.choice(self.document_tokens), fanout) for fanout in fanouts]

    @property
    def requests(self) -> int:
        """Requests of one draw (every draw sends as many)."""
        return self.turns * sum(s.fanout for s in self.schedule())

    def describe(self) -> str:
        """The workload in a few lines of under 100 columns."""
        fanouts = sorted(set(self.fanouts))
        wide = sum(1 for s in self.schedule() if s.fanout == fanouts[-1])
        return (
            "%d chat sessions (%d requests) of %d turns, starting within %g s, a turn every %g s,\n"
            "drawn %d times (seeds %d-%d), the figures pooled.\n"
            "A session: a document of %s tokens, then %d-token questions and %d-token answers;\n"
            "each turn sends %s siblings at once (%d sessions %d), %d tokens of each its own.\n"
            "%d mock workers: prefill %g ms/token, decode %g ms/token, times x%g, on the replay's clock."
            % (
                self.sessions, self.requests, self.turns, self.arrival_s, self.think_s, self.draws, self.seed, self.seed + self.draws - 1,
                "/".join(str(d) for d in self.document_tokens), self.question_tokens, self.answer_tokens,
                "/".join(str(f) for f in fanouts), wide, fanouts[-1], self.own_tokens,
                self.workers, self.cost.prefill_ms_per_token, self.cost.decode_ms_per_token, self.time_scale,
            )
        )  # fmt: skip


def _words(prefix: str, n: int) -> str:
    return " ".join("%s%d" % (prefix, i) for i in range(n))


def session_prompts(workload: Sessions, session: int, document_tokens: int, fanout: int) -> List[List[str]]:
    """``prompts[t][k]``, sibling ``k``'s prompt at turn ``t``: the session's history, the turn's
    question, then the sibling's own tokens. The history of turn ``t + 1`` is turn ``t``'s
    history and question followed by sibling 0's answer (the mock worker's deterministic text)."""
    history = _words("s%d.doc." % session, document_tokens)
    turns = []
    for turn in range(workload.turns):
        shared = history + " " + _words("s%d.q%d." % (session, turn), workload.question_tokens)
        siblings = [shared + " " + _words("s%d.t%d.k%d." % (session, turn, k), workload.own_tokens) for k in range(fanout)]
        turns.append(siblings)
        history = shared + expected_text(siblings[0], workload.answer_tokens)
    return turns


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)] if ordered else math.nan


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


class Figures(NamedTuple):
    """A run's figures, as the tables show them."""

    #: Mean time to first token as the workers report it (their queueing and prefill), ms.
    mean_ttft: float
    p99_ttft: float
    #: Mean time to first token as the client measures it (gateway and machine included), ms:
    #: the replicas' table shows it; on the replay's clock (the demo) it also holds the time a
    #: request waits for the replay to move the clock, so the demo's table leaves it out.
    client_mean_ttft: float
    #: Prompt tokens served from the workers' caches, of all prompt tokens.
    cached: float
    #: The share of requests the gateway counted as spilled.
    spilled: float


@dataclass
class Run:
    """One run of a policy through its own gateway: every request as the client saw it and the
    gateway's counters."""

    records: List[RequestRecord]
    branches: Dict[str, int]
    wall_s: float

    @property
    def figures(self) -> Figures:
        ok = [r for r in self.records if r.ok]
        prompt = sum(r.prompt_tokens for r in ok)
        return Figures(
            mean_ttft=_mean([r.worker_ttft_ms for r in ok]),
            p99_ttft=_percentile([r.worker_ttft_ms for r in ok], 0.99),
            client_mean_ttft=_mean([r.ttft_ms for r in ok]),
            cached=sum(r.cached_tokens for r in ok) / prompt if prompt else math.nan,
            spilled=self.branches.get("explicit_routing_key_spillover", 0) / max(1, len(self.records)),
        )


@dataclass
class Outcome:
    """One policy's runs, one per draw of the schedule; the figures pool them."""

    policy: Policy
    runs: List[Run]

    @property
    def figures(self) -> Figures:
        branches: Dict[str, int] = {}
        for r in self.runs:
            for branch, n in r.branches.items():
                branches[branch] = branches.get(branch, 0) + n
        return Run(self.records, branches, sum(r.wall_s for r in self.runs)).figures

    @property
    def records(self) -> List[RequestRecord]:
        return [r for run in self.runs for r in run.records]

    @property
    def spill(self) -> Optional[float]:
        """bounded_consistent_hashing's share of requests that spilled; None for the others."""
        return self.figures.spilled if self.policy.policy == "bounded_consistent_hashing" else None

    @property
    def failures(self) -> List[RequestRecord]:
        return [r for r in self.records if not r.ok]


class _InFlight(NamedTuple):
    """A request in flight: when its answer ends on the workers' clock, where, and its stream."""

    ends_at: float
    worker: str
    stream: "asyncio.Task[RequestRecord]"


class _Replay:
    """The client of one run, keeping the workers' clock (``--clock client``): it does what the
    model's time says, in its order. Before it sends a turn due at ``t``, every answer the model
    ends by ``t`` has ended at the client, so its lease is released (the gateway releases it
    before its handler returns, and Go's HTTP server writes a chunked body's last chunk after
    that), and no other can end (its worker's clock is behind it); a turn's siblings go one
    after another, each once the one before has been routed (its response head arrived). So the
    gateway sees the same arrivals and releases in the same order every run, and routes alike.
    """

    def __init__(self, client: Any, proxy_url: str, worker_urls: Dict[str, str], workload: Sessions) -> None:
        self.client, self.proxy_url, self.worker_urls, self.workload = client, proxy_url, worker_urls, workload
        self.records: List[RequestRecord] = []
        self.flying: List[_InFlight] = []

    async def land(self, t: float) -> None:
        """Every answer that ends by ``t`` ends: each worker's clock moves to the last of its
        answers' ends up to ``t`` (not beyond, so no later answer slips out before a request due at ``t``)."""
        landing = [a for a in self.flying if a.ends_at <= t]
        self.flying = [a for a in self.flying if a.ends_at > t]
        clocks = {a.worker: max(b.ends_at for b in landing if b.worker == a.worker) for a in landing}
        # The workers' clocks in any order: releases between two arrivals at the gateway commute.
        moved = await asyncio.gather(*(self.client.post(self.worker_urls[w] + "/clock", json={"now": now}) for w, now in clocks.items()))
        for response in moved:
            response.raise_for_status()
        self.records += await asyncio.gather(*(a.stream for a in landing))

    async def send(self, prompt: str, key: str, record: RequestRecord, due: float) -> float:
        """Send one request due at ``due`` and return once it is routed: when its answer ends."""
        head: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        stream = asyncio.ensure_future(
            stream_completion(self.client, self.proxy_url, prompt, self.workload.answer_tokens, key, record, due, head.set_result)
        )
        await asyncio.wait({head, stream}, return_when=asyncio.FIRST_COMPLETED)
        if not head.done():  # refused before its head: nothing in flight
            self.records.append(await stream)
            return due
        ends_at = float(head.result()["x-mock-ends-at"])
        self.flying.append(_InFlight(ends_at, record.worker, stream))
        return ends_at

    async def sessions(self) -> List[RequestRecord]:
        """Every session's turns, in the order of their times on the workers' clock."""
        workload = self.workload
        plans = workload.schedule()
        due = [(plan.start_s, number, 0) for number, plan in enumerate(plans)]
        heapq.heapify(due)
        prompts = [session_prompts(workload, number, plan.document_tokens, plan.fanout) for number, plan in enumerate(plans)]
        while due:
            at, number, turn = heapq.heappop(due)
            await self.land(at)
            ends = [await self.send(p, "session-%d" % number, RequestRecord(number, turn), at) for p in prompts[number][turn]]
            if turn + 1 < workload.turns:
                heapq.heappush(due, (max(plans[number].start_s + (turn + 1) * workload.think_s, max(ends)), number, turn + 1))
        await self.land(math.inf)
        return self.records


async def _replay(proxy_url: str, worker_urls: Dict[str, str], workload: Sessions) -> List[RequestRecord]:
    """Every request's record of one run through ``proxy_url`` (:class:`_Replay`);
    ``worker_urls`` maps each mock worker's name to its URL."""
    import httpx

    timeout = httpx.Timeout(workload.request_timeout, connect=10.0)
    # httpcore scans every connection of its pool for each request: a pool kept at the peak in
    # flight costs the client more CPU than a few idle connections and new ones on loopback.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=8)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        return await _Replay(client, proxy_url, worker_urls, workload).sessions()


def _branches(proxy: ServerProcess, deadline_s: float = 30.0) -> Dict[str, int]:
    """The gateway's requests by branch, once every lease is released (a request the client gave
    up on may hold its lease a moment longer)."""
    end = time.monotonic() + deadline_s
    while True:
        metrics = parse_metrics(_get_json(proxy.metrics_url + "/metrics"))
        if metrics.get(("bounded_router_active_leases", ()), 1) == 0 or time.monotonic() > end:
            break
        time.sleep(0.05)
    return {dict(labels)["branch"]: int(v) for (name, labels), v in metrics.items() if name == "bounded_router_requests_total"}


def run_policy(policy: Policy, workload: Sessions, workers: Sequence[ServerProcess]) -> Run:
    """The workload through a new gateway with ``policy`` in front of ``workers`` (on the
    client's clock), caches emptied and clocks set back first."""
    for worker in workers:
        _post(worker.url + "/reset")
    lifetime = 120.0 + workload.requests * 0.5
    names = {_worker_name(i): worker.url for i, worker in enumerate(workers)}
    with start_proxy([w.url for w in workers], policy.policy, lifetime=lifetime, flags=policy.flags) as proxy:
        started = time.monotonic()
        records = asyncio.run(asyncio.wait_for(_replay(proxy.url, names, workload), lifetime - 30.0))
        wall = time.monotonic() - started
        branches = _branches(proxy)
    return Run(records, branches, wall)


def _worker_name(i: int) -> str:
    return "w%d" % i


def start_workers(workload: Sessions, lifetime: float) -> List[ServerProcess]:
    """The mock workers, on the client's clock, on the first of ``workload.worker_ports`` where
    all of them start (the ring of consistent hashing is a function of the URLs: fixed ports,
    the same ring every run)."""
    for first in workload.worker_ports:
        workers: List[ServerProcess] = []
        try:
            for i in range(workload.workers):
                port = first + i if first else 0
                workers.append(start_mock_worker(_worker_name(i), workload.cost, workload.time_scale, lifetime, port=port, clock="client"))
            return workers
        except RuntimeError:
            for worker in workers:
                worker.stop()
    raise RuntimeError("no ports for %d mock workers: tried from %s" % (workload.workers, ", ".join(map(str, workload.worker_ports))))


def run(workload: Sessions = Sessions(), policies: Sequence[Policy] = POLICIES, progress: Optional[Callable[[str], None]] = None) -> List[Outcome]:
    """Start the mock workers and run every draw of the workload through every policy, each
    run through a gateway of its own; ``progress(text)`` is told what starts."""
    lifetime = 120.0 + len(policies) * workload.draws * (60.0 + workload.requests * 0.5)
    workers = start_workers(workload, lifetime)
    outcomes = []
    try:
        if progress:
            progress("mock workers on 127.0.0.1, ports %s" % " ".join(str(urlsplit(w.url).port) for w in workers))
        for policy in policies:
            if progress:
                progress("%s: %d draws of %d requests ..." % (policy.label, workload.draws, workload.requests))
            outcomes.append(Outcome(policy, [run_policy(policy, workload.draw(n), workers) for n in range(workload.draws)]))
    finally:
        for worker in workers:
            worker.stop()
    return outcomes


#: What each column of :func:`format_table` means, one line each, printed under it.
COLUMNS = (
    ("mean TTFT", "time to first token, mean over all requests, as the workers report it"),
    ("p99 TTFT", "its 99th percentile: the tail"),
    ("cached", "prompt tokens served from the workers' prefix caches, of all prompt tokens"),
    ("spill", "bounded only: requests sent off their session's worker, which was overloaded"),
    ("vs rr", "mean TTFT against round robin's (x0.20: five times sooner)"),
    ("vs strict", "p99 TTFT against strict hashing's (x0.50: half the tail)"),
)


def format_table(outcomes: Sequence[Outcome]) -> str:
    """The policies side by side (under 100 columns), each column explained under the table."""
    by = {o.policy.policy: o.figures for o in outcomes}
    rr = by["round_robin"].mean_ttft if "round_robin" in by else math.nan
    strict = by["consistent_hashing"].p99_ttft if "consistent_hashing" in by else math.nan
    lines = ["%-22s %10s %9s %7s %6s %6s %9s" % (("policy",) + tuple(name for name, _ in COLUMNS))]
    for o in outcomes:
        f, spill = o.figures, "-" if o.spill is None else "%.1f%%" % (100 * o.spill)
        lines.append(
            "%-22s %7.0f ms %6.0f ms %6.1f%% %6s %6s %9s"
            % (
                o.policy.label, f.mean_ttft, f.p99_ttft, 100 * f.cached, spill,
                "x%.2f" % (f.mean_ttft / rr), "x%.2f" % (f.p99_ttft / strict),
            )
        )  # fmt: skip
    lines.append("")
    lines += ["  %-9s  %s" % column for column in COLUMNS]
    return "\n".join(lines)


def conclusion(outcomes: Sequence[Outcome]) -> str:
    """Two lines from the figures: does affinity beat round robin, and does the bound beat
    strict hashing on the tail? Each says so when it does not."""
    by = {o.policy.policy: o.figures for o in outcomes}
    rr, strict, bounded = by.get("round_robin"), by.get("consistent_hashing"), by.get("bounded_consistent_hashing")
    if not (rr and strict and bounded):
        return ""
    speedup = rr.mean_ttft / bounded.mean_ttft
    affinity = "Affinity: bounded hashing caches %.0f%% of prompt tokens (round robin %.0f%%), first tokens %s." % (
        100 * bounded.cached, 100 * rr.cached, "%.1fx sooner" % speedup if speedup > 1 else "%.1fx later" % (1 / speedup))
    tail = bounded.p99_ttft / strict.p99_ttft
    bound = "The bound %s strict hashing's p99 TTFT: %.0f ms against %.0f ms (x%.2f), %.1f%% spilled." % (
        "cuts" if tail < 1 else "does not cut", bounded.p99_ttft, strict.p99_ttft, tail, 100 * bounded.spilled)
    return affinity + "\n" + bound


def problems(outcomes: Sequence[Outcome]) -> List[str]:
    """What went wrong, in words (empty when every request succeeded)."""
    found = []
    for o in outcomes:
        if o.failures:
            first = o.failures[0]
            found.append("%s: %d of %d requests failed (first: session %d turn %d: %s)" % (
                o.policy.label, len(o.failures), len(o.records), first.group, first.sibling, first.error))
    return found
