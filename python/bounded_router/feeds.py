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

Either returns a :class:`Feed`; :meth:`Feed.statistics` gives its counters per worker, and
:meth:`Feed.stop` (or leaving a ``with`` block) ends it.
"""

from __future__ import annotations

import json
import threading
from ctypes import byref, c_uint64
from types import TracebackType
from typing import Any, Dict, Mapping, Optional, Type

from ._native_router import NativeRouter

__all__ = ["Feed", "LOAD_FORMATS"]

#: The load endpoint formats a load poll reads.
LOAD_FORMATS = ("sglang", "sglang_loads", "vllm")


def _milliseconds(name: str, seconds: Optional[float]) -> int:
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
        raise ValueError("%s must be a number of seconds above 0 and at most 3600, got %r" % (name, seconds))
    return max(1, int(round(seconds * 1000)))


class Feed:
    """A running feed (see the module documentation); made by :meth:`Router.poll_loads` or
    :meth:`Router.subscribe_kv_events`."""

    def __init__(self, native: NativeRouter, export: str, options: Dict[str, Any]) -> None:
        self._handle = 0
        #: "load_poll" or "kv_events".
        self.kind = "load_poll" if export == "br_load_poll_start" else "kv_events"
        native.check_open()
        text = json.dumps(options).encode()
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

    @property
    def running(self) -> bool:
        """Whether :meth:`stop` has not been called."""
        return self._handle != 0

    def statistics(self) -> Dict[str, Dict[str, Any]]:
        """The feed's counters, per worker URL (empty once stopped). A load poll: ``reports``,
        ``failures`` by kind, ``expired``, ``standing``. KV events: ``batches``, ``stored``,
        ``removed``, ``cleared``, ``unknown_parent``, ``adapter``, ``unknown_tag``, ``gaps``,
        ``replayed``, ``lost``, ``malformed``, ``restarts``, ``stale``."""
        if not self.running:
            return {}
        answer = self._lib.read_json("br_feed_stats_json", self._handle)
        return {w["worker"]: {k: v for k, v in w.items() if k != "worker"} for w in answer["workers"]}

    def stop(self) -> None:
        """End the feed and wait for it (a load poll forgets the reports that stand)."""
        with self._lock:
            handle, self._handle = self._handle, 0
        if handle:
            self._lib.check(self._lib.br_feed_stop(handle))

    def __enter__(self) -> Feed:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()
