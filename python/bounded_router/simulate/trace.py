"""Request traces in the Mooncake format, and the routing key of each request.

One JSON object per line (the format of kvcache-ai/Mooncake's ``FAST25-release/traces``):

* ``timestamp``: arrival time in milliseconds from the start of the trace (non-decreasing);
* ``input_length``, ``output_length``: prompt and output tokens;
* ``hash_ids``: the prompt's prefix blocks in order, ``block_size`` tokens each (the last one may
  be partial). Block ``i`` identifies the whole prefix up to and including block ``i``, so two
  prompts share a cached prefix exactly as far as their leading ids are equal.

Any other field is kept, so that a field can serve as the routing key. A bad line raises
:class:`TraceError` naming the line and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "TraceError",
    "TraceRequest",
    "Trace",
    "parse_trace",
    "load_trace",
    "build_trace",
    "shared_leading_blocks",
    "routing_keys",
]


class TraceError(ValueError):
    """A trace line that cannot be replayed; the message names the line and the field."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace (``line``: its line number in the file)."""

    line: int
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    blocks: Tuple[Hashable, ...]
    fields: Dict[str, Any]


@dataclass(frozen=True)
class Trace:
    """The requests of a trace, in arrival order, with their routing keys."""

    requests: Tuple[TraceRequest, ...]
    keys: Tuple[str, ...]
    block_size: int
    key_source: str

    @property
    def span_ms(self) -> float:
        """Time from the first arrival to the last one, in the trace's own clock."""
        return self.requests[-1].timestamp_ms - self.requests[0].timestamp_ms

    @property
    def unique_blocks(self) -> int:
        """Distinct prefix blocks of the whole trace."""
        return len({block for request in self.requests for block in request.blocks})

    @property
    def prompt_tokens(self) -> int:
        return sum(request.input_tokens for request in self.requests)


def _field(record: Dict[str, Any], name: str, where: str) -> Any:
    if name not in record:
        raise TraceError("%s: field %r is missing" % (where, name))
    return record[name]


def _count(record: Dict[str, Any], name: str, where: str, minimum: int) -> int:
    value = _field(record, name, where)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TraceError("%s: field %r must be an integer >= %d, got %r" % (where, name, minimum, value))
    return value


def _request(record: Any, line: int, where: str, block_size: int, previous_ms: float) -> TraceRequest:
    if not isinstance(record, dict):
        raise TraceError("%s: expected a JSON object, got %s" % (where, type(record).__name__))
    timestamp = _field(record, "timestamp", where)
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp) or timestamp < 0:
        raise TraceError("%s: field 'timestamp' must be a number of milliseconds >= 0, got %r" % (where, timestamp))
    if timestamp < previous_ms:
        raise TraceError(
            "%s: field 'timestamp' goes back in time (%r after %r): the trace must be in arrival order"
            % (where, timestamp, previous_ms)
        )
    input_tokens = _count(record, "input_length", where, 1)
    output_tokens = _count(record, "output_length", where, 1)
    blocks = _field(record, "hash_ids", where)
    if not isinstance(blocks, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in blocks):
        raise TraceError("%s: field 'hash_ids' must be a list of integers" % where)
    expected = -(-input_tokens // block_size)
    if len(blocks) != expected:
        raise TraceError(
            "%s: field 'hash_ids' has %d blocks but input_length %d needs %d of %d tokens (is --block-size right?)"
            % (where, len(blocks), input_tokens, expected, block_size)
        )
    return TraceRequest(line, float(timestamp), input_tokens, output_tokens, tuple(blocks), record)


def parse_trace(
    lines: Iterable[str], block_size: int = 512, name: str = "trace", limit: Optional[int] = None
) -> List[TraceRequest]:
    """The requests of trace ``lines`` (blank lines are skipped), at most ``limit`` of them."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size must be an integer >= 1, got %r" % (block_size,))
    requests: List[TraceRequest] = []
    previous = 0.0
    for number, line in enumerate(lines, 1):
        if limit is not None and len(requests) >= limit:
            break
        if not line.strip():
            continue
        where = "%s line %d" % (name, number)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError("%s: not JSON (%s)" % (where, e.msg)) from None
        request = _request(record, number, where, block_size, previous)
        previous = request.timestamp_ms
        requests.append(request)
    if not requests:
        raise TraceError("%s: no requests" % name)
    return requests


def shared_leading_blocks(requests: Sequence[TraceRequest]) -> int:
    """How many leading blocks every request has in common (a system prompt all of them share)."""
    first = requests[0].blocks
    shared = len(first)
    for request in requests:
        blocks = request.blocks
        n = 0
        limit = min(shared, len(blocks))
        while n < limit and blocks[n] == first[n]:
            n += 1
        shared = n
        if shared == 0:
            break
    return shared


def routing_keys(requests: Sequence[TraceRequest], field: Optional[str] = None) -> List[str]:
    """The routing key of each request.

    Default: the first block after the leading blocks every request shares, i.e. the first block
    that tells conversations apart (a request with no such block uses its last block). With
    ``field``, that field's value in each line (a missing field is an error naming the line).
    """
    if field is not None:
        keys = []
        for request in requests:
            if field not in request.fields:
                raise TraceError("line %d: routing key field %r is missing" % (request.line, field))
            keys.append(str(request.fields[field]))
        return keys
    shared = shared_leading_blocks(requests)
    return ["block-%s" % request.blocks[min(shared, len(request.blocks) - 1)] for request in requests]


def load_trace(path: str, block_size: int = 512, key_field: Optional[str] = None, limit: Optional[int] = None) -> Trace:
    """Read a Mooncake-format trace file (the first ``limit`` requests) and derive the routing keys."""
    with open(path, encoding="utf-8") as f:
        requests = parse_trace(f, block_size, name=path, limit=limit)
    return build_trace(requests, block_size, key_field)


def build_trace(requests: Sequence[TraceRequest], block_size: int, key_field: Optional[str] = None) -> Trace:
    """A :class:`Trace` of parsed requests, with the routing keys :func:`routing_keys` derives."""
    if key_field is None:
        source = "first non-shared block (after %d shared)" % shared_leading_blocks(requests)
    else:
        source = "field %r" % key_field
    return Trace(tuple(requests), tuple(routing_keys(requests, key_field)), block_size, source)
