"""Routing policies: the :class:`PolicyType` enum and the typed, validated policy configs.

Mirrors ``sglang_router``'s ``PolicyType``/``policy_from_str`` and SMG's ``PolicyConfig``
variants. Each config serialises to the ``{"type": "<policy name>", ...}`` form the native
library reads, and :func:`config_from_dict` reads that form back. The defaults are defined here
once for Python (the tests check them against the library's) and every setting is validated
here once (docs/contract.md, "Validation").
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

__all__ = [
    "PolicyType",
    "policy_from_str",
    "RandomConfig",
    "RoundRobinConfig",
    "ConsistentHashingConfig",
    "BoundedConsistentHashingConfig",
    "PowerOfTwoConfig",
    "LeastLoadConfig",
    "ManualConfig",
    "CacheAwareConfig",
    "PolicyConfig",
    "config_from_dict",
    "default_config",
    "resolve_policy",
    "DEFAULT_MAX_LOAD_SKEW",
    "DEFAULT_MIN_LOAD_GAP",
    "DEFAULT_VIRTUAL_NODES",
    "DEFAULT_HASH_RING",
    "HASH_RINGS",
    "SPILL_TARGETS",
    "BALANCE_BY",
    "MAX_KEY_MEMORY",
    "MAX_SEED",
    "ASSIGNMENT_MODES",
    "DEFAULT_MAX_KEYS",
    "MAX_KEYS",
    "SMG_ONLY_POLICIES",
    "DEFAULT_BLOCKS_PER_WORKER",
    "DEFAULT_CACHE_THRESHOLD",
    "MAX_BLOCKS_PER_WORKER",
]

#: Default relative bound of ``bounded_consistent_hashing`` (docs/contract.md, "The bounded rule").
DEFAULT_MAX_LOAD_SKEW = 1.5
#: Default absolute load gap of ``bounded_consistent_hashing``.
DEFAULT_MIN_LOAD_GAP = 2
#: Ring positions per worker unless configured (as SMG; docs/contract.md, "The hash ring").
DEFAULT_VIRTUAL_NODES = 150
#: The rings of the hashing policies: ``"xxh64"`` (this package's, the default) and ``"smg"``
#: (SMG's BLAKE3 ring: a key goes to the same worker as under SMG's ``consistent_hashing``).
#: See docs/contract.md, "The ring".
HASH_RINGS = ("xxh64", "smg")
DEFAULT_HASH_RING = HASH_RINGS[0]
#: Where a bounded request that spills goes: the first eligible worker clockwise from the key
#: (the default) or the least loaded eligible one (docs/contract.md, "Spill target").
SPILL_TARGETS = ("clockwise", "least_loaded")
#: The load the bound of ``bounded_consistent_hashing`` and ``cache_aware`` weighs: ``"in_flight"``
#: (the default: every lease from route to release) or ``"prefill"`` (the leases that have not
#: seen their first token, :meth:`Lease.first_token <bounded_router.Lease.first_token>`; see
#: docs/contract.md, "Prefill load").
BALANCE_BY = ("in_flight", "prefill")
#: The most routing keys a router may remember the last worker of (docs/contract.md, "Key memory").
MAX_KEY_MEMORY = 1 << 22
#: The largest seed of the ``random`` policy (seeds are unsigned 64-bit integers).
MAX_SEED = 2**64 - 1
#: How ``manual`` assigns a worker to a new key, with SMG's names: ``"random"`` (SMG's default
#: for manual) or ``"min_load"``, the least loaded (docs/contract.md, "manual").
ASSIGNMENT_MODES = ("random", "min_load")
#: SMG's other assignment modes, refused with an error that says they are not implemented here.
_SMG_ONLY_ASSIGNMENT_MODES = ("min_group", "delegate")
#: How many routing keys ``manual`` keeps the worker of unless configured, and at most.
DEFAULT_MAX_KEYS = 1 << 16
MAX_KEYS = 1 << 22
#: SMG's policies this package does not implement: naming one is refused saying so.
SMG_ONLY_POLICIES = ("bucket", "prefix_hash", "passthrough")
#: Prefix blocks ``cache_aware`` remembers per worker unless configured: half a million tokens
#: of KV cache in blocks of 16 (docs/contract.md, "cache_aware").
DEFAULT_BLOCKS_PER_WORKER = 1 << 15
#: The largest ``blocks_per_worker``.
MAX_BLOCKS_PER_WORKER = 1 << 20
#: The fraction of a request's blocks ``cache_aware`` must find matched, strictly exceeded, for a
#: prefix hit unless configured: SMG's default ``cache_threshold``.
DEFAULT_CACHE_THRESHOLD = 0.3


class PolicyType(Enum):
    """The routing policies; each member's value is the policy's name (SMG's where SMG has it)."""

    Random = "random"
    RoundRobin = "round_robin"
    ConsistentHashing = "consistent_hashing"
    BoundedConsistentHashing = "bounded_consistent_hashing"
    PowerOfTwo = "power_of_two"
    LeastLoad = "least_load"
    Manual = "manual"
    CacheAware = "cache_aware"


_BY_NAME = {member.value: member for member in PolicyType}


def policy_from_str(policy_str: str) -> PolicyType:
    """Return the :class:`PolicyType` named ``policy_str``.

    Raises :class:`KeyError` for any other value, as ``sglang_router.policy_from_str`` does; for
    a policy SMG has and this package does not implement (:data:`SMG_ONLY_POLICIES`), its
    message says so.
    """
    try:
        return _BY_NAME[policy_str]
    except (KeyError, TypeError):
        if policy_str in SMG_ONLY_POLICIES:
            raise KeyError(
                "policy %r exists in SMG but is not implemented by bounded-router: use one of %s"
                % (policy_str, ", ".join(_BY_NAME))
            ) from None
        raise KeyError(
            "unknown policy %r: expected one of %s" % (policy_str, ", ".join(_BY_NAME))
        ) from None


_MAX_MIN_LOAD_GAP = 2**63 - 1


def _as_float(value: Any) -> float:
    """A real number (not a bool) as a float, an int too large for one as infinity, anything
    else as NaN, so that every range check refuses it with the setting's own message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _check_max_load_skew(value: Any) -> float:
    number = _as_float(value)
    if not math.isfinite(number) or number < 1.0:
        raise ValueError("max_load_skew must be a finite number >= 1.0, got %r" % (number if math.isfinite(number) else value,))
    return number


def _check_min_load_gap(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("min_load_gap must be an integer >= 0, got %r" % (value,))
    number = int(value)
    if number < 0:
        raise ValueError("min_load_gap must be an integer >= 0, got %r" % (number,))
    if number > _MAX_MIN_LOAD_GAP:  # the library counts loads in 64-bit integers
        raise ValueError("min_load_gap must be an integer >= 0 and at most %d, got %r" % (_MAX_MIN_LOAD_GAP, number))
    return number


def _check_hash_ring(value: Any) -> str:
    if not isinstance(value, str) or value not in HASH_RINGS:
        raise ValueError("hash_ring must be one of %s, got %r" % (", ".join(map(repr, HASH_RINGS)), value))
    return value


def _check_spill_target(value: Any) -> str:
    if not isinstance(value, str) or value not in SPILL_TARGETS:
        raise ValueError("spill_target must be one of %s, got %r" % (", ".join(map(repr, SPILL_TARGETS)), value))
    return value


def _check_balance_by(value: Any) -> str:
    if not isinstance(value, str) or value not in BALANCE_BY:
        raise ValueError("balance_by must be one of %s, got %r" % (", ".join(map(repr, BALANCE_BY)), value))
    return value


def _check_blocks_per_worker(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 1 <= int(value) <= MAX_BLOCKS_PER_WORKER
    ):
        raise ValueError("blocks_per_worker must be an integer from 1 to %d, got %r" % (MAX_BLOCKS_PER_WORKER, value))
    return int(value)


def _check_cache_threshold(value: Any) -> float:
    number = _as_float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("cache_threshold must be a number from 0.0 to 1.0, got %r" % (value,))
    return number


def _check_hit_wait_factor(value: Any, balance_by: str) -> float:
    number = _as_float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError("hit_wait_factor must be a finite number >= 0, got %r" % (value,))
    if number and balance_by != "prefill":
        raise ValueError("hit_wait_factor applies only with balance_by prefill, got balance_by %s" % balance_by)
    return number


def _check_key_memory(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= MAX_KEY_MEMORY:
        raise ValueError("key_memory must be an integer from 0 to %d, got %r" % (MAX_KEY_MEMORY, value))
    return int(value)


def _check_seed(value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= MAX_SEED:
        raise ValueError("seed must be an integer from 0 to %d or None, got %r" % (MAX_SEED, value))
    return int(value)


def _check_assignment_mode(value: Any) -> str:
    if isinstance(value, str) and value in _SMG_ONLY_ASSIGNMENT_MODES:
        raise ValueError(
            "assignment_mode %r exists in SMG but is not implemented by bounded-router: use one of %s"
            % (value, ", ".join(map(repr, ASSIGNMENT_MODES)))
        )
    if not isinstance(value, str) or value not in ASSIGNMENT_MODES:
        raise ValueError("assignment_mode must be one of %s, got %r" % (", ".join(map(repr, ASSIGNMENT_MODES)), value))
    return value


def _check_max_keys(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= int(value) <= MAX_KEYS:
        raise ValueError("max_keys must be an integer from 1 to %d, got %r" % (MAX_KEYS, value))
    return int(value)


def _typed_dict(config: Any) -> Dict[str, Any]:
    """``{"type": name}`` and every setting of a typed config, as the library reads them."""
    return {"type": config.policy_type.value, **asdict(config)}


@dataclass(frozen=True)
class RandomConfig:
    """Policy ``random``: a uniformly random available worker.

    Attributes:
        seed: None (the default): each router draws its own choices. An integer from 0 to
            2**64-1: the router's choices come from a generator of its own seeded with it, so
            routers of one seed given the same calls choose the same workers
            (docs/contract.md, "Random seed").
    """

    seed: Optional[int] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", _check_seed(self.seed))

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.Random

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "random"}``, with ``"seed"`` when one is set."""
        if self.seed is None:
            return {"type": PolicyType.Random.value}
        return {"type": PolicyType.Random.value, "seed": self.seed}


@dataclass(frozen=True)
class RoundRobinConfig:
    """Policy ``round_robin``: the available workers in turn, with a counter shared by all requests."""

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.RoundRobin

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "round_robin"}``."""
        return _typed_dict(self)


@dataclass(frozen=True)
class ConsistentHashingConfig:
    """Policy ``consistent_hashing``: strict consistent hashing of the routing key, never spills.

    Attributes:
        hash_ring: ``"xxh64"`` (default) or ``"smg"``, SMG's ring (see :data:`HASH_RINGS`).
    """

    hash_ring: str = DEFAULT_HASH_RING

    def __post_init__(self) -> None:
        _check_hash_ring(self.hash_ring)

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.ConsistentHashing

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "consistent_hashing", "hash_ring": ...}``."""
        return _typed_dict(self)


@dataclass(frozen=True)
class BoundedConsistentHashingConfig:
    """Policy ``bounded_consistent_hashing``: consistent hashing with a bounded load.

    A request with an explicit routing key leaves its preferred worker only when that worker's
    load exceeds the least-loaded available worker's by more than ``min_load_gap`` requests
    *and* exceeds the mean load times ``max_load_skew``.

    Attributes:
        max_load_skew: the relative bound, a finite number >= 1.0 (stored as a float).
        min_load_gap: the absolute gap in requests, an integer >= 0 (not a bool or a float).
        hash_ring: ``"xxh64"`` (default) or ``"smg"``, SMG's ring (see :data:`HASH_RINGS`).
        spill_target: ``"clockwise"`` (default) or ``"least_loaded"``: where a spill goes.
        key_memory: how many routing keys to remember the last worker of (0, the default: none).
        balance_by: ``"in_flight"`` (default) or ``"prefill"``: the load the spill test weighs
            (see :data:`BALANCE_BY`).

    Raises:
        ValueError: naming the field and its rule when a value breaks it.
    """

    max_load_skew: float = DEFAULT_MAX_LOAD_SKEW
    min_load_gap: int = DEFAULT_MIN_LOAD_GAP
    hash_ring: str = DEFAULT_HASH_RING
    spill_target: str = SPILL_TARGETS[0]
    key_memory: int = 0
    balance_by: str = BALANCE_BY[0]

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_load_skew", _check_max_load_skew(self.max_load_skew))
        object.__setattr__(self, "min_load_gap", _check_min_load_gap(self.min_load_gap))
        _check_hash_ring(self.hash_ring)
        _check_spill_target(self.spill_target)
        object.__setattr__(self, "key_memory", _check_key_memory(self.key_memory))
        _check_balance_by(self.balance_by)

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.BoundedConsistentHashing

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "bounded_consistent_hashing", "max_load_skew": ..., ...}`` with every setting."""
        return _typed_dict(self)


@dataclass(frozen=True)
class PowerOfTwoConfig:
    """Policy ``power_of_two``: the less loaded of two distinct available workers drawn at random
    (docs/contract.md, "power_of_two")."""

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.PowerOfTwo

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "power_of_two"}``."""
        return _typed_dict(self)


@dataclass(frozen=True)
class LeastLoadConfig:
    """Policy ``least_load``: the least loaded available worker, ties to the first in membership
    order (docs/contract.md, "least_load")."""

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.LeastLoad

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "least_load"}``."""
        return _typed_dict(self)


@dataclass(frozen=True)
class ManualConfig:
    """Policy ``manual`` (SMG's): a routing key keeps the worker it was first assigned until that
    worker turns unhealthy or leaves (docs/contract.md, "manual").

    Attributes:
        assignment_mode: how a new key (or a request without one) gets its worker: ``"random"``
            (default, as SMG) or ``"min_load"`` (see :data:`ASSIGNMENT_MODES`).
        max_keys: how many keys are kept, the least recently routed forgotten first (from 1 to
            :data:`MAX_KEYS`, default :data:`DEFAULT_MAX_KEYS`).

    Raises:
        ValueError: naming the field and its rule when a value breaks it.
    """

    assignment_mode: str = ASSIGNMENT_MODES[0]
    max_keys: int = DEFAULT_MAX_KEYS

    def __post_init__(self) -> None:
        _check_assignment_mode(self.assignment_mode)
        object.__setattr__(self, "max_keys", _check_max_keys(self.max_keys))

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.Manual

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "manual", "assignment_mode": ..., "max_keys": ...}``."""
        return _typed_dict(self)


@dataclass(frozen=True)
class CacheAwareConfig:
    """Policy ``cache_aware`` (SMG's name): send a request where its prefix is cached.

    The router remembers, per worker, the prefix blocks it sent there (at most
    ``blocks_per_worker``, least recently sent forgotten first) and sends a request with
    ``prefix_blocks`` to the worker holding the longest prefix of it among the workers that are
    not clearly overloaded (the bounded test: load above ``max_load_skew`` times the mean *and*
    more than ``min_load_gap`` above the least load, on weighted loads), the least loaded of
    them. A request without a match goes to the routing key's ring worker (``hash_ring``) unless
    it is above the mean load, then to the next one clockwise that is not; without a key to the
    least loaded. A
    match counts only when it covers more than ``cache_threshold`` of the request's blocks, so
    that a prefix every worker soon holds (a shared system prompt) cannot keep new requests off
    the workers that have received nothing yet. See docs/contract.md, "cache_aware".

    Attributes:
        max_load_skew: the relative bound, a finite number >= 1.0 (stored as a float).
        min_load_gap: the absolute gap in load units, an integer >= 0.
        blocks_per_worker: how many blocks to remember per worker, 1 to
            :data:`MAX_BLOCKS_PER_WORKER`; set it to the worker's KV cache in blocks.
        hash_ring: ``"xxh64"`` (default) or ``"smg"`` (see :data:`HASH_RINGS`).
        cache_threshold: SMG's name and default (0.3): a prefix hit needs more than this
            fraction of the request's blocks matched, a number from 0.0 to 1.0.
        balance_by: ``"in_flight"`` (default) or ``"prefill"``: the load the bound, the choice
            among holders and the walk of a miss weigh (see :data:`BALANCE_BY`). With ``"prefill"`` and prompt
            tokens as lease weights, ``min_load_gap=131072, max_load_skew=1.0, hit_wait_factor=6`` are
            the settings measured in docs/trace-replay.md.
        hit_wait_factor: with ``balance_by="prefill"``: a prefix hit stays on its worker only while
            that worker's prefill load exceeds the least by at most this many times the weight of
            the blocks it found there, else it is routed as a miss (docs/contract.md, "Prefill
            load", rule 5); a finite number >= 0, 0 (the default) keeps every hit.

    Raises:
        ValueError: naming the field and its rule when a value breaks it.
    """

    max_load_skew: float = DEFAULT_MAX_LOAD_SKEW
    min_load_gap: int = DEFAULT_MIN_LOAD_GAP
    blocks_per_worker: int = DEFAULT_BLOCKS_PER_WORKER
    hash_ring: str = DEFAULT_HASH_RING
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    balance_by: str = BALANCE_BY[0]
    hit_wait_factor: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_load_skew", _check_max_load_skew(self.max_load_skew))
        object.__setattr__(self, "min_load_gap", _check_min_load_gap(self.min_load_gap))
        object.__setattr__(self, "blocks_per_worker", _check_blocks_per_worker(self.blocks_per_worker))
        _check_hash_ring(self.hash_ring)
        object.__setattr__(self, "cache_threshold", _check_cache_threshold(self.cache_threshold))
        _check_balance_by(self.balance_by)
        object.__setattr__(self, "hit_wait_factor", _check_hit_wait_factor(self.hit_wait_factor, self.balance_by))

    @property
    def policy_type(self) -> PolicyType:
        return PolicyType.CacheAware

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"type": "cache_aware", "max_load_skew": ..., ...}`` with every setting."""
        return _typed_dict(self)


#: Any of the typed policy configs.
PolicyConfig = Union[
    RandomConfig,
    RoundRobinConfig,
    ConsistentHashingConfig,
    BoundedConsistentHashingConfig,
    PowerOfTwoConfig,
    LeastLoadConfig,
    ManualConfig,
    CacheAwareConfig,
]

_CONFIG_CLASSES: Dict[PolicyType, Callable[..., PolicyConfig]] = {
    PolicyType.Random: RandomConfig,
    PolicyType.RoundRobin: RoundRobinConfig,
    PolicyType.ConsistentHashing: ConsistentHashingConfig,
    PolicyType.BoundedConsistentHashing: BoundedConsistentHashingConfig,
    PolicyType.PowerOfTwo: PowerOfTwoConfig,
    PolicyType.LeastLoad: LeastLoadConfig,
    PolicyType.Manual: ManualConfig,
    PolicyType.CacheAware: CacheAwareConfig,
}

#: The typed config classes (for isinstance checks).
CONFIG_TYPES = (
    RandomConfig,
    RoundRobinConfig,
    ConsistentHashingConfig,
    BoundedConsistentHashingConfig,
    PowerOfTwoConfig,
    LeastLoadConfig,
    ManualConfig,
    CacheAwareConfig,
)


def default_config(policy: PolicyType) -> PolicyConfig:
    """Return the config of ``policy`` with its default settings."""
    return _CONFIG_CLASSES[policy]()


def config_from_dict(data: Mapping[str, Any]) -> PolicyConfig:
    """Build a typed config from its ``{"type": ..., ...}`` form (the inverse of ``to_dict``).

    Raises:
        ValueError: for a missing or unknown ``type``, a setting the policy does not have, or a
            setting that breaks its rule.
    """
    if not isinstance(data, Mapping):
        raise ValueError("a policy config must be a mapping with a 'type', got %r" % (data,))
    fields = dict(data)
    name = fields.pop("type", None)
    try:
        policy = policy_from_str(name)
    except KeyError as e:
        raise ValueError("policy config type: %s" % e.args[0]) from None
    allowed = [name for name, (_, policies) in _SETTINGS.items() if policy in policies]
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ValueError("policy %s has no setting %s" % (policy.value, ", ".join(map(repr, unknown))))
    return _CONFIG_CLASSES[policy](**fields)


#: The settings passed next to a policy: their defaults and the policies that have them.
_BOUNDED = (PolicyType.BoundedConsistentHashing, PolicyType.CacheAware)
_SETTINGS: Dict[str, Tuple[Any, Tuple[PolicyType, ...]]] = {
    "max_load_skew": (DEFAULT_MAX_LOAD_SKEW, _BOUNDED),
    "min_load_gap": (DEFAULT_MIN_LOAD_GAP, _BOUNDED),
    "hash_ring": (DEFAULT_HASH_RING, (PolicyType.ConsistentHashing,) + _BOUNDED),
    "spill_target": (SPILL_TARGETS[0], (PolicyType.BoundedConsistentHashing,)),
    "key_memory": (0, (PolicyType.BoundedConsistentHashing,)),
    "balance_by": (BALANCE_BY[0], _BOUNDED),
    "seed": (None, (PolicyType.Random,)),
    "assignment_mode": (ASSIGNMENT_MODES[0], (PolicyType.Manual,)),
    "max_keys": (DEFAULT_MAX_KEYS, (PolicyType.Manual,)),
    "blocks_per_worker": (DEFAULT_BLOCKS_PER_WORKER, (PolicyType.CacheAware,)),
    "cache_threshold": (DEFAULT_CACHE_THRESHOLD, (PolicyType.CacheAware,)),
    "hit_wait_factor": (0.0, (PolicyType.CacheAware,)),
}


def resolve_policy(policy: Any, **settings: Any) -> PolicyConfig:
    """The typed config of ``policy`` (a :class:`PolicyType`, a policy name or a typed config)
    with the settings given next to it (``max_load_skew``, ``min_load_gap``, ``hash_ring``,
    ``spill_target``, ``key_memory``, ``seed``, ``assignment_mode``, ``max_keys``,
    ``blocks_per_worker``, ``cache_threshold``, ``balance_by``, ``hit_wait_factor``; None: the default).

    A setting the policy does not have is accepted and ignored, as ``sglang_router`` does, so
    that a launcher can switch ``--policy`` while passing the same flags; one
    :class:`UserWarning` names those that differ from their defaults.

    Raises:
        ValueError: an unknown policy or setting, a setting that breaks its rule, or a setting
            passed both in a typed config and next to it.
    """
    unknown = sorted(set(settings) - set(_SETTINGS))
    if unknown:
        raise ValueError("unknown policy setting %s" % ", ".join(map(repr, unknown)))
    given = {name: value for name, value in settings.items() if value is not None}
    if isinstance(policy, CONFIG_TYPES):
        kind = policy.policy_type
        clash = sorted(name for name in given if kind in _SETTINGS[name][1])
        if clash:
            raise ValueError("%s cannot be passed next to a %s: set them in the config" % (", ".join(clash), type(policy).__name__))
        config: PolicyConfig = policy
    else:
        if isinstance(policy, PolicyType):
            kind = policy
        elif isinstance(policy, str):
            try:
                kind = policy_from_str(policy)
            except KeyError as e:
                raise ValueError("policy: %s" % e.args[0]) from None
        else:
            raise ValueError("policy must be a PolicyType, a policy name or a policy config, got %r" % (policy,))
        config = _CONFIG_CLASSES[kind](**{name: value for name, value in given.items() if kind in _SETTINGS[name][1]})
    ignored = [
        "%s=%r" % (name, value)
        for name, value in given.items()
        if kind not in _SETTINGS[name][1] and value != _SETTINGS[name][0]
    ]
    if ignored:
        warnings.warn("%s: no effect with policy %s" % (", ".join(ignored), kind.value), UserWarning, stacklevel=3)
    return config
