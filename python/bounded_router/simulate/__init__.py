"""A discrete-event simulator of the router on an LLM serving workload: see what a policy will do.

``python -m bounded_router.simulate`` replays the upstream two-worker A/B (400 groups of 8
streaming siblings sharing a prompt prefix) under ``consistent_hashing``,
``bounded_consistent_hashing`` with gaps 1, 2 and 4 at skew 1.5, ``round_robin`` and
``random``, and prints a table; ``--sweep`` runs a grid of bounded settings and loads. Every
routing decision is made by the real :class:`~bounded_router.Router`; the workers, their prefix
caches and their prefill and decode times are modelled (:mod:`bounded_router.simulate.model`).

From Python::

    from bounded_router.simulate import CostModel, PolicySpec, Workload, run

    result = run(PolicySpec("bounded_consistent_hashing", min_load_gap=2, max_load_skew=1.5),
                 Workload(groups=100, shared_prefix_tokens=4000), CostModel())
    print(result.placement, result.spill_fraction, result.mean_ttft_ms)

Standard library only; ``--plot`` needs matplotlib (``pip install 'bounded-router[plot]'``).
"""

from __future__ import annotations

from typing import List, Sequence

from .engine import DEFAULT_POLICIES, PolicySpec, Result, placement_label, run
from .model import CostModel, PrefixCache, Workload
from .sweep import SweepCell, sweep

__all__ = [
    "CostModel",
    "Workload",
    "PrefixCache",
    "PolicySpec",
    "Result",
    "DEFAULT_POLICIES",
    "run",
    "run_all",
    "sweep",
    "SweepCell",
    "placement_label",
]


def run_all(
    workload: Workload = Workload(), cost: CostModel = CostModel(), policies: Sequence[PolicySpec] = DEFAULT_POLICIES
) -> List[Result]:
    """Run every policy of ``policies`` (by default the upstream A/B's and two baselines) on the same workload."""
    return [run(spec, workload, cost) for spec in policies]
