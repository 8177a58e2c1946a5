"""KV cache events as vLLM publishes them, for the mock worker and tests (docs/contract.md,
"Reported blocks"): :func:`encode_batch` writes a ``KVEventBatch`` payload, :class:`KVEventPublisher`
sends them on a ZeroMQ PUB socket with sequence numbers and serves a replay ROUTER socket.

The format is vLLM's ``vllm/distributed/kv_events.py`` (SGLang publishes the same structures):
msgspec Structs with ``array_like=True``, so each is a msgpack array of its fields in declaration
order, an event's tag (its class name) first; each message is the frames ``[topic, sequence (8
bytes, big-endian), payload]``; a replay request is the first sequence wanted (8 bytes,
big-endian), answered with ``[sequence, payload]`` per buffered batch from it, then ``[-1, b""]``.

Needs ``pyzmq`` and ``msgpack`` (``pip install bounded-router[kv-events]``), imported when first
used: the package itself has no run-time dependencies.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Deque, List, Optional, Sequence, Tuple

__all__ = ["BlockStored", "BlockRemoved", "AllBlocksCleared", "encode_batch", "KVEventPublisher"]

_EXTRA = "the kv-events extra (pip install bounded-router[kv-events]: pyzmq and msgpack)"


def _msgpack() -> Any:
    try:
        import msgpack  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("KV events need %s: %s" % (_EXTRA, e)) from e
    return msgpack


def _zmq() -> Any:
    try:
        import zmq
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("KV events need %s: %s" % (_EXTRA, e)) from e
    return zmq


def BlockStored(
    block_hashes: Sequence[int], parent_block_hash: Optional[int], token_ids: Sequence[int], block_size: int
) -> List[Any]:
    """A ``BlockStored`` event in vLLM's field order: block_hashes, parent_block_hash, token_ids,
    block_size, lora_id, medium, lora_name (the last three None: the base model, on the GPU)."""
    return ["BlockStored", list(block_hashes), parent_block_hash, list(token_ids), block_size, None, None, None]


def BlockRemoved(block_hashes: Sequence[int]) -> List[Any]:
    """A ``BlockRemoved`` event: block_hashes, medium (None)."""
    return ["BlockRemoved", list(block_hashes), None]


def AllBlocksCleared() -> List[Any]:
    """An ``AllBlocksCleared`` event (no field)."""
    return ["AllBlocksCleared"]


def encode_batch(ts: float, events: Sequence[List[Any]]) -> bytes:
    """The msgpack payload of a ``KVEventBatch`` [ts, events] (data_parallel_rank left out, as
    ``omit_defaults`` leaves it when None)."""
    packed: bytes = _msgpack().packb([float(ts), list(events)], use_bin_type=True)
    return packed


class KVEventPublisher:
    """A ZeroMQ PUB socket bound to ``endpoint`` (``tcp://127.0.0.1:0`` picks a port) that sends
    batches numbered from 0, and a ROUTER socket on ``replay_endpoint`` (optional) that replays
    the last ``buffer`` batches; :attr:`endpoint` and :attr:`replay_endpoint` are the bound
    addresses. Safe to call from any thread; :meth:`close` stops it."""

    def __init__(self, endpoint: str = "tcp://127.0.0.1:0", replay_endpoint: Optional[str] = None, topic: str = "", buffer: int = 10000) -> None:
        zmq = _zmq()
        self._zmq = zmq
        self._context = zmq.Context()
        self._lock = threading.Lock()
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(endpoint)
        self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._topic = topic.encode("utf-8")
        self._next = 0
        self._buffer: Deque[Tuple[int, bytes]] = collections.deque(maxlen=buffer)
        self.replay_endpoint: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if replay_endpoint is not None:
            self._replay = self._context.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(replay_endpoint)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
            self._thread = threading.Thread(target=self._serve_replays, name="kv-events-replay", daemon=True)
            self._thread.start()

    def publish(self, events: Sequence[List[Any]], skip: bool = False) -> int:
        """Send one batch of events; its sequence number is returned. ``skip`` numbers and buffers
        the batch without sending it (a lost message, for tests of the replay)."""
        payload = encode_batch(time.time(), events)
        with self._lock:
            seq = self._next
            self._next += 1
            self._buffer.append((seq, payload))
            if not skip:
                self._pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload])
        return seq

    def _serve_replays(self) -> None:
        poller = self._zmq.Poller()
        poller.register(self._replay, self._zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            frames = self._replay.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                continue  # as vLLM: an invalid request is ignored
            client, start = frames[0], int.from_bytes(frames[2], "big")
            with self._lock:
                batches = [(seq, payload) for seq, payload in self._buffer if seq >= start]
            for seq, payload in batches:
                self._replay.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
            self._replay.send_multipart([client, b"", (-1).to_bytes(8, "big", signed=True), b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._replay.close()
        self._pub.close()
        self._context.term()
