"""Command-line configuration of a router, in the style of ``sglang_router``'s ``RouterArgs``.

Typical use in a launcher that has its own arguments too::

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)   # --router-worker-urls ...
    args = parser.parse_args()
    router = Router.from_args(RouterArgs.from_cli_args(args, use_router_prefix=True))
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import List

from .policy import (
    DEFAULT_BLOCKS_PER_WORKER,
    DEFAULT_HASH_RING,
    DEFAULT_MAX_LOAD_SKEW,
    DEFAULT_MIN_LOAD_GAP,
    DEFAULT_VIRTUAL_NODES,
    HASH_RINGS,
    SPILL_TARGETS,
    PolicyType,
)

__all__ = ["RouterArgs"]

_POLICY_CHOICES = [member.value for member in PolicyType]


@dataclasses.dataclass
class RouterArgs:
    """Everything needed to build a :class:`~bounded_router.Router`.

    ``max_load_skew`` and ``min_load_gap`` apply to ``bounded_consistent_hashing`` and
    ``cache_aware``, ``spill_target`` and ``key_memory`` to ``bounded_consistent_hashing`` only,
    ``blocks_per_worker`` to ``cache_aware`` only, and ``hash_ring`` to the policies that hash
    keys; with another policy :meth:`Router.from_args <bounded_router.Router.from_args>` ignores
    them and warns about values that differ from the defaults (see
    :func:`~bounded_router.policy.resolve_policy`).

    SMG's cache-aware flags map as follows: ``--balance-abs-threshold`` is close to
    ``--min-load-gap`` and ``--balance-rel-threshold`` to ``--max-load-skew`` (SMG compares the
    most loaded worker with the least loaded, here each worker's load is compared with the
    mean); ``--max-tree-size`` (characters over all workers) is replaced by
    ``--blocks-per-worker``; ``--cache-threshold`` has no equivalent, as any matched prefix
    counts (docs/contract.md, "cache_aware").
    """

    worker_urls: List[str] = dataclasses.field(default_factory=list)
    policy: str = PolicyType.BoundedConsistentHashing.value
    max_load_skew: float = DEFAULT_MAX_LOAD_SKEW
    min_load_gap: int = DEFAULT_MIN_LOAD_GAP
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    hash_ring: str = DEFAULT_HASH_RING
    spill_target: str = SPILL_TARGETS[0]
    key_memory: int = 0
    blocks_per_worker: int = DEFAULT_BLOCKS_PER_WORKER

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, use_router_prefix: bool = False) -> None:
        """Add the router's flags to ``parser``.

        Args:
            parser: the parser to extend.
            use_router_prefix: name the flags ``--router-worker-urls``, ``--router-policy``, ...
                (destinations ``router_worker_urls``, ...) so they can sit next to a server's
                own flags.
        """
        prefix = "router-" if use_router_prefix else ""
        parser.add_argument(
            "--%sworker-urls" % prefix,
            type=str,
            nargs="*",
            default=[],
            help="URLs of the backend workers",
        )
        parser.add_argument(
            "--%spolicy" % prefix,
            type=str,
            default=RouterArgs.policy,
            choices=_POLICY_CHOICES,
            help="routing policy (default: %(default)s)",
        )
        parser.add_argument(
            "--%smax-load-skew" % prefix,
            type=float,
            default=RouterArgs.max_load_skew,
            help="bounded_consistent_hashing and cache_aware: a worker is overloaded only when its load "
            "exceeds the mean load times this factor (>= 1.0, default: %(default)s)",
        )
        parser.add_argument(
            "--%smin-load-gap" % prefix,
            type=int,
            default=RouterArgs.min_load_gap,
            help="bounded_consistent_hashing and cache_aware: a worker is overloaded only when its load "
            "exceeds the least-loaded worker's by more than this (>= 0, default: %(default)s)",
        )
        parser.add_argument(
            "--%svirtual-nodes" % prefix,
            type=int,
            default=RouterArgs.virtual_nodes,
            help="hash ring positions per worker (default: %(default)s)",
        )
        parser.add_argument(
            "--%shash-ring" % prefix,
            type=str,
            default=RouterArgs.hash_ring,
            choices=HASH_RINGS,
            help="consistent_hashing, bounded_consistent_hashing and cache_aware: the ring's hash, xxh64 or smg "
            "(SMG's BLAKE3 ring: keys go to the same workers as under SMG) (default: %(default)s)",
        )
        parser.add_argument(
            "--%sspill-target" % prefix,
            type=str,
            default=RouterArgs.spill_target,
            choices=SPILL_TARGETS,
            help="bounded_consistent_hashing: where a spill goes, the first eligible worker clockwise "
            "or the least loaded eligible one (default: %(default)s)",
        )
        parser.add_argument(
            "--%skey-memory" % prefix,
            type=int,
            default=RouterArgs.key_memory,
            help="bounded_consistent_hashing: remember the last worker of this many routing keys and "
            "send a key back there while it is not overloaded (default: %(default)s, none)",
        )
        parser.add_argument(
            "--%sblocks-per-worker" % prefix,
            type=int,
            default=RouterArgs.blocks_per_worker,
            help="cache_aware: how many prefix blocks to remember per worker, about its KV cache in "
            "blocks (default: %(default)s)",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, use_router_prefix: bool = False) -> "RouterArgs":
        """Build a :class:`RouterArgs` from parsed arguments of :meth:`add_cli_args`.

        ``use_router_prefix`` must match the value given to :meth:`add_cli_args`.
        """
        prefix = "router_" if use_router_prefix else ""
        values = {field.name: getattr(args, prefix + field.name) for field in dataclasses.fields(cls)}
        values["worker_urls"] = list(values["worker_urls"] or [])
        return cls(**values)
