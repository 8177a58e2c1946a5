"""Feeds: the engines' own state brought into a router (docs/contract.md, "Engine load
reports", "Reported blocks"), run on the native library's own threads.

:meth:`Router.poll_loads <bounded_router.Router.poll_loads>` polls each worker's load endpoint
every ``interval_secs`` (0.2 by default): SGLang's ``GET /get_load`` (``format="sglang"``: the
sum of ``num_reqs`` over its ranks) or vLLM's ``GET /metrics`` (``format="vllm"``:
``vllm:num_requests_running`` plus ``vllm:num_requests_waiting``). A report older than
``expiry_secs`` (three intervals) is forgotten, so a worker whose endpoint stops answering falls
back to this router's own leases. Failures (``unreachable``, ``status``, ``garbage``) are
counted and logged once per worker and kind::

    with router.poll_loads({url: url + "/get_load" for url in urls}):
        ...   # every policy compares each engine's report plus this router's leases since

:meth:`Router.subscribe_kv_events <bounded_router.Router.subscribe_kv_events>` (``cache_aware``
only) subscribes to each worker's KV event stream (vLLM's and SGLang's ``--kv-events-config``
ZeroMQ PUB endpoint, ``tcp://host:port``), recovers sequence gaps from the worker's replay
endpoint when given, and keeps the worker's index to what its engine reports plus what this
router sent there since. A worker from which no batch came for ``stale_after_secs`` (10) is
reported ``stale``: its index then rests on this router's routes alone. ``Router(...,
kv_events={url: endpoint})`` starts one with the router and stops it with :meth:`Router.close`.

:meth:`Router.share_routes <bounded_router.Router.share_routes>` shares routes with other router
replicas in front of the same workers (docs/contract.md, "Sharing routes over the wire"): it
publishes each lease this router takes on a ZeroMQ PUB endpoint (``publish``, a private
``tcp://host:port``; port 0 picks one, see :attr:`PeerRoutesFeed.endpoint`) and applies the
routes the ``peers`` publish, as :meth:`Router.peer_route <bounded_router.Router.peer_route>`
does. Off unless started::

    with router.poll_loads(...), router.share_routes(publish="tcp://10.0.0.5:5601",
                                                     peers=["tcp://10.0.0.6:5601"]):
        ...   # the peers' routes count until the engines' next reports

Each returns a :class:`Feed`; :meth:`Feed.statistics` gives its counters per worker (per peer
endpoint for shared routes), and :meth:`Feed.stop` (or leaving a ``with`` block) ends it.
"""

from __future__ import annotations

import json
import threading
from ctypes import byref, c_uint64
from types import TracebackType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Type

from ._native_router import NativeRouter

__all__ = ["Feed", "PeerRoutesFeed", "LOAD_FORMATS"]

#: The load endpoint formats a load poll reads.
LOAD_FORMATS = ("sglang", "sglang_loads", "vllm")


#: The longest interval, timeout or expiry a feed takes, in seconds.
MAX_FEED_SECONDS = 3600


def _milliseconds(name: str, seconds: Optional[float]) -> int:
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_FEED_SECONDS:
        raise ValueError("%s must be a number of seconds above 0 and at most %d, got %r" % (name, MAX_FEED_SECONDS, seconds))
    return max(1, int(round(seconds * 1000)))


#: The kind of feed each start export makes.
_KINDS = {"br_load_poll_start": "load_poll", "br_kv_events_start": "kv_events", "br_peer_routes_start": "peer_routes"}


class Feed:
    """A running feed (see the module documentation); made by :meth:`Router.poll_loads`,
    :meth:`Router.subscribe_kv_events` or :meth:`Router.share_routes`."""

    #: The list of rows in the feed's counters, and the field naming each row.
    _rows = ("workers", "worker")

    def __init__(self, native: NativeRouter, export: str, options: Dict[str, Any]) -> None:
        self._handle = 0
        #: "load_poll", "kv_events" or "peer_routes".
        self.kind = _KINDS[export]
        native.check_open()
        text = json.dumps(options).encode()
        self._native = native  # a feed ends with its router: freeing the native router stops it
        self._lib = native.lib
        out = c_uint64()
        self._lib.check(getattr(self._lib, export)(native.handle, text, len(text), byref(out)))
        self._handle = out.value
        self._lock = threading.Lock()

    @classmethod
    def load_poll(
        cls,
        native: NativeRouter,
        endpoints: Mapping[str, str],
        format: str = "sglang",
        interval_secs: Optional[float] = None,
        timeout_secs: Optional[float] = None,
        expiry_secs: Optional[float] = None,
        lease_weights: str = "requests",
    ) -> Feed:
        if format not in LOAD_FORMATS:
            raise ValueError("format must be one of %s, got %r" % (", ".join(LOAD_FORMATS), format))
        options = {
            "endpoints": dict(endpoints),
            "format": format,
            "interval_ms": _milliseconds("interval_secs", interval_secs),
            "timeout_ms": _milliseconds("timeout_secs", timeout_secs),
            "expiry_ms": _milliseconds("expiry_secs", expiry_secs),
            "lease_weights": lease_weights,
        }
        return cls(native, "br_load_poll_start", options)

    @classmethod
    def kv_events(
        cls,
        native: NativeRouter,
        endpoints: Mapping[str, str],
        replay_endpoints: Optional[Mapping[str, str]] = None,
        topic: str = "",
        stale_after_secs: Optional[float] = None,
    ) -> Feed:
        options = {
            "endpoints": dict(endpoints),
            "replay_endpoints": dict(replay_endpoints or {}),
            "topic": topic,
            "stale_after_ms": _milliseconds("stale_after_secs", stale_after_secs),
        }
        return cls(native, "br_kv_events_start", options)

    @classmethod
    def peer_routes(cls, native: NativeRouter, publish: Optional[str], peers: Iterable[str], topic: str) -> PeerRoutesFeed:
        return PeerRoutesFeed(native, "br_peer_routes_start", {"publish": publish or "", "peers": list(peers), "topic": topic})

    @property
    def running(self) -> bool:
        """Whether neither :meth:`stop` nor its router's close has been called."""
        return self._handle != 0 and not self._native.closed

    def statistics(self) -> Dict[str, Dict[str, Any]]:
        """The feed's counters, per worker URL (empty once stopped). A load poll: ``reports``,
        ``failures`` by kind, ``expired``, ``standing``. KV events: ``batches``, ``stored``,
        ``removed``, ``cleared``, ``unknown_parent``, ``adapter``, ``unknown_tag``, ``gaps``,
        ``replayed``, ``lost``, ``malformed``, ``restarts``, ``stale``. Shared routes: per peer
        endpoint, ``batches``, ``routes``, ``own``, ``unknown_worker``, ``invalid``,
        ``malformed``, ``gaps``."""
        rows, name = self._rows
        return {row[name]: {k: v for k, v in row.items() if k != name} for row in self._read().get(rows, [])}

    def _read(self) -> Dict[str, Any]:
        """The counters as the library writes them (empty once stopped). The lock keeps a
        concurrent :meth:`stop` (a router closed during a metrics scrape) from freeing the
        handle while it is read."""
        with self._lock:
            if not self.running:
                return {}
            answer: Dict[str, Any] = self._lib.read_json("br_feed_stats_json", self._handle)
            return answer

    def metric_rows(self) -> List[Tuple[str, Dict[str, Dict[str, Any]]]]:
        """``(kind, statistics)`` pairs for the metrics: the feed's :meth:`statistics`."""
        return [(self.kind, self.statistics())]

    def stop(self) -> None:
        """End the feed and wait for it (a load poll forgets the reports that stand). Nothing
        once its router is closed: the feed ended with it."""
        with self._lock:
            handle, self._handle = self._handle, 0
        if handle and not self._native.closed:
            self._lib.check(self._lib.br_feed_stop(handle))

    def __enter__(self) -> Feed:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()


class PeerRoutesFeed(Feed):
    """A feed sharing routes with other router replicas (:meth:`Router.share_routes`)."""

    _rows = ("peers", "peer")

    def __init__(self, native: NativeRouter, export: str, options: Dict[str, Any]) -> None:
        super().__init__(native, export, options)
        #: The endpoint this router publishes on, as bound (the port the system picked for
        #: port 0), or None when it only applies the peers' routes.
        self.endpoint: Optional[str] = self._read()["publish"] or None

    def publisher_statistics(self) -> Dict[str, int]:
        """``published``: the routes sent to the peers; ``dropped``: those the queue had no room
        for. Both 0 when the feed does not publish (or was stopped)."""
        answer = self._read()
        return {"published": answer.get("published", 0), "dropped": answer.get("dropped", 0)}

    def metric_rows(self) -> List[Tuple[str, Dict[str, Dict[str, Any]]]]:
        """The peers' counters and, when publishing, the publisher's (kind ``peer_routes_publisher``)."""
        rows = super().metric_rows()
        if self.endpoint is not None:
            rows.append(("peer_routes_publisher", {self.endpoint: dict(self.publisher_statistics())}))
        return rows
