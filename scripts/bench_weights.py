"""The request path of weighted leases, prefix blocks and first tokens from Python, next to the key-only path.

    .venv/bin/python scripts/bench_weights.py [--rounds 15] [--plain-only] [--clock cpu]
    .venv/bin/python scripts/bench_weights.py --forms [--rounds 9] [--clock cpu]

One request's life at 64 workers (route, then release; the release travels with the next call
into the library): ``route(key)``, the key-only path; ``route(key, weight=...)`` and
``route(key, prefix_blocks=...)`` with 1 and 1,024 blocks (real block hashes: the
``PrefixBlocks`` that ``prefix_blocks()`` returns, the same as a plain list, also of 128, and as
an ``array("Q")``), which take ``br_release_then_route_request``; ``route(key)`` with
``lease.first_token()`` between route and release (one ``br_first_token`` call); and batches of
64 keys, ``route_many(keys)`` against ``route_many(keys, weights=...)``. The cost of a block is the
difference between the 1,024-block (or 128-block) and the 1-block rows, over the blocks between
them, and the weighted batch is
also compared with the plain one, each within its round. Cases run one after
another in rounds (a noisy neighbour slows every case of a round alike); the median over the
rounds is printed, and each case's ratio to ``route(key)`` taken within each round, then its
median. ``--plain-only`` measures ``route(key)`` alone, for comparing builds of the package
(``PYTHONPATH``/``BOUNDED_ROUTER_LIBRARY``; scripts/bench_builds.py does). ``--forms`` measures
instead what each way CPython offers to turn a list of ints into uint64s in one C-level call costs
per block, and what each test for a bool among them costs (:data:`FORMS`, slopes from 1 to 128
blocks). ``make bench`` runs :func:`measure` and reports it against issue 24's targets. Figures:
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import struct
from array import array
import statistics
import sys
from typing import Any, Callable, Dict, List, Tuple

from bench_timing import CLOCKS, per_call_ns
from bounded_router import Router, prefix_blocks
from bounded_router._request import prefix_block_bytes

WORKERS = 64
BATCH = 64


ROUTE = "route(key)"
FIRST_TOKEN = "route(key) + first_token()"
WEIGHT = "route(key, weight=1000)"
ONE = "route(key, prefix_blocks=<1 block>)"
# The slope per block is taken over this many blocks, so that the shared machine's noise (a few
# hundred ns a measurement) spreads over many blocks.
MANY_BLOCKS = 1024
MANY = "route(key, prefix_blocks=<%d blocks>)" % MANY_BLOCKS
LIST_ONE = "route(key, prefix_blocks=list of 1)"
LIST_MANY = "route(key, prefix_blocks=list of %d)" % MANY_BLOCKS
# Issue 24 states its figures from 1 to 128 blocks: a list's slope over that span too.
LIST_128 = "route(key, prefix_blocks=list of 128)"
ARRAY_MANY = 'route(key, prefix_blocks=array("Q") of %d)' % MANY_BLOCKS
BOTH = "route(key, weight=1000, prefix_blocks=<1 block>)"
BATCH_CASE = "route_many(64 keys), per key"
WEIGHTED_BATCH = "route_many(64 keys, weights=...), per key"
# The cost of an extra block of each form: (the many-block case, the 1-block case it is taken
# from, the blocks between them).
PER_BLOCK = {
    "PrefixBlocks": (MANY, ONE, MANY_BLOCKS - 1),
    "list": (LIST_MANY, LIST_ONE, MANY_BLOCKS - 1),
    "list, 1 to 128 blocks": (LIST_128, LIST_ONE, 127),
    'array("Q")': (ARRAY_MANY, ONE, MANY_BLOCKS - 1),
}


def cases(router: Router, plain_only: bool) -> List[Tuple[str, Callable[[], object]]]:
    keys = ["session-%d" % i for i in range(4096)]
    batch = keys[:BATCH]
    weights = [1 + 37 * i for i in range(BATCH)]
    one, many = prefix_blocks(range(16)), prefix_blocks(range(16 * MANY_BLOCKS))  # PrefixBlocks
    one_list, many_list, many_array = list(one), list(many), array("Q", many)
    list_128 = many_list[:128]
    counter = [0]

    def key() -> str:
        counter[0] = (counter[0] + 1) & 4095
        return keys[counter[0]]

    found: List[Tuple[str, Callable[[], object]]] = [(ROUTE, lambda: router.route(key()).release())]
    if plain_only:
        return found

    def first_token() -> None:
        lease = router.route(key())
        lease.first_token()
        lease.release()

    found += [
        (FIRST_TOKEN, first_token),
        (WEIGHT, lambda: router.route(key(), weight=1000).release()),
        (ONE, lambda: router.route(key(), prefix_blocks=one).release()),
        (MANY, lambda: router.route(key(), prefix_blocks=many).release()),
        (LIST_ONE, lambda: router.route(key(), prefix_blocks=one_list).release()),
        (LIST_MANY, lambda: router.route(key(), prefix_blocks=many_list).release()),
        (LIST_128, lambda: router.route(key(), prefix_blocks=list_128).release()),
        (ARRAY_MANY, lambda: router.route(key(), prefix_blocks=many_array).release()),
        (BOTH, lambda: router.route(key(), weight=1000, prefix_blocks=one).release()),
        (BATCH_CASE, lambda: router.release_many(router.route_many(batch))),
        (WEIGHTED_BATCH, lambda: router.release_many(router.route_many(batch, weights=weights))),
    ]
    return found


def measure(rounds: int, seconds: float, plain_only: bool = False, clock: str = "wall") -> Dict[str, Any]:
    """The cases in rounds: ``ns`` (median per case), ``ratio`` (to ``route(key)``, median of
    the rounds'), and unless ``plain_only``: ``per_block`` (ns per extra block of each form),
    ``weighted_batch`` (the weighted batch over the plain one) and ``first_token_ns`` (what the
    first-token call adds), each the median of the rounds' values; ``clock`` names one of
    :data:`CLOCKS`."""
    with Router(["http://w%d:8000" % i for i in range(WORKERS)]) as router:
        measured = cases(router, plain_only)
        times: Dict[str, List[float]] = {name: [] for name, _ in measured}
        for _ in range(rounds):
            for name, call in measured:
                ns = per_call_ns(call, seconds, CLOCKS[clock])
                times[name].append(ns / BATCH if name.startswith("route_many") else ns)
    median = statistics.median
    result: Dict[str, Any] = {
        "ns": {name: median(values) for name, values in times.items()},
        "ratio": {name: median([t / r for t, r in zip(values, times[ROUTE])]) for name, values in times.items()},
    }
    if not plain_only:
        result["per_block"] = {form: median([(m - o) / extra for m, o in zip(times[many], times[one])]) for form, (many, one, extra) in PER_BLOCK.items()}
        result["weighted_batch"] = median([w / p for w, p in zip(times[WEIGHTED_BATCH], times[BATCH_CASE])])
        result["first_token_ns"] = median([f - r for f, r in zip(times[FIRST_TOKEN], times[ROUTE])])
    return result


# The block counts a slope of --forms is fitted over (least squares).
FORM_COUNTS = (1, 32, 64, 96, 128)
_EMPTY = array("L")
_STRUCTS = {n: struct.Struct("=%dQ" % n) for n in FORM_COUNTS}  # one per length, as a bounded cache would hold
_SCRATCH = bytearray(8 * max(FORM_COUNTS))
_SEVEN_ZEROS = re.compile(bytes(7))
_LISTS = {n: list(prefix_blocks(range(16 * n))) for n in FORM_COUNTS}  # real block hashes
_PACKED = {n: array("L", blocks).tobytes() for n, blocks in _LISTS.items()}
#: What --forms measures: conversions of a list of ints into uint64s (each one C-level call), then
#: tests for a bool among the blocks (which each conversion lets through as 0 or 1), then the
#: library's whole conversion of a list.
FORMS: Dict[str, Callable[[List[int]], object]] = {
    'array("Q", blocks)': lambda blocks: array("Q", blocks),
    'array("L", blocks)': lambda blocks: array("L", blocks),
    'array("Q").fromlist(blocks)': lambda blocks: array("Q").fromlist(blocks),
    'array("L").fromlist(blocks)': lambda blocks: array("L").fromlist(blocks),
    'empty array("L") copied, fromlist': lambda blocks: _EMPTY.__copy__().fromlist(blocks),
    "Struct(n Q).pack(*blocks)": lambda blocks: _STRUCTS[len(blocks)].pack(*blocks),
    "Struct(n Q).pack_into(buffer, 0, *blocks)": lambda blocks: _STRUCTS[len(blocks)].pack_into(_SCRATCH, 0, *blocks),
    "(c_uint64 * n)(*blocks)": lambda blocks: (ctypes.c_uint64 * len(blocks))(*blocks),
    "bool test: bool in map(type, blocks)": lambda blocks: bool in map(type, blocks),
    "bool test: blocks.count(True)": lambda blocks: blocks.count(True),
    "bool test: bytes.find(7 zero bytes)": lambda blocks: _PACKED[len(blocks)].find(bytes(7)),
    "bool test: re.search(7 zero bytes)": lambda blocks: _SEVEN_ZEROS.search(_PACKED[len(blocks)]),
    "prefix_block_bytes(blocks) (the list path)": prefix_block_bytes,
}


def measure_forms(rounds: int, seconds: float, clock: str = "wall") -> Dict[str, float]:
    """ns per block of each of :data:`FORMS`: in each round every form at every count of
    :data:`FORM_COUNTS` (the forms in a rotated order), a least-squares slope per form and
    round, and the median of the rounds' slopes."""
    names = list(FORMS)
    slopes: Dict[str, List[float]] = {name: [] for name in names}
    mean_n = statistics.mean(FORM_COUNTS)
    spread = sum((n - mean_n) ** 2 for n in FORM_COUNTS)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            form = FORMS[name]
            ns = [per_call_ns(lambda: form(_LISTS[n]), seconds, CLOCKS[clock]) for n in FORM_COUNTS]
            mean_ns = statistics.mean(ns)
            slopes[name].append(sum((n - mean_n) * (t - mean_ns) for n, t in zip(FORM_COUNTS, ns)) / spread)
    return {name: statistics.median(values) for name, values in slopes.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one measurement")
    parser.add_argument("--plain-only", action="store_true")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall time or the thread's CPU time")
    parser.add_argument("--forms", action="store_true", help="the cost per block of each conversion of a list instead")
    args = parser.parse_args()
    if args.forms:
        print("ns per block from %d to %d blocks, median of %d rounds, %s time" % (FORM_COUNTS[0], FORM_COUNTS[-1], args.rounds, args.clock))
        for name, per_block in measure_forms(args.rounds, args.seconds / 10, args.clock).items():
            print("%-50s %8.2f" % (name, per_block))
        return 0
    result = measure(args.rounds, args.seconds, args.plain_only, args.clock)
    print("%d workers, %d rounds, medians, %s time" % (WORKERS, args.rounds, args.clock))
    print("%-50s %10s %10s" % ("case (route + release)", "ns", "x route"))
    for name, ns in result["ns"].items():
        print("%-50s %10.0f %10.2f" % (name, ns, result["ratio"][name]))
    if not args.plain_only:
        for form, per_block in result["per_block"].items():
            print("%-50s %10.1f ns per extra block" % (form, per_block))
        print("%-50s %10.2f x route_many(64 keys)" % ("route_many(64 keys, weights=...)", result["weighted_batch"]))
        print("%-50s %10.0f ns" % ("first_token() adds", result["first_token_ns"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
