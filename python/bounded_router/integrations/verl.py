"""A drop-in for verl's rollout balancer (``GlobalRequestLoadBalancer`` in
``verl/workers/rollout/llm_server.py``, github.com/verl-project/verl), backed by a
:class:`~bounded_router.Router`.

verl's balancer keeps a request id on its server (an LRU of 10,000 ids), sends a new id to the
server with the fewest requests in flight, and breaks ties by ``candidates[0]``. This one keeps
the surface verl calls, ``acquire_server(request_id) -> (server_id, handle)``,
``release_server(server_id)``, ``add_servers``, ``remove_servers``, ``clear_sticky_cache``,
``get_total_inflight``, ``get_inflight_count``, ``get_all_servers`` and ``get_status``, with
verl's return shapes, and routes by the bounded rule (docs/contract.md, "The bounded rule", "Key
memory", "Spill target", "Ties by the key"):

* a request id stays on its server (key memory, ``key_memory`` ids, least recently routed
  forgotten first) until that server is clearly overloaded: its in-flight count exceeds the
  least loaded server's by more than ``min_load_gap`` and the mean by a factor ``max_load_skew``;
* it then spills to the least loaded server, ties broken clockwise from the key on the ring, and
  the key stays where it spilled;
* a new id starts on its ring server, so an idle fleet spreads new ids instead of sending them
  all to the first server;
* GRPO siblings can share one key: ``key_fn`` maps a request id to its routing key (say the
  prompt's group id), and the bound spreads a hot group over several servers;
* with verl's ``full_determinism`` a request id goes to its ring server whatever the loads
  (strict consistent hashing), so runs route alike.

As verl's, the pool may start empty (acquiring then raises "No available servers in load
balancer"); releasing a server unknown or with nothing in flight, or removing one not in the
pool, does nothing; adding one already in it replaces its handle. ``add_servers`` and
``remove_servers`` take their whole batch or, refused, none of it.

Nothing of verl or Ray is imported: the class is plain Python, and verl builds it as its own
balancer (``ray.remote(load_balancer_cls).remote(servers=..., max_cache_size=...)``); older verl
versions' ways of building it are taken too. See ``examples/verl_balancer.py``.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..errors import NoWorkerAvailableError
from ..lease import Lease
from ..policy import (
    DEFAULT_MAX_LOAD_SKEW,
    DEFAULT_MIN_LOAD_GAP,
    BoundedConsistentHashingConfig,
    ConsistentHashingConfig,
    PolicyConfig,
)
from ..router import Router

__all__ = ["BoundedRequestLoadBalancer", "DEFAULT_ROUTING_CACHE_SIZE", "server_url"]

_log = logging.getLogger("bounded_router.integrations")

#: verl's default: how many request ids keep their server.
DEFAULT_ROUTING_CACHE_SIZE = 10000

Servers = Union[Mapping[str, Any], Iterable[str]]


def server_url(server_id: str) -> str:
    """The worker URL the router knows a server by: a router's workers are URLs (docs/contract.md,
    "Workers and membership") and verl's server ids are not, so the id, percent-encoded, is the
    path of a URL in normal form. Nothing is ever sent to it: verl sends the request itself."""
    if not isinstance(server_id, str) or not server_id:
        raise ValueError("a server id must be a non-empty str, got %r" % (server_id,))
    return "http://verl-server/" + urllib.parse.quote(server_id, safe="")


class BoundedRequestLoadBalancer:
    """verl's ``acquire_server`` / ``release_server`` on a bounded router; thread-safe.

    Args:
        servers: ``{server_id: handle}`` as verl passes them (or server ids alone), possibly
            none yet (:meth:`add_servers` adds them); ``server_actor_ids``, the ids alone, as
            verl v0.7.1 passes them.
        max_cache_size: verl's name for ``key_memory``.
        config: settings as a dict; its keys ``max_load_skew``, ``min_load_gap``, ``key_memory``
            (or verl's ``max_cache_size``), ``full_determinism`` and ``return_handle`` are read,
            the others ignored. Keyword arguments win over it.
        full_determinism: verl's flag (its ``actor_rollout_ref.rollout.full_determinism``, which
            its ``LLMServerManager`` passes): route every request id to the server its routing
            key hashes to, whatever the loads, so a run routes as the runs before it did. The
            router is then strict consistent hashing (``consistent_hashing``): a key's server
            depends only on the key and the set of servers, never on timing, and the bounded
            settings and key memory are not used. verl hashes with Python's ``hash`` modulo the
            pool size; this ring (XXH64) needs no ``PYTHONHASHSEED`` and moves about 1/n of the
            ids when a server joins or leaves instead of most of them.
        max_load_skew, min_load_gap: the bounded rule's two tests, on requests in flight.
        key_memory: how many request ids (keys) keep their server.
        key_fn: the routing key of a request id (default: the id itself); give siblings one key.
        return_handle: whether ``acquire_server`` returns ``(server_id, handle)``, as verl since
            v0.8.0 unpacks it, or the server id alone, as verl v0.7.1 takes it. By default the
            pair when ``servers`` is a mapping of handles, the id alone when it gives ids alone.
    """

    def __init__(
        self,
        servers: Optional[Servers] = None,
        config: Optional[Mapping[str, Any]] = None,
        *,
        server_actor_ids: Optional[Iterable[str]] = None,
        max_cache_size: Optional[int] = None,
        full_determinism: Optional[bool] = None,
        max_load_skew: Optional[float] = None,
        min_load_gap: Optional[int] = None,
        key_memory: Optional[int] = None,
        key_fn: Optional[Callable[[str], str]] = None,
        return_handle: Optional[bool] = None,
    ) -> None:
        settings = dict(config or {})
        given = servers if servers is not None else server_actor_ids if server_actor_ids is not None else {}
        self._handles = _handles(given)  # may be empty: verl can register every server later
        bounded = BoundedConsistentHashingConfig(  # checked also when full_determinism leaves it unused
            max_load_skew=_pick(max_load_skew, settings.get("max_load_skew"), DEFAULT_MAX_LOAD_SKEW),
            min_load_gap=_pick(min_load_gap, settings.get("min_load_gap"), DEFAULT_MIN_LOAD_GAP),
            spill_target="least_loaded",
            key_memory=_pick(_pick(key_memory, max_cache_size, None), settings.get("key_memory", settings.get("max_cache_size")), DEFAULT_ROUTING_CACHE_SIZE),
        )
        deterministic = _pick(full_determinism, settings.get("full_determinism"), False)
        if isinstance(deterministic, (str, bytes)) or deterministic not in (True, False):
            raise ValueError("full_determinism must be a bool, got %r" % (deterministic,))
        policy: PolicyConfig = ConsistentHashingConfig() if deterministic else bounded
        self._ids = {server_url(sid): sid for sid in self._handles}
        self._router = Router(list(self._ids), policy)
        self._key_fn = key_fn
        # verl passes {address: handle} and unpacks (server_id, handle); ids alone (verl v0.7.1's
        # server_actor_ids) get the id alone, as that verl expects.
        self._return_handle = bool(_pick(return_handle, settings.get("return_handle"), isinstance(given, Mapping)))
        # Oldest first: after a server leaves and comes back under its id, the requests of the
        # earlier one are released before the new one's.
        self._held: Dict[str, Deque[Lease]] = {sid: deque() for sid in self._handles}
        self._lock = threading.Lock()

    @property
    def router(self) -> Router:
        """The router that decides: its loads, statistics and metrics are the balancer's."""
        return self._router

    def acquire_server(self, request_id: str, prompt_ids: Optional[List[int]] = None) -> Union[str, Tuple[str, Any]]:
        """The server for a request, counted in flight until :meth:`release_server`.

        Raises:
            NoWorkerAvailableError: a RuntimeError, "No available servers in load balancer" as
                verl's balancer says it, when the pool is empty.
        """
        key = request_id if self._key_fn is None else self._key_fn(request_id)
        with self._lock:
            try:
                lease = self._router.route(key)
            except NoWorkerAvailableError:
                raise NoWorkerAvailableError("no_healthy_workers", "No available servers in load balancer") from None
            server_id = self._ids[lease.worker_url]
            self._held[server_id].append(lease)
        return (server_id, self._handles[server_id]) if self._return_handle else server_id

    def release_server(self, server_id: str, prompt_len: int = 0, request_id: Optional[str] = None) -> None:
        """One request on ``server_id`` finished: its oldest lease there is released, also on a
        server removed since. As verl's balancer (since verl d324b014d), a server unknown or
        with nothing in flight is no error: nothing happens."""
        with self._lock:
            held = self._held.get(server_id)
            if not held:
                return
            held.popleft().release()
            if not held and server_id not in self._handles:
                del self._held[server_id]  # a removed server's last request

    def add_servers(self, servers: Servers) -> None:
        """Add servers to the pool, all or none: an id that is not a non-empty str refuses the
        whole call (ValueError). As verl's, an id already in the pool takes its new handle; its
        requests in flight stay counted."""
        new = _handles(servers)
        urls = {server_id: server_url(server_id) for server_id in new}  # every id checked first
        with self._lock:
            for server_id, handle in new.items():
                if server_id not in self._handles:
                    self._router.add_worker(urls[server_id])
                    self._ids[urls[server_id]] = server_id
                    self._held.setdefault(server_id, deque())  # requests of an earlier server of that id may still release
                self._handles[server_id] = handle
        _log.info("verl balancer: servers added: %s", list(new))

    def remove_servers(self, server_ids: Iterable[str]) -> None:
        """Remove servers, all or none: no new request goes there; requests in flight on them
        still release. As verl's, an id not in the pool is no error."""
        urls = {server_id: server_url(server_id) for server_id in server_ids}  # every id checked first
        with self._lock:
            for server_id, url in urls.items():
                if server_id not in self._handles:
                    continue
                del self._handles[server_id]
                self._router.remove_worker(url)
                del self._ids[url]  # a removed server takes no new request
                if not self._held[server_id]:
                    del self._held[server_id]
        _log.info("verl balancer: servers removed: %s", list(urls))

    def get_all_servers(self) -> List[str]:
        """The server ids requests may go to, in the order they joined."""
        with self._lock:
            return list(self._handles)

    def get_inflight_count(self, server_id: str) -> int:
        """The requests in flight on a server of the pool; 0 for any other id, as verl's."""
        with self._lock:
            return self._in_flight().get(server_id, 0)

    def get_total_inflight(self) -> int:
        """The requests in flight on the servers of the pool (those on servers removed since are
        not counted, as in verl's)."""
        with self._lock:
            return sum(self._in_flight().values())

    def clear_sticky_cache(self) -> Dict[str, Any]:
        """Forget the server of every request id, as verl's: each id's next request is decided
        as a new id's, on its ring server unless that one is clearly overloaded (the bounded
        rule), so servers added since take their share of the ids (Router.forget_keys).
        Requests in flight, their leases and the loads are untouched.

        Returns verl's ``{"cleared_entries": ..., "server_loads": {server_id: in flight}}``:
        how many request ids (routing keys) the router remembered (0 with ``key_memory`` 0 or
        ``full_determinism``, which remember none).
        """
        with self._lock:
            cleared = self._router.forget_keys()
            loads = self._in_flight()
        _log.info("verl balancer: sticky cache cleared, %d request ids forgotten; in flight: %s", cleared, loads)
        return {"cleared_entries": cleared, "server_loads": loads}

    def get_status(self) -> Dict[str, Any]:
        """verl's ``servers`` (in flight per server of the pool), ``total_inflight``,
        ``active_servers`` and ``registered_handles`` (the pool's ids), and the router's
        ``branches``, ``active_leases`` (also on servers removed since) and ``leaked_leases``;
        ``inflight`` is ``servers`` under this balancer's earlier name. For debugging."""
        with self._lock:  # a server joins the router and the names in one step
            stats = self._router.statistics()
            inflight = {self._ids[w.url]: w.requests for w in stats.workers}
            registered = list(self._handles)
        return {
            "servers": inflight,
            "total_inflight": sum(inflight.values()),
            "active_servers": len(inflight),
            "registered_handles": registered,
            "inflight": dict(inflight),
            "branches": stats.branches,
            "active_leases": stats.active_leases,
            "leaked_leases": stats.leaked_leases,
        }

    def _in_flight(self) -> Dict[str, int]:
        """Requests in flight per server of the pool, in the order they joined; under the lock."""
        return {self._ids[w.url]: w.requests for w in self._router.workers()}

    def close(self) -> None:
        """Free the router (leases still held are released with it)."""
        self._router.close()


def _handles(servers: Servers) -> Dict[str, Any]:
    """``{server_id: handle}`` of a dict as verl passes it, or of server ids alone (handles None)."""
    return dict(servers) if isinstance(servers, Mapping) else {server_id: None for server_id in servers}


def _pick(given: Any, configured: Any, default: Any) -> Any:
    """The keyword argument, else the config's value, else the default."""
    if given is not None:
        return given
    return default if configured is None else configured
