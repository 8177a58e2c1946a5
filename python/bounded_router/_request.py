"""The routing inputs beyond the key and the headers: a lease's weight and the request's prefix
blocks, checked here once (docs/contract.md, "Weighted leases") and converted to what the
library takes: bytes of uint64s and int64s for the request path (``route`` and ``route_many``),
``br_request`` structs for a batch with prefix blocks and for ``select``.

Prefix blocks come in four forms (docs/contract.md, "Weighted leases"): a :class:`PrefixBlocks`
(what :func:`~bounded_router.prefix_blocks` returns), which carries its blocks already packed and
costs nothing per block; an ``array("Q")`` or a one-dimensional buffer of uint64s (a
``memoryview`` of format ``"Q"``, a numpy ``uint64`` array), copied in one step; and any other
sequence of ints, converted block by block in C.
"""

from __future__ import annotations

import ctypes
import functools
import numbers
import struct
import sys
import threading
from array import array
from itertools import chain
from typing import Any, Callable, Iterable, List, NoReturn, Optional, Sequence

from ._native import BrRequest

__all__ = ["MAX_LEASE_WEIGHT", "MAX_PREFIX_BLOCKS", "PrefixBlocks", "check_weight", "packed_blocks", "one_request", "pack_requests", "prefix_block_array", "prefix_block_bytes", "weight_array"]

#: The largest weight one lease may count (``BR_MAX_LEASE_WEIGHT``; the tests check it against
#: the library's constants).
MAX_LEASE_WEIGHT = 1 << 30
#: The most prefix blocks one request may carry (``BR_MAX_PREFIX_BLOCKS``).
MAX_PREFIX_BLOCKS = 1 << 16
_U64_MAX = 2**64 - 1
# The array typecode that converts Python ints to uint64s fastest: "L" where C's unsigned long
# has 64 bits (CPython reads an int's digits in a loop for it, where "Q" goes through a generic
# byte conversion: BENCHMARKS.md, "Prefix blocks passed once"), else "Q".
_U64 = "L" if array("L").itemsize == 8 else "Q"
# The array typecodes and buffer formats whose items are the library's uint64s as they are.
_U64_CODES = frozenset(code for code in "QL" if array(code).itemsize == 8)
_U64_FORMATS = _U64_CODES | {"@" + code for code in _U64_CODES} | {"=Q", ("<Q" if sys.byteorder == "little" else ">Q")}
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


class PrefixBlocks(List[int]):
    """A list of prefix block hashes that also keeps them packed as the library reads them, so
    that a route passes them on without looking at each block again.

    :func:`~bounded_router.prefix_blocks`, :func:`~bounded_router.text_prefix_blocks` and the
    proxies' text blocks return one; ``PrefixBlocks(blocks)`` checks and packs other blocks once
    (each an integer from 0 to 2**64-1, at most ``MAX_PREFIX_BLOCKS``; ``TypeError`` or
    ``ValueError`` naming ``prefix_blocks[i]`` otherwise), for a prompt routed more than once. It
    is a ``list`` in every other way: any change to it drops the packed copy, and the route then
    converts it as any list (slices and copies are plain lists).
    """

    __slots__ = ("_packed",)

    _packed: Optional[bytes]

    def __init__(self, blocks: Iterable[int] = ()) -> None:
        self._packed = None
        list.__init__(self, blocks)
        self._packed = prefix_block_array(self).tobytes()

    def __reduce__(self) -> Any:
        return (PrefixBlocks, (list(self),))


def _dropping_packed(change: Callable[..., Any]) -> Callable[..., Any]:
    """``list``'s method ``change`` for :class:`PrefixBlocks`: drops the packed copy first."""

    @functools.wraps(change)
    def changed(self: PrefixBlocks, *args: Any, **kwargs: Any) -> Any:
        self._packed = None
        return change(self, *args, **kwargs)

    return changed


# Every method by which a list changes in place.
for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"):
    setattr(PrefixBlocks, _name, _dropping_packed(getattr(list, _name)))
del _name


def packed_blocks(packed: bytes) -> PrefixBlocks:
    """The :class:`PrefixBlocks` of uint64s the library wrote (``packed``: their bytes)."""
    blocks = PrefixBlocks.__new__(PrefixBlocks)
    list.__init__(blocks, array(_U64, packed))
    blocks._packed = packed
    return blocks


def prefix_block_array(blocks: Any, what: str = "prefix_blocks") -> "array[int]":
    """``blocks`` (in one of the module docstring's forms: ints from 0 to 2**64-1, at most
    :data:`MAX_PREFIX_BLOCKS`) as an array of uint64s, converted as :func:`prefix_block_bytes`
    converts them.

    Raises:
        TypeError: not a sequence of integers (a str, bytes or a bool among the blocks included),
            or a memoryview of items that are not uint64s.
        ValueError: a block out of range, or too many blocks.
    """
    return array(_U64, prefix_block_bytes(blocks, what))


def _block_array(blocks: Any, what: str) -> "array[int]":
    """:func:`prefix_block_array` of the forms :func:`prefix_block_bytes` has no shortcut for, and
    of every form whose shortcut did not apply."""
    if type(blocks) is array and blocks.typecode in _U64_CODES:
        packed: Optional["array[int]"] = array(_U64, blocks.tobytes())  # a copy, in one step
    elif type(blocks) in (list, tuple, PrefixBlocks):
        packed = None  # the usual case, without the ABC checks below
    else:
        packed = _uint64_buffer(blocks, what)
    if packed is not None:
        _check_count(len(packed), what)
        return packed
    items: Sequence[Any] = blocks if type(blocks) in (list, tuple, PrefixBlocks) else _sequence(blocks, what)
    _check_count(len(items), what)
    try:
        packed = array(_U64, items)
    except (TypeError, OverflowError):
        packed = None
    if packed is None or bool in map(type, items):
        _raise_bad_block(items, what)
    return packed


def _check_count(count: int, what: str) -> None:
    if count > MAX_PREFIX_BLOCKS:
        raise ValueError("%s may hold at most %d blocks, got %d" % (what, MAX_PREFIX_BLOCKS, count))


def _sequence(blocks: Any, what: str) -> Sequence[Any]:
    """``blocks``, an object of no form the request path knows, as a sequence of its items."""
    if isinstance(blocks, (str, bytes, bytearray)) or not isinstance(blocks, Iterable):
        hint = " (for packed uint64s pass memoryview(data).cast('Q'))" if isinstance(blocks, (bytes, bytearray)) else ""
        raise TypeError("%s must be a sequence of integers from 0 to 2**64-1, got %s%s" % (what, type(blocks).__name__, hint))
    return blocks if isinstance(blocks, Sequence) else list(blocks)


def _uint64_buffer(blocks: Any, what: str) -> Optional["array[int]"]:
    """The uint64s of ``blocks`` when it is a one-dimensional buffer of them (a memoryview, a
    numpy ``uint64`` array), copied in one step; None when it is another object (converted as a
    sequence, as a numpy ``int64`` array is).

    Raises:
        TypeError: ``blocks`` is a memoryview of anything but a one-dimensional run of uint64s.
    """
    try:
        view = memoryview(blocks)
    except TypeError:
        return None
    if view.format in _U64_FORMATS and view.itemsize == 8 and view.ndim == 1:
        return array(_U64, view.tobytes())
    if isinstance(blocks, memoryview):
        raise TypeError(
            "%s as a memoryview must be one-dimensional with uint64 items (format 'Q', itemsize 8), got format %r, itemsize %d, ndim %d"
            % (what, view.format, view.itemsize, view.ndim)
        )
    return None


def prefix_block_bytes(blocks: Any, what: str = "prefix_blocks") -> bytes:
    """:func:`prefix_block_array`'s blocks as the bytes of their uint64s, the form the request
    path passes to the library (ctypes passes bytes as a pointer without a converter)."""
    kind = type(blocks)
    if kind is PrefixBlocks:
        packed = blocks._packed
        if packed is not None:
            return packed  # type: ignore[no-any-return]
    if (kind is list or kind is PrefixBlocks) and len(blocks) <= MAX_PREFIX_BLOCKS:
        # The cheapest conversion of a list of ints CPython has (BENCHMARKS.md, "A list of
        # blocks"): fromlist reads the list's items in place, where array(_U64, blocks) takes a
        # new reference to each, and a copy of an empty array skips the constructor's arguments.
        packed = _NO_BLOCKS.__copy__()
        try:
            packed.fromlist(blocks)
            raw = packed.tobytes()
        except (TypeError, OverflowError):
            raw = b""
        # array("L") lets a bool through as 0 or 1, and testing the type of every block costs
        # more than the conversion: this shortcut takes the array only when no block is 0 or 1,
        # searching its bytes for the 7 zero bytes that follow the low byte of both (a false
        # alarm, such as a run of zeros across two blocks, only costs the exact test). Hash
        # values almost never hold 7 zero bytes in a row. (find, not `in`, which tries the
        # needle as an int first and clears the error.)
        if raw and raw.find(_SEVEN_ZEROS) < 0:
            return raw
    elif kind is array and blocks.typecode in _U64_CODES and len(blocks) <= MAX_PREFIX_BLOCKS:
        return blocks.tobytes()  # type: ignore[no-any-return]  # no conversion, no bool
    return _block_array(blocks, what).tobytes()


_SEVEN_ZEROS = bytes(7)
_NO_BLOCKS = array(_U64)


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
