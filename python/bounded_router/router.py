"""The :class:`Router`: chooses a worker for each request and counts the requests in flight.

Routing, load counting and membership live in the native library; this module converts
arguments, maps the library's worker ids to URLs and turns its answers into Python objects.
"""

from __future__ import annotations

import json
import os
import weakref
from array import array
from ctypes import c_size_t, c_uint64
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, Type, Union

from . import _native
from ._headers import HeadersLike, encode_headers, key_bytes
from .args import DEFAULT_VIRTUAL_NODES, RouterArgs
from .errors import ForkedProcessError, NoWorkerAvailableError, RouterClosedError
from .lease import Lease, LeaseDecision, _HeldLease
from .policy import (
    CONFIG_TYPES,
    DEFAULT_HASH_RING,
    DEFAULT_MAX_LOAD_SKEW,
    DEFAULT_MIN_LOAD_GAP,
    BoundedConsistentHashingConfig,
    ConsistentHashingConfig,
    PolicyConfig,
    PolicyType,
    default_config,
    policy_from_str,
)

if TYPE_CHECKING:  # pragma: no cover
    from .gateway import Gateway

__all__ = ["Router", "Decision", "WorkerInfo"]

_BRANCHES = _native.BRANCHES
_CHOSE_WORKER = _native.BRANCH_CHOSE_WORKER
_LOW32 = 0xFFFFFFFF
_SPILLOVER = "explicit_routing_key_spillover"
# A selection whose worker left the membership before its URL could be looked up is made
# again; membership would have to change this many times in a row to give up.
_SELECT_ATTEMPTS = 100

_BUFFERS = _native.BUFFERS
# The request path calls the library's fast_* functions, which have no argtypes (see _native):
# a key or header block length is passed as a ready-made size_t argument (~80 ns less than
# building a c_size_t, and ctypes passes it without allocating).
_SIZES = tuple(c_size_t.from_param(n) for n in range(256))
# Decisions whose URLs are cached (see Router._decided); the cache starts again past this.
_DECIDED_MAX = 4096
# The array typecode of a uint32, the type of br_route_keys' key lengths.
_UINT32 = next(code for code in "IL" if array(code).itemsize == 4)
# Leases are built without calling Lease.__init__ (the slots are set right after): ~30 ns less
# on every route.
_new_lease = object.__new__
# Every router of this process, for the fork handler at the end of this module.
_ROUTERS: "weakref.WeakSet[Router]" = weakref.WeakSet()


def _out() -> Any:
    """This thread's output array for route calls."""
    return _native.thread_buffers()[0]


def _size(n: int) -> Any:
    return _SIZES[n] if n < len(_SIZES) else c_size_t.from_param(n)



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


@dataclass(frozen=True)
class WorkerInfo:
    """A snapshot of one worker.

    Attributes:
        url: the worker's URL.
        healthy: whether it is available for routing.
        load: the number of leases held on it (requests in flight from this process).
        active_keys: the number of distinct explicit routing keys among those leases.
    """

    url: str
    healthy: bool
    load: int
    active_keys: int


def _url_bytes(url: Any) -> bytes:
    if not isinstance(url, str):
        raise TypeError("a worker URL must be a str, got %s" % type(url).__name__)
    try:
        return url.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("worker URL %r is not valid Unicode text (%s)" % (url, e.reason)) from None


def _url_list(urls: Any, what: str) -> List[str]:
    if isinstance(urls, (str, bytes)):
        raise TypeError("%s must be a list of URL strings, not a single %s" % (what, type(urls).__name__))
    try:
        items = list(urls)
    except TypeError:
        raise TypeError("%s must be a list of URL strings, got %s" % (what, type(urls).__name__)) from None
    for url in items:
        _url_bytes(url)
    return items


def _resolve_policy(policy: Any, max_load_skew: Any, min_load_gap: Any) -> PolicyConfig:
    if isinstance(policy, CONFIG_TYPES):
        if max_load_skew is not None or min_load_gap is not None:
            raise ValueError(
                "max_load_skew and min_load_gap cannot be passed next to a typed policy config: "
                "set them in the config (BoundedConsistentHashingConfig(max_load_skew=..., min_load_gap=...))"
            )
        return policy
    if isinstance(policy, PolicyType):
        kind = policy
    elif isinstance(policy, str):
        try:
            kind = policy_from_str(policy)
        except KeyError as e:
            raise ValueError("policy: %s" % e.args[0]) from None
    else:
        raise ValueError("policy must be a PolicyType, a policy name or a policy config, got %r" % (policy,))
    if kind is PolicyType.BoundedConsistentHashing:
        return BoundedConsistentHashingConfig(
            max_load_skew=DEFAULT_MAX_LOAD_SKEW if max_load_skew is None else max_load_skew,
            min_load_gap=DEFAULT_MIN_LOAD_GAP if min_load_gap is None else min_load_gap,
        )
    if max_load_skew is not None or min_load_gap is not None:
        raise ValueError(
            "max_load_skew and min_load_gap apply only to bounded_consistent_hashing, not %s" % kind.value
        )
    return default_config(kind)


class Router:
    """Routes requests to workers, keeping requests that share a routing key on one worker.

    Args:
        worker_urls: the workers' URLs, in membership order (unique, non-empty strings).
        policy: a :class:`PolicyType`, its name (``"bounded_consistent_hashing"``, ...) or a
            typed config (:class:`BoundedConsistentHashingConfig`, ...).
        max_load_skew: ``bounded_consistent_hashing`` only (default 1.5): a finite number >= 1.
        min_load_gap: ``bounded_consistent_hashing`` only (default 2): an integer >= 0.
        virtual_nodes: ring positions per worker (default 150).

    Raises:
        ValueError: a setting breaks its rule, an unknown policy name, an empty or duplicate
            URL, or skew/gap given with another policy or next to a typed config.
        TypeError: a URL is not a str.

    All methods are thread-safe. A router is a context manager that closes it on exit; using
    a closed router raises :class:`RouterClosedError`.
    """

    def __init__(
        self,
        worker_urls: Iterable[str],
        policy: Union[PolicyType, str, PolicyConfig] = PolicyType.BoundedConsistentHashing,
        max_load_skew: Optional[float] = None,
        min_load_gap: Optional[int] = None,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    ) -> None:
        self._closed = True  # until the native router exists, so __del__ has nothing to do
        self._handle = 0
        # Worker id -> URL, replaced (never mutated) after every membership change.
        self._urls: Dict[int, str] = {}
        # Packed decision of a route (branch and worker ids, see _native.DECISION_BRANCH) ->
        # (worker_url, preferred_url, branch): one dictionary lookup per route. Worker ids are
        # never reused, so an entry never goes stale; the cache starts again after a membership
        # change or when it grows past _DECIDED_MAX.
        self._decided: Dict[int, LeaseDecision] = {}
        # Leases released (Lease.release) but not yet in the library: the next call into it
        # hands them over first, so every later route and statistic sees them (see _hand_over).
        self._released: List[int] = []
        urls = _url_list(worker_urls, "worker_urls")
        self._policy = _resolve_policy(policy, max_load_skew, min_load_gap)
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise ValueError("virtual_nodes must be an integer, got %r" % (virtual_nodes,))
        config = {"worker_urls": urls, "policy": self._policy.to_dict(), "virtual_nodes": virtual_nodes}
        data = json.dumps(config, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._lib = lib = _native.library()
        out = c_uint64()
        lib.check(lib.br_router_new(data, len(data), out))
        self._handle = out.value
        # The handle as the fast_* functions take it: a ready-made uint64 argument.
        self._handle_arg = c_uint64.from_param(self._handle)
        # The request path's functions, bound once (the fork handler below replaces them).
        self._route_key = lib.fast_release_then_route_key
        self._route_headers = lib.fast_release_then_route
        self._closed = False
        _ROUTERS.add(self)
        self._refresh_urls()

    @classmethod
    def from_args(cls, args: RouterArgs) -> Router:
        """Build a router from :class:`RouterArgs` (e.g. parsed command-line flags).

        With a policy other than ``bounded_consistent_hashing``, ``max_load_skew`` and
        ``min_load_gap`` must keep their defaults (they would have no effect); so must
        ``hash_ring`` with a policy that does not hash.
        """
        try:
            kind = policy_from_str(args.policy)
        except KeyError as e:
            raise ValueError("policy: %s" % e.args[0]) from None
        if kind is PolicyType.BoundedConsistentHashing:
            config = BoundedConsistentHashingConfig(args.max_load_skew, args.min_load_gap, args.hash_ring)
            return cls(args.worker_urls, config, virtual_nodes=args.virtual_nodes)
        if args.max_load_skew != DEFAULT_MAX_LOAD_SKEW or args.min_load_gap != DEFAULT_MIN_LOAD_GAP:
            raise ValueError(
                "max_load_skew and min_load_gap apply only to bounded_consistent_hashing, not %s" % kind.value
            )
        if kind is PolicyType.ConsistentHashing:
            return cls(args.worker_urls, ConsistentHashingConfig(args.hash_ring), virtual_nodes=args.virtual_nodes)
        if args.hash_ring != DEFAULT_HASH_RING:
            raise ValueError(
                "hash_ring applies only to consistent_hashing and bounded_consistent_hashing, not %s" % kind.value
            )
        return cls(args.worker_urls, kind, virtual_nodes=args.virtual_nodes)

    # -- state -------------------------------------------------------------------------------

    @property
    def policy(self) -> PolicyConfig:
        """The policy and its settings, as a typed config (readable after close too)."""
        return self._policy

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _closed_error(self) -> RouterClosedError:
        return RouterClosedError("the router is closed")

    def close(self) -> None:
        """Free the native router. Idempotent; outstanding leases become no-ops.

        In a process forked after the router was created, this only marks the inherited copy
        closed (the parent's router is untouched).
        """
        if self._closed:
            return
        self._closed = True
        self._released.clear()
        try:
            status = self._lib.br_router_free(self._handle)
        except ForkedProcessError:  # nothing of ours to free in this process
            return
        if status < 0 and status != _native.STATUS_INVALID_HANDLE:
            raise self._lib.error(status)

    def __enter__(self) -> Router:
        if self._closed:
            raise self._closed_error()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except BaseException:
            pass

    def __repr__(self) -> str:
        return "<Router policy=%r%s>" % (self._policy, " closed" if self._closed else "")

    # -- routing -----------------------------------------------------------------------------

    def route(self, routing_key: Union[str, bytes, None] = None, *, headers: Optional[HeadersLike] = None) -> Lease:
        """Choose a worker for a request and count the request on it until the lease is released.

        Args:
            routing_key: the explicit routing key (``str``, UTF-8 encoded, or ``bytes``); empty
                or None means no key. It overrides an ``X-SMG-Routing-Key`` header.
            headers: the request's HTTP headers (any mapping, or an iterable of ``(name,
                value)`` pairs); ``X-SMG-Target-Worker``, ``X-SMG-Routing-Key``,
                ``Authorization``, ``X-Forwarded-For`` and ``Cookie`` are used as SPEC §5 says.

        Returns:
            The :class:`Lease`; release it (or use it as a context manager) when the request
            has finished.

        Raises:
            NoWorkerAvailableError: no worker can be chosen (``.branch`` says why).
            TypeError: ``routing_key`` or a header is of the wrong type.
            RouterClosedError: the router was closed.
        """
        # Every line here is on the path whose cost scripts/bench.py compares with two bare
        # ctypes calls: hence one function for both kinds of input, the inlined type tests,
        # the thread-local buffers, _SIZES and the release handed over with the call. A closed
        # router is reported by the library (its handle is invalid from then on).
        try:
            out, out_ref = _BUFFERS.value
        except AttributeError:
            out, out_ref = _native.thread_buffers()
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
            block = encode_headers(headers)
        released = self._released
        if released:
            try:
                (previous,) = released  # usually one lease released since the last route: in out[2]
            except ValueError:  # more of them: handed over by a call of their own
                previous = 0
                self._hand_over()
            else:
                out[2] = previous
        else:
            previous = 0
        if headers is None:
            n = len(key)
            decision = self._route_key(self._handle_arg, key, _SIZES[n] if n < 256 else _size(n), out_ref)
        else:
            decision = self._route_headers(self._handle_arg, key, _size(len(key)), block, _size(len(block)), out_ref)
        lease_id = out[0]
        if not lease_id:
            # `previous` stays in _released: handed over again, it is skipped if it was released.
            raise self._unrouted(decision)
        if previous:
            try:
                released.remove(previous)
            except ValueError:  # handed over by another thread as well
                pass
        urls = self._decided.get(decision)
        if urls is None:
            urls = self._decision_urls(decision, out[1], lease_id)
        lease: Lease = _new_lease(_HeldLease)
        lease._router = self
        lease._id = lease_id
        lease._decision = urls
        return lease

    def route_many(self, keys: Iterable[Union[str, bytes, None]]) -> List[Lease]:
        """Route one request per key, in order, with one call into the library for the batch.

        The keys are placed exactly as successive ``route(routing_key=key)`` calls would place
        them, and the batch is one linearizable step: it sees every lease taken before it
        began, and no other route or release of this router runs in the middle of it (a key
        repeated in the batch sees the leases of its earlier copies, as with successive calls).

        Args:
            keys: routing keys (``str``, ``bytes``, or None / empty for no key).

        Returns:
            One :class:`Lease` per key, in the order of ``keys``.

        Raises:
            NoWorkerAvailableError: a key could not be routed (with explicit keys, only when no
                worker is available, and then none can be). The batch then holds no lease.
            TypeError, ValueError: ``keys`` is a single str or bytes, or a key is of the wrong
                type or not valid Unicode. Nothing is routed.
        """
        if self._closed:
            raise self._closed_error()
        self._hand_over()
        if isinstance(keys, (str, bytes)):
            raise TypeError("route_many takes an iterable of keys, not a single %s" % type(keys).__name__)
        batch = keys if type(keys) is list else list(keys)
        try:
            encoded = list(map(str.encode, batch))  # all str, the common case: encoded in C
        except (TypeError, UnicodeEncodeError):
            encoded = [key_bytes(key) for key in batch]  # raises the error that names a bad key
        n = len(encoded)
        if not n:
            return []
        block = b"".join(encoded)
        lengths = array(_UINT32, map(len, encoded)).tobytes()
        out = (c_uint64 * (3 * n))()
        status = self._lib.fast_route_keys(self._handle_arg, block, _size(len(block)), lengths, n, out)
        if status < 0:
            raise self._lib.error(status)
        lease_ids, decisions = out[:n], out[n : 2 * n]  # the worker ids (out[2n:]) only on a miss
        if not all(lease_ids):
            self._release_ids([lease_id for lease_id in lease_ids if lease_id])
            raise NoWorkerAvailableError(_BRANCHES[decisions[lease_ids.index(0)]])
        decided = self._decided
        leases: List[Lease] = []
        append = leases.append
        for lease_id, decision in zip(lease_ids, decisions):
            urls = decided.get(decision)
            if urls is None:  # rare: the position of a (unique) lease id is worth a search then
                urls = self._decision_urls(decision, out[2 * n + lease_ids.index(lease_id)], lease_id)
            lease: Lease = _new_lease(_HeldLease)  # as in route(), inline: this loop is the batch's cost
            lease._router = self
            lease._id = lease_id
            lease._decision = urls
            append(lease)
        return leases

    def release_many(self, leases: Iterable[Lease]) -> int:
        """Release leases of this router in one call into the library; return how many it released.

        Each lease is released as :meth:`Lease.release` would release it, all in one step;
        leases released before (or listed twice) are skipped and not counted.

        Raises:
            TypeError: an item is not a :class:`Lease`.
            ValueError: a lease belongs to another router. Nothing is released then.
        """
        batch = leases if type(leases) is list else list(leases)
        try:
            lease_ids = [lease._id for lease in batch if lease._router is self]
        except AttributeError:
            raise TypeError("release_many takes Lease objects") from None
        if len(lease_ids) != len(batch):
            raise ValueError("release_many: every lease must come from this router")
        for lease in batch:
            lease._id = 0
            lease.__class__ = Lease  # as Lease.release does: no safety net needed any more
        if self._closed:
            return 0
        return self._release_ids(lease_ids)

    def _hand_over(self) -> None:
        """Release in the library the leases released since the last call into it.

        :meth:`Lease.release` only appends its lease to ``_released``; a route hands one such
        lease over in ``out[2]`` of its own call, and every other call whose answer depends on
        the loads (routes of several leases, selections, statistics) runs this first, as does
        a release that finds many leases waiting. So no call made after a release returned
        sees the lease as held. Two threads may hand the same lease over: the library releases
        it once and skips it the second time.
        """
        released = self._released
        if released and not self._closed:
            lease_ids = released[:]  # one step, even with other threads appending
            self._release_ids(lease_ids)
            for lease_id in lease_ids:
                try:
                    released.remove(lease_id)
                except ValueError:  # handed over by another thread as well
                    pass

    def _release_ids(self, lease_ids: List[int]) -> int:
        status = self._lib.fast_release_many(self._handle_arg, array("Q", lease_ids).tobytes(), len(lease_ids))
        if status == _native.STATUS_INVALID_HANDLE:  # closed by another thread meanwhile
            return 0
        return self._lib.check(status)

    def select(self, routing_key: Union[str, bytes, None] = None, *, headers: Optional[HeadersLike] = None) -> Decision:
        """Choose a worker like :meth:`route` without counting anything.

        Never raises :class:`NoWorkerAvailableError`: when no worker can be chosen the decision
        has ``worker_url`` None and the branch says why.
        """
        if self._closed:
            raise self._closed_error()
        key = key_bytes(routing_key)
        block = b"" if headers is None else encode_headers(headers)
        self._hand_over()
        out = _out()
        for _ in range(_SELECT_ATTEMPTS):
            code = self._lib.br_route(self._handle, key, len(key), block, len(block), 0, out)
            if code < 0:
                raise self._lib.error(code)
            branch = _BRANCHES[code]
            if not _CHOSE_WORKER[code]:
                return Decision(None, None, branch)
            ids = out[1]
            worker, preferred = self._urls_of(ids)
            if worker is None or preferred is None:
                # A worker added concurrently by another thread: refresh the map and look again.
                self._refresh_urls()
                worker, preferred = self._urls_of(ids)
            if worker is not None and preferred is not None:
                return Decision(worker, preferred, branch)
            # The worker left the membership in between: decide again.
        raise RuntimeError("bounded_router: the membership changed during every one of %d selections" % _SELECT_ATTEMPTS)

    def acquire(self, worker_url: str, routing_key: Union[str, bytes, None] = None) -> Lease:
        """Count a request on ``worker_url``, a worker chosen outside the router.

        The worker must be a member (it need not be healthy). ``routing_key``, if given, is
        counted among the worker's active keys. The lease's ``branch`` is None.

        Raises:
            KeyError: ``worker_url`` is not a member.
        """
        if self._closed:
            raise self._closed_error()
        url = _url_bytes(worker_url)
        key = key_bytes(routing_key)
        out = _out()
        status = self._lib.br_acquire(self._handle, url, len(url), key, len(key), out)
        if status < 0:
            raise self._lib.error(status)
        return _HeldLease(self, out[0], (worker_url, worker_url, None))

    # -- membership and health ---------------------------------------------------------------

    def add_worker(self, url: str) -> None:
        """Add a worker at the end of the membership order.

        Raises:
            ValueError: the URL is empty or already a member.
            TypeError: the URL is not a str.
        """
        self._change_member(self._lib_call("br_add_worker"), url)

    def remove_worker(self, url: str) -> None:
        """Remove a worker. Its outstanding leases stay valid and release against it alone.

        Raises:
            KeyError: the URL is not a member.
        """
        self._change_member(self._lib_call("br_remove_worker"), url)

    def set_workers(self, urls: Iterable[str]) -> None:
        """Replace the membership with ``urls``, in that order.

        Workers that stay keep their health and load; the others are removed.

        Raises:
            ValueError: a URL is empty or listed twice.
            TypeError: a URL is not a str.
        """
        if self._closed:
            raise self._closed_error()
        data = json.dumps(_url_list(urls, "urls"), ensure_ascii=False).encode("utf-8")
        self._lib.check(self._lib.br_set_workers(self._handle, data, len(data)))
        self._refresh_urls()

    def set_healthy(self, url: str, healthy: bool) -> None:
        """Mark a worker healthy (available for routing) or not; its leases are unaffected.

        Raises:
            KeyError: the URL is not a member.
        """
        if self._closed:
            raise self._closed_error()
        if isinstance(healthy, (str, bytes)) or healthy not in (True, False):
            raise TypeError("healthy must be a bool, got %r" % (healthy,))
        raw = _url_bytes(url)
        self._lib.check(self._lib.br_set_healthy(self._handle, raw, len(raw), 1 if healthy else 0))

    def _lib_call(self, name: str) -> Any:
        if self._closed:
            raise self._closed_error()
        return getattr(self._lib, name)

    def _change_member(self, function: Any, url: str) -> None:
        raw = _url_bytes(url)
        self._lib.check(function(self._handle, raw, len(raw)))
        self._refresh_urls()

    # -- statistics --------------------------------------------------------------------------

    def workers(self) -> List[WorkerInfo]:
        """A snapshot of every worker, in membership order."""
        if self._closed:
            raise self._closed_error()
        self._hand_over()
        states = self._lib.read_json("br_workers_json", self._handle)
        self._urls = {state["id"]: state["url"] for state in states}
        return [WorkerInfo(s["url"], s["healthy"], s["load"], s["active_keys"]) for s in states]

    def loads(self) -> Dict[str, int]:
        """The load (leases held) of every worker, by URL, in membership order."""
        return {worker.url: worker.load for worker in self.workers()}

    def _stats(self) -> Dict[str, Any]:
        if self._closed:
            raise self._closed_error()
        self._hand_over()
        return self._lib.read_json("br_stats_json", self._handle)  # type: ignore[no-any-return]

    def branch_counts(self) -> Dict[str, int]:
        """How many routed requests each branch decided (every branch name is present)."""
        counts = self._stats()["branches"]
        return {name: int(counts.get(name, 0)) for name in _BRANCHES}

    def leaked_leases(self) -> int:
        """How many leases were garbage-collected without release (and released by the safety net)."""
        return int(self._stats()["leaked"])

    def active_leases(self) -> int:
        """How many leases are held, including those on workers removed since."""
        return int(self._stats()["active_leases"])

    def serve(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> "Gateway":
        """Serve this router's workers through the native HTTP gateway (see :mod:`bounded_router.gateway`)."""
        from .gateway import Gateway

        return Gateway(self, host=host, port=port, **options)

    def metrics_text(self, labels: Optional[Dict[str, str]] = None) -> str:
        """The router's statistics in the Prometheus text format, for a ``/metrics`` endpoint.

        Branch counters, per-worker load, active keys and health, active and leaked leases;
        ``labels`` are added to every sample. See :mod:`bounded_router.metrics`.
        """
        from .metrics import render

        return render(self, labels)

    # -- worker id -> URL --------------------------------------------------------------------

    def _refresh_urls(self) -> None:
        states = self._lib.read_json("br_workers_json", self._handle)
        self._urls = {state["id"]: state["url"] for state in states}
        self._decided = {}

    def _unrouted(self, decision: int) -> Exception:
        """The error of a route that took no lease: its status, or no worker chosen (the
        decision is then a branch code alone)."""
        if decision < 0:
            return self._lib.error(decision)
        return NoWorkerAvailableError(_BRANCHES[decision])

    def _decision_urls(self, decision: int, ids: int, lease_id: int) -> LeaseDecision:
        """The (worker_url, preferred_url, branch) of a route's packed decision, cached for the
        next route with the same decision. ``ids`` are the worker ids as the library packs them
        apart from the decision (for decisions whose ids do not fit in them, never cached)."""
        branch = _BRANCHES[decision & _native.DECISION_BRANCH]
        worker, preferred = self._urls_of(ids)
        if worker is None or preferred is None:
            return self._lease_urls(lease_id) + (branch,)
        urls = (worker, preferred, branch)
        if not decision & _native.DECISION_IDS_DONT_FIT:
            decided = self._decided
            if len(decided) >= _DECIDED_MAX:
                decided.clear()
            decided[decision] = urls
        return urls

    def _urls_of(self, ids: int) -> Tuple[Optional[str], Optional[str]]:
        urls = self._urls
        return urls.get(ids & _LOW32), urls.get(ids >> 32)

    def _lease_urls(self, lease_id: int) -> Tuple[str, str]:
        # The chosen worker is not in the map: the membership changed concurrently. The lease
        # knows its workers even if they have been removed since.
        self._refresh_urls()
        answer = self._lib.read_json("br_lease_workers_json", self._handle, lease_id)
        return answer["worker_url"], answer["preferred_url"]


class _ReleasedInForkedChild(List[int]):
    """``Router._released`` in a process forked after the router was made: a release raises
    :class:`ForkedProcessError` there, as every call into the library does."""

    def append(self, lease_id: int) -> None:
        _native._forked()


def _after_fork_in_child() -> None:
    for router in list(_ROUTERS):
        router._released = _ReleasedInForkedChild()
        router._route_key = router._route_headers = _native._forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
