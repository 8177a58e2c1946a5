"""A mock LLM inference worker: a small HTTP server that streams tokens like a real one.

It serves an OpenAI-style ``POST /v1/completions`` with ``"stream": true`` and behaves like the
worker model of the simulator (:mod:`bounded_router.simulate.model`): a prefix cache per worker
(an LRU of prompt-prefix blocks), one FIFO prefill engine (time to first token = queueing +
prefill of the uncached tokens) and decode at a fixed rate. Prompts are tokenized by
whitespace, a word's token id its CRC-32 (:func:`token_id`); a prompt may also come as the token
ids themselves, and both share the cache. All costs are multiplied by ``time_scale`` (0.01 runs
the model 100 times faster than real time), so a test can stream thousands of requests in
seconds.

Standard library only (asyncio), so it ships with the package: tests, ``make demo``,
``scripts/e2e.py`` and users trying an integration without a GPU all start it the same way::

    python -m bounded_router.testing.mock_worker --name w0 --port 0 --time-scale 0.01
    # prints "mock worker w0 listening on http://127.0.0.1:PORT" once it accepts requests

Endpoints:

* ``POST /v1/completions`` -- JSON ``{"prompt": str, "max_tokens": int, "stream": bool}``, the
  prompt a string or a list of token ids (ints from 0 to 2**32 - 1, as vLLM and SGLang take),
  optionally ``"fail_after_tokens": n`` to abort the connection after n tokens (to test
  failures) and ``"scheduled_at": t``, when a replaying client meant to send it (seconds on this
  machine's monotonic clock, Python's ``time.monotonic()``): the model queues the request from
  then, not from its late delivery on a busy machine (with ``--clock client``, on the client's
  clock, and required). The stream is server-sent events: one
  ``{"choices": [{"text": ...}]}`` per token,
  then one with ``"usage"`` (``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
  ``prompt_tokens_details.cached_tokens``), the worker's name and its time to first token as its
  model computes it (``ttft_ms``: queueing and prefill since the request arrived, whatever this
  process's own delays), then
  ``data: [DONE]``. Output text is :func:`expected_text`, so a client can check it arrived intact.
  Every response carries ``X-Mock-Worker: <name>``. A ``"model"`` and OpenAI's other sampling
  fields are accepted and ignored; ``null`` counts as absent.
* ``POST /v1/chat/completions`` -- the same model for OpenAI chat: the prompt is the text of
  ``"messages"`` (string contents or ``{"type": "text"}`` parts, joined by newlines);
  ``max_tokens`` or ``max_completion_tokens``; ``stream`` defaults to false, as OpenAI's. The
  answer is a ``chat.completion`` (or ``chat.completion.chunk`` events with ``delta.content``).
* ``POST /generate`` -- SGLang's native endpoint, as slime and verl call it: ``"input_ids"`` (token
  ids) or ``"text"``, ``"sampling_params": {"max_new_tokens": n}``, ``"stream"`` (default false);
  the answer is ``{"text", "meta_info": {"prompt_tokens", "completion_tokens", "cached_tokens",
  "finish_reason"}}``, streamed as events that each carry the whole text so far.
* ``GET /stats`` -- counters: requests, completed, failed, cancelled (client gone), active,
  prompt/cached/computed prompt tokens.
* ``POST /reset`` -- empty the prefix cache and zero the counters (and the client's clock).
* ``POST /clock`` -- JSON ``{"now": t}``, with ``--clock client`` only: the model's time is then
  the client's, not the wall clock's. A request's ``scheduled_at`` is its arrival on that clock;
  the model fixes its prefill as it arrives (FIFO, so the requests before it fix its queueing
  and what the cache holds), answers with the response head at once, ``X-Mock-Ends-At`` saying
  when on that clock its answer ends, and streams its tokens only as ``POST /clock`` moves the
  clock past each one's time. A replaying client that sends requests and moves the clock in the
  order of the model's time then gets the same answers, in the same order, however busy the
  machine (``make demo`` does). Load reports see no prefill queue in this mode.
* ``GET /health``, ``GET /health_generate`` -- 200.
* ``POST /fault`` -- JSON ``{"mode": ...}``, the fault switch the tests and
  ``scripts/bench_faults.py`` share: ``"unavailable"`` answers 503 to every other request,
  ``/health`` included; ``"hang"`` accepts every other request and answers none until the mode
  changes (a process hung by SIGSTOP behaves so too); ``"ok"`` recovers. A dead worker is a
  killed process (SIGKILL), restarted on the same ``--port``.

What gateways probe before they route to a worker, so that SMG (``smg launch``) and
sglang-router register it as an SGLang worker serving ``--model-name`` (default ``mock-model``):

* ``GET /v1/models`` -- the model, ``owned_by: "sglang"``; ``GET /model_info`` (also
  ``/get_model_info``) and ``GET /server_info`` (also ``/get_server_info``) -- its path and the
  server's settings; ``GET /version``.
* Loads: ``GET /v1/loads`` and ``GET /loads`` (SMG's load report: running and queued requests,
  token usage), ``GET /get_load`` (SGLang's), ``GET /metrics`` (Prometheus text with SGLang's
  metric names).

Loopback only by default; it is a test tool, not a server to expose.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import zlib
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from ..simulate.model import CostModel, PrefixCache, text_block_keys
from .kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventPublisher

__all__ = ["MockWorker", "expected_text", "make_prompt", "prompt_token_ids", "token_id", "main", "DEFAULT_MODEL_NAME"]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large", 503: "Service Unavailable"}
_MAX_BODY = 16 * 1024 * 1024
DEFAULT_MODEL_NAME = "mock-model"
#: What the mock reports as its version (``/version``, ``/server_info``).
MOCK_VERSION = "0.0.0-mock"


#: A prompt as a request gives it: text, or token ids.
Prompt = Union[str, Sequence[int]]


def expected_text(prompt: Prompt, max_tokens: int) -> str:
    """The text the mock worker streams for ``prompt`` (text or token ids): deterministic,
    different per prompt."""
    return "".join(_tokens(prompt, max_tokens))


def _tokens(prompt: Prompt, max_tokens: int) -> List[str]:
    seed = zlib.crc32((prompt if isinstance(prompt, str) else " ".join(map(str, prompt))).encode("utf-8"))
    return [" t%d" % ((seed + 7919 * i) % 100003) for i in range(max_tokens)]


def make_prompt(group: int, sibling: int, shared_tokens: int, own_tokens: int, tag: str = "") -> str:
    """A prompt of ``shared_tokens`` words shared by a group and ``own_tokens`` words of one sibling."""
    shared = " ".join("g%s%d.%d" % (tag, group, i) for i in range(shared_tokens))
    own = " ".join("s%s%d.%d.%d" % (tag, group, sibling, i) for i in range(own_tokens))
    return (shared + " " + own).strip()


#: The modes of the fault switch (``POST /fault``, :meth:`MockWorker.set_fault`).
FAULT_MODES = ("ok", "unavailable", "hang")
#: Whose clock the model's time is: the wall clock (the event loop's), or the client's (``POST /clock``).
CLOCKS = ("wall", "client")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def token_id(word: str) -> int:
    """The mock's token id of a word: its CRC-32, so any process numbers words alike."""
    return zlib.crc32(word.encode("utf-8"))


def prompt_token_ids(prompt: Prompt) -> List[int]:
    """The token ids of a prompt: a text's words' :func:`token_id`, or the ids given."""
    return [token_id(w) for w in prompt.split()] if isinstance(prompt, str) else list(prompt)


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 32 for i in value
    )


def cache_events(keys: Sequence[Any], ids: Sequence[int], block_size: int, stored: Any, evicted: Sequence[Any]) -> List[List[Any]]:
    """The KV cache events of one prompt's insertion: a ``BlockStored`` per run of newly stored
    blocks (its parent the block before the run), then a ``BlockRemoved`` of the evicted ones."""
    events: List[List[Any]] = []
    i = 0
    while i < len(keys):
        if keys[i] not in stored:
            i += 1
            continue
        start = i
        while i < len(keys) and keys[i] in stored:
            i += 1
        tokens = ids[start * block_size : i * block_size]
        events.append(BlockStored(keys[start:i], keys[start - 1] if start else None, tokens, block_size))
    if evicted:
        events.append(BlockRemoved(evicted))
    return events


class _Job:
    __slots__ = ("keys", "prompt_tokens", "reader", "done", "cached", "ids", "arrival", "prefilled_at")

    def __init__(self, keys: List[Any], prompt_tokens: int, reader: asyncio.StreamReader, ids: Sequence[int], arrival: float) -> None:
        self.arrival = arrival
        self.keys = keys
        self.ids = ids
        self.prompt_tokens = prompt_tokens
        self.reader = reader
        self.done: "asyncio.Future[Optional[int]]" = asyncio.get_running_loop().create_future()
        self.cached = 0
        #: When the model's prefill of this job ends, on the loop's clock.
        self.prefilled_at = self.arrival


class MockWorker:
    """The server. ``await start()`` binds it (port 0 = any free port), ``await close()`` stops it."""

    def __init__(
        self,
        name: str = "mock",
        cost: CostModel = CostModel(),
        time_scale: float = 1.0,
        model_name: str = DEFAULT_MODEL_NAME,
        clock: str = "wall",
    ) -> None:
        if not (time_scale > 0):
            raise ValueError("time_scale must be > 0, got %r" % (time_scale,))
        if not model_name:
            raise ValueError("model_name must not be empty")
        if clock not in CLOCKS:
            raise ValueError("clock must be one of %s, got %r" % (", ".join(CLOCKS), clock))
        self.clock = clock
        #: The client's clock (``clock="client"``), seconds; moved by :meth:`advance`.
        self.now = 0.0
        # When the last prefill the model fixed ends, on the model's clock.
        self._free_at = 0.0
        self._ticked: Optional[asyncio.Event] = None
        self.name = name
        self.model_name = model_name
        self.cost = cost
        self.time_scale = time_scale
        self.cache = PrefixCache(cost.cache_tokens, cost.block_size)
        self.stats: Dict[str, int] = {}
        # When set, the cache's stores and evictions are published as KV cache events (issue 21).
        self.kv_events: Optional[KVEventPublisher] = None
        self.reset()
        self._server: Optional[asyncio.AbstractServer] = None
        self._queue: "Optional[asyncio.Queue[_Job]]" = None
        # The prefill queue, in order: the jobs queued and the one in prefill (FIFO, one engine).
        self._prefilling: Deque[_Job] = deque()
        self._engine: Optional["asyncio.Task[None]"] = None
        self.port = 0
        self.fault = "ok"
        self._recovered: Optional[asyncio.Event] = None

    def reset(self) -> None:
        self.cache.clear()
        if self.clock == "client":  # a new replay starts its clock from 0 (the wall clock runs on)
            self.now = self._free_at = 0.0
        if self.kv_events is not None:
            self.kv_events.publish([AllBlocksCleared()])
        self.stats = dict.fromkeys(
            ("requests", "completed", "failed", "cancelled", "active", "prompt_tokens", "cached_tokens", "computed_tokens"),
            0,
        )

    def _seconds(self, model_ms: float) -> float:
        return model_ms * self.time_scale / 1000.0

    def set_fault(self, mode: str) -> None:
        """Switch the fault mode: ``"ok"``, ``"unavailable"`` or ``"hang"`` (see ``POST /fault``)."""
        if mode not in FAULT_MODES:
            raise ValueError("fault mode must be one of %s, got %r" % (", ".join(FAULT_MODES), mode))
        self.fault = mode
        if self._recovered is not None:
            if mode == "hang":
                self._recovered.clear()
            else:
                self._recovered.set()

    def advance(self, now: float) -> None:
        """Move the client's clock to ``now`` (never back): every token due by then goes out."""
        if now > self.now and self._ticked is not None:
            self.now, ticked, self._ticked = now, self._ticked, asyncio.Event()
            ticked.set()

    async def _until(self, at: float) -> None:
        """Wait until the model's clock reads ``at``: the loop's (time.monotonic()) or the client's."""
        if self.clock == "wall":
            delay = at - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)
            return
        while self.now < at and self._ticked is not None:
            await self._ticked.wait()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._recovered = asyncio.Event()
        self._ticked = asyncio.Event()
        self.set_fault(self.fault)
        self._queue = asyncio.Queue()
        self._engine = asyncio.get_running_loop().create_task(self._prefill_engine())
        self._server = await asyncio.start_server(self._connection, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._engine is not None:
            self._engine.cancel()
            try:
                await self._engine
            except asyncio.CancelledError:
                pass

    # -- the model ---------------------------------------------------------------------------

    def _begin_prefill(self, job: _Job) -> None:
        """Fix the next prefill of the FIFO engine: the tokens the cache holds and when it ends.
        It starts when the job arrived or the previous one ended, whichever is later, by the
        model's clock: a late wake-up of this process (a busy machine) does not push back every
        prefill queued behind it."""
        job.cached = min(self.cache.lookup(job.keys), job.prompt_tokens)
        self._free_at = max(job.arrival, self._free_at) + self._seconds(self.cost.prefill_ms(job.prompt_tokens - job.cached))
        job.prefilled_at = self._free_at

    def _end_prefill(self, job: _Job) -> None:
        """The prefilled prompt enters the cache (and its KV events go out)."""
        stored, evicted = self.cache.insert(job.keys)
        if self.kv_events is not None:
            self.kv_events.publish(cache_events(job.keys, job.ids, self.cost.block_size, set(stored), evicted))

    async def _prefill_engine(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            if job.reader.at_eof():  # the client left while queued: drop it, as engines do
                self._prefilling.popleft()
                job.done.set_result(None)
                continue
            self._begin_prefill(job)
            await asyncio.sleep(max(0.0, job.prefilled_at - loop.time()))
            self._end_prefill(job)
            self._prefilling.popleft()
            job.done.set_result(job.cached)

    def _arrival(self, scheduled_at: Optional[float]) -> float:
        """When a request arrived, by the model's clock: when it was scheduled on the client's
        clock; on the wall clock now, or when it was scheduled if that is earlier."""
        if self.clock == "client":
            if scheduled_at is None:
                raise _HttpError(400, "'scheduled_at' is required with --clock client: the request's time on the client's clock")
            return scheduled_at
        now = asyncio.get_running_loop().time()  # time.monotonic(), as the event loop's clock is
        return now if scheduled_at is None else min(now, scheduled_at)

    def _fix_prefill(self, job: _Job, max_tokens: int) -> str:
        """On the client's clock the model fixes a prefill as its job arrives (the engine would
        come to the same figures, the jobs before it being the same) and tells the client when a
        stream of ``max_tokens`` ends (its last token, one decode step after another): the
        header to send. Nothing on the wall clock."""
        if self.clock == "wall":
            return ""
        self._begin_prefill(job)
        self._end_prefill(job)
        return "x-mock-ends-at: %r\r\n" % (job.prefilled_at + (max_tokens - 1) * self._seconds(self.cost.decode_ms_per_token))

    async def _prefilled(self, job: _Job) -> Optional[int]:
        """The job's cached tokens once its prefill ends (None: dropped, its client gone)."""
        if self.clock == "client":
            await self._until(job.prefilled_at)
            return job.cached
        assert self._queue is not None
        self._queue.put_nowait(job)
        self._prefilling.append(job)
        return await job.done

    # -- HTTP --------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                keep_alive = headers.get("connection", "").lower() != "close"
                try:
                    keep_alive = await self._dispatch(method, path, body, reader, writer) and keep_alive
                except _HttpError as e:
                    await self._send_json(writer, e.status, {"error": str(e), "worker": self.name}, keep_alive)
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except _HttpError as e:  # a malformed request: answer and close
            try:
                await self._send_json(writer, e.status, {"error": str(e), "worker": self.name}, False)
            except ConnectionError:
                pass
        finally:
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> Optional[Tuple[str, str, Dict[str, str], bytes]]:
        line = await reader.readline()
        if not line:
            return None
        try:
            method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        except ValueError:
            raise _HttpError(400, "malformed request line %r" % line[:80]) from None
        headers: Dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _HttpError(400, "chunked request bodies are not supported by the mock worker: send Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _HttpError(400, "invalid Content-Length %r" % headers["content-length"]) from None
        if length > _MAX_BODY:
            raise _HttpError(413, "request body of %d bytes is larger than %d" % (length, _MAX_BODY))
        body = await reader.readexactly(length) if length else b""
        return method, target.split("?", 1)[0], headers, body

    def _head(self, status: int, content_type: str, extra: str = "", keep_alive: bool = True) -> bytes:
        return (
            "HTTP/1.1 %d %s\r\ncontent-type: %s\r\nx-mock-worker: %s\r\n%sconnection: %s\r\n\r\n"
            % (status, _REASONS.get(status, "Error"), content_type, self.name, extra, "keep-alive" if keep_alive else "close")
        ).encode("latin-1")

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, payload: Any, keep_alive: bool = True) -> None:
        body = json.dumps(payload).encode()
        writer.write(self._head(status, "application/json", "content-length: %d\r\n" % len(body), keep_alive) + body)
        await writer.drain()

    async def _send_text(self, writer: asyncio.StreamWriter, content_type: str, text: str) -> None:
        body = text.encode()
        writer.write(self._head(200, content_type, "content-length: %d\r\n" % len(body)) + body)
        await writer.drain()

    async def _dispatch(
        self, method: str, path: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve one request; return whether the connection can serve another."""
        if path == "/fault" and method == "POST":
            self.set_fault(self._fault_mode(body))
            await self._send_json(writer, 200, {"fault": self.fault, "worker": self.name})
            return True
        if self.fault == "hang":
            assert self._recovered is not None
            await self._recovered.wait()
        if self.fault == "unavailable":
            raise _HttpError(503, "the mock worker is switched to answer 503 (POST /fault)")
        if path in _ENDPOINTS:
            if method != "POST":
                raise _HttpError(405, "use POST for %s" % path)
            return await self._completion(body, reader, writer, _ENDPOINTS[path])
        if path == "/clock" and method == "POST":
            self.advance(self._clock_time(body))
            await self._send_json(writer, 200, {"now": self.now, "worker": self.name})
        elif path == "/stats" and method == "GET":
            await self._send_json(writer, 200, dict(self.stats, worker=self.name, cached_blocks=len(self.cache)))
        elif path == "/reset" and method == "POST":
            self.reset()
            await self._send_json(writer, 200, {"reset": True, "worker": self.name})
        elif path in ("/health", "/health_generate") and method == "GET":
            await self._send_json(writer, 200, {"healthy": True, "worker": self.name})
        elif path == "/metrics" and method == "GET":
            await self._send_text(writer, "text/plain; version=0.0.4; charset=utf-8", self._metrics())
        elif method == "GET" and path in self._INFO:
            await self._send_json(writer, 200, self._INFO[path](self))
        else:
            raise _HttpError(404, "no endpoint %s %s on the mock worker" % (method, path))
        return True

    def _clock_time(self, body: bytes) -> float:
        if self.clock != "client":
            raise _HttpError(400, "POST /clock needs --clock client: this mock worker keeps the wall clock's time")
        try:
            now = json.loads(body or b"{}").get("now")
        except (ValueError, AttributeError):
            now = None
        if isinstance(now, bool) or not isinstance(now, (int, float)) or not 0 <= now < math.inf:
            raise _HttpError(400, 'POST /clock takes {"now": a finite number of seconds >= 0}')
        return float(now)

    @staticmethod
    def _fault_mode(body: bytes) -> str:
        try:
            mode = json.loads(body or b"{}").get("mode")
        except (ValueError, AttributeError):
            mode = None
        if mode not in FAULT_MODES:
            raise _HttpError(400, 'POST /fault takes {"mode": one of %s}' % ", ".join(FAULT_MODES))
        return str(mode)

    # -- what gateways probe -----------------------------------------------------------------

    def _models(self) -> Dict[str, Any]:
        model = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "sglang", "root": self.model_name}
        return {"object": "list", "data": [model]}

    def _model_info(self) -> Dict[str, Any]:
        return {"model_path": self.model_name, "tokenizer_path": self.model_name, "is_generation": True}

    def _server_info(self) -> Dict[str, Any]:
        return {
            "model_path": self.model_name,
            "tokenizer_path": self.model_name,
            "served_model_name": self.model_name,
            "version": MOCK_VERSION,
            "tp_size": 1,
            "dp_size": 1,
            "page_size": self.cost.block_size,
            "max_total_num_tokens": self.cost.cache_tokens,
            "worker": self.name,
        }

    def _waiting(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    def _waiting_uncached_tokens(self) -> int:
        """SGLang's ``num_waiting_uncached_tokens``: the prompt tokens of the prefill queue the
        cache does not hold (the job in prefill's included)."""
        return sum(job.prompt_tokens - min(self.cache.lookup(job.keys), job.prompt_tokens) for job in self._prefilling)

    def _load_report(self) -> Dict[str, Any]:
        running = self.stats["active"] - self._waiting()
        usage = len(self.cache) * self.cost.block_size / self.cost.cache_tokens
        load = {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": self._waiting(),
            "num_waiting_uncached_tokens": self._waiting_uncached_tokens(),
            "num_total_reqs": self.stats["active"],
            "num_used_tokens": len(self.cache) * self.cost.block_size,
            "max_total_num_tokens": self.cost.cache_tokens,
            "token_usage": usage,
        }
        return {"timestamp": "", "dp_rank_count": 1, "loads": [load]}

    def _get_load(self) -> List[Dict[str, Any]]:
        return [{"dp_rank": 0, "num_reqs": self.stats["active"], "num_waiting_reqs": self._waiting(), "num_tokens": 0}]

    def _metrics(self) -> str:
        report = self._load_report()["loads"][0]
        label = '{model_name="%s"}' % self.model_name.replace("\\", "\\\\").replace('"', '\\"')
        lines = []
        for metric, value in (
            ("num_running_reqs", report["num_running_reqs"]),
            ("num_queue_reqs", report["num_waiting_reqs"]),
            ("num_used_tokens", report["num_used_tokens"]),
            ("token_usage", report["token_usage"]),
        ):
            lines += ["# TYPE sglang:%s gauge" % metric, "sglang:%s%s %s" % (metric, label, value)]
        return "\n".join(lines) + "\n"

    _INFO: Dict[str, Callable[["MockWorker"], Any]] = {
        "/v1/models": _models,
        "/model_info": _model_info,
        "/get_model_info": _model_info,
        "/server_info": _server_info,
        "/get_server_info": _server_info,
        "/version": lambda self: {"version": MOCK_VERSION},
        "/v1/loads": _load_report,
        "/loads": _load_report,
        "/get_load": _get_load,
    }

    # -- completions -------------------------------------------------------------------------

    @staticmethod
    def _parse_completion(body: bytes, kind: str) -> Tuple[Prompt, int, bool, Optional[int], Optional[float]]:
        """A generation request of an endpoint (``_ENDPOINTS``): prompt, max tokens, stream, fail
        after, scheduled at."""
        try:
            request = json.loads(body or b"null")
        except ValueError:
            raise _HttpError(400, "the request body is not JSON") from None
        if not isinstance(request, dict):
            raise _HttpError(400, "the request body must be a JSON object")
        # Gateways re-serialise requests with unset fields as null: null is absent.
        request = {k: v for k, v in request.items() if v is not None}
        model = request.get("model", DEFAULT_MODEL_NAME)
        if not isinstance(model, str):
            raise _HttpError(400, "'model' must be a string")
        prompt, max_tokens = _PROMPTS[kind](request)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 100000:
            name = "sampling_params.max_new_tokens" if kind == "generate" else "max_tokens"
            raise _HttpError(400, "'%s' must be an integer from 1 to 100000" % name)
        stream = request.get("stream", kind == "completions")
        if not isinstance(stream, bool):
            raise _HttpError(400, "'stream' must be true or false")
        fail_after = request.get("fail_after_tokens")
        if fail_after is not None and (isinstance(fail_after, bool) or not isinstance(fail_after, int) or fail_after < 0):
            raise _HttpError(400, "'fail_after_tokens' must be a non-negative integer")
        scheduled_at = request.get("scheduled_at")
        if scheduled_at is not None and (isinstance(scheduled_at, bool) or not isinstance(scheduled_at, (int, float)) or not 0 <= scheduled_at < math.inf):
            raise _HttpError(400, "'scheduled_at' must be a finite number of seconds >= 0 (time.monotonic())")
        return prompt, max_tokens, stream, fail_after, scheduled_at

    async def _completion(self, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str) -> bool:
        prompt, max_tokens, stream, fail_after, scheduled_at = self._parse_completion(body, kind)
        arrival = self._arrival(scheduled_at)  # before the counters: a refusal is not a request
        stats = self.stats
        stats["requests"] += 1
        stats["active"] += 1
        ids = prompt_token_ids(prompt)
        outcome = "cancelled"
        try:
            job = _Job(text_block_keys(ids, self.cost.block_size), len(ids), reader, ids, arrival)
            ends = self._fix_prefill(job, max_tokens)
            if stream:
                writer.write(self._head(200, "text/event-stream", "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n" + ends))
                await writer.drain()
            cached = await self._prefilled(job)
            if cached is None:
                return False
            stats["prompt_tokens"] += len(ids)
            stats["cached_tokens"] += cached
            stats["computed_tokens"] += len(ids) - cached
            tokens = _tokens(prompt, max_tokens)
            # The model's time (queueing and prefill since arrival, or since the client's schedule
            # said to send), not this process's wake-up: a busy machine delays the stream, not the figure.
            answer = _Answer(kind, self, len(ids), cached, max_tokens, (job.prefilled_at - job.arrival) * 1000.0)
            step = self._seconds(self.cost.decode_ms_per_token)
            deadline = job.prefilled_at if self.clock == "client" else asyncio.get_running_loop().time()
            if not stream:
                await self._until(deadline + max_tokens * step)
                await self._send_json(writer, 200, answer.whole("".join(tokens)))
                outcome = "completed"
                return True
            for i, token in enumerate(tokens):
                if fail_after is not None and i >= fail_after:
                    outcome = "failed"
                    writer.transport.abort()  # no terminating chunk: the client sees a broken stream
                    return False
                if reader.at_eof():  # the client closed its side: stop generating
                    return False
                await self._send_event(writer, answer.event(token))
                deadline += step
                if i < max_tokens - 1:
                    await self._until(deadline)
            closing = answer.closing()
            if closing is not None:
                await self._send_event(writer, closing)
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await writer.drain()
            outcome = "completed"
            return True
        except (ConnectionError, asyncio.CancelledError):
            outcome = "cancelled"
            raise
        finally:
            stats["active"] -= 1
            stats[outcome] += 1

    @staticmethod
    async def _send_event(writer: asyncio.StreamWriter, payload: Any) -> None:
        data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()


def _chat_prompt(messages: Any) -> Optional[str]:
    """The text of OpenAI chat ``messages``: string contents and text parts, one per line."""
    if not isinstance(messages, list):
        return None
    texts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return "\n".join(texts)


def _completions_prompt(request: Dict[str, Any]) -> Tuple[Prompt, Any]:
    prompt: Any = request.get("prompt")
    if not (isinstance(prompt, str) and prompt.split()) and not _is_token_ids(prompt):
        raise _HttpError(400, "'prompt' must be a non-empty string or a list of token ids (ints from 0 to 2**32 - 1)")
    return prompt, request.get("max_tokens", 16)


def _chat_request_prompt(request: Dict[str, Any]) -> Tuple[Prompt, Any]:
    prompt = _chat_prompt(request.get("messages"))
    if not prompt or not prompt.split():
        raise _HttpError(400, "'messages' must hold some text")
    return prompt, request.get("max_completion_tokens", request.get("max_tokens", 16))


def _generate_prompt(request: Dict[str, Any]) -> Tuple[Prompt, Any]:
    """SGLang's /generate: ``input_ids`` or ``text``, and ``sampling_params.max_new_tokens``."""
    prompt: Any = request.get("input_ids", request.get("text"))
    if not (isinstance(prompt, str) and prompt.split()) and not _is_token_ids(prompt):
        raise _HttpError(400, "'text' must be a non-empty string or 'input_ids' a list of token ids (ints from 0 to 2**32 - 1)")
    sampling = request.get("sampling_params", {})
    if not isinstance(sampling, dict):
        raise _HttpError(400, "'sampling_params' must be an object")
    return prompt, sampling.get("max_new_tokens", 16)


#: The generation endpoints by path, and how each reads its prompt and its number of tokens.
_ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/generate": "generate"}
_PROMPTS: Dict[str, Callable[[Dict[str, Any]], Tuple[Prompt, Any]]] = {
    "completions": _completions_prompt,
    "chat": _chat_request_prompt,
    "generate": _generate_prompt,
}


class _Answer:
    """One request's answer in its endpoint's shape, whole or as stream events: OpenAI's
    completion (``usage`` in a last event of its own), OpenAI's chat completion, or SGLang's
    /generate (each event the whole text so far and ``meta_info``). Each whole answer and last
    event also name the worker and its time to first token."""

    def __init__(self, kind: str, worker: "MockWorker", prompt_tokens: int, cached: int, max_tokens: int, ttft_ms: float) -> None:
        self.kind = kind
        self.model = worker.model_name
        self.prompt_tokens, self.cached, self.max_tokens = prompt_tokens, cached, max_tokens
        self.extra = {"worker": worker.name, "ttft_ms": ttft_ms}
        self.text, self.sent = "", 0

    def _usage(self) -> Dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.max_tokens,
            "total_tokens": self.prompt_tokens + self.max_tokens,  # OpenAI's CompletionUsage has all three
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }

    def _generate(self, text: str, tokens: int) -> Dict[str, Any]:
        finished = tokens == self.max_tokens
        meta = {
            "id": "mock",
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": tokens,
            "cached_tokens": self.cached,
            "finish_reason": {"type": "length", "length": tokens} if finished else None,
        }
        answer = {"text": text, "meta_info": meta}
        return dict(answer, **self.extra) if finished else answer

    def _chat(self, kind: str, payload: Dict[str, Any]) -> Dict[str, Any]:
        return dict({"id": "chatcmpl-mock", "object": kind, "created": 0, "model": self.model}, **payload)

    def whole(self, text: str) -> Dict[str, Any]:
        if self.kind == "generate":
            return self._generate(text, self.max_tokens)
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            return self._chat("chat.completion", dict({"choices": [choice], "usage": self._usage()}, **self.extra))
        return dict({"choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": self._usage()}, **self.extra)

    def event(self, token: str) -> Dict[str, Any]:
        self.text, self.sent = self.text + token, self.sent + 1
        finish = "length" if self.sent == self.max_tokens else None
        if self.kind == "generate":
            return self._generate(self.text, self.sent)
        if self.kind == "chat":
            return self._chat("chat.completion.chunk", {"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": finish}]})
        return {"choices": [{"index": 0, "text": token, "finish_reason": finish}]}

    def closing(self) -> Optional[Dict[str, Any]]:
        """The event after the tokens: OpenAI's usage; None for SGLang, whose last event has it."""
        if self.kind == "generate":
            return None
        last = dict({"choices": [], "usage": self._usage()}, **self.extra)
        return self._chat("chat.completion.chunk", last) if self.kind == "chat" else last


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bounded_router.testing.mock_worker",
        description="A mock LLM worker: streams tokens, keeps a prefix cache, models prefill and decode time.",
    )
    parser.add_argument("--name", default="mock", help="reported in X-Mock-Worker and in every answer")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help="the model it serves (/v1/models; default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed on start)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply every modelled time by this")
    parser.add_argument(
        "--clock", choices=CLOCKS, default="wall", help="the model's clock: the wall clock, or the client's (POST /clock; default %(default)s)"
    )
    parser.add_argument("--lifetime", type=float, default=None, help="exit after this many seconds")
    parser.add_argument(
        "--kv-events-port", type=int, default=None, help="publish KV cache events on tcp://HOST:PORT (0: any free port; needs pyzmq, msgpack)"
    )
    parser.add_argument("--kv-events-replay-port", type=int, default=None, help="serve KV event replays on this port (with --kv-events-port)")
    CostModel.add_arguments(parser)
    return parser


async def _serve(args: argparse.Namespace) -> None:
    cost = CostModel.from_args(args)
    worker = MockWorker(args.name, cost, args.time_scale, args.model_name, args.clock)
    port = await worker.start(args.host, args.port)
    if args.kv_events_port is not None:
        replay = None if args.kv_events_replay_port is None else "tcp://%s:%d" % (args.host, args.kv_events_replay_port)
        worker.kv_events = KVEventPublisher("tcp://%s:%d" % (args.host, args.kv_events_port), replay)
        print("mock worker %s publishing KV events on %s (replay %s)" % (args.name, worker.kv_events.endpoint, worker.kv_events.replay_endpoint), flush=True)
    print("mock worker %s listening on http://%s:%d" % (args.name, args.host, port), flush=True)
    parent = os.getppid()
    started = time.monotonic()
    try:
        while args.lifetime is None or time.monotonic() - started < args.lifetime:
            await asyncio.sleep(0.5)
            if os.getppid() != parent:  # the process that started us is gone
                break
    finally:
        await worker.close()
        if worker.kv_events is not None:
            worker.kv_events.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.kv_events_replay_port is not None and args.kv_events_port is None:
        parser.error("--kv-events-replay-port needs --kv-events-port")
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        pass
    except ValueError as e:
        print("mock worker: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
