"""Prefix block hashes for the ``cache_aware`` policy, from token ids or from text.

``cache_aware`` places a request where the longest part of its prompt is already cached. It
learns that from ``route(..., prefix_blocks=...)``: the prompt cut into fixed-size blocks, block
*i* hashed together with every block before it (a chained hash), so equal prefixes give equal
hashes and block *i* names the whole prefix through block *i*::

    from bounded_router import Router, prefix_blocks

    blocks = prefix_blocks(tokenizer.encode(prompt))          # block_size=16 tokens
    with router.route(session_id, prefix_blocks=blocks) as lease:
        ...

The hash is XXH64, computed by the native library (``br_prefix_blocks``; the package has no
Python dependency), chained as docs/contract.md ("Prefix block hashes") says: block 0 hashes
its bytes, block *i* > 0 hashes the previous block's hash (8 little-endian bytes) followed by
its bytes. Token ids go in as
little-endian uint32s, text as UTF-8. Only full blocks count: engines with paged KV caches
(vLLM, SGLang with a page size above 1) cache only full pages, so a partial last block would name
a prefix no worker can hold.

Which to use:

- :func:`prefix_blocks` when the serving stack tokenizes (it has the ids the engine caches):
  its blocks line up with the engine's pages when ``block_size`` is the engine's page size.
- :func:`text_prefix_blocks` when it does not. Blocks of ``bytes_per_block`` UTF-8 bytes
  approximate the token blocks: the same text always gives the same blocks, so requests that
  share a prompt prefix share blocks, but block boundaries do not fall on token boundaries and a
  block covers a varying number of tokens. Hash the text the engine sees, in the same order (for
  chat, the messages as the chat template lays them out; the proxies' ``prefix_blocks="text"``
  option joins role and content of each message), or prefixes that the engine shares may differ
  here.
"""

from __future__ import annotations

import ctypes
import operator
import struct
from typing import Iterable, SupportsIndex

from . import _native
from ._request import MAX_PREFIX_BLOCKS, PrefixBlocks, packed_blocks

__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_BYTES_PER_BLOCK", "PrefixBlocks", "hash_blocks", "prefix_blocks", "text_prefix_blocks"]

#: Tokens per block by default: vLLM's default KV block size, and the page size to give SGLang
#: (whose default page of 1 token would make one hash per token). Use the engine's own value.
DEFAULT_BLOCK_SIZE = 16
#: UTF-8 bytes per text block by default: about 16 tokens of English text (about 4 bytes a
#: token), the granularity of :data:`DEFAULT_BLOCK_SIZE`.
DEFAULT_BYTES_PER_BLOCK = 64

# Token ids are hashed as little-endian uint32s: every vocabulary in use is smaller than 2**32.
_TOKEN_BYTES = 4


def prefix_blocks(token_ids: Iterable[SupportsIndex], block_size: int = DEFAULT_BLOCK_SIZE) -> PrefixBlocks:
    """The chained hashes of the full blocks of ``block_size`` tokens of ``token_ids``.

    Args:
        token_ids: the prompt's token ids in order, each an int from 0 to 2**32 - 1 (numpy
            integers work too).
        block_size: tokens per block, the engine's KV block (page) size.

    Returns:
        One unsigned 64-bit int per full block; a partial last block is left out. The list is a
        :class:`~bounded_router.PrefixBlocks`, which ``route(..., prefix_blocks=...)`` passes to the
        library as it is, at no cost per block.

    Raises:
        TypeError: a token id is not an integer, or ``block_size`` is not an int.
        ValueError: a token id is out of range, ``block_size`` is below 1, or the prompt
            makes more than :data:`~bounded_router.MAX_PREFIX_BLOCKS` blocks. Each names the field.
    """
    _check_block_length("block_size", block_size)
    ids = token_ids if isinstance(token_ids, (list, tuple)) else list(token_ids)
    try:
        data = struct.pack("<%dI" % len(ids), *ids)
    except struct.error:
        raise _bad_token(ids) from None
    return _hash_blocks(data, block_size * _TOKEN_BYTES, "token_ids", "block_size")


def text_prefix_blocks(text: str, bytes_per_block: int = DEFAULT_BYTES_PER_BLOCK) -> PrefixBlocks:
    """The chained hashes of the full blocks of ``bytes_per_block`` bytes of ``text`` in UTF-8,
    as a :class:`~bounded_router.PrefixBlocks` (see :func:`prefix_blocks`).

    Blocks are cut in UTF-8 bytes, not code points, so that a block is the same size whatever the
    script (a block may end inside a character; the hash does not mind). See the module
    documentation for how this approximates token blocks.

    Raises:
        TypeError: ``text`` is not a str, or ``bytes_per_block`` is not an int.
        ValueError: ``bytes_per_block`` is below 1, or the text makes more than
            :data:`~bounded_router.MAX_PREFIX_BLOCKS` blocks (cut it, e.g. to ``MAX_PREFIX_BLOCKS *
            bytes_per_block`` bytes: its prefix is what counts).
    """
    if not isinstance(text, str):
        raise TypeError("text must be a str, not %s" % type(text).__name__)
    _check_block_length("bytes_per_block", bytes_per_block)
    return _hash_blocks(text.encode("utf-8", "surrogatepass"), bytes_per_block, "text", "bytes_per_block")


def hash_blocks(data: bytes, block_len: int) -> PrefixBlocks:
    """The chained hashes of the full ``block_len``-byte blocks of ``data`` (for the proxies,
    which cut their text to :data:`~bounded_router.MAX_PREFIX_BLOCKS` blocks first)."""
    return _hash_blocks(data, block_len, "data", "block_len")


def _hash_blocks(data: bytes, block_len: int, field: str, size_field: str) -> PrefixBlocks:
    n = len(data) // block_len
    if n == 0:
        return packed_blocks(b"")
    if n > MAX_PREFIX_BLOCKS:
        raise ValueError(
            "%s makes %d prefix blocks of %s, more than MAX_PREFIX_BLOCKS (%d): pass only its first %d"
            % (field, n, size_field, MAX_PREFIX_BLOCKS, MAX_PREFIX_BLOCKS)
        )
    lib = _native.library()
    out = (ctypes.c_uint64 * n)()
    lib.check(lib.br_prefix_blocks(data, len(data), block_len, out, n))
    return packed_blocks(bytes(out))


def _check_block_length(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (name, type(value).__name__))
    if value < 1:
        raise ValueError("%s must be at least 1, got %d" % (name, value))


def _bad_token(ids: Iterable[SupportsIndex]) -> Exception:
    """The error naming the first token id that is not an int from 0 to 2**32 - 1."""
    for i, token in enumerate(ids):
        try:
            value = operator.index(token)
        except TypeError:
            return TypeError("token_ids[%d] must be an int, not %s" % (i, type(token).__name__))
        if not 0 <= value < 1 << 32:
            return ValueError("token_ids[%d] must be from 0 to 2**32 - 1, got %d" % (i, value))
    return ValueError("token_ids could not be packed as uint32s")  # pragma: no cover - struct agrees with the checks above
