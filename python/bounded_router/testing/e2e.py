"""End to end over real HTTP: mock workers, a routing proxy per policy, groups of streaming siblings.

For each policy this starts a routing proxy process (the native gateway,
``python -m bounded_router serve``) in front of the same mock worker processes, sends groups
of sibling requests through it -- one routing key per group, the siblings sharing a prompt
prefix, each request streaming its tokens back -- and measures what the simulator does, from
the outside: where each group's siblings landed (the ``X-Mock-Worker`` header), the spill
fraction and leases (the proxy's metrics port), the cached-token fraction (the workers'
``usage``), time to first token as the client sees it, and throughput. Every answer's text is
checked against what the worker must have sent.

``scripts/e2e.py`` (the full run), ``scripts/demo.py`` (``make demo``) and the CI test all use
:func:`run`. Needs httpx and the proxy's FastAPI and uvicorn (``bounded-router[fastapi]``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..metrics import parse as parse_metrics
from ..simulate.engine import PolicySpec, Result, placement_label
from ..simulate.model import CostModel, Workload
from ..simulate.report import format_table
from .fleet import ServerProcess, start_mock_worker, start_proxy
from .mock_worker import Prompt, expected_text, make_prompt, prompt_token_ids

__all__ = ["Scenario", "RequestRecord", "PolicyRun", "run", "run_policy", "main", "stream_completion", "DEFAULT_POLICIES"]

DEFAULT_POLICIES: Tuple[PolicySpec, ...] = (
    PolicySpec("consistent_hashing"),
    PolicySpec("bounded_consistent_hashing", 2, 1.5),
)


@dataclass(frozen=True)
class Scenario:
    """What to send and how the mock workers behave.

    The workload and costs are the simulator's (the upstream A/B) except for the output length:
    a Python proxy relays every token as its own event, so 32 tokens instead of 1,024 keep the
    run short. ``time_scale`` multiplies every modelled time (0.01: a 2,048-token prefill takes
    20 ms).
    """

    workload: Workload = Workload(output_tokens=32)
    cost: CostModel = CostModel()
    time_scale: float = 0.01
    request_timeout: float = 120.0

    @property
    def requests(self) -> int:
        return self.workload.requests


@dataclass
class RequestRecord:
    """One request as the client saw it."""

    group: int
    sibling: int
    ok: bool = False
    status: int = 0
    worker: str = ""
    ttft_ms: float = float("nan")
    #: The worker's own time to first token (queue and prefill), from its answer.
    worker_ttft_ms: float = float("nan")
    prompt_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""


@dataclass
class PolicyRun:
    """The outcome of one policy: the simulator-style result and the end-to-end checks."""

    spec: PolicySpec
    result: Result
    records: List[RequestRecord]
    wall_s: float
    metrics: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = field(repr=False)
    worker_stats: Dict[str, Dict[str, Any]]
    #: Worker URL -> the mock worker's name (w0, w1, ...).
    worker_names: Dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> List[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def group_placements(self) -> Dict[int, Dict[str, int]]:
        groups: Dict[int, Dict[str, int]] = {}
        for r in self.records:
            per = groups.setdefault(r.group, {})
            per[r.worker] = per.get(r.worker, 0) + 1
        return groups

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.get((name, tuple(sorted(labels.items()))), float("nan"))

    def loads(self) -> Dict[str, float]:
        """The proxy's per-worker load after the run (all 0 when no lease leaked)."""
        return {dict(k[1])["worker"]: v for k, v in self.metrics.items() if k[0] == "bounded_router_worker_load"}


async def _one_request(client: Any, proxy_url: str, scenario: Scenario, group: int, sibling: int, tag: str) -> RequestRecord:
    w = scenario.workload
    prompt = make_prompt(group, sibling, w.shared_prefix_tokens, w.own_tokens, tag)
    return await stream_completion(client, proxy_url, prompt, w.output_tokens, "group-%s%d" % (tag, group), RequestRecord(group, sibling))


async def stream_completion(
    client: Any,
    proxy_url: str,
    prompt: Prompt,
    max_tokens: int,
    routing_key: Optional[str],
    record: RequestRecord,
    scheduled_at: Optional[float] = None,
    on_head: Optional[Callable[[Any], None]] = None,
) -> RequestRecord:
    """Stream one completion of ``prompt`` (text or token ids) through the proxy with
    ``routing_key`` (None: no key), filling in and checking ``record``: status, worker, time to
    first token, usage, the text against what the mock worker must have sent. ``scheduled_at``
    (``time.monotonic()``, or the client's clock of a mock worker on ``--clock client``) tells
    the mock worker when a replay meant to send it; ``on_head(headers)`` is told a 200 response's
    headers as they arrive (the proxy has routed the request, the worker has it)."""
    body: Dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
    if scheduled_at is not None:
        body["scheduled_at"] = scheduled_at
    headers = {} if routing_key is None else {"X-SMG-Routing-Key": routing_key}
    start = time.monotonic()
    text: List[str] = []
    done = False
    try:
        async with client.stream("POST", proxy_url + "/v1/completions", json=body, headers=headers) as response:
            record.status = response.status_code
            record.worker = response.headers.get("x-mock-worker", "")
            if response.status_code != 200:
                record.error = "HTTP %d: %s" % (response.status_code, (await response.aread())[:300].decode("utf-8", "replace"))
                return record
            if on_head is not None:
                on_head(response.headers)
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                for choice in event.get("choices", ()):
                    if not text:
                        record.ttft_ms = (time.monotonic() - start) * 1000.0
                    text.append(choice["text"])
                usage = event.get("usage")
                if usage:
                    record.worker_ttft_ms = event.get("ttft_ms", math.nan)
                    record.prompt_tokens = usage["prompt_tokens"]
                    record.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"]
    except Exception as e:  # noqa: BLE001 - recorded and reported as this request's failure
        record.error = "%s: %s" % (type(e).__name__, e)
        return record
    if not done:
        record.error = "the stream ended without [DONE]"
    elif "".join(text) != expected_text(prompt, max_tokens):
        record.error = "the streamed text differs from what the worker sent"
    elif record.prompt_tokens != len(prompt_token_ids(prompt)):
        record.error = "usage reports %d prompt tokens, the prompt has %d" % (record.prompt_tokens, len(prompt_token_ids(prompt)))
    else:
        record.ok = True
    return record


async def _send_groups(proxy_url: str, scenario: Scenario, tag: str) -> List[RequestRecord]:
    import httpx

    w = scenario.workload
    records: List[RequestRecord] = []
    next_group = 0
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=w.siblings * w.concurrency + 8)
    timeout = httpx.Timeout(scenario.request_timeout, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:

        async def send_group(group: int) -> None:
            tasks = []
            for sibling in range(w.siblings):
                if sibling and w.sibling_interval_ms:
                    await asyncio.sleep(w.sibling_interval_ms * scenario.time_scale / 1000.0)
                tasks.append(asyncio.ensure_future(_one_request(client, proxy_url, scenario, group, sibling, tag)))
            records.extend(await asyncio.gather(*tasks))

        async def lane() -> None:  # closed loop: one group after another
            nonlocal next_group
            while next_group < w.groups:
                group = next_group
                next_group += 1
                await send_group(group)

        if w.rate is None:
            await asyncio.gather(*(lane() for _ in range(w.concurrency)))
        else:
            import random

            rng = random.Random(w.seed)
            pending = []
            for group in range(w.groups):
                pending.append(asyncio.ensure_future(send_group(group)))
                await asyncio.sleep(rng.expovariate(w.rate) * scenario.time_scale)
            await asyncio.gather(*pending)
    return records


def _get_json(url: str) -> Any:
    import httpx

    with httpx.Client(timeout=30.0, trust_env=False) as client:
        response = client.get(url)
        response.raise_for_status()
        return response.json() if "json" in response.headers.get("content-type", "") else response.text


def _post(url: str) -> None:
    import httpx

    with httpx.Client(timeout=30.0, trust_env=False) as client:
        client.post(url).raise_for_status()


def _settle(proxy: ServerProcess, expected_requests: int, deadline_s: float = 30.0) -> Dict[Any, float]:
    """The proxy's metrics once every lease has been released (or what they are at the deadline).

    The client sees the end of a stream a moment before the proxy's ``finally`` releases its
    lease, so wait until the proxy reports no active lease.
    """
    end = time.monotonic() + deadline_s
    while True:
        metrics = parse_metrics(_get_json(proxy.metrics_url + "/metrics"))
        if metrics.get(("bounded_router_active_leases", ()), 1) == 0 or time.monotonic() > end:
            return metrics
        time.sleep(0.05)


def run_policy(spec: PolicySpec, scenario: Scenario, workers: Sequence[ServerProcess], tag: str = "") -> PolicyRun:
    """Run ``scenario`` through a new proxy with ``spec`` in front of ``workers`` (caches emptied first)."""
    for worker in workers:
        _post(worker.url + "/reset")
    lifetime = 120.0 + scenario.requests * 0.5
    with start_proxy([w.url for w in workers], spec.policy, spec.min_load_gap, spec.max_load_skew, lifetime) as proxy:
        started = time.monotonic()
        total_timeout = lifetime - 30.0
        records = asyncio.run(asyncio.wait_for(_send_groups(proxy.url, scenario, tag), total_timeout))
        wall = time.monotonic() - started
        metrics = _settle(proxy, scenario.requests)
    stats = {w.name: _get_json(w.url + "/stats") for w in workers}
    names = sorted({r.worker for r in records if r.worker} | {s["worker"] for s in stats.values()})
    placements: Dict[str, int] = {}
    by_group: Dict[int, Dict[str, int]] = {}
    for r in records:
        by_group.setdefault(r.group, {})[r.worker] = by_group.setdefault(r.group, {}).get(r.worker, 0) + 1
    for counts in by_group.values():
        label = placement_label([counts.get(n, 0) for n in names] if names else list(counts.values()))
        placements[label] = placements.get(label, 0) + 1
    branches = {
        dict(labels)["branch"]: int(value) for (name, labels), value in metrics.items() if name == "bounded_router_requests_total"
    }
    ok = [r for r in records if r.ok]
    result = Result(
        spec=spec,
        workload=scenario.workload,
        cost=scenario.cost,
        placement=dict(sorted(placements.items(), key=lambda kv: [-int(x) for x in kv[0].split(":")])),
        requests=len(records),
        spilled=branches.get("explicit_routing_key_spillover", 0),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        cached_tokens=sum(r.cached_tokens for r in ok),
        ttft_ms=[r.ttft_ms for r in ok],
        duration_ms=wall * 1000.0,
        branches=branches,
        leaked_leases=int(metrics.get(("bounded_router_leaked_leases_total", ()), -1)),
        final_loads={dict(k[1])["worker"]: int(v) for k, v in metrics.items() if k[0] == "bounded_router_worker_load"},
    )
    names_by_url = {w.url: w.name.rsplit(" ", 1)[-1] for w in workers}
    return PolicyRun(spec, result, records, wall, metrics, stats, names_by_url)


def run(
    scenario: Scenario = Scenario(), policies: Sequence[PolicySpec] = DEFAULT_POLICIES, worker_lifetime: Optional[float] = None
) -> List[PolicyRun]:
    """Start ``scenario.workload.workers`` mock workers and run every policy through its own proxy."""
    lifetime = worker_lifetime or 120.0 + len(policies) * (60.0 + scenario.requests * 0.5)
    workers: List[ServerProcess] = []
    try:
        for i in range(scenario.workload.workers):
            workers.append(start_mock_worker("w%d" % i, scenario.cost, scenario.time_scale, lifetime))
        return [run_policy(spec, scenario, workers, tag="p%d-" % n) for n, spec in enumerate(policies)]
    finally:
        for worker in workers:
            worker.stop()


def problems(runs: Sequence[PolicyRun]) -> List[str]:
    """What went wrong, in words (empty when every check passed)."""
    found: List[str] = []
    for pr in runs:
        name = pr.spec.label
        if pr.failures:
            first = pr.failures[0]
            found.append(
                "%s: %d of %d requests failed (first: group %d sibling %d: %s)"
                % (name, len(pr.failures), len(pr.records), first.group, first.sibling, first.error)
            )
        busy = {url: load for url, load in pr.loads().items() if load != 0}
        if busy:
            found.append("%s: leases still held after the run (loads %s)" % (name, busy))
        if pr.result.leaked_leases != 0:
            found.append("%s: %d leases leaked (released by the safety net)" % (name, pr.result.leaked_leases))
    return found


def format_report(runs: Sequence[PolicyRun], scenario: Scenario) -> str:
    w = scenario.workload
    lines = [
        "Real HTTP: %s" % w.describe(),
        "mock workers: prefill %g ms/token, decode %g ms/token, times x%g (a 2,048-token prefill takes %.1f ms); "
        "one FastAPI proxy per policy" % (
            scenario.cost.prefill_ms_per_token,
            scenario.cost.decode_ms_per_token,
            scenario.time_scale,
            scenario.cost.prefill_ms(2048) * scenario.time_scale,
        ),
        "",
        format_table([pr.result for pr in runs]),
        "",
    ]
    for pr in runs:
        ok = len(pr.records) - len(pr.failures)
        loads = ", ".join("%s=%d" % (pr.worker_names.get(url, url), load) for url, load in pr.loads().items())
        ttfts = sorted(pr.result.ttft_ms)
        median = ttfts[len(ttfts) // 2] if ttfts else float("nan")
        lines.append(
            "%-24s %d/%d ok, median TTFT %.0f ms, leases held after the run: %s, leaked %d, wall %.1f s"
            % (pr.spec.label, ok, len(pr.records), median, loads, pr.result.leaked_leases, pr.wall_s)
        )
    return "\n".join(lines)


def _parser(description: str) -> argparse.ArgumentParser:
    d = Scenario()
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--groups", type=int, default=d.workload.groups)
    parser.add_argument("--siblings", type=int, default=d.workload.siblings)
    parser.add_argument("--concurrency", type=int, default=d.workload.concurrency, help="groups in flight")
    parser.add_argument("--output-tokens", type=int, default=d.workload.output_tokens)
    parser.add_argument("--time-scale", type=float, default=d.time_scale, help="multiply every modelled time by this")
    parser.add_argument("--gaps", default="2", help="min_load_gap of the bounded runs, comma-separated (default 2)")
    parser.add_argument("--skew", type=float, default=1.5)
    parser.add_argument("--round-robin", action="store_true", help="also run round_robin")
    parser.add_argument("--json", metavar="FILE", help="also write every policy's row (simulator format) to FILE")
    return parser


def main(argv: Optional[Sequence[str]] = None, description: str = "Run groups of streaming siblings through real proxies.") -> int:
    args = _parser(description).parse_args(argv)
    scenario = Scenario(
        workload=replace(
            Scenario().workload,
            groups=args.groups,
            siblings=args.siblings,
            concurrency=args.concurrency,
            output_tokens=args.output_tokens,
        ),
        time_scale=args.time_scale,
    )
    policies = [PolicySpec("consistent_hashing")]
    policies += [PolicySpec("bounded_consistent_hashing", int(g), args.skew) for g in args.gaps.split(",") if g.strip()]
    if args.round_robin:
        policies.append(PolicySpec("round_robin"))
    runs = run(scenario, policies)
    print(format_report(runs, scenario))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([pr.result.row() for pr in runs], f, indent=1)
    found = problems(runs)
    for problem in found:
        print("PROBLEM: " + problem, file=sys.stderr)
    return 1 if found else 0
