"""The library's weighted ``bounded_consistent_hashing`` rule in Python, standing in for
``Router.route(key, weight=n)`` in the trace replay until the Python binding takes weights.

It follows docs/contract.md ("The bounded rule", "Spill target", "Key memory", "Weighted
leases") for ``spill_target="least_loaded"``: a worker's load is the sum of its leases' weights;
a worker is overloaded when its load exceeds the least load by more than ``min_load_gap`` *and*
the mean load times ``max_load_skew`` (both strict, the request being routed not counted); a
remembered key goes to its last worker unless that worker is the preferred one or is overloaded,
else to the preferred worker unless it is overloaded, else it spills to the least loaded worker
(which never exceeds the mean, so it is always eligible); every decision is remembered, in an
LRU of ``key_memory`` keys (0: none).

One difference: the library breaks a tie for the least load by the clockwise order from the
key, which needs the ring; this breaks it by worker index counting up from the preferred one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import List, Tuple

__all__ = ["PrototypeRouting"]


class PrototypeRouting:
    """The rule over ``workers`` worker indexes; the caller says where requests went and left."""

    def __init__(self, workers: int, min_load_gap: int, max_load_skew: float, key_memory: int) -> None:
        self.loads: List[int] = [0] * workers
        self.gap = min_load_gap
        self.skew = max_load_skew
        self.key_memory = key_memory
        self.last: "OrderedDict[str, int]" = OrderedDict()

    def _overloaded(self, worker: int) -> bool:
        loads = self.loads
        load = loads[worker]
        return load > sum(loads) / len(loads) * self.skew and load - min(loads) > self.gap

    def _least_loaded(self, preferred: int) -> int:
        n = len(self.loads)
        return min(range(n), key=lambda i: (self.loads[i], (i - preferred) % n))

    def choose(self, key: str, preferred: int, weight: int) -> Tuple[int, bool]:
        """The worker for a request of ``weight`` whose ring worker is ``preferred``, and whether it
        spilled (a remembered hit does not count); counts it there."""
        remembered = self.last.get(key)
        spilled = False
        if remembered is not None and remembered != preferred and not self._overloaded(remembered):
            chosen = remembered
        elif not self._overloaded(preferred):
            chosen = preferred
        else:
            chosen, spilled = self._least_loaded(preferred), True
        self.loads[chosen] += weight
        if self.key_memory:
            self.last[key] = chosen
            self.last.move_to_end(key)
            if len(self.last) > self.key_memory:
                self.last.popitem(last=False)
        return chosen, spilled

    def finished(self, worker: int, weight: int) -> None:
        self.loads[worker] -= weight
