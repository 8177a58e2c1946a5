"""The request path of weighted leases, prefix blocks and first tokens from Python, next to the key-only path.

    .venv/bin/python scripts/bench_weights.py [--rounds 15] [--plain-only]

One request's life at 64 workers (route, then release; the release travels with the next call
into the library): ``route(key)``, the key-only path; ``route(key, weight=...)`` and
``route(key, prefix_blocks=...)`` with 1 and 128 blocks (real block hashes, as a list and as an
``array("Q")``), which take ``br_release_then_route_request``; ``route(key)`` with
``lease.first_token()`` between route and release (one ``br_first_token`` call); and batches of
64 keys, ``route_many(keys)`` against ``route_many(keys, weights=...)``. The cost of a block is the
difference between the 128-block and the 1-block rows, over 127, and the weighted batch is
also compared with the plain one, each within its round. Cases run one after
another in rounds (a noisy neighbour slows every case of a round alike); the median over the
rounds is printed, and each case's ratio to ``route(key)`` taken within each round, then its
median. ``--plain-only`` measures ``route(key)`` alone, for comparing builds of the package
(``PYTHONPATH``/``BOUNDED_ROUTER_LIBRARY``) that lack the weighted path. Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
from array import array
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple

from bounded_router import Router, prefix_blocks

WORKERS = 64
BATCH = 64


def per_call_ns(call: Callable[[], None], seconds: float) -> float:
    """Nanoseconds per call of ``call``, timed over about ``seconds``."""
    n, elapsed = 1, 0.0
    while elapsed < seconds / 4:  # find a count that takes a measurable time
        n *= 4
        start = time.perf_counter()
        for _ in range(n):
            call()
        elapsed = time.perf_counter() - start
    n = max(1, int(n * seconds / elapsed))
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e9


def cases(router: Router, plain_only: bool) -> List[Tuple[str, Callable[[], None]]]:
    keys = ["session-%d" % i for i in range(4096)]
    batch = keys[:BATCH]
    weights = [1 + 37 * i for i in range(BATCH)]
    one, many = prefix_blocks(range(16)), prefix_blocks(range(16 * 128))  # PrefixBlocks
    one_list, many_list, many_array = list(one), list(many), array("Q", many)
    counter = [0]

    def key() -> str:
        counter[0] = (counter[0] + 1) & 4095
        return keys[counter[0]]

    found: List[Tuple[str, Callable[[], None]]] = [("route(key)", lambda: router.route(key()).release())]
    if plain_only:
        return found
    def first_token() -> None:
        lease = router.route(key())
        lease.first_token()
        lease.release()

    found += [
        ("route(key) + first_token()", first_token),
        ("route(key, weight=1000)", lambda: router.route(key(), weight=1000).release()),
        ("route(key, prefix_blocks=1 block)", lambda: router.route(key(), prefix_blocks=one).release()),
        ("route(key, prefix_blocks=128 blocks)", lambda: router.route(key(), prefix_blocks=many).release()),
        ("route(key, prefix_blocks=list 1)", lambda: router.route(key(), prefix_blocks=one_list).release()),
        ("route(key, prefix_blocks=list 128)", lambda: router.route(key(), prefix_blocks=many_list).release()),
        ("route(key, prefix_blocks=array 128)", lambda: router.route(key(), prefix_blocks=many_array).release()),
        ("route(key, weight, 1 block)", lambda: router.route(key(), weight=1000, prefix_blocks=one).release()),
        ("route_many(64 keys) / key", lambda: router.release_many(router.route_many(batch))),
        ("route_many(64 keys, weights) / key", lambda: router.release_many(router.route_many(batch, weights=weights))),
    ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one measurement")
    parser.add_argument("--plain-only", action="store_true")
    args = parser.parse_args()
    with Router(["http://w%d:8000" % i for i in range(WORKERS)]) as router:
        measured = cases(router, args.plain_only)
        times: Dict[str, List[float]] = {name: [] for name, _ in measured}
        ratios: Dict[str, List[float]] = {name: [] for name, _ in measured}
        for _ in range(args.rounds):
            this_round = {}
            for name, call in measured:
                ns = per_call_ns(call, args.seconds)
                this_round[name] = ns / BATCH if name.startswith("route_many") else ns
                times[name].append(this_round[name])
            for name in this_round:
                ratios[name].append(this_round[name] / this_round["route(key)"])
    print("%d workers, %d rounds, medians" % (WORKERS, args.rounds))
    print("%-38s %10s %10s" % ("case (route + release)", "ns", "x route"))
    for name, _ in measured:
        print("%-38s %10.0f %10.2f" % (name, statistics.median(times[name]), statistics.median(ratios[name])))
    if not args.plain_only:
        for many_name, one_name in (
            ("route(key, prefix_blocks=128 blocks)", "route(key, prefix_blocks=1 block)"),
            ("route(key, prefix_blocks=list 128)", "route(key, prefix_blocks=list 1)"),
            ("route(key, prefix_blocks=array 128)", "route(key, prefix_blocks=1 block)"),
        ):
            per_block = [(m - o) / 127 for m, o in zip(times[many_name], times[one_name])]
            print("%-38s %10.1f ns per extra block" % (many_name, statistics.median(per_block)))
        weighted = [w / p for w, p in zip(times["route_many(64 keys, weights) / key"], times["route_many(64 keys) / key"])]
        print("%-38s %10.2f x route_many(64 keys)" % ("route_many(64 keys, weights) / key", statistics.median(weighted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
