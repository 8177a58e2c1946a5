"""Command-line configuration of a router, in the style of ``sglang_router``'s and SMG's ``RouterArgs``.

Typical use in a launcher that has its own arguments too::

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)   # --router-policy ...
    args = parser.parse_args()
    router = Router.from_args(RouterArgs.from_cli_args(args, use_router_prefix=True))

With ``use_router_prefix=True`` every flag is ``--router-...`` except ``--worker-urls``,
``--host`` and ``--port``, which stay unprefixed, and :meth:`RouterArgs.from_cli_args` reads a
setting whose prefixed value is unset (None) from the unprefixed flag of the same name, unless
``--router-disable-arg-fallback`` is given: exactly as SMG 1.13.0 (docs/smg-comparison.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Union

from ._encoding import DEFAULT_ROUTING_KEY_HEADERS
from .health import DEFAULT_RETRY_MAX_RETRIES, CircuitBreakerConfig, HealthCheckConfig, RetryConfig
from .policy import (
    ASSIGNMENT_MODES,
    BALANCE_BY,
    DEFAULT_BLOCKS_PER_WORKER,
    DEFAULT_CACHE_THRESHOLD,
    DEFAULT_HASH_RING,
    DEFAULT_MAX_KEYS,
    DEFAULT_MAX_LOAD_SKEW,
    DEFAULT_MIN_LOAD_GAP,
    DEFAULT_VIRTUAL_NODES,
    HASH_RINGS,
    MAX_SEED,
    SPILL_TARGETS,
    PolicyType,
    _check_assignment_mode,
    policy_from_str,
)

__all__ = ["RouterArgs"]

_POLICY_CHOICES = [member.value for member in PolicyType]

def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a port number" % text) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("a port is between 0 and 65535, not %d" % port)
    return port


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number of seconds" % text) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds, not %s" % text)
    return value


def seconds_at_most(limit: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds above 0 and at most ``limit``."""

    def seconds(text: str) -> float:
        value = positive_seconds(text)
        if value > limit:
            raise argparse.ArgumentTypeError("must be a number of seconds above 0 and at most %g, not %s" % (limit, text))
        return value

    return seconds


def _random_seed(text: str) -> int:
    """An argparse type: a seed of the random policy, 0 to 2**64 - 1, checked as the flag is read
    so that the error names the flag (the library names its setting ``seed``)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text) from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError("must be an integer from 0 to %d, not %s" % (MAX_SEED, text))
    return seed


def _policy_name(text: str) -> str:
    """An argparse type: a policy name; SMG's names this package lacks are refused saying so."""
    try:
        return policy_from_str(text).value
    except KeyError as e:
        raise argparse.ArgumentTypeError(e.args[0]) from None


def _assignment_mode(text: str) -> str:
    """An argparse type: an assignment mode; SMG's other modes are refused saying so."""
    try:
        return _check_assignment_mode(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclasses.dataclass
class RouterArgs:
    """Everything needed to build a :class:`~bounded_router.Router`, and the address a proxy
    listens on (``host``, ``port``; used by ``serve``, ignored by :meth:`Router.from_args
    <bounded_router.Router.from_args>`).

    ``max_load_skew`` and ``min_load_gap`` apply to ``bounded_consistent_hashing`` and
    ``cache_aware``, ``spill_target`` and ``key_memory`` to ``bounded_consistent_hashing`` only,
    ``blocks_per_worker``, ``cache_threshold`` and ``hit_wait_factor`` to ``cache_aware`` only, ``balance_by`` to both bounded policies, ``hash_ring`` to the policies that hash keys,
    ``random_seed`` to ``random``, ``assignment_mode`` and ``max_keys`` to ``manual``; with
    another policy :meth:`Router.from_args <bounded_router.Router.from_args>` ignores them and
    warns about values that differ from the defaults (see
    :func:`~bounded_router.policy.resolve_policy`).

    SMG's cache-aware flags map as follows: ``--balance-abs-threshold`` is close to
    ``--min-load-gap`` and ``--balance-rel-threshold`` to ``--max-load-skew`` (SMG compares the
    most loaded worker with the least loaded, here each worker's load is compared with the
    mean); ``--max-tree-size`` (characters over all workers) is replaced by
    ``--blocks-per-worker``; ``--cache-threshold`` is the same flag with the same default, a
    fraction of the request's blocks here where SMG counts characters (docs/contract.md,
    "cache_aware").
    """

    worker_urls: List[str] = dataclasses.field(default_factory=list)
    policy: str = PolicyType.BoundedConsistentHashing.value
    max_load_skew: float = DEFAULT_MAX_LOAD_SKEW
    min_load_gap: int = DEFAULT_MIN_LOAD_GAP
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    hash_ring: str = DEFAULT_HASH_RING
    spill_target: str = SPILL_TARGETS[0]
    key_memory: int = 0
    random_seed: Optional[int] = None
    host: str = "127.0.0.1"
    port: int = 8080
    assignment_mode: str = ASSIGNMENT_MODES[0]
    max_keys: int = DEFAULT_MAX_KEYS
    routing_key_headers: List[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_ROUTING_KEY_HEADERS))
    blocks_per_worker: int = DEFAULT_BLOCKS_PER_WORKER
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    balance_by: str = BALANCE_BY[0]
    hit_wait_factor: float = 0.0
    # Worker failures (docs/contract.md, "Worker failures"), SMG's names: probes, the circuit
    # breaker and the proxies' retries, all on unless disabled.
    health_check_endpoint: str = "/health"
    health_check_interval_secs: float = 1.0
    health_check_timeout_secs: float = 1.0
    health_failure_threshold: int = 3
    health_success_threshold: int = 2
    disable_health_check: bool = False
    cb_failure_threshold: int = 5
    cb_success_threshold: int = 2
    cb_timeout_duration_secs: float = 10.0
    disable_circuit_breaker: bool = False
    retry_max_retries: int = DEFAULT_RETRY_MAX_RETRIES
    disable_retries: bool = False
    request_timeout_secs: float = 1800.0
    # The gateway's (serve, launch_router), with SMG's names; Router.from_args ignores them.
    control_plane_api_keys: List[str] = dataclasses.field(default_factory=list)
    worker_api_on_proxy_port: bool = False
    prometheus_port: Optional[int] = None

    def health_check_config(self) -> Optional[HealthCheckConfig]:
        """The health check these settings describe, None with ``disable_health_check``."""
        if self.disable_health_check:
            return None
        return HealthCheckConfig(
            self.health_check_endpoint,
            self.health_check_interval_secs,
            self.health_check_timeout_secs,
            self.health_failure_threshold,
            self.health_success_threshold,
        )

    def circuit_breaker_config(self) -> Union[CircuitBreakerConfig, bool]:
        """The circuit breaker these settings describe, False with ``disable_circuit_breaker``."""
        if self.disable_circuit_breaker:
            return False
        return CircuitBreakerConfig(self.cb_failure_threshold, self.cb_success_threshold, self.cb_timeout_duration_secs)

    def retry_config(self) -> RetryConfig:
        """The proxies' retries: none with ``disable_retries``."""
        return RetryConfig(0 if self.disable_retries else self.retry_max_retries)

    @staticmethod
    def add_cli_args(
        parser: argparse.ArgumentParser, use_router_prefix: bool = False, exclude_host_port: bool = False
    ) -> None:
        """Add the router's flags to ``parser`` (SMG's signature and prefix rule).

        Args:
            parser: the parser to extend.
            use_router_prefix: name the flags ``--router-policy``, ... (destinations
                ``router_policy``, ...) so they can sit next to a server's own flags;
                ``--worker-urls``, ``--host`` and ``--port`` keep their names. Adds
                ``--router-disable-arg-fallback`` (see :meth:`from_cli_args`).
            exclude_host_port: leave out ``--host`` and ``--port`` (a server that embeds the
                router has its own).
        """
        prefix = "router-" if use_router_prefix else ""
        if use_router_prefix:
            parser.add_argument(
                "--router-disable-arg-fallback",
                action="store_true",
                default=False,
                help="read only the --router-* flags, never the unprefixed flag of the same name",
            )
        if not exclude_host_port:
            parser.add_argument("--host", default=RouterArgs.host, help="address to listen on (default: %(default)s)")
            parser.add_argument(
                "--port", type=port_number, default=RouterArgs.port, help="port to listen on; 0 picks a free one (default: %(default)s)"
            )
        # The list flags accumulate over repeated occurrences (action="extend"), as SMG's do.
        parser.add_argument("--worker-urls", type=str, nargs="*", action="extend", default=[], help="URLs of the backend workers")

        def add(name: str, **kwargs: Any) -> None:
            parser.add_argument("--" + prefix + name, **kwargs)

        add(
            "policy",
            type=_policy_name,
            default=RouterArgs.policy,
            metavar="{%s}" % ",".join(_POLICY_CHOICES),
            help="routing policy (default: %(default)s)",
        )
        add(
            "max-load-skew",
            type=float,
            default=RouterArgs.max_load_skew,
            help="bounded_consistent_hashing and cache_aware: a worker is overloaded only when its load "
            "exceeds the mean load times this factor (>= 1.0, default: %(default)s)",
        )
        add(
            "min-load-gap",
            type=int,
            default=RouterArgs.min_load_gap,
            help="bounded_consistent_hashing and cache_aware: a worker is overloaded only when its load "
            "exceeds the least-loaded worker's by more than this (>= 0, default: %(default)s)",
        )
        add("virtual-nodes", type=int, default=RouterArgs.virtual_nodes, help="hash ring positions per worker (default: %(default)s)")
        add(
            "hash-ring",
            type=str,
            default=RouterArgs.hash_ring,
            choices=HASH_RINGS,
            help="consistent_hashing, bounded_consistent_hashing and cache_aware: the ring's hash, xxh64 or smg "
            "(SMG's BLAKE3 ring: keys go to the same workers as under SMG) (default: %(default)s)",
        )
        add(
            "spill-target",
            type=str,
            default=RouterArgs.spill_target,
            choices=SPILL_TARGETS,
            help="bounded_consistent_hashing: where a spill goes, the first eligible worker clockwise "
            "or the least loaded eligible one (default: %(default)s)",
        )
        add(
            "key-memory",
            type=int,
            default=RouterArgs.key_memory,
            help="bounded_consistent_hashing: remember the last worker of this many routing keys and "
            "send a key back there while it is not overloaded (default: %(default)s, none)",
        )
        add(
            "random-seed",
            type=_random_seed,
            default=RouterArgs.random_seed,
            help="random: seed the router's choices (an integer from 0 to 2**64-1), so that runs "
            "given the same requests choose the same workers (default: unseeded)",
        )
        add(
            "assignment-mode",
            type=_assignment_mode,
            default=RouterArgs.assignment_mode,
            metavar="{%s}" % ",".join(ASSIGNMENT_MODES),
            help="manual: how a new routing key gets its worker, at random or the least loaded (default: %(default)s)",
        )
        add(
            "max-keys",
            type=int,
            default=RouterArgs.max_keys,
            help="manual: keep the worker of at most this many routing keys, the least recently "
            "routed forgotten first (default: %(default)s)",
        )
        add(
            "routing-key-headers",
            type=str,
            nargs="*",
            action="extend",
            help="names of the headers that carry the routing key, in order: the first present with a "
            "valid value wins (default: %s)" % " ".join(DEFAULT_ROUTING_KEY_HEADERS),
        )
        add(
            "blocks-per-worker",
            type=int,
            default=RouterArgs.blocks_per_worker,
            help="cache_aware: how many prefix blocks to remember per worker, about its KV cache in "
            "blocks (default: %(default)s)",
        )
        add(
            "cache-threshold",
            type=float,
            default=RouterArgs.cache_threshold,
            help="cache_aware: a prefix hit needs more than this fraction of the request's blocks "
            "matched, from 0.0 to 1.0 (default: %(default)s, as SMG)",
        )
        add(
            "balance-by",
            type=str,
            default=RouterArgs.balance_by,
            choices=BALANCE_BY,
            help="bounded_consistent_hashing and cache_aware: the load the bound weighs, every lease "
            "in flight or only those waiting for their first token (default: %(default)s)",
        )
        add(
            "hit-wait-factor",
            type=float,
            default=RouterArgs.hit_wait_factor,
            help="cache_aware with --balance-by prefill: a prefix hit stays on its worker only while its "
            "prefill load exceeds the least by at most this many times the weight of the blocks found there "
            "(default: %(default)s, every hit stays)",
        )
        _add_failure_args(add)

        add(
            "control-plane-api-keys",
            type=str,
            nargs="*",
            action="extend",
            metavar="ID:NAME:ROLE:KEY",
            help="gateway: keys of the worker API (POST/GET/DELETE /workers ...), SMG's format, role admin; "
            "with keys set every worker API request needs Authorization: Bearer KEY, and the proxy port serves it",
        )
        add(
            "worker-api-on-proxy-port",
            action="store_true",
            default=None,
            help="gateway: serve the worker API on the proxy port, as SMG does (without keys anyone who reaches "
            "the port can add and remove workers); otherwise only on the metrics (admin) port",
        )
        add(
            "prometheus-port",
            type=port_number,
            default=None,
            help="serve GET /metrics (Prometheus) on this admin port, and the native gateway's worker API (SMG's "
            "flag; off by default, where SMG's default is 29000)",
        )

    def control_plane_keys(self) -> List[str]:
        """The bearer keys of ``control_plane_api_keys`` (SMG's ``id:name:role:key``, role
        ``admin`` or ``user``). Only admin keys may use the worker API, as in SMG; ValueError
        names an entry of the wrong form, and a list with no admin key (which would leave the
        API without a usable key)."""
        keys = []
        for i, entry in enumerate(self.control_plane_api_keys):
            parts = entry.split(":", 3)
            if len(parts) != 4 or parts[2].lower() not in ("admin", "user") or not parts[3]:
                raise ValueError("control_plane_api_keys[%d] must be ID:NAME:ROLE:KEY with ROLE admin or user, got %r" % (i, entry))
            if parts[2].lower() == "admin":
                keys.append(parts[3])
        if self.control_plane_api_keys and not keys:
            raise ValueError("control_plane_api_keys: no key has the role admin, which the worker API needs")
        return keys

    def gateway_options(self) -> Dict[str, Any]:
        """The native gateway's options these arguments set (see :mod:`bounded_router.gateway`)."""
        if not self.request_timeout_secs > 0:  # the library's 0 would be its default, silently
            raise ValueError("request_timeout_secs must be a number of seconds above 0, got %r" % self.request_timeout_secs)
        return {
            "host": self.host,
            "port": self.port,
            "metrics_port": self.prometheus_port,
            "control_plane_api_keys": self.control_plane_keys(),
            "worker_api_on_proxy_port": self.worker_api_on_proxy_port,
            "retry_max_retries": self.retry_config().max_retries,
            "request_timeout_secs": self.request_timeout_secs,
        }

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, use_router_prefix: bool = False) -> "RouterArgs":
        """Build a :class:`RouterArgs` from parsed arguments of :meth:`add_cli_args`.

        As SMG: with ``use_router_prefix``, a setting takes its ``router_``-prefixed value when
        that is set (not None), else the unprefixed value of the same name when one is present
        and neither None nor ``""`` (``--worker-urls``, ``--host`` and ``--port``, which have no
        prefixed form, are read so), else its default; ``--router-disable-arg-fallback`` turns
        the unprefixed reading off, for those three too. ``use_router_prefix`` must match the
        value given to :meth:`add_cli_args`.
        """
        prefix = "router_" if use_router_prefix else ""
        given = vars(args)
        no_fallback = bool(given.get(prefix + "disable_arg_fallback", False))
        values: Dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            value: Optional[Any] = given.get(prefix + field.name)
            if value is None and not no_fallback and given.get(field.name) not in (None, ""):
                value = given[field.name]
            if value is not None:
                values[field.name] = value
        values["worker_urls"] = list(values.get("worker_urls") or [])
        return cls(**values)



def _add_failure_args(add: Callable[..., None]) -> None:
    """The flags of docs/contract.md, "Worker failures", with SMG's names."""
    d = RouterArgs
    add("health-check-endpoint", type=str, default=d.health_check_endpoint, help="path each health probe GETs (default: %(default)s)")
    add(
        "health-check-interval-secs",
        type=positive_seconds,
        default=d.health_check_interval_secs,
        help="seconds between a worker's probes; 1 flags a dead worker within seconds (default: %(default)s)",
    )
    add("health-check-timeout-secs", type=positive_seconds, default=d.health_check_timeout_secs, help="seconds a probe may take (default: %(default)s)")
    add(
        "health-failure-threshold",
        type=int,
        default=d.health_failure_threshold,
        help="failed probes in a row that make a worker unavailable (default: %(default)s)",
    )
    add(
        "health-success-threshold",
        type=int,
        default=d.health_success_threshold,
        help="good probes in a row that make it available again (default: %(default)s)",
    )
    add("disable-health-check", action="store_true", default=None, help="probe no worker")
    add(
        "cb-failure-threshold",
        type=int,
        default=d.cb_failure_threshold,
        help="failed requests in a row that eject a worker (circuit breaker) (default: %(default)s)",
    )
    add(
        "cb-success-threshold",
        type=int,
        default=d.cb_success_threshold,
        help="successes in a row that restore a half-open worker (default: %(default)s)",
    )
    add(
        "cb-timeout-duration-secs",
        type=positive_seconds,
        default=d.cb_timeout_duration_secs,
        help="seconds an ejected worker waits before trial requests (default: %(default)s)",
    )
    add("disable-circuit-breaker", action="store_true", default=None, help="never eject a worker for failed requests")
    add(
        "retry-max-retries",
        type=int,
        default=d.retry_max_retries,
        help="proxies: more workers to try when one fails a request before its first byte (default: %(default)s)",
    )
    add("disable-retries", action="store_true", default=None, help="proxies: send every request once")
    add(
        "request-timeout-secs",
        type=positive_seconds,
        default=d.request_timeout_secs,
        help="serve: seconds a whole request may take, streaming included (default: %(default)s)",
    )
