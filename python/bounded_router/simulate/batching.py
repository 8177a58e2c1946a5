"""A worker with chunked prefill and continuous batching, the worker model of the trace replay.

The worker runs **steps**, one after another, as vLLM and SGLang schedulers do. Each step:

* decodes one token for every request of the running batch;
* prefills up to ``chunk_tokens`` prompt tokens taken from the waiting queue in arrival order
  (chunked prefill: a long prompt takes several steps, a chunk may finish one prompt and start
  the next). When a prompt's first chunk is scheduled, its longest cached prefix is looked up in
  the worker's LRU block cache; those tokens are not computed (at least one token always is, the
  one whose logits give the first output token);
* lasts ``step_ms + prefill_ms_per_token x prefilled tokens + decode_ms_per_request x batch
  + context_ms_per_token x context``, where the context is the prompt tokens of the running
  batch: a step slows down as the batch grows and as its requests' contexts grow.

A prompt whose last chunk is in a step gets its first token at the end of that step (time to
first token = that time - arrival), its blocks enter the cache, and it joins the batch for its
remaining ``output - 1`` tokens; it finishes at the end of the step that decodes its last one.
The block cache is separate from the KV memory of the running batch (no preemption).

Steps that only decode change nothing until the next request finishes or arrives, so they are
run as one segment whose length is cut short when a request arrives (cost per request, not per
token).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Deque, Dict, Hashable, List, Optional, Sequence, Tuple

from .model import PrefixCache, _check_number

__all__ = ["StepCosts", "Job", "BatchingWorker", "EVENTS_AT"]

#: When a worker's KV cache events report a prompt's blocks stored (docs/trace-replay.md, "When
#: engines report blocks"): ``step-end``, each chunk's full blocks when the step that computed it
#: ends (vLLM's scheduler publishes in ``update_from_output``, SGLang inserts a chunk into its radix
#: tree once computed); ``schedule``, when the step that computes them starts (vLLM schedulers that
#: published at the end of ``schedule()``); ``prefill-end``, all of them when the prompt's last
#: chunk ends.
EVENTS_AT = ("step-end", "schedule", "prefill-end")


@dataclass(frozen=True)
class StepCosts:
    """What a step of a worker costs (milliseconds) and how much it may prefill.

    Attributes:
        step_ms: fixed cost of every step (reading the weights, scheduling).
        prefill_ms_per_token: per prompt token prefilled in the step.
        decode_ms_per_request: per request of the running batch (one output token each).
        context_ms_per_token: per prompt token of the running batch (attention reads its KV).
        chunk_tokens: most prompt tokens prefilled in one step.
    """

    step_ms: float = 10.0
    prefill_ms_per_token: float = 0.05
    decode_ms_per_request: float = 0.2
    context_ms_per_token: float = 0.00005
    chunk_tokens: int = 2048

    def __post_init__(self) -> None:
        _check_number("step_ms", self.step_ms, 0.0)
        _check_number("prefill_ms_per_token", self.prefill_ms_per_token, 0.0)
        _check_number("decode_ms_per_request", self.decode_ms_per_request, 0.0)
        _check_number("context_ms_per_token", self.context_ms_per_token, 0.0)
        _check_number("chunk_tokens", self.chunk_tokens, 1, integer=True)
        if self.step_ms + self.prefill_ms_per_token + self.decode_ms_per_request == 0:
            raise ValueError("a step must take time: step_ms, prefill_ms_per_token and decode_ms_per_request are all 0")

    def step_time(self, prefill_tokens: int, batch: int, context_tokens: int) -> float:
        return (
            self.step_ms
            + self.prefill_ms_per_token * prefill_tokens
            + self.decode_ms_per_request * batch
            + self.context_ms_per_token * context_tokens
        )

    def prefill_ms_at_capacity(self, tokens: float) -> float:
        """Worker time to prefill ``tokens`` in full chunks with nothing else running: the unit of ``--load``."""
        return tokens * (self.step_ms / self.chunk_tokens + self.prefill_ms_per_token)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class Job:
    """A request on a worker: its prompt, its progress and the times the engine reports."""

    __slots__ = (
        "ident",
        "arrival",
        "input_tokens",
        "output_tokens",
        "blocks",
        "cached",
        "remaining",
        "first_token",
        "finished",
        "payload",
        "reported",
    )

    def __init__(
        self, ident: int, arrival: float, input_tokens: int, output_tokens: int, blocks: Sequence[Hashable], payload: Any = None
    ) -> None:
        self.ident = ident
        self.arrival = arrival
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.blocks = blocks
        self.cached = -1  # prompt tokens served from the cache, known when prefill starts
        self.remaining = input_tokens  # prompt tokens still to prefill
        self.first_token = math.nan
        self.finished = math.nan
        self.payload = payload
        self.reported = range(0)  # the blocks reported stored chunk by chunk (EVENTS_AT), by position


class BatchingWorker:
    """One worker: a waiting queue, a running batch, a block cache and the step in progress.

    The engine calls :meth:`add` when a job arrives, :meth:`start` when the worker is idle and
    :meth:`complete` at the end time :meth:`start` (or :meth:`add`, when it cuts a decode segment
    short) returned; :attr:`version` tells a current end time from a superseded one.
    """

    def __init__(self, costs: StepCosts, cache_blocks: int, block_size: int) -> None:
        self.costs = costs
        self.block_size = block_size
        self.cache = PrefixCache(cache_blocks * block_size, block_size)
        self.queue: Deque[Job] = deque()
        self._running: List[Tuple[int, int, Job]] = []  # (step of its last token, ident, job)
        self.context = 0  # prompt tokens of the running batch
        self.waiting_tokens = 0  # prompt tokens of the queue: requests waiting for their first token
        self.steps = 0  # steps completed
        self.busy_ms = 0.0  # time in steps
        self.prefill_busy_ms = 0.0  # time in steps that prefill
        self.version = 0
        # The step or decode segment in progress: start, time per step, steps, tokens prefilled.
        self._start = math.nan
        self._step = 0.0
        self._count = 0
        self._prefill = 0
        self.in_step = False
        # When a list: what the cache reports, (stored, evicted), in order, for the caller to take
        # (the replay's KV cache events), at the times ``events_at`` names.
        self.reports: Optional[List[Tuple[List[Hashable], List[Hashable]]]] = None
        self.events_at = EVENTS_AT[0]

    @property
    def waiting(self) -> int:
        """Requests waiting for their first token (the prefill queue), partly prefilled ones included."""
        return len(self.queue)

    def cached_blocks(self, blocks: Sequence[Hashable]) -> int:
        """How many leading blocks of a prompt this worker's cache holds (nothing is touched)."""
        return self.cache.lookup(blocks) // self.block_size

    def add(self, job: Job, now: float) -> Optional[float]:
        """Queue a job; if a decode segment is running, cut it at the step in progress and return its new end."""
        self.queue.append(job)
        self.waiting_tokens += job.input_tokens
        if not self.in_step or self._prefill or self._count <= 1:
            return None
        # Steps started before now run to their end; an arrival exactly at a step boundary joins
        # the step that starts there (the tolerance absorbs float rounding of the boundary).
        done = math.ceil((now - self._start) / self._step - 1e-9)
        self._count = min(self._count, max(done, 0))
        self.version += 1
        return self._start + self._count * self._step

    def start(self, now: float) -> Optional[float]:
        """Start the next step (or decode segment) if there is work; return when it ends."""
        if self.in_step or not (self.queue or self._running):
            return None
        self._prefill = self._plan_prefill()
        self._step = self.costs.step_time(self._prefill, len(self._running), self.context)
        if self._prefill:
            self._count = 1
        else:  # decode only: nothing changes until the next job finishes or arrives
            self._count = self._running[0][0] - self.steps
        self._start = now
        self.in_step = True
        self.version += 1
        return now + self._count * self._step

    def _plan_prefill(self) -> int:
        budget = self.costs.chunk_tokens
        for job in self.queue:
            if budget == 0:
                break
            if job.cached < 0:
                cached = self.cache.lookup(job.blocks)
                job.cached = min(cached, job.input_tokens - 1)
                job.remaining = job.input_tokens - job.cached
                job.reported = range(job.cached // self.block_size, job.cached // self.block_size)
            take = min(budget, job.remaining)
            budget -= take
            if self.events_at == "schedule":
                self._report_chunk(job, job.remaining - take)
        return self.costs.chunk_tokens - budget

    def complete(self, now: float) -> Tuple[List[Job], List[Job]]:
        """End the step or segment in progress: the jobs that got their first token, and those that finished."""
        self.in_step = False
        self.steps += self._count
        self.busy_ms += self._count * self._step
        if self._prefill:
            self.prefill_busy_ms += self._step
        finished: List[Job] = []
        running = self._running
        while running and running[0][0] <= self.steps:
            job = heapq.heappop(running)[2]
            self.context -= job.input_tokens
            job.finished = now
            finished.append(job)
        first = self._take_prefill()
        for job in first:
            self.waiting_tokens -= job.input_tokens
            self._report_prefill(job, self.cache.insert(job.blocks))
            job.first_token = now
            if job.output_tokens <= 1:
                job.finished = now
                finished.append(job)
            else:
                heapq.heappush(running, (self.steps + job.output_tokens - 1, job.ident, job))
                self.context += job.input_tokens
        return first, finished

    def _take_prefill(self) -> List[Job]:
        budget = self._prefill
        first: List[Job] = []
        while budget:
            job = self.queue[0]
            take = min(budget, job.remaining)
            job.remaining -= take
            budget -= take
            if self.events_at == "step-end":
                self._report_chunk(job, job.remaining)
            if job.remaining == 0:
                first.append(self.queue.popleft())
        return first

    def _report_chunk(self, job: Job, remaining: int) -> None:
        """Report the prompt's full blocks computed once only ``remaining`` tokens are left (the
        ``step-end`` and ``schedule`` timings), those already reported or cached left out."""
        if self.reports is None:
            return
        done = job.input_tokens - remaining
        full = len(job.blocks) if remaining == 0 else min(len(job.blocks), done // self.block_size)
        start, end = job.reported.start, job.reported.stop
        if full > end:
            self.reports.append((list(job.blocks[end:full]), []))
            job.reported = range(start, full)

    def _report_prefill(self, job: Job, report: Tuple[List[Hashable], List[Hashable]]) -> None:
        """Report what the prompt's entry into the cache stored and evicted, less the blocks its
        chunks reported already."""
        if self.reports is None:
            return
        if self.events_at == "prefill-end":
            self.reports.append(report)
            return
        stored, evicted = report
        if job.reported:
            reported = set(job.blocks[job.reported.start : job.reported.stop])
            stored = [block for block in stored if block not in reported]
        if stored or evicted:
            self.reports.append((stored, evicted))
