"""The routing inputs beyond the key and the headers: a lease's weight and the request's prefix
blocks, checked here once (docs/contract.md, "Weighted leases") and converted to what the
library takes: bytes of uint64s and int64s for the request path (``route`` and ``route_many``),
``br_request`` structs for a batch with prefix blocks and for ``select``.
"""

from __future__ import annotations

import ctypes
import numbers
import struct
import threading
from array import array
from itertools import chain
from typing import Any, Iterable, List, NoReturn, Optional, Sequence

from ._native import BrRequest

__all__ = ["MAX_LEASE_WEIGHT", "MAX_PREFIX_BLOCKS", "check_weight", "one_request", "pack_requests", "prefix_block_array", "prefix_block_bytes", "weight_array"]

#: The largest weight one lease may count (``BR_MAX_LEASE_WEIGHT``; the tests check it against
#: the library's constants).
MAX_LEASE_WEIGHT = 1 << 30
#: The most prefix blocks one request may carry (``BR_MAX_PREFIX_BLOCKS``).
MAX_PREFIX_BLOCKS = 1 << 16
_U64_MAX = 2**64 - 1
# br_request's fields in the platform's C layout: key, key_len, headers, headers_len, weight,
# prefix_blocks, prefix_blocks_len. Packing the structs with it costs a fraction of setting
# ctypes fields one by one.
_LAYOUT = struct.Struct("@PNPNqPN")
assert _LAYOUT.size == ctypes.sizeof(BrRequest)


def check_weight(weight: Any, what: str = "weight") -> int:
    """``weight`` as an int from 1 to :data:`MAX_LEASE_WEIGHT`.

    Raises:
        TypeError: not an integer (a bool is not one here).
        ValueError: out of range.
    """
    if type(weight) is int and 1 <= weight <= MAX_LEASE_WEIGHT:  # the usual case, without the ABC checks
        return weight
    if isinstance(weight, bool) or not isinstance(weight, numbers.Integral):
        raise TypeError("%s must be an integer from 1 to %d, got %r" % (what, MAX_LEASE_WEIGHT, weight))
    number = int(weight)
    if not 1 <= number <= MAX_LEASE_WEIGHT:
        raise ValueError("%s must be an integer from 1 to %d, got %d" % (what, MAX_LEASE_WEIGHT, number))
    return number


def weight_array(weights: List[Any], what: str) -> "array[int]":
    """The weights of a batch as an ``array("q")``, each checked as :func:`check_weight` checks
    one (the error names its index in ``what``)."""
    try:
        packed = array("q", weights)  # one conversion in C, where a bool passes as 0 or 1
    except (TypeError, OverflowError):
        packed = None
    if packed is None or min(packed) < 1 or max(packed) > MAX_LEASE_WEIGHT or bool in map(type, weights):
        packed = array("q", [check_weight(w, "%s[%d]" % (what, i)) for i, w in enumerate(weights)])
    return packed


def prefix_block_array(blocks: Any, what: str = "prefix_blocks") -> "array[int]":
    """``blocks`` (a sequence of ints from 0 to 2**64-1, at most :data:`MAX_PREFIX_BLOCKS`) as an
    ``array("Q")``.

    Raises:
        TypeError: not a sequence of integers (a str, bytes or a bool among the blocks included).
        ValueError: a block out of range, or too many blocks.
    """
    if type(blocks) is array and blocks.typecode == "Q":
        items: Sequence[Any] = blocks  # already uint64s: only the length to check
    elif type(blocks) in (list, tuple):
        items = blocks  # the usual case, without the ABC checks below
    elif isinstance(blocks, (str, bytes, bytearray)) or not isinstance(blocks, Iterable):
        raise TypeError("%s must be a sequence of integers from 0 to 2**64-1, got %s" % (what, type(blocks).__name__))
    else:
        items = blocks if isinstance(blocks, Sequence) else list(blocks)
    if len(items) > MAX_PREFIX_BLOCKS:
        raise ValueError("%s may hold at most %d blocks, got %d" % (what, MAX_PREFIX_BLOCKS, len(items)))
    try:
        packed = array("Q", items)
    except (TypeError, OverflowError):
        packed = None
    if packed is None or bool in map(type, items):
        _raise_bad_block(items, what)
    return packed


def prefix_block_bytes(blocks: Any, what: str = "prefix_blocks") -> bytes:
    """:func:`prefix_block_array`'s blocks as the bytes of their uint64s, the form the request
    path passes to the library (ctypes passes bytes as a pointer without a converter)."""
    if type(blocks) is list and len(blocks) <= MAX_PREFIX_BLOCKS:
        try:
            raw = array("Q", blocks).tobytes()
        except (TypeError, OverflowError):
            raw = b""
        # array("Q") lets a bool through as 0 or 1, and testing the type of every block costs
        # more than the conversion: this shortcut takes the array only when no block is 0 or 1,
        # searching its bytes for the 7 zero bytes that follow the low byte of both (a false
        # alarm, such as a run of zeros across two blocks, only costs the exact test). Hash
        # values almost never hold 7 zero bytes in a row. (find, not `in`, which tries the
        # needle as an int first and clears the error.)
        if raw and raw.find(_SEVEN_ZEROS) < 0:
            return raw
    elif type(blocks) is array and blocks.typecode == "Q" and len(blocks) <= MAX_PREFIX_BLOCKS:
        return blocks.tobytes()  # no conversion, no bool
    return prefix_block_array(blocks, what).tobytes()


_SEVEN_ZEROS = bytes(7)


def _raise_bad_block(items: Sequence[Any], what: str) -> NoReturn:
    """Raise the error that names the first block that is not an integer from 0 to 2**64-1."""
    for i, block in enumerate(items):
        if isinstance(block, bool) or not isinstance(block, numbers.Integral):
            raise TypeError("%s[%d] must be an integer from 0 to 2**64-1, got %r" % (what, i, block))
        if not 0 <= int(block) <= _U64_MAX:
            raise ValueError("%s[%d] must be an integer from 0 to 2**64-1, got %d" % (what, i, int(block)))
    raise TypeError("%s must be a sequence of integers from 0 to 2**64-1" % what)


def pack_requests(keys: List[bytes], headers: Optional[List[bytes]], weights: List[int], blocks: List[Optional["array[int]"]]) -> Any:
    """A ctypes array of ``br_request``, one per key: its header block (all empty when
    ``headers`` is None), checked weight and block array from :func:`prefix_block_array` (or
    None). The keys and headers are copied behind the structs, in the same buffer; the array
    keeps the block arrays it points to alive."""
    n, size = len(keys), _LAYOUT.size
    data = b"".join(keys) if headers is None else b"".join(chain.from_iterable(zip(keys, headers)))
    buffer = bytearray(n * size + len(data))
    buffer[n * size :] = data
    requests = (BrRequest * n).from_buffer(buffer)
    at = ctypes.addressof(requests) + n * size
    pack_into = _LAYOUT.pack_into
    for i in range(n):
        k = len(keys[i])
        h = 0 if headers is None else len(headers[i])
        b = blocks[i]
        m = 0 if b is None else len(b)
        pack_into(buffer, i * size, at if k else 0, k, at + k if h else 0, h, weights[i], b.buffer_info()[0] if b is not None and m else 0, m)
        at += k + h
    setattr(requests, "blocks", blocks)  # a ctypes array takes attributes; kept as long as it lives
    return requests


# Per thread: (buffer, a pointer argument to its br_request view, the view's address) of
# one_request, and the block array of its last request.
_SCRATCH = threading.local()


def one_request(key: bytes, headers: bytes, weight: int, blocks: Optional["array[int]"]) -> Any:
    """A pointer argument (``byref``) to a ``br_request`` for one call, in this thread's buffer
    (the key and headers copied behind the struct): valid until this thread's next call of this
    function. Reusing the buffer spares a single route the allocations :func:`pack_requests`
    makes for a batch."""
    size, k, h = _LAYOUT.size, len(key), len(headers)
    scratch = getattr(_SCRATCH, "value", None)
    if scratch is None or len(scratch[0]) < size + k + h:
        buffer = bytearray(max(4096, 2 * (size + k + h)))
        view = BrRequest.from_buffer(buffer)
        scratch = _SCRATCH.value = (buffer, ctypes.byref(view), ctypes.addressof(view))
    buffer, pointer, at = scratch
    at += size
    buffer[size : size + k] = key  # same length: the exported buffer is never resized
    buffer[size + k : size + k + h] = headers
    m = 0 if blocks is None else len(blocks)
    _LAYOUT.pack_into(buffer, 0, at if k else 0, k, at + k if h else 0, h, weight, blocks.buffer_info()[0] if blocks is not None and m else 0, m)
    _SCRATCH.blocks = blocks  # alive until the next request of this thread
    return pointer
