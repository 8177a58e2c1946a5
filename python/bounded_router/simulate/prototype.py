"""A prototype of the routing options proposed for ``bounded_consistent_hashing``, in Python.

Not a policy of the library: it exists only in the replay, to measure what the three options
of the issue "Routing quality on real traces" would bring before they are built in the core.

* **Token weights.** A worker's load is the prompt tokens of its requests in flight, not their
  number; the absolute gap is in tokens too (the row's ``min_load_gap`` times the trace's mean
  prompt).
* **Key memory.** The last worker of each routing key is remembered (an LRU of ``key_memory``
  keys). A remembered key goes to its last worker while that worker passes the spill test, else
  to the ring's worker if it passes, else it spills.
* **Least-loaded spill.** A spill goes to the least loaded worker (ties: the first such worker
  counting up from the preferred one), not the first one clockwise.

The spill test is the library's, on weighted loads: a worker fails it when its load exceeds
the least load by more than the gap *and* the mean load times ``max_load_skew``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import List

__all__ = ["PrototypeRouting", "DEFAULT_KEY_MEMORY"]

DEFAULT_KEY_MEMORY = 100_000


class PrototypeRouting:
    """The prototype's rule over ``workers`` worker indexes; the caller says where requests went and left."""

    def __init__(self, workers: int, gap_tokens: float, max_load_skew: float, key_memory: int = DEFAULT_KEY_MEMORY) -> None:
        self.loads: List[int] = [0] * workers
        self.gap = gap_tokens
        self.skew = max_load_skew
        self.key_memory = key_memory
        self.last: "OrderedDict[str, int]" = OrderedDict()

    def _overloaded(self, worker: int) -> bool:
        loads = self.loads
        load = loads[worker]
        return load - min(loads) > self.gap and load > sum(loads) / len(loads) * self.skew

    def _least_loaded(self, preferred: int) -> int:
        n = len(self.loads)
        return min(range(n), key=lambda i: (self.loads[i], (i - preferred) % n))

    def choose(self, key: str, preferred: int, weight: int) -> int:
        """The worker for a request of ``weight`` prompt tokens whose ring worker is ``preferred``; counts it there."""
        remembered = self.last.get(key)
        if remembered is not None and not self._overloaded(remembered):
            chosen = remembered
        elif not self._overloaded(preferred):
            chosen = preferred
        else:
            chosen = self._least_loaded(preferred)
        self.loads[chosen] += weight
        if self.key_memory:
            self.last[key] = chosen
            self.last.move_to_end(key)
            if len(self.last) > self.key_memory:
                self.last.popitem(last=False)
        return chosen

    def finished(self, worker: int, weight: int) -> None:
        self.loads[worker] -= weight
