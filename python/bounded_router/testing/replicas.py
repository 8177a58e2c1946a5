"""Router replicas end to end: several native gateways in front of the same mock workers, with
and without the workers' KV events (docs/contract.md, "Reported blocks"; issue 21).

Every process is real and on loopback: mock workers (:mod:`~bounded_router.testing.mock_worker`)
that publish their prefix cache's KV events over ZeroMQ with a replay socket, and gateway
processes (``python -m bounded_router serve``) under ``cache_aware`` that route each request by
the prefix blocks of its token ids (``--prefix-blocks tokens``), each a router of its own. The
workload is multi-turn sessions (turn ``t`` repeats the session's history and adds to it), sent as
token ids, each request to a random gateway, as the processes of an RL rollout send theirs. Each
mode runs the same requests at the same times (:class:`ReplicaSessions`), the workers' caches and
counters emptied first:

* one gateway, which sees every request (what the replicas lose);
* the replicas without events: each knows only what it routed itself;
* the replicas with events: each learns what every worker really holds;
* the same with engine loads polled (``--load-poll sglang``);
* events with each gateway's routes shared with the others as it takes them
  (``--peer-routes-publish`` on a loopback port of its own, ``--peer-routes`` the other three;
  docs/contract.md, "Sharing routes over the wire"), without and with engine loads.

Cache hits are the workers' own counters (``GET /stats``: cached prompt tokens over prompt
tokens); time to first token is the workers' model's (queueing and prefill from each request's
scheduled send time, so the machine's other load moves it only through the order requests arrive
in), beside the client's. ``scripts/e2e_replicas.py`` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..simulate.model import CostModel

from ..metrics import parse as parse_metrics
from .e2e import RequestRecord, _get_json, _post, stream_completion
from .fleet import ServerProcess, kv_event_endpoints, start_mock_worker, start_proxy
from .mock_worker import expected_text, prompt_token_ids
from .sessions import Outcome, Policy, Run, _words

__all__ = [
    "Mode", "MODES", "ModeResult", "ReplicaSessions", "await_events", "complete", "format_table", "indexed_blocks",
    "peer_route_flags", "run", "run_mode", "session_token_prompts", "start_gateways", "start_workers",
]  # fmt: skip


@dataclass(frozen=True)
class ReplicaSessions:
    """The workload and the mock workers' costs (times are multiplied by ``time_scale``).

    Session ``s`` starts at a seeded time within ``arrival_s`` seconds and sends turn ``t`` at
    ``t * think_s`` seconds after its start, or as soon as turn ``t - 1`` has been answered if
    that is later: arrivals follow a schedule, so every mode gets the same requests at the same
    times. Its document is 1, 2 or 4 times ``document_tokens`` long (seeded)."""

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
            "%d sessions of %d turns, starting within %g s, a turn every %g s, on %d mock workers.\n"
            "A session: a document of %d to %d tokens, then %d-token questions and %d-token answers.\n"
            "Workers: prefill %g ms/token, decode %g ms/token, times x%g (a %d-token prefill: %.0f ms)."
            % (
                self.sessions, self.turns, self.arrival_s, self.think_s, self.workers,
                self.document_tokens, longest, self.question_tokens, self.answer_tokens,
                self.cost.prefill_ms_per_token, self.cost.decode_ms_per_token, self.time_scale, longest,
                self.cost.prefill_ms(longest) * self.time_scale,
            )
        )  # fmt: skip


@dataclass(frozen=True)
class Mode:
    """How many gateways, and whether they take the workers' KV events and loads and share
    their routes with each other."""

    label: str
    gateways: int
    events: bool = False
    loads: bool = False
    peer_routes: bool = False


MODES: Tuple[Mode, ...] = (
    Mode("1 gateway, no events", 1),
    Mode("4 gateways, no events", 4),
    Mode("4 gateways, KV events", 4, events=True),
    Mode("4 gateways, events + loads", 4, events=True, loads=True),
    Mode("4 gateways, events + peer routes", 4, events=True, peer_routes=True),
    Mode("4 gateways, events+loads+peers", 4, events=True, loads=True, peer_routes=True),
)


def session_token_prompts(workload: ReplicaSessions, session: int, document_tokens: int) -> List[List[int]]:
    """The token ids of a session's turns: the document, every earlier question with the mock
    worker's answer to it, and a new question."""
    history = prompt_token_ids(_words("s%d.doc." % session, document_tokens))
    prompts = []
    for turn in range(workload.turns):
        if turn:
            history = history + prompt_token_ids(expected_text(history, workload.answer_tokens))
        history = history + prompt_token_ids(_words("s%d.q%d." % (session, turn), workload.question_tokens))
        prompts.append(history)
    return prompts


@contextlib.contextmanager
def start_workers(workload: ReplicaSessions, lifetime: float) -> Iterator[List[ServerProcess]]:
    """``workload.workers`` mock worker processes publishing KV events, stopped on exit."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(start_mock_worker("w%d" % i, workload.cost, workload.time_scale, lifetime, kv_events=True))
            for i in range(workload.workers)
        ]


def gateway_flags(mode: Mode, workers: Sequence[ServerProcess], block_size: int) -> List[str]:
    """The ``serve`` flags of a mode's gateways over ``workers``."""
    flags = ["--prefix-blocks", "tokens", "--prefix-block-size", str(block_size)]
    if mode.events:
        for worker in workers:
            endpoint, replay = kv_event_endpoints(worker)
            flags += ["--kv-events", "%s=%s" % (worker.url, endpoint), "--kv-events-replay", "%s=%s" % (worker.url, replay)]
    if mode.loads:
        flags += ["--load-poll", "sglang"]
    return flags


def peer_route_flags(endpoints: Sequence[str], gateway: int) -> List[str]:
    """Gateway ``gateway``'s flags sharing routes: it publishes on its own endpoint and applies
    the others'."""
    others = [e for i, e in enumerate(endpoints) if i != gateway]
    return ["--peer-routes-publish", endpoints[gateway]] + (["--peer-routes"] + others if others else [])


def _free_endpoints(n: int) -> List[str]:
    """n loopback tcp:// endpoints nothing listens on yet (each port held until all are found,
    so that they differ)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return ["tcp://127.0.0.1:%d" % s.getsockname()[1] for s in sockets]


#: How long a gateway may take to connect to a peer started after it: zmq4 dials every 250 ms
#: for 2.5 s, then the feed dials again every second (peerroutes, RedialInterval).
PEER_CONNECT_S = 1.5


@contextlib.contextmanager
def start_gateways(mode: Mode, workers: Sequence[ServerProcess], block_size: int, lifetime: float) -> Iterator[List[ServerProcess]]:
    """A mode's gateway processes, stopped on exit."""
    flags = gateway_flags(mode, workers, block_size)
    endpoints = _free_endpoints(mode.gateways) if mode.peer_routes else []
    with contextlib.ExitStack() as stack:
        gateways = []
        for i in range(mode.gateways):
            own = flags + (peer_route_flags(endpoints, i) if endpoints else [])
            gateways.append(stack.enter_context(start_proxy([w.url for w in workers], "cache_aware", lifetime=lifetime, flags=own)))
        if endpoints:
            # Every publisher is bound once its gateway listens; the last gateway's peers dial it
            # again within PEER_CONNECT_S. The gateways' metrics do not show the feeds, so this
            # waits rather than watches (a route lost meanwhile only misses one peer's count).
            time.sleep(PEER_CONNECT_S)
        yield gateways


def indexed_blocks(gateway: ServerProcess) -> Dict[str, float]:
    """Blocks the gateway's index holds per worker URL (its /metrics)."""
    metrics = parse_metrics(_get_json(gateway.metrics_url + "/metrics"))
    return {dict(labels)["worker"]: v for (name, labels), v in metrics.items() if name == "bounded_router_worker_indexed_blocks"}


def await_events(gateways: Sequence[ServerProcess], workers: Sequence[ServerProcess], block_size: int, attempts: int = 100) -> None:
    """Wait until every gateway hears every worker's events, then empty the caches again.

    A ZeroMQ subscriber misses what was published before it joined, so each worker is sent a
    prompt of its own, straight (no gateway sees it), until every gateway's index holds blocks
    there; a reset then clears the caches and, by event, the indexes. RuntimeError after
    ``attempts`` rounds of 0.1 s."""
    for round_ in range(attempts):
        for worker in workers:
            _post(worker.url + "/reset")
            complete(worker.url, prompt_token_ids(_words("probe.%s.%d." % (worker.name, round_), block_size)))
        time.sleep(0.1)
        if all(all(indexed_blocks(g).get(w.url, 0) > 0 for w in workers) for g in gateways):
            break
    else:
        raise RuntimeError("the gateways did not receive every worker's KV events after %d attempts" % attempts)
    for worker in workers:
        _post(worker.url + "/reset")
    for _ in range(attempts):
        if not any(any(indexed_blocks(g).values()) for g in gateways):
            return
        time.sleep(0.1)
    raise RuntimeError("the gateways' indexes were not cleared by the workers' AllBlocksCleared events")


def complete(url: str, ids: List[int]) -> Dict[str, Any]:
    """One non-streaming completion of ``ids`` at ``url`` (a worker or a gateway), its answer."""
    import httpx

    with httpx.Client(timeout=60.0, trust_env=False) as client:
        response = client.post(url + "/v1/completions", json={"prompt": ids, "max_tokens": 1, "stream": False})
        response.raise_for_status()
        answer: Dict[str, Any] = response.json()
        return answer


@dataclass
class ModeResult:
    """One mode's run: the client's records (TTFT) and the workers' counters (cache hits)."""

    mode: Mode
    outcome: Outcome
    prompt_tokens: int
    cached_tokens: int

    @property
    def cache_hits(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else math.nan


async def _send_sessions(gateways: Sequence[str], workload: ReplicaSessions) -> List[RequestRecord]:
    import httpx

    records: List[RequestRecord] = []
    pick = random.Random(workload.seed + 1)  # the same gateway for each request in every mode
    timeout = httpx.Timeout(workload.request_timeout, connect=10.0)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=timeout, trust_env=False) as client:
        began = time.monotonic()

        async def session(number: int, start_s: float, document_tokens: int, targets: List[str]) -> None:
            for turn, prompt in enumerate(session_token_prompts(workload, number, document_tokens)):
                due = began + start_s + turn * workload.think_s
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                record = RequestRecord(number, turn)
                records.append(await stream_completion(client, targets[turn], prompt, workload.answer_tokens, None, record, scheduled_at=due))

        schedule = workload.schedule()
        targets = [[pick.choice(gateways) for _ in range(workload.turns)] for _ in schedule]
        await asyncio.gather(*(session(n, start, tokens, targets[n]) for n, (start, tokens) in enumerate(schedule)))
    return records


def run_mode(mode: Mode, workload: ReplicaSessions, workers: Sequence[ServerProcess]) -> ModeResult:
    """The workload through a mode's new gateways in front of ``workers``, caches emptied first."""
    lifetime = 120.0 + workload.requests * 0.5
    with start_gateways(mode, workers, workload.cost.block_size, lifetime) as gateways:
        if mode.events:
            await_events(gateways, workers, workload.cost.block_size)
        for worker in workers:
            _post(worker.url + "/reset")
        started = time.monotonic()
        records = asyncio.run(asyncio.wait_for(_send_sessions([g.url for g in gateways], workload), lifetime - 30.0))
        wall = time.monotonic() - started
    stats = [_get_json(w.url + "/stats") for w in workers]
    outcome = Outcome(Policy(mode.label, "cache_aware"), [Run(records, {}, wall)])
    return ModeResult(mode, outcome, sum(s["prompt_tokens"] for s in stats), sum(s["cached_tokens"] for s in stats))


def run(workload: ReplicaSessions, modes: Sequence[Mode] = MODES, progress: Any = None) -> List[ModeResult]:
    """Start the mock workers and run every mode; ``progress(text)`` is told what starts."""
    lifetime = 120.0 + len(modes) * (60.0 + workload.requests * 0.5)
    results = []
    with start_workers(workload, lifetime) as workers:
        for mode in modes:
            if progress:
                progress("%s: %d requests ..." % (mode.label, workload.requests))
            results.append(run_mode(mode, workload, workers))
    return results


def format_table(results: Sequence[ModeResult], baseline: Optional[str] = "4 gateways, no events") -> str:
    """The modes side by side, mean TTFT also as a ratio to ``baseline``'s."""
    base = next((r.outcome.figures.mean_ttft for r in results if r.mode.label == baseline), math.nan)
    lines = ["%-32s %10s %10s %11s %9s %10s" % ("mode", "mean TTFT", "p99 TTFT", "cache hits", "vs no ev.", "client")]
    for r in results:
        f = r.outcome.figures
        lines.append(
            "%-32s %7.0f ms %7.0f ms %10.1f%% %9s %7.0f ms"
            % (r.mode.label, f.mean_ttft, f.p99_ttft, 100 * r.cache_hits, "x%.2f" % (f.mean_ttft / base), f.client_mean_ttft)
        )
    lines += [
        "",
        "  cache hits: cached prompt tokens / prompt tokens, the mock workers' own counters (GET /stats)",
        "  TTFT: time to first token in the workers' model (queueing and prefill from the scheduled send)",
        "  vs no ev.: mean TTFT against the replicas without events (x0.50: twice as fast)",
        "  client: mean TTFT as the client measured it (the gateway and this machine's load included)",
    ]
    return "\n".join(lines)
