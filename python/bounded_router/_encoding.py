"""Python inputs as the bytes the C API reads: routing keys, worker URLs and header blocks.

Every length passed to the library is the length of an exact ``bytes`` object this module made
or checked: a ``bytes`` or ``str`` subclass can override ``__len__`` or ``encode()``, and a
length larger than the buffer would make the library read past it.

Header blocks (capi/headers.go): only the headers that carry routing inputs are passed on: ``X-SMG-Target-Worker``,
``X-SMG-Routing-Key`` (or the router's ``routing_key_headers``), ``Authorization``,
``X-Forwarded-For`` and ``Cookie``, matched without regard to ASCII case. This is a filter only: which header wins, what is valid and what is
ignored is decided by the native library, which receives those headers in their original order.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = ["HeadersLike", "ROUTING_HEADERS", "DEFAULT_ROUTING_KEY_HEADERS", "HeaderFilter", "encode_headers", "key_bytes", "url_bytes"]

#: Any mapping of header names to values (a dict, Starlette's ``Headers``, aiohttp's
#: ``CIMultiDict``, ...) or an iterable of ``(name, value)`` pairs; names and values are ``str``
#: (encoded latin-1, as HTTP does) or ``bytes``.
HeadersLike = Union[Mapping[Any, Any], Iterable[Tuple[Any, Any]]]

#: Lower-case names of the headers that carry routing inputs (docs/contract.md, "Inputs and
#: precedence"; the library reports the same names in its constants).
ROUTING_HEADERS = frozenset(
    (b"x-smg-target-worker", b"x-smg-routing-key", b"authorization", b"x-forwarded-for", b"cookie")
)
#: The default ``routing_key_headers`` (the library reports the same in its constants).
DEFAULT_ROUTING_KEY_HEADERS = ("X-SMG-Routing-Key",)
_length = struct.Struct("<I").pack
# Header name as given (str or bytes) -> its encoded part of a header block (length and name),
# or None for a header that carries no routing input. Requests repeat the same few names, so
# most headers cost one lookup here; the cache starts again past _NAMES_MAX names (clients can
# send names of their choosing).
_names: Dict[Any, Optional[bytes]] = {}
_NAMES_MAX = 4096


def exact_bytes(data: bytes, what: str) -> bytes:
    """``data`` as an exact ``bytes`` object, whatever its class claims about its length.

    Raises:
        ValueError: ``data`` is a bytes subclass whose ``len()`` differs from its content.
    """
    if type(data) is bytes:
        return data
    content = memoryview(data).tobytes()
    if len(data) != len(content):
        raise ValueError(
            "%s: its length says %d bytes but it holds %d (a bytes subclass whose __len__ lies); pass plain bytes"
            % (what, len(data), len(content))
        )
    return content


def _header_bytes(text: Any, what: str) -> bytes:
    if isinstance(text, bytes):
        return exact_bytes(text, "header " + what)
    if isinstance(text, str):
        try:
            return str.encode(text, "latin-1")
        except UnicodeEncodeError:
            # Not a valid HTTP header text; UTF-8 keeps it, and the library treats a value with
            # bytes outside visible ASCII as absent.
            return str.encode(text, "utf-8", "surrogatepass")
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    raise TypeError("header %s must be str or bytes, got %s" % (what, type(text).__name__))


class HeaderFilter:
    """The headers that carry routing inputs for one set of routing-key header names, and the
    cache of header names classified against them (see _names)."""

    def __init__(self, names: "frozenset[bytes]", cache: Dict[Any, Optional[bytes]]) -> None:
        self.names = names
        self.lengths = frozenset(len(name) for name in names)
        self.cache = cache

    @classmethod
    def for_key_headers(cls, key_headers: Iterable[str]) -> "HeaderFilter":
        """The filter of a router whose routing-key headers are ``key_headers`` (ASCII names)."""
        names = (ROUTING_HEADERS - {b"x-smg-routing-key"}) | {name.lower().encode("ascii") for name in key_headers}
        return cls(frozenset(names), {})

    def name_part(self, name: Any) -> Optional[bytes]:
        """The block part of a header name, classified on first sight."""
        raw_name = _header_bytes(name, "name")
        part = None
        if len(raw_name) in self.lengths and raw_name.lower() in self.names:
            part = _length(len(raw_name)) + raw_name
        if type(name) in (str, bytes):  # hashable and immutable: safe to remember
            if len(self.cache) >= _NAMES_MAX:
                self.cache.clear()
            self.cache[name] = part
        return part


#: The filter of the default routing-key header, whose cache is _names.
DEFAULT_FILTER = HeaderFilter(ROUTING_HEADERS, _names)


def _items(headers: HeadersLike) -> Iterable[Any]:
    if isinstance(headers, (str, bytes, bytearray, memoryview)):
        raise TypeError("headers must be a mapping or an iterable of (name, value) pairs, got %s" % type(headers).__name__)
    if type(headers).__module__.startswith("starlette.") and isinstance(getattr(headers, "raw", None), list):
        # Starlette's Headers keep the raw (bytes, bytes) pairs; .items() would decode them all.
        return headers.raw  # type: ignore[union-attr, no-any-return]
    items = headers.items() if hasattr(headers, "items") else headers
    try:
        return iter(items)
    except TypeError:
        raise TypeError(
            "headers must be a mapping or an iterable of (name, value) pairs, got %s" % type(headers).__name__
        ) from None


def encode_headers(headers: HeadersLike, routing: HeaderFilter = DEFAULT_FILTER) -> bytes:
    """Encode the routing headers among ``headers`` (those of ``routing``) as a header block
    (empty if there are none).

    For each header kept: a little-endian uint32 name length, the name, a little-endian uint32
    value length, the value.

    Raises:
        TypeError: ``headers`` is not a mapping or an iterable of pairs, or a name or value is
            neither str nor bytes.
    """
    parts: List[bytes] = []
    names = routing.cache
    for item in _items(headers):
        if type(item) is not tuple and isinstance(item, (str, bytes, bytearray, memoryview)):
            # Two characters would unpack into a name and a value.
            raise TypeError("each header must be a (name, value) pair, got %r" % (item,))
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError("each header must be a (name, value) pair, got %r" % (item,)) from None
        try:
            part = names[name]
        except (KeyError, TypeError):  # a name not seen yet, or one that cannot be a dict key
            part = routing.name_part(name)
        if part is None:
            continue
        raw_value = value if type(value) is bytes else _header_bytes(value, "value")
        parts += (part, _length(len(raw_value)), raw_value)
    return b"".join(parts)


def key_bytes(routing_key: Union[str, bytes, None]) -> bytes:
    """A routing key as bytes: str is UTF-8 encoded, bytes kept, None is the empty (absent) key.

    Raises:
        TypeError: for any other type.
        ValueError: a str that is not valid Unicode, or a bytes object that lies about its length.
    """
    if routing_key is None:
        return b""
    if isinstance(routing_key, bytes):
        return exact_bytes(routing_key, "routing_key")
    if isinstance(routing_key, str):
        try:
            return str.encode(routing_key, "utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("routing_key %r is not valid Unicode text (%s); pass bytes for a binary key" % (routing_key, e.reason)) from None
    raise TypeError("routing_key must be str, bytes or None, got %s" % type(routing_key).__name__)


def url_bytes(url: Any) -> bytes:
    """A worker URL as UTF-8 bytes.

    Raises:
        TypeError: ``url`` is not a str.
        ValueError: ``url`` is not valid Unicode text.
    """
    if not isinstance(url, str):
        raise TypeError("a worker URL must be a str, got %s" % type(url).__name__)
    try:
        return str.encode(url, "utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("worker URL %r is not valid Unicode text (%s)" % (url, e.reason)) from None


def options_json(value: Any) -> bytes:
    """Settings for the library as JSON. JSON has no NaN nor infinity: such a number is refused
    naming its setting (``health_check.interval_secs must be a finite number, got nan``)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:
        found = _non_finite(value, "")
        if found is None:
            raise
        raise ValueError("%s must be a finite number, got %r" % found) from None


def _non_finite(value: Any, path: str) -> Optional[Tuple[str, float]]:
    """The first NaN or infinite float in ``value`` and where it is (``a.b[2]``), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "the value", value)
    if isinstance(value, Mapping):
        items: Iterable[Tuple[str, Any]] = (("%s.%s" % (path, k) if path else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = (("%s[%d]" % (path, i), v) for i, v in enumerate(value))
    else:
        return None
    for where, item in items:
        found = _non_finite(item, where)
        if found is not None:
            return found
    return None
