"""The forms prefix blocks may take (docs/contract.md, "Weighted leases"): a PrefixBlocks (what
prefix_blocks() returns, packed once), an array("Q"), a buffer of uint64s (memoryview, numpy),
and any sequence of ints; each routes as the list of the same blocks does in the reference model,
and every bad form is refused with an error naming the argument."""

from __future__ import annotations

import pickle
import struct
from array import array
from typing import Any, Callable, List

import numpy as np
import pytest
from reference_model import ReferenceRouter
from support import urls

from bounded_router import PrefixBlocks, Router, prefix_blocks, text_prefix_blocks

# Prompts that share prefixes: conversation c's turn t extends turn t-1 (16 tokens a block).
PROMPTS = [prefix_blocks(range(1000 * c, 1000 * c + 16 * (t + 1))) for c in range(4) for t in range(4)]
KEYS = [None, "user-1", None, "user-2"]

FORMS: List[Callable[[List[int]], Any]] = [
    lambda blocks: PrefixBlocks(blocks),
    lambda blocks: array("Q", blocks),
    lambda blocks: memoryview(array("Q", blocks)),
    lambda blocks: np.array(blocks, dtype=np.uint64),
    lambda blocks: np.array([b for b in blocks for _ in range(2)], dtype=np.uint64)[::2],  # strided
    lambda blocks: tuple(blocks),
    lambda blocks: list(blocks),
    lambda blocks: iter(list(blocks)),
]
FORM_IDS = ["PrefixBlocks", "array_Q", "memoryview_Q", "numpy_uint64", "numpy_strided", "tuple", "list", "iterator"]


def test_the_hash_functions_return_prefix_blocks_with_their_packed_bytes() -> None:
    for blocks in (prefix_blocks(range(48)), text_prefix_blocks("a" * 200), prefix_blocks([])):
        assert type(blocks) is PrefixBlocks and isinstance(blocks, list)
        assert blocks._packed == array("Q", blocks).tobytes()
    # The contract's vector ("Prefix block hashes"): a list equal to the hashes as ints.
    assert text_prefix_blocks("abcdefghij", 4) == [0xDE0327B0D25D92CC, 0x3130A33ABBB35194]


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_every_form_routes_as_the_list_in_the_model(make_router, form) -> None:
    # The expected decisions come from the reference model, given each prompt as a plain list.
    router = make_router(4, policy="cache_aware")
    model = ReferenceRouter(urls(4), policy="cache_aware")
    run_sequence(router, model, form)
    assert {"cache_aware_prefix_hit", "cache_aware_balance", "cache_aware_no_match"} <= {b for b, n in model.branch_counts.items() if n}
    assert router.statistics().prefix_blocks == model.prefix_blocks
    assert router.statistics().prefix_blocks_matched == model.prefix_blocks_matched


def run_sequence(router: Router, model: ReferenceRouter, form: Callable[[List[int]], Any]) -> None:
    """Route every prompt twice (turns hold their leases, so loads differ), through route, select
    and route_many, comparing each decision with the model's on the list of the same blocks."""
    held = []
    for round_ in range(2):
        for i, blocks in enumerate(PROMPTS):
            key = KEYS[i % len(KEYS)]
            expected, decision = model.select(key, prefix_blocks=list(blocks)), router.select(key, prefix_blocks=form(blocks))
            assert (decision.worker_url, decision.branch) == (expected.worker_url, expected.branch)
            want = model.route(key, prefix_blocks=list(blocks), weight=1 + i % 3)
            lease = router.route(key, weight=1 + i % 3, prefix_blocks=form(blocks))
            assert (lease.worker_url, lease.branch) == (want.worker_url, want.branch), (round_, i)
            held.append((lease, want.lease_id))
        batch = [PROMPTS[3], PROMPTS[7], PROMPTS[0]]
        wants = [model.route(None, prefix_blocks=list(b)) for b in batch]
        leases = router.route_many([None] * 3, prefix_blocks=[form(b) for b in batch])
        assert [(lease.worker_url, lease.branch) for lease in leases] == [(w.worker_url, w.branch) for w in wants]
        held += list(zip(leases, [w.lease_id for w in wants]))
        for lease, lease_id in held[::2]:
            lease.release()
            model.release(lease_id)
        held = held[1::2]
        assert router.loads() == model.loads()


def test_a_changed_prefix_blocks_is_converted_again(make_router) -> None:
    # Any change drops the packed copy: the route must see the new blocks, not the old bytes.
    blocks = prefix_blocks(range(64))
    changes = [
        lambda b: b.__setitem__(0, 7),
        lambda b: b.__setitem__(slice(0, 2), [7, 8]),
        lambda b: b.__delitem__(0),
        lambda b: b.append(7),
        lambda b: b.extend([7, 8]),
        lambda b: b.insert(0, 7),
        lambda b: b.pop(),
        lambda b: b.remove(b[1]),
        lambda b: b.reverse(),
        lambda b: b.sort(),
        lambda b: b.clear(),
        lambda b: b.__iadd__([7]),
        lambda b: b.__imul__(2),
    ]
    for change in changes:
        changed = PrefixBlocks(blocks)
        change(changed)
        assert changed._packed is None
        assert pack(changed) == array("Q", list(changed)).tobytes()
    assert pack(PrefixBlocks(blocks)) == array("Q", blocks).tobytes()


def pack(blocks: Any) -> bytes:
    from bounded_router._request import prefix_block_bytes

    return prefix_block_bytes(blocks)


def test_prefix_blocks_survive_pickling_and_copying() -> None:
    import copy

    blocks = prefix_blocks(range(48))
    for again in (pickle.loads(pickle.dumps(blocks)), pickle.loads(pickle.dumps(blocks, 0)), copy.copy(blocks), copy.deepcopy(blocks)):
        assert type(again) is PrefixBlocks and again == blocks and again._packed == blocks._packed


@pytest.mark.parametrize(
    "blocks, error, message",
    [
        ([1, -1], ValueError, "prefix_blocks[1] must be an integer from 0 to 2**64-1, got -1"),
        ([2**64], ValueError, "prefix_blocks[0] must be an integer from 0 to 2**64-1, got 18446744073709551616"),
        ([5, True], TypeError, "prefix_blocks[1] must be an integer from 0 to 2**64-1, got True"),
        ([False], TypeError, "prefix_blocks[0] must be an integer from 0 to 2**64-1, got False"),
        ([1.0], TypeError, "prefix_blocks[0] must be an integer from 0 to 2**64-1, got 1.0"),
        (np.array([3, -2], dtype=np.int64), ValueError, "prefix_blocks[1] must be an integer from 0 to 2**64-1, got -2"),
        (array("q", [-3]), ValueError, "prefix_blocks[0] must be an integer from 0 to 2**64-1, got -3"),
        ("abc", TypeError, "prefix_blocks must be a sequence of integers from 0 to 2**64-1, got str"),
        (b"\x01" * 8, TypeError, "got bytes (for packed uint64s pass memoryview(data).cast('Q'))"),
        (bytearray(8), TypeError, "got bytearray (for packed uint64s pass memoryview(data).cast('Q'))"),
        (7, TypeError, "prefix_blocks must be a sequence of integers from 0 to 2**64-1, got int"),
        (memoryview(array("I", [1, 2])), TypeError, "prefix_blocks as a memoryview must be one-dimensional with uint64 items (format 'Q', itemsize 8), got format 'I', itemsize 4, ndim 1"),
        (memoryview(array("q", [1])), TypeError, "got format 'q', itemsize 8, ndim 1"),
        (memoryview(bytes(16)), TypeError, "got format 'B', itemsize 1, ndim 1"),
        (memoryview(bytes(16)).cast("Q", (2, 1)), TypeError, "got format 'Q', itemsize 8, ndim 2"),
        (array("Q", [1]) * 65537, ValueError, "prefix_blocks may hold at most 65536 blocks, got 65537"),
        (np.zeros(65537, dtype=np.uint64), ValueError, "prefix_blocks may hold at most 65536 blocks, got 65537"),
        ([1] * 65537, ValueError, "prefix_blocks may hold at most 65536 blocks, got 65537"),
    ],
    ids=lambda value: None if not isinstance(value, str) else value[:30],
)
def test_bad_forms_are_refused_naming_the_argument(make_router, blocks, error, message) -> None:
    router = make_router(2, policy="cache_aware")
    # In a batch the error names the request's index first: prefix_blocks[0][1], prefix_blocks[0].
    in_batch = message.replace("prefix_blocks", "prefix_blocks[0]", 1)
    for call, expected in (
        (lambda: router.route("k", prefix_blocks=blocks), message),
        (lambda: router.select("k", prefix_blocks=blocks), message),
        (lambda: router.route_many(["k"], prefix_blocks=[blocks]), in_batch),
    ):
        with pytest.raises(error) as raised:
            call()
        assert expected in str(raised.value)
    assert router.active_leases() == 0


def test_prefix_blocks_checks_what_it_is_given() -> None:
    with pytest.raises(ValueError, match=r"prefix_blocks\[2\] must be an integer from 0 to 2\*\*64-1, got -1"):
        PrefixBlocks([1, 2, -1])
    with pytest.raises(TypeError, match=r"prefix_blocks\[0\] must be an integer"):
        PrefixBlocks([True])


# Real block hashes with the edge values a list may hold: 0 and 1 (whose 7 zero bytes send the
# conversion to its exact test) and 2**64-1.
HASHES = list(prefix_blocks(range(16 * 128)))
EDGES = [HASHES[:1], [0], [1], [0, 1], HASHES + [0], [2**64 - 1] + HASHES, HASHES[:64] + [1] + HASHES[64:]]


@pytest.mark.parametrize("blocks", EDGES, ids=["one", "zero", "one_value", "zero_one", "hashes_zero", "max_hashes", "hashes_one_inside"])
def test_a_list_converts_to_the_uint64s_of_its_blocks(blocks) -> None:
    # The expected bytes come from struct, not from the array conversion under test.
    expected = struct.pack("<%dQ" % len(blocks), *blocks)
    for form in (list(blocks), PrefixBlocks(blocks)):
        assert pack(form) == expected
    changed = PrefixBlocks(blocks)
    changed.append(5)  # a PrefixBlocks without its packed copy takes the list's conversion
    assert pack(changed) == expected + struct.pack("<Q", 5)


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (True, TypeError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got True"),
        (False, TypeError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got False"),
        (-1, ValueError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got -1"),
        (2**64, ValueError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got 18446744073709551616"),
        ("7", TypeError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got '7'"),
        (None, TypeError, "prefix_blocks[128] must be an integer from 0 to 2**64-1, got None"),
    ],
)
def test_a_bad_block_after_many_good_ones_is_named(make_router, bad, error, message) -> None:
    # The conversion fails (or, for a bool, passes) after 128 blocks it has already written.
    router = make_router(2, policy="cache_aware")
    for blocks in (HASHES + [bad], HASHES + [bad] + HASHES[:3]):
        for form in (list, PrefixBlocks):
            with pytest.raises(error) as raised:
                router.route("k", prefix_blocks=form(blocks) if form is list else _unchecked(blocks))
            assert message in str(raised.value)
    assert router.active_leases() == 0


def _unchecked(blocks: List[Any]) -> PrefixBlocks:
    """A PrefixBlocks holding ``blocks`` without their packed copy (as after a change in place),
    which PrefixBlocks(blocks) would refuse to build."""
    made = PrefixBlocks()
    list.extend(made, blocks)
    made._packed = None
    return made


def test_too_many_reported_blocks_are_refused_naming_the_argument_and_their_number(make_router) -> None:
    # Regression (found by an audit): the C API capped the count at 65537 before its message,
    # which named prefix_blocks whatever the argument (the Python methods check first).
    from ctypes import c_uint64

    from bounded_router import _native

    lib = _native.library()
    router = make_router(2, policy="cache_aware")
    url = router.workers()[0].url.encode()
    blocks = (c_uint64 * 100000)()
    handle = router._native.handle
    for call, message in (
        (lambda: lib.br_store_blocks(handle, url, len(url), blocks, 100000, None), ": blocks may hold at most 65536 blocks, got 100000"),
        (lambda: lib.br_remove_blocks(handle, url, len(url), blocks, 100000), ": engine_hashes may hold at most 65536 blocks, got 100000"),
        (lambda: lib.br_peer_route(handle, url, len(url), 1, blocks, 100000), ": blocks may hold at most 65536 blocks, got 100000"),
    ):
        status = call()
        assert status < 0
        assert str(lib.error(status)).endswith(message)
