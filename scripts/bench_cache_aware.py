"""cache_aware's route+release from Python against prefix length and workers (BENCHMARKS.md, "cache_aware").

    python scripts/bench_cache_aware.py [--rounds 7] [--n 2000]

The workload of the Go benchmark BenchmarkCacheAwareRouteRelease: 64 conversations, each with
its own key, in groups of four sharing a system prompt (the first eighth of the blocks), routed
in turn and released at once; after a warm-up every route is a prefix hit of the whole prefix.
Prints one Markdown row per case: the median over the rounds of the mean time per request.
Run it on the installed wheel.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import List

from bounded_router import CacheAwareConfig, Router

CONVERSATIONS = 64
_MASK = (1 << 64) - 1


def conversations(blocks: int) -> List[List[int]]:
    """The prefixes of the Go benchmark (block values differ; only sharing matters)."""
    shared = max(blocks // 8, 1)
    return [
        [((c // 4 + 1) << 48 | i) if i < shared else ((c + 1) << 32 | i) for i in range(blocks)]
        for c in range(CONVERSATIONS)
    ]


def per_request(workers: int, blocks: int, n: int, rounds: int) -> float:
    urls = ["http://10.0.0.%d:8000" % i for i in range(workers)]
    keys = ["session-%d" % c for c in range(CONVERSATIONS)]
    prefixes = conversations(blocks)
    with Router(urls, policy=CacheAwareConfig()) as router:
        for i in range(2 * CONVERSATIONS):
            router.route(keys[i % CONVERSATIONS], prefix_blocks=prefixes[i % CONVERSATIONS]).release()
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            for i in range(n):
                c = i % CONVERSATIONS
                router.route(keys[c], prefix_blocks=prefixes[c]).release()
            samples.append((time.perf_counter() - start) / n)
        stats = router.statistics()
        assert stats.prefix_blocks_matched > 0.9 * stats.prefix_blocks, "the workload should match"
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=2000, help="requests per round")
    args = parser.parse_args()
    print("| workers | 1 block | 16 blocks | 128 blocks | 1024 blocks |")
    print("|---|---|---|---|---|")
    for workers in (8, 64, 1024):
        cells = ["%.1f µs" % (per_request(workers, b, args.n, args.rounds) * 1e6) for b in (1, 16, 128, 1024)]
        print("| %d | %s |" % (workers, " | ".join(cells)))


if __name__ == "__main__":
    main()
