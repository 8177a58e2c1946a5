"""Snapshots of a router's state: its workers and its counters (docs/contract.md, "What is
counted where")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Sequence, Tuple

from .health import OUTCOMES

__all__ = ["WorkerInfo", "Statistics"]


@dataclass(frozen=True)
class WorkerInfo:
    """A snapshot of one worker.

    Attributes:
        url: the worker's URL.
        healthy: whether it is available for routing.
        load: the sum of the weights of the leases held on it (requests in flight from this
            process, each counting its weight; their number when every weight is 1).
        active_keys: the number of distinct explicit routing keys among those leases.
        requests: the number of leases held on it, whatever their weights.
        indexed_blocks: the prefix blocks ``cache_aware`` remembers sending there (0 under
            the other policies; at most ``blocks_per_worker``).
        condition: why it is or is not available (docs/contract.md, "Worker failures"):
            ``"available"``, ``"half_open"``, ``"ejected"``, ``"unhealthy_probe"`` or
            ``"unhealthy_user"``.
        consecutive_failures: its failed requests since its last success.
        ejections: how many times its circuit breaker opened.
        routed: every lease ever taken on it (requests routed or acquired there).
        outcomes: its released requests by outcome (``success``, ``failure``, ``pushback``,
            ``neutral``).
        probes_passed, probes_failed: its health-check probes.
        prefill_load: the sum of the weights of its leases that have not seen their first token
            (:meth:`Lease.first_token <bounded_router.Lease.first_token>`; docs/contract.md,
            "Prefill load"): its prefill queue as this process counts it.
        prefill_requests: the number of those leases.
    """

    url: str
    healthy: bool
    load: int
    active_keys: int
    requests: int
    indexed_blocks: int = 0
    condition: str = "available"
    consecutive_failures: int = 0
    ejections: int = 0
    routed: int = 0
    outcomes: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    probes_passed: int = 0
    probes_failed: int = 0
    prefill_load: int = 0
    prefill_requests: int = 0

    @classmethod
    def from_json(cls, state: Mapping[str, Any]) -> WorkerInfo:
        """From the library's JSON form of a worker."""
        return cls(
            state["url"],
            state["healthy"],
            state["load"],
            state["active_keys"],
            state["requests"],
            state["indexed_blocks"],
            state["condition"],
            state["consecutive_failures"],
            state["ejections"],
            state["routed"],
            dict(state["outcomes"]),
            state["probes"]["passed"],
            state["probes"]["failed"],
            state["prefill_load"],
            state["prefill_requests"],
        )


@dataclass(frozen=True)
class Statistics:
    """Everything a router counts, read in one step (:meth:`Router.statistics
    <bounded_router.Router.statistics>`): ``active_leases`` is the sum of the workers' loads
    plus the leases held on workers removed since.

    Attributes:
        branches: routed requests by the branch that decided them (every branch present).
        workers: the members in membership order.
        active_leases: leases held, including those on removed workers.
        leaked_leases: leases released by the safety net instead of by their holder.
        prefix_blocks: the prefix blocks of the requests ``cache_aware`` routed.
        prefix_blocks_matched: those of them the chosen worker held (its matched prefix), so
            ``prefix_blocks_matched / prefix_blocks`` is the matched fraction.
        indexed_blocks: the (worker, block) pairs ``cache_aware``'s index holds, all workers.
    """

    branches: Dict[str, int]
    workers: Tuple[WorkerInfo, ...]
    active_leases: int
    leaked_leases: int
    prefix_blocks: int = 0
    prefix_blocks_matched: int = 0
    indexed_blocks: int = 0

    @classmethod
    def from_json(cls, stats: Mapping[str, Any], branch_names: Sequence[str]) -> Statistics:
        """From the library's ``br_stats_json`` answer; ``branch_names`` in code order."""
        counts = stats["branches"]
        return cls(
            branches={name: int(counts.get(name, 0)) for name in branch_names},
            workers=tuple(WorkerInfo.from_json(state) for state in stats["workers"]),
            active_leases=int(stats["active_leases"]),
            leaked_leases=int(stats["leaked"]),
            prefix_blocks=int(stats["prefix_blocks"]),
            prefix_blocks_matched=int(stats["prefix_blocks_matched"]),
            indexed_blocks=int(stats["indexed_blocks"]),
        )
