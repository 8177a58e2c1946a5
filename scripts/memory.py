"""Memory: the process must not grow over many route/release cycles or membership changes.

    .venv/bin/python scripts/memory.py                          # 1,000,000 cycles, 10,000 changes
    .venv/bin/python scripts/memory.py --cycles 100000 --changes 1000

Measures the resident set size (VmRSS from /proc/self/status) after a warm-up, at checkpoints
during 1,000,000 route/release cycles (keys, headers, acquire, a few leases held across
cycles), and during 10,000 membership changes (new URLs added and removed, whole sets replaced,
health flipped, leases held on workers that leave). Prints the figures; exits non-zero if the
RSS grew by more than --limit-mib between the end of the warm-up and the end of a phase.

tests/python/test_conformance_memory.py runs a small version in CI and checks its bookkeeping
only: the RSS figures depend on the allocators, so they are measured here, not asserted in CI.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
from typing import Any, Dict, List

from bounded_router import Router


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


def route_release(router: Router, cycles: int, rng: random.Random, urls: List[str]) -> None:
    held = []
    for i in range(cycles):
        kind = i % 10
        if kind < 6:
            lease = router.route("key-%d" % rng.randrange(1000))
        elif kind < 8:
            lease = router.route(headers={"X-SMG-Routing-Key": "h-%d" % rng.randrange(1000), "Cookie": "c"})
        elif kind < 9:
            lease = router.acquire(urls[i % len(urls)], "a-%d" % (i % 100))
        else:
            lease = router.route()
        held.append(lease)
        if len(held) > 16:
            held.pop(rng.randrange(len(held))).release()
    for lease in held:
        lease.release()


def membership_changes(router: Router, changes: int, rng: random.Random, base: List[str], start: int) -> int:
    """Make ``changes`` changes with never-seen URLs; returns the next unused URL number."""
    n = start
    held = []
    for i in range(changes):
        kind = i % 4
        if kind == 0:
            url = "http://churn-%d:8000" % n
            n += 1
            router.add_worker(url)
            held.append(router.acquire(url, "k"))  # a lease that outlives its worker
        elif kind == 1:
            extra = [u for u in router.loads() if u.startswith("http://churn-")]
            router.remove_worker(extra[0])
        elif kind == 2:
            fresh = ["http://churn-%d:8000" % (n + j) for j in range(3)]
            n += 3
            router.set_workers(base + fresh)
        else:
            router.set_healthy(rng.choice(base), rng.random() < 0.5)
            router.set_workers(base)
        if len(held) > 8:
            held.pop(0).release()
    for lease in held:
        lease.release()
    for url in base:
        router.set_healthy(url, True)
    return n


def run(cycles: int = 1_000_000, changes: int = 10_000, checkpoints: int = 10) -> Dict[str, Any]:
    rng = random.Random(0)
    base = ["http://w%d:8000" % i for i in range(8)]
    router = Router(base)
    # Warm up: the lease table, the per-thread buffers, the allocators' pools.
    route_release(router, max(cycles // 20, 10000), rng, base)
    n = membership_changes(router, max(changes // 20, 200), rng, base, 0)
    gc.collect()
    start = rss_kib()

    route_points = []
    for _ in range(checkpoints):
        route_release(router, cycles // checkpoints, rng, base)
        route_points.append(rss_kib())
    gc.collect()
    after_routes = rss_kib()

    change_points = []
    for _ in range(checkpoints):
        n = membership_changes(router, changes // checkpoints, rng, base, n)
        change_points.append(rss_kib())
    gc.collect()
    after_changes = rss_kib()

    assert router.active_leases() == 0 and set(router.loads().values()) == {0}
    assert list(router.loads()) == base
    leaked = router.leaked_leases()
    router.close()
    return {
        "cycles": cycles,
        "membership_changes": changes,
        "urls_used": n,
        "rss_after_warmup_mib": _mib(start),
        "rss_during_cycles_mib": [_mib(p) for p in route_points],
        "rss_after_cycles_mib": _mib(after_routes),
        "growth_over_cycles_mib": _mib(after_routes - start),
        "rss_during_changes_mib": [_mib(p) for p in change_points],
        "rss_after_changes_mib": _mib(after_changes),
        "growth_over_changes_mib": _mib(after_changes - after_routes),
        "leaked_leases": leaked,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--limit-mib", type=float, default=8.0)
    args = parser.parse_args()
    figures = run(args.cycles, args.changes)
    width = max(map(len, figures))
    for name, value in figures.items():
        print("%-*s  %s" % (width, name, value))
    worst = max(figures["growth_over_cycles_mib"], figures["growth_over_changes_mib"])
    if worst > args.limit_mib or figures["leaked_leases"]:
        print("FAIL: RSS grew by %.1f MiB (limit %.1f) or leases leaked" % (worst, args.limit_mib))
        return 1
    print("OK: RSS grew by at most %.1f MiB (limit %.1f)" % (worst, args.limit_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
