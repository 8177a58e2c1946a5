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

``python -m bounded_router.simulate --trace FILE.jsonl`` replays a request trace in the
Mooncake format over workers with chunked prefill and continuous batching
(:mod:`bounded_router.simulate.batching`), routed by every policy of the library and by a
cache-aware oracle (:mod:`bounded_router.simulate.replay`)::

    from bounded_router.simulate import DEFAULT_REPLAY_POLICIES, ReplayConfig, load_trace, replay

    trace = load_trace("conversation_trace.jsonl")
    for policy in DEFAULT_REPLAY_POLICIES:
        result = replay(policy, trace, ReplayConfig(workers=8, load=0.8))
        print(policy.label, result.mean_ttft_ms, result.cached_token_fraction)

Standard library only; ``--plot`` needs matplotlib (``pip install 'bounded-router[plot]'``).
"""

from __future__ import annotations

from typing import List, Sequence

from .batching import StepCosts
from .engine import DEFAULT_POLICIES, PolicySpec, Result, placement_label, run
from .model import CostModel, PrefixCache, Workload
from .replay import ReplayConfig, ReplayResult, replay
from .replay_policies import DEFAULT_REPLAY_POLICIES, ReplayPolicy
from .sweep import SweepCell, sweep
from .trace import Trace, TraceError, load_trace

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
    "StepCosts",
    "Trace",
    "TraceError",
    "load_trace",
    "ReplayConfig",
    "ReplayPolicy",
    "ReplayResult",
    "DEFAULT_REPLAY_POLICIES",
    "replay",
]


def run_all(
    workload: Workload = Workload(), cost: CostModel = CostModel(), policies: Sequence[PolicySpec] = DEFAULT_POLICIES
) -> List[Result]:
    """Run every policy of ``policies`` (by default the upstream A/B's and two baselines) on the same workload."""
    return [run(spec, workload, cost) for spec in policies]
