"""The prefix block helpers (bounded_router.prefix) against an independent XXH64 (the xxhash
package, test-only) chained as capi/bounded_router.h describes br_prefix_blocks."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded_router import prefix_blocks, text_prefix_blocks
from bounded_router import MAX_PREFIX_BLOCKS
from bounded_router.prefix import DEFAULT_BLOCK_SIZE, DEFAULT_BYTES_PER_BLOCK, hash_blocks


def chained(data: bytes, block_len: int):
    """Block 0: xxh64 of its bytes; block i: xxh64 of the previous hash (8 bytes LE) + its bytes."""
    hashes = []
    for i in range(len(data) // block_len):
        previous = struct.pack("<Q", hashes[-1]) if hashes else b""
        hashes.append(xxhash.xxh64_intdigest(previous + data[i * block_len : (i + 1) * block_len]))
    return hashes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=300), st.integers(1, 40))
def test_token_blocks_are_the_chained_xxh64_of_little_endian_uint32s(tokens, block_size):
    data = struct.pack("<%dI" % len(tokens), *tokens)
    assert prefix_blocks(tokens, block_size=block_size) == chained(data, 4 * block_size)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400), st.integers(1, 100))
def test_text_blocks_are_the_chained_xxh64_of_utf8_bytes(text, bytes_per_block):
    data = text.encode("utf-8", "surrogatepass")
    assert text_prefix_blocks(text, bytes_per_block=bytes_per_block) == chained(data, bytes_per_block)


def test_defaults_are_16_tokens_and_64_bytes():
    tokens = list(range(1000, 1040))  # 40 tokens: two full blocks of 16
    assert DEFAULT_BLOCK_SIZE == 16 and DEFAULT_BYTES_PER_BLOCK == 64
    assert prefix_blocks(tokens) == chained(struct.pack("<40I", *tokens), 64)
    assert len(text_prefix_blocks("x" * 200)) == 3


def test_equal_prefixes_share_blocks_and_part_after_the_first_difference():
    base = list(range(64))
    other = base[:20] + [9999] + base[21:]  # differs in block 1 (tokens 16..31)
    a, b = prefix_blocks(base), prefix_blocks(other)
    assert len(a) == len(b) == 4
    assert a[0] == b[0]
    # Blocks 2 and 3 hold equal tokens, but they name prefixes that differ in block 1.
    assert all(x != y for x, y in zip(a[1:], b[1:]))
    assert prefix_blocks(base[:48]) == a[:3]  # a shorter prompt is a prefix of the blocks


def test_a_partial_last_block_is_left_out():
    assert prefix_blocks(list(range(31))) == prefix_blocks(list(range(16)))
    assert prefix_blocks(list(range(15))) == []
    assert text_prefix_blocks("abcdefg", bytes_per_block=4) == text_prefix_blocks("abcd", bytes_per_block=4)
    assert text_prefix_blocks("", bytes_per_block=4) == []


def test_token_ids_may_be_any_iterable_of_integers():
    tokens = list(range(40))
    assert prefix_blocks(iter(tokens)) == prefix_blocks(tuple(tokens)) == prefix_blocks(range(40)) == prefix_blocks(tokens)


def test_text_blocks_are_cut_in_bytes_not_characters():
    # "é" is two UTF-8 bytes: four of them fill one 8-byte block, eight ASCII letters too.
    assert len(text_prefix_blocks("éééé", bytes_per_block=8)) == 1
    assert len(text_prefix_blocks("abcdefgh", bytes_per_block=8)) == 1
    assert text_prefix_blocks("é" * 8, bytes_per_block=3) == chained(("é" * 8).encode(), 3)


@pytest.mark.parametrize(
    "tokens, error, text",
    [
        ([1, 2, "3"], TypeError, "token_ids[2] must be an int"),
        ([1, 2.0], TypeError, "token_ids[1] must be an int"),
        ([None], TypeError, "token_ids[0] must be an int"),
        ([0, -1], ValueError, "token_ids[1] must be from 0 to 2**32 - 1, got -1"),
        ([2**32], ValueError, "token_ids[0] must be from 0 to 2**32 - 1"),
    ],
)
def test_bad_token_ids_are_refused_naming_the_first_bad_one(tokens, error, text):
    with pytest.raises(error) as caught:
        prefix_blocks(tokens * 16, block_size=1)
    assert text in str(caught.value)


@pytest.mark.parametrize("function, name", [(prefix_blocks, "block_size"), (text_prefix_blocks, "bytes_per_block")])
@pytest.mark.parametrize("value, error", [(0, ValueError), (-16, ValueError), (1.5, TypeError), (True, TypeError), ("16", TypeError)])
def test_a_bad_block_size_is_refused_naming_it(function, name, value, error):
    argument = [1] * 64 if function is prefix_blocks else "x" * 64
    with pytest.raises(error, match=name):
        function(argument, value)


def test_text_must_be_a_str():
    with pytest.raises(TypeError, match="text must be a str"):
        text_prefix_blocks(b"bytes")  # type: ignore[arg-type]


def test_more_blocks_than_the_library_accepts_are_refused_naming_the_field_and_limit():
    limit = MAX_PREFIX_BLOCKS
    assert len(prefix_blocks([7] * limit, block_size=1)) == limit
    with pytest.raises(ValueError, match=r"token_ids makes %d prefix blocks .*MAX_PREFIX_BLOCKS \(%d\)" % (limit + 1, limit)):
        prefix_blocks([7] * (limit + 1), block_size=1)
    with pytest.raises(ValueError, match="text makes .* MAX_PREFIX_BLOCKS"):
        text_prefix_blocks("x" * (limit + 1), bytes_per_block=1)
    assert hash_blocks(b"x" * (limit + 1), limit + 1) == chained(b"x" * (limit + 1), limit + 1)


def test_the_native_export_refuses_what_the_helpers_never_send():
    # The C function's own checks, reached directly: the helpers validate first.
    from bounded_router import _native

    lib = _native.library()
    assert lib.br_prefix_blocks(b"abcdefgh", 8, 0, None, 0) == lib.status["invalid_argument"]
    assert b"block_len" in lib.br_last_error()
    assert lib.br_prefix_blocks(b"abcdefgh", 8, 4, None, 2) == lib.status["invalid_argument"]
    assert b"out" in lib.br_last_error()
