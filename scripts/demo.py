"""Route sibling bursts through the real library and show what bounded hashing changes.

Part 1 sends the 8-sibling burst (8 requests of one routing key, leases held) to 2 workers.
Part 2 streams 400 groups x 8 siblings: each group arrives while earlier ones are still
running, every request holds its lease for a random service time, and the table shows where
each group's siblings landed and how many requests spilled. Everything is seeded, so the
figures are the same on every run.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from typing import Dict, List, Optional, Tuple

from bounded_router import Lease, PolicyType, Router

WORKERS = ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
SIBLINGS = 8
GROUPS = 400
GROUP_INTERVAL = 1.0  # time between group arrivals
MEAN_SERVICE = 3.0  # mean time a request holds its lease


def make_router(gap: Optional[int]) -> Router:
    if gap is None:
        return Router(WORKERS, policy=PolicyType.ConsistentHashing)
    return Router(WORKERS, policy=PolicyType.BoundedConsistentHashing, max_load_skew=1.5, min_load_gap=gap)


def placement(urls: List[str]) -> str:
    """'6:2' for six siblings on one worker and two on the other (larger share first)."""
    counts = sorted((urls.count(w) for w in WORKERS), reverse=True)
    return ":".join(str(c) for c in counts)


def burst(gap: Optional[int]) -> str:
    with make_router(gap) as router:
        leases = [router.route("group-0") for _ in range(SIBLINGS)]
        result = placement([lease.worker_url for lease in leases])
        for lease in leases:
            lease.release()
        return result


def stream(gap: Optional[int]) -> Tuple[Counter, float, int]:
    """Returns the placement histogram, the spill share and the peak load gap between workers."""
    rng = random.Random(7)
    finishing: List[Tuple[float, int, Lease]] = []  # (finish time, tiebreak, lease)
    histogram: Counter = Counter()
    spilled = routed = peak_gap = 0
    with make_router(gap) as router:
        for group in range(GROUPS):
            now = group * GROUP_INTERVAL
            while finishing and finishing[0][0] <= now:
                heapq.heappop(finishing)[2].release()
            urls = []
            for _ in range(SIBLINGS):
                lease = router.route(f"group-{group}")
                urls.append(lease.worker_url)
                spilled += lease.spilled
                routed += 1
                heapq.heappush(finishing, (now + rng.expovariate(1 / MEAN_SERVICE), routed, lease))
                loads: Dict[str, int] = router.loads()
                peak_gap = max(peak_gap, max(loads.values()) - min(loads.values()))
            histogram[placement(urls)] += 1
        for _, _, lease in finishing:
            lease.release()
        assert all(load == 0 for load in router.loads().values()), "a lease leaked"
    return histogram, spilled / routed, peak_gap


def main() -> None:
    policies = [("consistent_hashing (strict)", None)] + [(f"bounded, gap {g}, skew 1.5", g) for g in (1, 2, 4)]
    print(f"8-sibling burst over {len(WORKERS)} workers (leases held):")
    print(f"  {'policy':<30} placement")
    for name, gap in policies:
        print(f"  {name:<30} {burst(gap)}")
    print()
    print(f"Stream of {GROUPS} groups x {SIBLINGS} siblings over {len(WORKERS)} workers:")
    header = f"  {'policy':<30} {'8:0':>5} {'7:1':>5} {'6:2':>5} {'5:3':>5} {'4:4':>5} {'spill':>7} {'peak gap':>9}"
    print(header)
    for name, gap in policies:
        histogram, spill, peak_gap = stream(gap)
        cells = " ".join(f"{histogram.get(p, 0):>5}" for p in ("8:0", "7:1", "6:2", "5:3", "4:4"))
        print(f"  {name:<30} {cells} {spill:>6.1%} {peak_gap:>9}")


if __name__ == "__main__":
    main()
