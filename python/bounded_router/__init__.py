"""bounded_router: bounded consistent-hashing request routing for LLM serving.

A :class:`Router` holds a list of backend workers (URLs of inference servers). For each request
it chooses a worker and counts the request on it until the returned :class:`Lease` is released.
Requests that share a routing key stay on one worker so its prefix/KV cache is reused, but spill
to another worker when the preferred one is clearly overloaded (policy
``bounded_consistent_hashing``, next to ``consistent_hashing``, ``random`` and ``round_robin``)::

    from bounded_router import Router, PolicyType

    router = Router(["http://w0:8000", "http://w1:8000"],
                    policy=PolicyType.BoundedConsistentHashing, max_load_skew=1.5, min_load_gap=2)
    with router.route(routing_key="group-17") as lease:
        send_request(lease.worker_url)

The routing engine is a Go library bundled in the package and loaded on first use (importing
this package does not load it). The API mirrors ``sglang_router``.
"""

from __future__ import annotations

from .args import RouterArgs
from .errors import ForkedProcessError, LibraryLoadError, NoWorkerAvailableError, RouterClosedError
from ._request import MAX_LEASE_WEIGHT, MAX_PREFIX_BLOCKS
from .health import CircuitBreakerConfig, HealthCheckConfig, RetryConfig
from .lease import Lease
from .policy import (
    BoundedConsistentHashingConfig,
    CacheAwareConfig,
    ConsistentHashingConfig,
    LeastLoadConfig,
    ManualConfig,
    PolicyConfig,
    PolicyType,
    PowerOfTwoConfig,
    RandomConfig,
    RoundRobinConfig,
    config_from_dict,
    policy_from_str,
)
from .prefix import PrefixBlocks, prefix_blocks, text_prefix_blocks
from .router import Decision, Router
from .stats import Statistics, WorkerInfo

__version__ = "0.1.0"

__all__ = [
    "Router",
    "RouterArgs",
    "Lease",
    "Decision",
    "WorkerInfo",
    "Statistics",
    "PolicyType",
    "policy_from_str",
    "PolicyConfig",
    "RandomConfig",
    "RoundRobinConfig",
    "ConsistentHashingConfig",
    "BoundedConsistentHashingConfig",
    "PowerOfTwoConfig",
    "LeastLoadConfig",
    "ManualConfig",
    "CacheAwareConfig",
    "config_from_dict",
    "HealthCheckConfig",
    "CircuitBreakerConfig",
    "RetryConfig",
    "prefix_blocks",
    "text_prefix_blocks",
    "PrefixBlocks",
    "MAX_LEASE_WEIGHT",
    "MAX_PREFIX_BLOCKS",
    "NoWorkerAvailableError",
    "RouterClosedError",
    "ForkedProcessError",
    "LibraryLoadError",
    "__version__",
]
