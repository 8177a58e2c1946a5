"""The cache-aware oracle of the trace replay: a bound on what prefix-aware routing can reach.

It is not a policy of the library: it reads the simulated workers' caches themselves, which no
router can. Among the workers whose load (requests in flight) is at most the least load plus
``margin``, it picks the one whose cache holds the longest prefix of the request; ties go to the
least loaded, then to the lowest worker index. The margin keeps it from piling every request of
a popular prefix on one worker: a larger margin reuses more cache and balances less.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["DEFAULT_MARGIN", "oracle_choice"]

#: Requests in flight a worker may carry above the least loaded one and still be chosen for its cache.
DEFAULT_MARGIN = 8


def oracle_choice(cached_blocks: Sequence[int], loads: Sequence[int], margin: int = DEFAULT_MARGIN) -> int:
    """The worker index the oracle picks, given each worker's cached prefix (blocks) and load."""
    if not loads or len(cached_blocks) != len(loads):
        raise ValueError("oracle_choice needs one cached-prefix length per worker, and at least one worker")
    bound = min(loads) + margin
    best = -1
    for i, load in enumerate(loads):
        if load > bound:
            continue
        if best < 0 or (cached_blocks[i], -load) > (cached_blocks[best], -loads[best]):
            best = i
    return best
