"""The :class:`Router`: chooses a worker for each request and counts the requests in flight.

Routing, load counting and membership live in the native library; the router converts
arguments (:mod:`._encoding`), calls its native router (:mod:`._native_router`, which owns the
handle, the release path and the worker id map) and turns the answers into Python objects.
"""

from __future__ import annotations

import ctypes
from array import array
from ctypes import c_size_t, c_uint64
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Tuple, Type, Union

from . import _native
from ._encoding import DEFAULT_FILTER, DEFAULT_ROUTING_KEY_HEADERS, HeaderFilter, HeadersLike, encode_headers, key_bytes, options_json, url_bytes
from ._native_router import NativeRouter
from ._request import MAX_LEASE_WEIGHT, check_weight, one_request, pack_requests, prefix_block_array, prefix_block_bytes, weight_array
from .args import RouterArgs
from .errors import ForkedProcessError, NoWorkerAvailableError
from .gateway import Gateway
from .health import CircuitBreakerConfig, HealthCheckConfig, circuit_breaker_setting, health_check_setting
from .lease import Lease, _HeldLease
from .feeds import Feed, PeerRoutesFeed
from .metrics import render
from .policy import DEFAULT_VIRTUAL_NODES, PolicyConfig, PolicyType, resolve_policy
from .stats import Statistics, WorkerInfo

__all__ = ["Router", "Decision", "WorkerInfo", "Statistics"]

_SPILLOVER = "explicit_routing_key_spillover"
# A selection whose worker left the membership before its URL could be looked up is made
# again; membership would have to change this many times in a row to give up.
_SELECT_ATTEMPTS = 100
_BUFFERS = _native.BUFFERS
# The request path passes a key or header block length as a ready-made size_t argument (the
# request path's exports have no argtypes, see _native): made once for the usual lengths.
_SIZES = tuple(c_size_t.from_param(n) for n in range(256))
# The array typecode of a uint32, the type of br_route_keys' key lengths.
_UINT32 = next(code for code in "IL" if array(code).itemsize == 4)
# Leases of the request path are made without a call of Lease.__init__: object.__new__, then
# the three slots are set right away (in route and route_many).
_new_lease = object.__new__


def _size(n: int) -> Any:
    return _SIZES[n] if n < 256 else c_size_t.from_param(n)


@dataclass(frozen=True)
class Decision:
    """A routing decision made by :meth:`Router.select` (nothing counted).

    Attributes:
        worker_url: the chosen worker, or None when no worker could be chosen.
        preferred_url: the worker the routing key prefers (the chosen one unless the request
            would spill), or None when no worker could be chosen.
        branch: the rule that decided, e.g. ``"explicit_routing_key_hit"``.
    """

    worker_url: Optional[str]
    preferred_url: Optional[str]
    branch: str

    @property
    def spilled(self) -> bool:
        """Whether the request would leave its preferred worker."""
        return self.branch == _SPILLOVER


def _url_list(urls: Any, what: str) -> List[str]:
    if isinstance(urls, (str, bytes)):
        raise TypeError("%s must be a list of URL strings, not a single %s" % (what, type(urls).__name__))
    try:
        items = list(urls)
    except TypeError:
        raise TypeError("%s must be a list of URL strings, got %s" % (what, type(urls).__name__)) from None
    for url in items:
        url_bytes(url)
    return [str.__str__(url) for url in items]


def _header_names(names: Any) -> List[str]:
    """routing_key_headers as a list of str; the library checks the names themselves."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise TypeError("routing_key_headers must be a list of header names, got %s" % type(names).__name__)
    items = list(names)
    for name in items:
        if not isinstance(name, str):
            raise TypeError("routing_key_headers must hold str header names, got %r" % (name,))
    return [str.__str__(name) for name in items]




class Router:
    """Routes requests to workers, keeping requests that share a routing key on one worker.

    Args:
        worker_urls: the workers' URLs, in membership order: ``http(s)://host[:port][/path]``,
            kept in their normal form (lower-case scheme and host, no default port or trailing
            ``/``), unique in it; may be empty (docs/contract.md, "Workers and membership").
        policy: a :class:`PolicyType`, its name (``"bounded_consistent_hashing"``, ...) or a
            typed config (:class:`BoundedConsistentHashingConfig`, ...).
        max_load_skew: ``bounded_consistent_hashing``'s relative bound (default 1.5), a finite
            number >= 1. Ignored by the other policies, with a warning when not the default.
        min_load_gap: ``bounded_consistent_hashing``'s absolute gap (default 2), an integer >= 0.
            Ignored by the other policies, with a warning when not the default.
        virtual_nodes: ring positions per worker (default 150), from 1 to 65536; the workers
            times the virtual nodes may be at most 4,194,304.
        hash_ring: the hashing policies' ring, ``"xxh64"`` (default) or ``"smg"`` (SMG's ring:
            keys go where SMG sends them). Ignored by the other policies, with a warning when
            not the default.
        spill_target: ``bounded_consistent_hashing``: ``"clockwise"`` (default) or
            ``"least_loaded"``, where a spill goes (docs/contract.md, "Spill target").
        key_memory: ``bounded_consistent_hashing``: remember the last worker of this many
            routing keys (default 0, none; docs/contract.md, "Key memory").
        seed: ``random``: seed the router's choices, an integer from 0 to 2**64-1 (default
            None, unseeded; docs/contract.md, "Random seed"). Ignored by the other policies,
            with a warning when given.
        assignment_mode: ``manual``: ``"random"`` (default) or ``"min_load"``, how a new key
            gets its worker (docs/contract.md, "manual").
        max_keys: ``manual``: how many keys it keeps the worker of (default 65536).
        routing_key_headers: the names of the headers that carry the routing key, in order;
            the first with a valid value wins (default ``["X-SMG-Routing-Key"]``; as SMG's
            ``--routing-key-headers``; docs/contract.md, "Inputs and precedence").
        blocks_per_worker: ``cache_aware``: how many prefix blocks to remember per worker
            (default 32768; docs/contract.md, "cache_aware"). ``max_load_skew`` and
            ``min_load_gap`` apply to ``cache_aware`` too.
        cache_threshold: ``cache_aware``: a prefix hit needs more than this fraction of the
            request's blocks matched (default 0.3, SMG's; docs/contract.md, "cache_aware").
        balance_by: ``bounded_consistent_hashing`` and ``cache_aware``: the load the bound
            weighs, ``"in_flight"`` (default) or ``"prefill"``, the leases not yet past their
            first token (:meth:`Lease.first_token`; docs/contract.md, "Prefill load").
        hit_wait_factor: ``cache_aware`` with ``balance_by="prefill"``: a prefix hit stays on its
            worker only while that worker's prefill load exceeds the least by at most this many
            times the weight of the blocks found there (default 0: always; docs/contract.md,
            "Prefill load", rule 5).
        health_check: a :class:`HealthCheckConfig` (or True for its defaults) to probe the
            workers from the library's own threads; None (default) probes nothing.
        circuit_breaker: a :class:`CircuitBreakerConfig`; None (default) its defaults, False
            none. Failures reported with :meth:`Lease.fail` eject a worker after its threshold
            (docs/contract.md, "Worker failures").

    Raises:
        ValueError: a setting breaks its rule, an unknown policy name, a URL that is not of
            that form or names a worker twice, or a setting given both in a typed config and next to it.
        TypeError: a URL is not a str.

    All methods are thread-safe. A router is a context manager that closes it on exit; using
    a closed router raises :class:`RouterClosedError`. Routers cannot be copied or pickled.
    """

    def __init__(
        self,
        worker_urls: Iterable[str],
        policy: Union[PolicyType, str, PolicyConfig] = PolicyType.BoundedConsistentHashing,
        max_load_skew: Optional[float] = None,
        min_load_gap: Optional[int] = None,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        *,
        hash_ring: Optional[str] = None,
        spill_target: Optional[str] = None,
        key_memory: Optional[int] = None,
        seed: Optional[int] = None,
        assignment_mode: Optional[str] = None,
        max_keys: Optional[int] = None,
        routing_key_headers: Optional[Sequence[str]] = None,
        blocks_per_worker: Optional[int] = None,
        cache_threshold: Optional[float] = None,
        balance_by: Optional[str] = None,
        hit_wait_factor: Optional[float] = None,
        health_check: Union[HealthCheckConfig, bool, None] = None,
        circuit_breaker: Union[CircuitBreakerConfig, bool, None] = None,
        kv_events: Optional[Mapping[str, str]] = None,
    ) -> None:
        urls = _url_list(worker_urls, "worker_urls")
        self._policy = resolve_policy(
            policy,
            max_load_skew=max_load_skew,
            min_load_gap=min_load_gap,
            hash_ring=hash_ring,
            spill_target=spill_target,
            key_memory=key_memory,
            seed=seed,
            assignment_mode=assignment_mode,
            max_keys=max_keys,
            blocks_per_worker=blocks_per_worker,
            cache_threshold=cache_threshold,
            balance_by=balance_by,
            hit_wait_factor=hit_wait_factor,
        )
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise ValueError("virtual_nodes must be an integer, got %r" % (virtual_nodes,))
        config: Dict[str, Any] = {"worker_urls": urls, "policy": self._policy.to_dict(), "virtual_nodes": int(virtual_nodes)}
        if routing_key_headers is not None:
            config["routing_key_headers"] = _header_names(routing_key_headers)
        probes, breaker = health_check_setting(health_check), circuit_breaker_setting(circuit_breaker)
        if probes is not None:
            config["health_check"] = probes
        if breaker is not None:
            config["circuit_breaker"] = breaker
        self._native = NativeRouter(options_json(config))
        self._routing_key_headers = tuple(config.get("routing_key_headers", DEFAULT_ROUTING_KEY_HEADERS))
        # Built once the library has accepted the names (tokens, hence ASCII).
        self._header_filter = (
            DEFAULT_FILTER if routing_key_headers is None else HeaderFilter.for_key_headers(config["routing_key_headers"])
        )
        # The feeds this router started (their counters go into metrics_text), and
        # kv_events={url: "tcp://host:port"}: subscribed from the start, ended by close().
        self._feeds: List[Feed] = []
        self.kv_events: Optional[Feed] = None
        if kv_events is not None:
            try:
                self.kv_events = self.subscribe_kv_events(kv_events)
            except BaseException:
                self._native.close()
                raise

    @classmethod
    def from_args(cls, args: RouterArgs, probe: bool = False) -> Router:
        """Build a router from :class:`RouterArgs` (e.g. parsed command-line flags).

        Settings the policy does not have are ignored, with a warning when they differ from the
        defaults. With ``probe`` the router runs the health check the arguments describe
        (unless ``disable_health_check``), as the servers do (``bounded-router serve``, the
        Python ``serve``, :func:`~bounded_router.launch_router.launch_router`); without it, as
        everywhere in the library, it probes nothing (docs/contract.md, "Worker failures").
        """
        return cls(
            args.worker_urls,
            args.policy,
            args.max_load_skew,
            args.min_load_gap,
            args.virtual_nodes,
            hash_ring=args.hash_ring,
            spill_target=args.spill_target,
            key_memory=args.key_memory,
            seed=args.random_seed,
            assignment_mode=args.assignment_mode,
            max_keys=args.max_keys,
            routing_key_headers=args.routing_key_headers,
            blocks_per_worker=args.blocks_per_worker,
            cache_threshold=args.cache_threshold,
            balance_by=args.balance_by,
            hit_wait_factor=args.hit_wait_factor,
            health_check=args.health_check_config() if probe else None,
            circuit_breaker=args.circuit_breaker_config(),
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def policy(self) -> PolicyConfig:
        """The policy in force and its settings, as a typed config (readable after close too)."""
        return self._policy

    @property
    def routing_key_headers(self) -> List[str]:
        """The names of the headers that carry the routing key, in order."""
        return list(self._routing_key_headers)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.closed

    def close(self) -> None:
        """Free the native router. Idempotent; outstanding leases become no-ops.

        In a process forked after the router was created, this only marks the inherited copy
        closed (the parent's router is untouched). Stops the feeds it started first
        (``kv_events``, :meth:`poll_loads`, :meth:`subscribe_kv_events`, :meth:`share_routes`).
        """
        self._stop_feeds()
        self._native.close()

    def __del__(self) -> None:
        # Feeds end with their router (docs/contract.md), also when their Feed objects or this
        # router's leases outlive it and keep the native router alive.
        try:
            self._stop_feeds()
        except BaseException:
            pass

    def _stop_feeds(self) -> None:
        for feed in getattr(self, "_feeds", ()):  # none when __init__ failed before making them
            try:
                feed.stop()
            except ForkedProcessError:  # in a forked child: the parent's feeds, nothing to stop
                pass

    def __enter__(self) -> Router:
        self._native.check_open()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __copy__(self) -> NoReturn:
        raise TypeError("a Router cannot be copied: it owns one native router; share the object instead")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self.__copy__()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("a Router cannot be pickled: create one in each process from its settings")

    def __repr__(self) -> str:
        return "<Router policy=%r%s>" % (self._policy, " closed" if self.closed else "")

    # -- routing -----------------------------------------------------------------------------

    def route(
        self,
        routing_key: Union[str, bytes, None] = None,
        *,
        headers: Optional[HeadersLike] = None,
        weight: Optional[int] = None,
        prefix_blocks: Optional[Iterable[int]] = None,
        exclude: Optional[Iterable[str]] = None,
    ) -> Lease:
        """Choose a worker for a request and count the request on it until the lease is released.

        Args:
            routing_key: the explicit routing key (``str``, UTF-8 encoded, or ``bytes``); empty
                or None means no key. It overrides the routing-key headers.
            headers: the request's HTTP headers (any mapping, or an iterable of ``(name,
                value)`` pairs); ``X-SMG-Target-Worker``, the routing-key headers
                (``X-SMG-Routing-Key`` unless ``routing_key_headers`` says otherwise),
                ``Authorization``, ``X-Forwarded-For`` and ``Cookie`` are used as
                docs/contract.md, "Inputs and precedence", says.
            weight: what the lease counts on its worker's load until released, an integer
                from 1 to ``MAX_LEASE_WEIGHT`` (e.g. the prompt's tokens); None is 1
                (docs/contract.md, "Weighted leases"). It plays no part in choosing the worker.
            prefix_blocks: the prompt's prefix block hashes in order (integers from 0 to
                2**64-1, at most ``MAX_PREFIX_BLOCKS``; see :func:`~bounded_router.prefix_blocks`);
                ``cache_aware`` routes by them, the other policies ignore them. A
                :class:`~bounded_router.PrefixBlocks` (what ``prefix_blocks()`` returns) is
                passed on as it is, an ``array("Q")`` or a buffer of uint64s (``memoryview``,
                numpy ``uint64``) copied in one step, any other sequence of ints converted block
                by block (docs/contract.md, "Weighted leases").
            exclude: the URLs of workers the request already failed on, for a retry
                (docs/contract.md, "Worker failures"): a keyed request goes to the next
                available worker clockwise from its key that is not excluded (branch
                ``failover``), any other where the policy sends it among the rest; a request
                naming a target worker is not retried. URLs that are not workers are ignored.

        Returns:
            The :class:`Lease`; release it (or use it as a context manager) when the request
            has finished.

        Raises:
            NoWorkerAvailableError: no worker can be chosen (``.branch`` says why).
            TypeError, ValueError: ``routing_key``, a header, ``weight`` or ``prefix_blocks``
                breaks its rule (the message names it).
            RouterClosedError: the router was closed (the library reports it: the handle is
                invalid from then on).
        """
        if exclude is not None:
            return self._route_avoiding(routing_key, headers, weight, prefix_blocks, exclude)
        # One native call per request, which also hands over a lease released since the last
        # one (the release path, see _native_router); the lease's URLs come from the decision
        # cache (NativeRouter.decided). A weight or prefix blocks take the same path with the
        # export that carries them. What each shortcut here buys: BENCHMARKS.md.
        try:
            out, out_ref = _BUFFERS.value
        except AttributeError:
            out, out_ref = _native.thread_buffers()
        native = self._native
        if headers is None:
            key = routing_key
            if type(key) is str:
                try:
                    key = key.encode()
                except UnicodeEncodeError:
                    key = key_bytes(key)  # raises the error that names the routing key
            elif type(key) is not bytes:
                key = key_bytes(key)
        else:
            key = key_bytes(routing_key)
            block = encode_headers(headers, self._header_filter)
        plain = weight is None and prefix_blocks is None
        if not plain:
            checked = 1 if weight is None else weight if type(weight) is int and 0 < weight <= MAX_LEASE_WEIGHT else check_weight(weight)
            blocks = b"" if prefix_blocks is None else prefix_block_bytes(prefix_blocks)
        released = native.released
        if released:
            try:
                (previous,) = released  # usually one lease released since the last route: in out[2]
            except ValueError:  # more of them: handed over by a call of their own
                previous = 0
                native.hand_over()
            else:
                out[2] = previous
        else:
            previous = 0
        if plain and headers is None:
            n = len(key)
            decision = native.route_key(native.handle_arg, key, _SIZES[n] if n < 256 else _size(n), out_ref)
        elif plain:
            decision = native.route_headers(native.handle_arg, key, _size(len(key)), block, _size(len(block)), out_ref)
        else:
            n, m = len(key), len(blocks) >> 3
            if headers is None:
                block, block_size = b"", _SIZES[0]
            else:
                block_size = _size(len(block))
            key_size, blocks_size = _SIZES[n] if n < 256 else _size(n), _SIZES[m] if m < 256 else _size(m)
            decision = native.route_request(native.handle_arg, key, key_size, block, block_size, checked, blocks, blocks_size, out_ref)
        lease_id = out[0]
        if not lease_id:
            # `previous` stays in released: handed over again, it is skipped if it was released.
            raise native.unrouted(decision)
        if previous:
            try:
                released.remove(previous)
            except ValueError:  # handed over by another thread as well
                pass
        urls = native.decided.get(decision)
        if urls is None:
            urls = native.decision_urls(decision, out[1], lease_id)
        lease: Lease = _new_lease(_HeldLease)
        lease._native = native
        lease._id = lease_id
        lease._decision = urls
        return lease

    def _route_avoiding(
        self,
        routing_key: Union[str, bytes, None],
        headers: Optional[HeadersLike],
        weight: Optional[int],
        prefix_blocks: Any,
        exclude: Iterable[str],
    ) -> Lease:
        """:meth:`route` for a retry: one ``br_route_avoiding`` call, with every input of the request."""
        native = self._native
        avoid = options_json(_url_list(exclude, "exclude"))
        request = _request(routing_key, headers, weight, prefix_blocks, self._header_filter)
        native.check_open()
        native.hand_over()
        out, _ = _native.thread_buffers()
        lib = native.lib
        code = lib.check(lib.br_route_avoiding(native.handle, request, avoid, len(avoid), out))
        lease_id = out[0]
        if not lease_id:
            raise native.unrouted(code)
        return _HeldLease(native, lease_id, native.lease_decision(code, out[1], lease_id))

    def route_many(
        self,
        keys: Iterable[Union[str, bytes, None]],
        *,
        weights: Optional[Iterable[int]] = None,
        prefix_blocks: Optional[Iterable[Optional[Iterable[int]]]] = None,
    ) -> List[Lease]:
        """Route one request per key, in order, with one call into the library for the batch.

        The keys are placed exactly as successive ``route(routing_key=key)`` calls would place
        them, and the batch is one linearizable step: it sees every lease taken before it
        began, and no other route or release of this router runs in the middle of it (a key
        repeated in the batch sees the leases of its earlier copies, as with successive calls).

        Args:
            keys: routing keys (``str``, ``bytes``, or None / empty for no key).
            weights: the weight of each key's lease, aligned with ``keys`` (see :meth:`route`).
            prefix_blocks: each key's prefix blocks (None, or any form :meth:`route`
                takes), aligned with ``keys``.

        Returns:
            One :class:`Lease` per key, in the order of ``keys``.

        Raises:
            NoWorkerAvailableError: no worker is available. The batch is all or nothing
                (docs/contract.md, "Leases"): then no key got a lease.
            TypeError, ValueError: ``keys`` is a single str or bytes, a key is of the wrong
                type or not valid Unicode, ``weights`` or ``prefix_blocks`` is not as long as
                ``keys``, or one of them breaks its rule (the message names its index).
                Nothing is routed.
        """
        native = self._native
        native.check_open()
        if isinstance(keys, (str, bytes)):
            raise TypeError("route_many takes an iterable of keys, not a single %s" % type(keys).__name__)
        batch = keys if type(keys) is list else list(keys)
        if prefix_blocks is not None:
            return self._route_requests(batch, weights, prefix_blocks)
        weight_list = _aligned(weights, "weights", len(batch))
        try:
            encoded = list(map(str.encode, batch))  # all str, the common case: encoded in C
        except (TypeError, UnicodeEncodeError):
            encoded = [key_bytes(key) for key in batch]  # raises the error that names a bad key
        n = len(encoded)
        if not n:
            return []
        packed = None if weight_list is None else weight_array(weight_list, "weights").tobytes()
        native.hand_over()
        block = b"".join(encoded)
        lengths = array(_UINT32, map(len, encoded)).tobytes()
        out = (c_uint64 * (3 * n))()
        lib = native.lib
        if packed is None:
            lib.check(lib.br_route_keys(native.handle_arg, block, _size(len(block)), lengths, n, out))
        else:
            lib.check(lib.br_route_weighted_keys(native.handle_arg, block, _size(len(block)), lengths, packed, n, out))
        return _batch_leases(native, out, n)

    def _route_requests(self, keys: List[Any], weights: Optional[Iterable[int]], prefix_blocks: Any) -> List[Lease]:
        """:meth:`route_many` with prefix blocks: one ``br_route_requests`` call."""
        n = len(keys)
        weight_list = _aligned(weights, "weights", n)
        block_list = _aligned(prefix_blocks, "prefix_blocks", n)
        if not n:
            return []
        requests = pack_requests(
            [key_bytes(key) for key in keys],
            None,
            [1] * n if weight_list is None else [check_weight(w, "weights[%d]" % i) for i, w in enumerate(weight_list)],
            [None] * n if block_list is None else [_blocks(b, "prefix_blocks[%d]" % i) for i, b in enumerate(block_list)],
        )
        native = self._native
        native.hand_over()
        out = (c_uint64 * (3 * n))()
        native.lib.check(native.lib.br_route_requests(native.handle_arg, requests, n, out))
        return _batch_leases(native, out, n)

    def release_many(self, leases: Iterable[Lease]) -> int:
        """Release leases of this router in one call into the library; return how many it released.

        Each lease is released as :meth:`Lease.release` would release it, all in one step;
        leases released before (or listed twice) are skipped and not counted.

        Raises:
            TypeError: an item is not a :class:`Lease`.
            ValueError: a lease belongs to another router. Nothing is released then.
        """
        native = self._native
        batch = leases if type(leases) is list else list(leases)
        try:
            mine = [lease for lease in batch if lease._native is native]
        except AttributeError:
            raise TypeError("release_many takes Lease objects") from None
        if len(mine) != len(batch):
            raise ValueError("release_many: every lease must come from this router")
        lease_ids: List[int] = []
        claim = lease_ids.append
        for lease in batch:
            # Read and cleared with no call nor jump between them, where CPython 3.11 and later
            # never switch threads, so one call alone claims each lease, as in Lease.release
            # (3.9 and 3.10 may switch there: the library still releases the lease once). A
            # lease released before is claimed as 0, which the library skips.
            lease_id, lease._id = lease._id, 0
            claim(lease_id)
        released = 0
        if not native.closed:
            try:
                released = native.release_ids(lease_ids)
            except BaseException:  # ForkedProcessError: nothing was released, the leases stay held
                for lease, lease_id in zip(batch, lease_ids):
                    if lease_id:  # a lease listed twice was claimed once: its second is 0
                        lease._id = lease_id
                raise
        for lease in batch:
            lease.__class__ = Lease  # as Lease.release does: no safety net needed any more
        return released

    def select(
        self,
        routing_key: Union[str, bytes, None] = None,
        *,
        headers: Optional[HeadersLike] = None,
        prefix_blocks: Optional[Iterable[int]] = None,
    ) -> Decision:
        """Choose a worker like :meth:`route` without counting anything.

        Never raises :class:`NoWorkerAvailableError`: when no worker can be chosen the decision
        has ``worker_url`` None and the branch says why.
        """
        native = self._native
        native.check_open()
        lib = native.lib
        decide: Callable[[Any], int]
        if prefix_blocks is None:
            key = key_bytes(routing_key)
            block = b"" if headers is None else encode_headers(headers, self._header_filter)
            decide = lambda out: lib.br_route(native.handle, key, len(key), block, len(block), 0, out)  # noqa: E731
        else:
            request = _request(routing_key, headers, None, prefix_blocks, self._header_filter)
            decide = lambda out: lib.br_route_request(native.handle_arg, request, 0, ctypes.byref(out))  # noqa: E731
        native.hand_over()
        out = _native.thread_buffers()[0]
        for _ in range(_SELECT_ATTEMPTS):
            branch = lib.branches[lib.check(decide(out))]
            if not out[1]:  # both worker ids 0: no worker chosen
                return Decision(None, None, branch)
            urls = native.urls_of(out[1])
            if urls is not None:
                return Decision(urls[0], urls[1], branch)
            # The worker left the membership in between: decide again.
        raise RuntimeError("bounded_router: the membership changed during every one of %d selections" % _SELECT_ATTEMPTS)

    def acquire(self, worker_url: str, routing_key: Union[str, bytes, None] = None, *, weight: int = 1) -> Lease:
        """Count a request on ``worker_url``, a worker chosen outside the router.

        The worker must be a member (it need not be healthy). ``routing_key``, if given, is
        counted among the worker's active keys. ``weight`` is what the lease counts on the
        worker's load, as with :meth:`route`. The lease's ``branch`` is None.

        Raises:
            KeyError: ``worker_url`` is not a member.
            TypeError, ValueError: ``weight`` is not an integer from 1 to ``MAX_LEASE_WEIGHT``.
        """
        url = url_bytes(worker_url)
        key = key_bytes(routing_key)
        checked = check_weight(weight)
        out = _native.thread_buffers()[0]
        self._native.call("br_acquire", url, len(url), key, len(key), checked, out)
        # The member's URL in its normal form (contract: "Workers and membership"); the worker
        # is its own preferred one. The given URL if the worker has left since.
        urls = self._native.urls_of(out[1] | (out[1] << 32)) or (str.__str__(worker_url),) * 2
        return _HeldLease(self._native, out[0], (urls[0], urls[1], None))

    # -- membership and health ---------------------------------------------------------------

    def add_worker(self, url: str) -> None:
        """Add a worker at the end of the membership order.

        Raises:
            ValueError: the URL is not a worker URL (docs/contract.md, "Workers and membership"),
                is already a member in any spelling, or the ring would be too large.
            TypeError: the URL is not a str.
        """
        raw = url_bytes(url)
        self._native.change_membership("br_add_worker", raw, len(raw))

    def remove_worker(self, url: str) -> None:
        """Remove a worker. Its outstanding leases stay valid and release against it alone.

        Raises:
            KeyError: the URL is not a member.
        """
        raw = url_bytes(url)
        self._native.change_membership("br_remove_worker", raw, len(raw))

    def set_workers(self, urls: Iterable[str]) -> None:
        """Replace the membership with ``urls``, in that order.

        Workers that stay keep their health and load; the others are removed.

        Raises:
            ValueError: a URL is not a worker URL, two name the same worker, or the ring would
                be too large.
            TypeError: a URL is not a str.
        """
        data = options_json(_url_list(urls, "urls"))
        self._native.change_membership("br_set_workers", data, len(data))

    def set_healthy(self, url: str, healthy: bool) -> None:
        """Mark a worker healthy (available for routing) or not; its leases are unaffected.

        Raises:
            KeyError: the URL is not a member.
        """
        if isinstance(healthy, (str, bytes)) or healthy not in (True, False):
            raise TypeError("healthy must be a bool, got %r" % (healthy,))
        raw = url_bytes(url)
        self._native.call("br_set_healthy", raw, len(raw), 1 if healthy else 0)

    def forget_keys(self) -> int:
        """Forget the remembered worker of every routing key (``key_memory`` of
        ``bounded_consistent_hashing``, the keys of ``manual``; contract: "Key memory"): each
        key's next request is decided as a new key's, so workers that joined since take their
        share. Leases and loads are unaffected. Returns how many keys were remembered (0 under a
        policy without a memory)."""
        return self._native.call("br_forget_keys")

    # -- loads the engines report ---------------------------------------------------------------

    def report_load(self, url: str, load: Optional[int] = None, *, waiting: Optional[int] = None, waiting_requests: Optional[int] = None) -> None:
        """The engine of worker ``url`` reports its load, every router replica's requests included
        (contract: "Engine load reports"). Until the next report, the worker's load for routing is
        ``load`` (its requests running and waiting) plus the weights of this router's leases taken
        since, and its prefill load (``balance_by="prefill"``) is ``waiting`` (its prefill queue in
        the unit of the lease weights: requests with unit weights, prompt tokens with token
        weights) plus the weights of those leases not yet past their first token. Without
        ``waiting``, ``waiting_requests`` (its requests waiting) times the mean weight of this
        router's leases held stands for it. A figure left out (None) is this router's leases.

        Raises:
            KeyError: the URL is not a member.
            TypeError, ValueError: a figure is not None or an integer from 0 to 2**40.
        """
        figures = [_engine_figure(name, value) for name, value in (("load", load), ("waiting", waiting), ("waiting_requests", waiting_requests))]
        raw = url_bytes(url)
        self._native.call("br_report_load", raw, len(raw), *figures)

    def peer_route(self, url: str, *, weight: Optional[int] = None, prefix_blocks: Optional[Sequence[int]] = None) -> None:
        """Another router replica sent a request to worker ``url`` (contract: "Peer routes").

        While an engine load report stands for the worker (:meth:`report_load`), ``weight`` (the
        lease weight in this router's unit; None means 1) adds to its routing loads until the
        next report, which counts the request itself; ``prefix_blocks`` join its ``cache_aware``
        index as this router's own routes do. Nothing this router counts or reports changes.

        Raises:
            KeyError: the URL is not a member.
            TypeError, ValueError: the weight is not an integer from 1 to 2**30, or a block is
                out of range.
        """
        checked = 1 if weight is None else check_weight(weight)
        packed = prefix_block_array(() if prefix_blocks is None else prefix_blocks, "prefix_blocks")
        raw = url_bytes(url)
        self._native.call("br_peer_route", raw, len(raw), checked, _uint64s(packed), len(packed))

    def poll_loads(
        self,
        endpoints: Mapping[str, str],
        format: str = "sglang",
        interval_secs: Optional[float] = None,
        timeout_secs: Optional[float] = None,
        expiry_secs: Optional[float] = None,
        lease_weights: str = "requests",
    ) -> Feed:
        """Poll each worker's load endpoint (``endpoints``: worker URL to endpoint URL) and
        report the loads (see :mod:`bounded_router.feeds`); stop the feed to end it.
        ``lease_weights="tokens"`` says this router's leases weigh prompt tokens: an engine's
        waiting uncached tokens (``format="sglang_loads"``) are then its prefill queue.

        Raises:
            ValueError: a setting breaks its rule, or a worker named is not a member, is named
                twice (in two spellings) or is polled already by another running feed.
        """
        return self._started(Feed.load_poll(self._native, endpoints, format, interval_secs, timeout_secs, expiry_secs, lease_weights))

    def subscribe_kv_events(
        self,
        endpoints: Mapping[str, str],
        replay_endpoints: Optional[Mapping[str, str]] = None,
        topic: str = "",
        stale_after_secs: Optional[float] = None,
    ) -> Feed:
        """Subscribe to each worker's KV event stream (``endpoints``: worker URL to its engine's
        ``tcp://host:port`` PUB endpoint; ``replay_endpoints`` likewise, for gaps) and keep the
        ``cache_aware`` index to what the engines report (see :mod:`bounded_router.feeds`).

        Raises:
            ValueError: the policy is not ``cache_aware``, a setting breaks its rule, or a worker
                named is not a member, is named twice or is followed already by another feed.
        """
        return self._started(Feed.kv_events(self._native, endpoints, replay_endpoints, topic, stale_after_secs))

    def share_routes(self, publish: Optional[str] = None, peers: Iterable[str] = (), topic: str = "") -> PeerRoutesFeed:
        """Share routes with other router replicas in front of the same workers (contract:
        "Sharing routes over the wire"): publish each lease this router takes on ``publish``
        (``tcp://host:port`` bound on a private interface: the feed carries worker URLs and block
        hashes and changes where traffic goes; port 0 picks one, see
        :attr:`PeerRoutesFeed.endpoint`) and apply what the ``peers`` (their ``tcp://host:port``
        publish endpoints) publish, as :meth:`peer_route` does: their routes count while engine
        load reports stand (:meth:`poll_loads`). Routes of this router's own endpoint are skipped,
        so every replica may be given the same list. Stop the feed to end it.

        Raises:
            ValueError: neither ``publish`` nor ``peers`` is given, an endpoint is not
                ``tcp://host:port``, this router publishes already or follows a peer already
                (its counters would be two series of one metric), or the endpoint cannot be bound.
            TypeError: ``peers`` is one str, not a list of them.
        """
        if isinstance(peers, str):
            raise TypeError("peers must be a list of tcp://host:port endpoints, not one str")
        peers = list(peers)
        followed = {peer for feed in self._feeds if feed.running and feed.kind == "peer_routes" for peer in feed.statistics()}
        again = [peer for peer in peers if peer in followed]
        if again:
            raise ValueError("peer routes: this router follows %s already (one feed per peer: stop the other first)" % again[0])
        feed = Feed.peer_routes(self._native, publish, peers, topic)
        self._started(feed)
        return feed

    def _started(self, feed: Feed) -> Feed:
        running = [f for f in self._feeds if f.running]
        if feed.kind != "peer_routes":  # share_routes checks its peers before it starts
            taken = {worker for f in running if f.kind == feed.kind for worker in f.statistics()}
            again = sorted(taken.intersection(feed.statistics()))
            if again:
                feed.stop()
                raise ValueError(
                    "%s is %s already (one feed per worker: its counters would be two series of one metric; stop the other first)"
                    % (again[0], "polled" if feed.kind == "load_poll" else "followed for KV events")
                )
        self._feeds = running + [feed]
        return feed

    def feed_statistics(self) -> List[Tuple[str, Dict[str, Dict[str, Any]]]]:
        """``(kind, statistics)`` of each running feed this router started (see :mod:`bounded_router.feeds`;
        a route sharing feed adds its publisher's counters as kind ``peer_routes_publisher``)."""
        return [row for feed in self._feeds if feed.running for row in feed.metric_rows()]

    def forget_load(self, url: str) -> None:
        """Drop worker ``url``'s standing load report (it expired): its load for routing is this
        router's leases again."""
        raw = url_bytes(url)
        self._native.call("br_forget_load", raw, len(raw))

    # -- blocks the engines report (cache_aware) -----------------------------------------------

    def store_blocks(self, url: str, blocks: Sequence[int], engine_hashes: Optional[Sequence[int]] = None) -> None:
        """The engine of worker ``url`` reports that it stores ``blocks`` (contract: "Reported blocks").

        Args:
            url: the worker.
            blocks: prefix block hashes as :func:`~bounded_router.prefix_blocks` computes them
                from the blocks' token ids, in prefix order; the worker then holds them as if a
                route had just sent them there.
            engine_hashes: the engine's own names of the blocks, one per block, by which
                :meth:`remove_blocks` finds them; None: the engine names them as ``blocks``.

        Raises:
            KeyError: the URL is not a member.
            ValueError: the policy is not ``cache_aware``, or a block or name is out of range,
                or the two lists differ in length.
        """
        packed = prefix_block_array(blocks, "blocks")
        names = None if engine_hashes is None else prefix_block_array(engine_hashes, "engine_hashes")
        if names is not None and len(names) != len(packed):
            raise ValueError("engine_hashes must name each of the %d blocks, got %d" % (len(packed), len(names)))
        raw = url_bytes(url)
        self._native.call("br_store_blocks", raw, len(raw), _uint64s(packed), len(packed), None if names is None else _uint64s(names))

    def remove_blocks(self, url: str, engine_hashes: Sequence[int]) -> None:
        """The engine of worker ``url`` reports evicting the blocks it names ``engine_hashes``
        (see :meth:`store_blocks`); names it never reported are ignored."""
        packed = prefix_block_array(engine_hashes, "engine_hashes")
        raw = url_bytes(url)
        self._native.call("br_remove_blocks", raw, len(raw), _uint64s(packed), len(packed))

    def clear_blocks(self, url: str) -> None:
        """The engine of worker ``url`` reports dropping every block: its index is emptied."""
        raw = url_bytes(url)
        self._native.call("br_clear_blocks", raw, len(raw))

    # -- statistics --------------------------------------------------------------------------

    def statistics(self) -> Statistics:
        """Everything the router counts, read in one step (see :class:`Statistics`)."""
        return self._native.statistics()

    def workers(self) -> List[WorkerInfo]:
        """A snapshot of every worker, in membership order."""
        return self._native.workers()

    def loads(self) -> Dict[str, int]:
        """The load of every worker, by URL, in membership order: the sum of the weights of the
        leases held on it (their number when every weight is 1)."""
        return {worker.url: worker.load for worker in self.workers()}

    def in_flight(self) -> Dict[str, int]:
        """The number of leases held on every worker, by URL, in membership order, whatever
        their weights."""
        return {worker.url: worker.requests for worker in self.workers()}

    def branch_counts(self) -> Dict[str, int]:
        """How many routed requests each branch decided (every branch name is present)."""
        return self.statistics().branches

    def leaked_leases(self) -> int:
        """How many leases were garbage-collected without release (and released by the safety net)."""
        return self.statistics().leaked_leases

    def active_leases(self) -> int:
        """How many leases are held, including those on workers removed since."""
        return self.statistics().active_leases

    def serve(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> Gateway:
        """Serve this router's workers through the native HTTP gateway (see :mod:`bounded_router.gateway`)."""
        return Gateway(self._native, host=host, port=port, **options)

    def metrics_text(self, labels: Optional[Dict[str, str]] = None) -> str:
        """The router's statistics in the Prometheus text format, for a ``/metrics`` endpoint.

        Branch counters, per-worker load, active keys and health, active and leaked leases,
        from one :meth:`statistics` snapshot; ``labels`` are added to every sample. See
        :mod:`bounded_router.metrics`.
        """
        return render(self, labels)


def _batch_leases(native: NativeRouter, out: Any, n: int) -> List[Lease]:
    """The leases of a batch answered as ``br_route_keys`` answers (three runs of n values)."""
    lease_ids, decisions = out[:n], out[n : 2 * n]  # the worker ids (out[2n:]) only on a miss
    if not lease_ids[0]:  # all or nothing: no worker was available
        raise native.unrouted(decisions[0])
    decided = native.decided
    leases: List[Lease] = []
    append = leases.append
    for i, (lease_id, decision) in enumerate(zip(lease_ids, decisions)):
        urls = decided.get(decision)
        if urls is None:
            urls = native.decision_urls(decision, out[2 * n + i], lease_id)
        lease: Lease = _new_lease(_HeldLease)
        lease._native = native
        lease._id = lease_id
        lease._decision = urls
        append(lease)
    return leases


def _request(
    routing_key: Union[str, bytes, None], headers: Optional[HeadersLike], weight: Any, prefix_blocks: Any, header_filter: HeaderFilter
) -> Any:
    """A ``br_request`` of checked inputs, valid until this thread's next one (see one_request)."""
    return one_request(
        key_bytes(routing_key),
        b"" if headers is None else encode_headers(headers, header_filter),
        1 if weight is None else check_weight(weight),
        _blocks(prefix_blocks, "prefix_blocks"),
    )


def _blocks(prefix_blocks: Any, what: str) -> Any:
    return None if prefix_blocks is None else prefix_block_array(prefix_blocks, what)


def _aligned(values: Optional[Iterable[Any]], what: str, n: int) -> Optional[List[Any]]:
    """``values`` as a list of n items (one per key), or None."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)):
        raise TypeError("%s must be an iterable with one item per key, not a single %s" % (what, type(values).__name__))
    items = list(values)
    if len(items) != n:
        raise ValueError("%s has %d items but there are %d keys: give one per key" % (what, len(items), n))
    return items



def _uint64s(values: "array[int]") -> Any:
    """A pointer to the uint64s of ``values`` (None when empty), valid while ``values`` lives."""
    return ctypes.cast(values.buffer_info()[0], ctypes.POINTER(c_uint64)) if values else None


def _engine_figure(name: str, value: Optional[int]) -> int:
    """A figure of an engine load report for the C API: -1 when not reported."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be None or an integer from 0 to 2**40, got %r" % (name, value))
    if not 0 <= value <= 1 << 40:
        raise ValueError("engine %s must be from 0 to %d, got %d" % (name.replace("_", " "), 1 << 40, value))
    return value
