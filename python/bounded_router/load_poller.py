"""Polling the engines' load endpoints (docs/contract.md, "Engine load reports").

:meth:`Router.poll_loads <bounded_router.Router.poll_loads>` starts a poller on the native
library's own threads and returns a :class:`LoadPoller`::

    router = Router(urls, "bounded_consistent_hashing")
    with router.poll_loads({url: url + "/get_load" for url in urls}, format="sglang"):
        ...   # every policy now compares each engine's report plus this router's leases since

Every ``interval_secs`` (0.2 by default) each worker's endpoint is asked for its requests
running and waiting: SGLang's ``GET /get_load`` (``format="sglang"``: the sum of ``num_reqs``
over its ranks) or vLLM's ``GET /metrics`` (``format="vllm"``: ``vllm:num_requests_running``
plus ``vllm:num_requests_waiting``). A report older than ``expiry_secs`` (three intervals) is
forgotten, so a worker whose endpoint stops answering falls back to this router's own leases.
Failures (``unreachable``, ``status``, ``garbage``) are counted in :meth:`LoadPoller.statistics`
and logged once per worker and kind. Off unless started.
"""

from __future__ import annotations

import json
import threading
from ctypes import byref, c_uint64
from types import TracebackType
from typing import Any, Dict, Mapping, Optional, Type

from ._native_router import NativeRouter

__all__ = ["LoadPoller", "LOAD_FORMATS"]

#: The endpoint formats a poller reads.
LOAD_FORMATS = ("sglang", "vllm")


def _milliseconds(name: str, seconds: Optional[float]) -> int:
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
        raise ValueError("%s must be a number of seconds above 0 and at most 3600, got %r" % (name, seconds))
    return max(1, int(round(seconds * 1000)))


class LoadPoller:
    """A running load poller (see the module documentation); made by :meth:`Router.poll_loads`.

    Raises:
        ValueError: a setting breaks its rule, or a worker named is not a member.
        RouterClosedError: the router is closed.
    """

    def __init__(
        self,
        native: NativeRouter,
        endpoints: Mapping[str, str],
        format: str = "sglang",
        interval_secs: Optional[float] = None,
        timeout_secs: Optional[float] = None,
        expiry_secs: Optional[float] = None,
    ) -> None:
        self._handle = 0
        native.check_open()
        if format not in LOAD_FORMATS:
            raise ValueError("format must be one of %s, got %r" % (", ".join(LOAD_FORMATS), format))
        options = {
            "endpoints": dict(endpoints),
            "format": format,
            "interval_ms": _milliseconds("interval_secs", interval_secs),
            "timeout_ms": _milliseconds("timeout_secs", timeout_secs),
            "expiry_ms": _milliseconds("expiry_secs", expiry_secs),
        }
        text = json.dumps(options).encode()
        self._lib = native.lib
        out = c_uint64()
        self._lib.check(self._lib.br_load_poll_start(native.handle, text, len(text), byref(out)))
        self._handle = out.value
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether :meth:`stop` has not been called."""
        return self._handle != 0

    def statistics(self) -> Dict[str, Dict[str, Any]]:
        """Per worker: ``reports`` (polls whose load was reported), ``failures`` by kind,
        ``expired`` (reports forgotten for their age) and ``standing`` (a report stands now)."""
        if not self.running:
            return {}
        answer = self._lib.read_json("br_load_poll_stats_json", self._handle)
        return {w["worker"]: {k: v for k, v in w.items() if k != "worker"} for w in answer["workers"]}

    def stop(self) -> None:
        """Stop polling, wait for the polls in flight and forget the reports that stand."""
        with self._lock:
            handle, self._handle = self._handle, 0
        if handle:
            self._lib.check(self._lib.br_load_poll_stop(handle))

    def __enter__(self) -> LoadPoller:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()
