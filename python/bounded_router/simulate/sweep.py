"""A grid of ``bounded_consistent_hashing`` settings (and loads), to choose settings for a workload."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, List, Optional, Sequence

from ..policy import DEFAULT_HASH_RING
from .engine import PolicySpec, Result, run
from .model import CostModel, Workload

__all__ = ["SweepCell", "sweep", "load_label", "DEFAULT_GAPS", "DEFAULT_SKEWS", "DEFAULT_RATES"]

DEFAULT_GAPS = (0, 1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_SKEWS = (1.0, 1.25, 1.5, 2.0, 3.0)
#: Open-loop group arrival rates (groups/s) swept next to the workload's own arrivals. With the
#: default costs a group needs ~2.0 s of prefill on its preferred worker (strict) and both
#: workers together can prefill about 0.45 groups/s, so these are light to heavy loads.
DEFAULT_RATES = (0.1, 0.2, 0.3)


@dataclass
class SweepCell:
    """One bounded setting at one load, with the strict baseline of that load."""

    load: str
    gap: int
    skew: float
    result: Result
    strict: Result

    def row(self) -> Dict[str, Any]:
        row = self.result.row()
        row["load"] = self.load
        row["mean_ttft_vs_strict"] = self.result.mean_ttft_ms / self.strict.mean_ttft_ms - 1.0
        row["p99_ttft_vs_strict"] = self.result.p99_ttft_ms / self.strict.p99_ttft_ms - 1.0
        row["strict_cached_token_fraction"] = self.strict.cached_token_fraction
        return row


def load_label(workload: Workload) -> str:
    if workload.rate is None:
        return "closed loop, %d group%s in flight" % (workload.concurrency, "" if workload.concurrency == 1 else "s")
    return "open loop, %g groups/s" % workload.rate


def sweep(
    workload: Workload = Workload(),
    cost: CostModel = CostModel(),
    gaps: Sequence[int] = DEFAULT_GAPS,
    skews: Sequence[float] = DEFAULT_SKEWS,
    rates: Optional[Iterable[Optional[float]]] = None,
    hash_ring: str = DEFAULT_HASH_RING,
) -> List[SweepCell]:
    """Simulate every ``min_load_gap`` x ``max_load_skew`` at every load.

    Loads: the workload's own arrivals first, then open-loop Poisson arrivals at each of
    ``rates`` groups/s (default :data:`DEFAULT_RATES`; pass ``()`` for the workload alone).
    Every policy hashes on ``hash_ring``.
    """
    loads: List[Workload] = [workload]
    for rate in DEFAULT_RATES if rates is None else rates:
        if rate is not None and rate != workload.rate:
            loads.append(replace(workload, rate=rate))
    cells: List[SweepCell] = []
    for load in loads:
        strict = run(PolicySpec("consistent_hashing", hash_ring=hash_ring), load, cost)
        for skew in skews:
            for gap in gaps:
                result = run(PolicySpec("bounded_consistent_hashing", gap, skew, hash_ring), load, cost)
                cells.append(SweepCell(load_label(load), gap, skew, result, strict))
    return cells
