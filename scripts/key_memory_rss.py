"""Memory under a million distinct keys: with key_memory on, the process stays bounded.

    .venv/bin/python scripts/key_memory_rss.py                        # 1,000,000 keys, memories 0, 65536, 262144
    .venv/bin/python scripts/key_memory_rss.py --keys 2000000 --memories 1048576

For each key_memory size, a fresh router of 8 workers (bounded_consistent_hashing, least_loaded
spill) routes that many distinct keys, each with a random weight (1 to 4096, as prompt tokens
would be) and released a few routes later (64 leases in flight, so loads and spills vary), and
the resident set size (VmRSS from /proc/self/status) is read after a warm-up of 10,000 keys and
at each quarter. The memory's entries are allocated when the router is built, but their pages
count in the RSS only once written: the RSS grows while the memory fills (about 40 bytes per
key, docs/contract.md, "Key memory") and stays flat once it is full. So the script checks the
second half of the keys, when a memory of at most half the keys is full: it exits 1 if the RSS
grew by more than --limit-mib there. Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import gc
import random
import os
import sys
from collections import deque
from typing import Deque, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # memory.py

from bounded_router import Lease, Router
from memory import rss_kib

WARM_UP = 10_000
IN_FLIGHT = 64


def measure(keys: int, key_memory: int, seed: int) -> List[float]:
    """RSS in MiB before the router, after the warm-up and at each quarter of the keys."""
    rng = random.Random(seed)
    gc.collect()
    figures = [rss_kib() / 1024]
    urls = ["http://w%d:8000" % i for i in range(8)]
    with Router(urls, min_load_gap=4096, spill_target="least_loaded", key_memory=key_memory) as router:
        held: Deque[Lease] = deque()
        for i in range(WARM_UP + keys):
            held.append(router.route("user-%d" % i, weight=rng.randint(1, 4096)))
            if len(held) > IN_FLIGHT:
                held.popleft().release()
            if i + 1 == WARM_UP or (i + 1 > WARM_UP and (i + 1 - WARM_UP) % (keys // 4) == 0):
                gc.collect()
                figures.append(rss_kib() / 1024)
        router.release_many(held)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--memories", type=int, nargs="+", default=[0, 65536, 262144])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit-mib", type=float, default=8.0)
    args = parser.parse_args()
    print("distinct keys routed: %d (after a warm-up of %d); RSS in MiB" % (args.keys, WARM_UP))
    print("%-12s %8s %8s %8s %8s %8s %8s %12s" % ("key_memory", "before", "warm", "25%", "50%", "75%", "100%", "2nd half"))
    failed = False
    for memory in args.memories:
        figures = measure(args.keys, memory, args.seed)
        growth = figures[-1] - figures[3]  # from 50% to 100% of the keys
        checked = memory <= args.keys // 2
        failed |= checked and growth > args.limit_mib
        print("%-12d %s %+11.1f%s" % (memory, " ".join("%8.1f" % f for f in figures), growth, "" if checked else "*"))
    print("* not checked: the memory holds more than half the keys, so it is still filling in the second half")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
