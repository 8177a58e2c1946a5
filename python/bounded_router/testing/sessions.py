"""Multi-turn chat sessions over real HTTP: the workload where keeping a session on one worker pays.

Each session opens with a long document of its own and then asks follow-up questions: turn
``t``'s prompt is the document, every earlier question and answer, and a new question, so a
worker that served the session before holds all but the new part in its prefix cache. Many
sessions run at once, so their turns interleave at every worker, as the conversations of the
Mooncake trace do.
Each policy gets its own native gateway (``python -m bounded_router serve``) in front of the
same mock workers, caches emptied first; the routing key is the session.

Everything is seeded (the prompts are functions of the session and turn numbers, the arrival
times of the seed), so two runs send the same requests at the same times; what varies is the
machine's timing, which the worker model's times (tens of milliseconds) dominate.

``make demo`` (``scripts/demo.py``) runs it; :func:`run` is its entry point.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..metrics import parse as parse_metrics
from ..simulate.model import CostModel
from .e2e import RequestRecord, _get_json, _post, stream_completion
from .fleet import ServerProcess, start_mock_worker, start_proxy
from .mock_worker import expected_text

__all__ = ["Sessions", "Policy", "Outcome", "POLICIES", "run", "run_policy", "format_table", "conclusion", "problems"]

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


@dataclass(frozen=True)
class Sessions:
    """The workload and the mock workers' costs (times are multiplied by ``time_scale``).

    Session ``s`` starts at a seeded time within ``arrival_s`` seconds and sends turn ``t`` at
    ``t * think_s`` seconds after its start, or as soon as turn ``t - 1`` has been answered if
    that is later: arrivals follow a schedule, not the answers, so every policy gets the same
    requests at the same times (as a trace replay does). Its document is 1, 2 or 4 times
    ``document_tokens`` long (seeded), so sessions differ in cost, as real conversations do.
    """

    workers: int = 4
    sessions: int = 128
    turns: int = 4
    arrival_s: float = 8.0
    think_s: float = 0.5
    document_tokens: int = 512
    question_tokens: int = 384
    answer_tokens: int = 16
    cost: CostModel = CostModel(prefill_ms_per_token=1.0, decode_ms_per_token=10.0, cache_tokens=65536)
    time_scale: float = 0.05
    seed: int = 0
    request_timeout: float = 120.0

    @property
    def requests(self) -> int:
        return self.sessions * self.turns

    def schedule(self) -> List[Tuple[float, int]]:
        """(start time in seconds, document tokens) of each session, seeded."""
        rng = random.Random(self.seed)
        return [(rng.uniform(0.0, self.arrival_s), self.document_tokens * rng.choice((1, 2, 4))) for _ in range(self.sessions)]

    def describe(self) -> str:
        """The workload in a few lines of under 100 columns."""
        longest = 4 * self.document_tokens
        return (
            "%d chat sessions of %d turns, starting within %g s, a turn every %g s, on %d mock workers.\n"
            "A session: a document of %d to %d tokens, then %d-token questions and %d-token answers.\n"
            "Workers: prefill %g ms/token, decode %g ms/token, times x%g (a %d-token prefill: %.0f ms)."
            % (
                self.sessions, self.turns, self.arrival_s, self.think_s, self.workers,
                self.document_tokens, longest, self.question_tokens, self.answer_tokens,
                self.cost.prefill_ms_per_token, self.cost.decode_ms_per_token, self.time_scale, longest,
                self.cost.prefill_ms(longest) * self.time_scale,
            )
        )  # fmt: skip


def _words(prefix: str, n: int) -> str:
    return " ".join("%s%d" % (prefix, i) for i in range(n))


def session_prompts(workload: Sessions, session: int, document_tokens: int) -> List[str]:
    """The prompts of a session's turns: turn ``t``'s is the document, the earlier questions with
    their answers (the mock worker's deterministic text), and a new question."""
    prompts = [_words("s%d.doc." % session, document_tokens)]
    for turn in range(workload.turns):
        previous = prompts[-1] + expected_text(prompts[-1], workload.answer_tokens) if turn else prompts[-1]
        prompts.append(previous + " " + _words("s%d.q%d." % (session, turn), workload.question_tokens))
    return prompts[1:]


@dataclass
class Outcome:
    """One policy's run: every request as the client saw it and the gateway's counters."""

    policy: Policy
    records: List[RequestRecord]
    branches: Dict[str, int]
    wall_s: float

    @property
    def ok(self) -> List[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def ttfts(self) -> List[float]:
        return sorted(r.ttft_ms for r in self.ok)

    @property
    def mean_ttft(self) -> float:
        return sum(self.ttfts) / len(self.ttfts) if self.ttfts else math.nan

    @property
    def mean_ttft_margin(self) -> float:
        """Half the 95% confidence interval of the mean (normal approximation)."""
        values = self.ttfts
        if len(values) < 2:
            return math.nan
        mean = self.mean_ttft
        variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return 1.96 * math.sqrt(variance / len(values))

    @property
    def p99_ttft(self) -> float:
        values = self.ttfts
        return values[min(len(values) - 1, int(math.ceil(0.99 * len(values))) - 1)] if values else math.nan

    @property
    def cached(self) -> float:
        prompt = sum(r.prompt_tokens for r in self.ok)
        return sum(r.cached_tokens for r in self.ok) / prompt if prompt else math.nan

    @property
    def spill(self) -> Optional[float]:
        """bounded_consistent_hashing's share of requests that spilled; None for the others."""
        if self.policy.policy != "bounded_consistent_hashing":
            return None
        return self.branches.get("explicit_routing_key_spillover", 0) / max(1, len(self.records))

    @property
    def failures(self) -> List[RequestRecord]:
        return [r for r in self.records if not r.ok]


async def _send_sessions(proxy_url: str, workload: Sessions) -> List[RequestRecord]:
    import httpx

    records: List[RequestRecord] = []
    timeout = httpx.Timeout(workload.request_timeout, connect=10.0)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=timeout, trust_env=False) as client:
        began = time.monotonic()

        async def session(number: int, start_s: float, document_tokens: int) -> None:
            for turn, prompt in enumerate(session_prompts(workload, number, document_tokens)):
                await asyncio.sleep(max(0.0, began + start_s + turn * workload.think_s - time.monotonic()))
                record = RequestRecord(number, turn)
                records.append(await stream_completion(client, proxy_url, prompt, workload.answer_tokens, "session-%d" % number, record))

        await asyncio.gather(*(session(n, start, tokens) for n, (start, tokens) in enumerate(workload.schedule())))
    return records


def _branches(proxy: ServerProcess, deadline_s: float = 30.0) -> Dict[str, int]:
    """The gateway's requests by branch, once every lease is released (the client sees a stream
    end a moment before the gateway releases its lease)."""
    end = time.monotonic() + deadline_s
    while True:
        metrics = parse_metrics(_get_json(proxy.metrics_url + "/metrics"))
        if metrics.get(("bounded_router_active_leases", ()), 1) == 0 or time.monotonic() > end:
            break
        time.sleep(0.05)
    return {dict(labels)["branch"]: int(v) for (name, labels), v in metrics.items() if name == "bounded_router_requests_total"}


def run_policy(policy: Policy, workload: Sessions, workers: Sequence[ServerProcess]) -> Outcome:
    """The workload through a new gateway with ``policy`` in front of ``workers``, caches emptied first."""
    for worker in workers:
        _post(worker.url + "/reset")
    lifetime = 120.0 + workload.requests * 0.5
    with start_proxy([w.url for w in workers], policy.policy, lifetime=lifetime, flags=policy.flags) as proxy:
        started = time.monotonic()
        records = asyncio.run(asyncio.wait_for(_send_sessions(proxy.url, workload), lifetime - 30.0))
        wall = time.monotonic() - started
        branches = _branches(proxy)
    return Outcome(policy, records, branches, wall)


def run(workload: Sessions = Sessions(), policies: Sequence[Policy] = POLICIES, progress: Any = None) -> List[Outcome]:
    """Start the mock workers and run every policy through its own gateway; ``progress(text)``
    is told what starts."""
    lifetime = 120.0 + len(policies) * (60.0 + workload.requests * 0.5)
    workers: List[ServerProcess] = []
    outcomes: List[Outcome] = []
    try:
        for i in range(workload.workers):
            workers.append(start_mock_worker("w%d" % i, workload.cost, workload.time_scale, lifetime))
        for policy in policies:
            if progress:
                progress("%s: %d requests ..." % (policy.label, workload.requests))
            outcomes.append(run_policy(policy, workload, workers))
    finally:
        for worker in workers:
            worker.stop()
    return outcomes


#: What each column of :func:`format_table` means, one line each, printed under it.
COLUMNS = (
    ("mean TTFT", "time to first token, mean over all requests, measured by the client"),
    ("+-", "half the 95% confidence interval of that mean: this run's own noise"),
    ("p99 TTFT", "the 99th percentile of time to first token: the tail"),
    ("cached", "prompt tokens served from the workers' prefix caches, of all prompt tokens"),
    ("spill", "bounded only: requests sent off their session's worker, which was overloaded"),
    ("vs rr", "mean TTFT against round robin's (x0.20: five times sooner)"),
)


def format_table(outcomes: Sequence[Outcome]) -> str:
    """The policies side by side (under 100 columns), each column explained under the table."""
    rr = next((o.mean_ttft for o in outcomes if o.policy.policy == "round_robin"), math.nan)
    lines = ["%-24s %10s %7s %10s %7s %6s %6s" % ("policy", "mean TTFT", "+-", "p99 TTFT", "cached", "spill", "vs rr")]
    for o in outcomes:
        spill = "-" if o.spill is None else "%.1f%%" % (100 * o.spill)
        lines.append(
            "%-24s %7.0f ms %4.0f ms %7.0f ms %6.1f%% %6s %6s"
            % (o.policy.label, o.mean_ttft, o.mean_ttft_margin, o.p99_ttft, 100 * o.cached, spill, "x%.2f" % (o.mean_ttft / rr))
        )
    lines.append("")
    lines += ["  %-9s  %s" % column for column in COLUMNS]
    return "\n".join(lines)


def conclusion(outcomes: Sequence[Outcome]) -> str:
    """One line: does affinity beat round robin, and does bounded beat strict on the tail?"""
    by = {o.policy.policy: o for o in outcomes}
    rr, strict, bounded = by.get("round_robin"), by.get("consistent_hashing"), by.get("bounded_consistent_hashing")
    if not (rr and strict and bounded):
        return ""
    tail = 1 - bounded.p99_ttft / strict.p99_ttft
    return "In one glance: affinity caches %.0f%% of prompt tokens (round robin %.0f%%), first tokens %.1fx sooner; " \
        "the bound %s strict hashing's p99 by %.0f%%." % (
            100 * bounded.cached, 100 * rr.cached, rr.mean_ttft / bounded.mean_ttft, "cuts" if tail > 0 else "raises", 100 * abs(tail))


def problems(outcomes: Sequence[Outcome]) -> List[str]:
    """What went wrong, in words (empty when every request succeeded)."""
    found = []
    for o in outcomes:
        if o.failures:
            first = o.failures[0]
            found.append("%s: %d of %d requests failed (first: session %d turn %d: %s)" % (
                o.policy.label, len(o.failures), len(o.records), first.group, first.sibling, first.error))
    return found
