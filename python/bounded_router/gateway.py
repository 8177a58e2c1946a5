"""The native gateway: an HTTP proxy, run by the native library, in front of a router's workers.

:meth:`Router.serve <bounded_router.Router.serve>` starts one and returns a :class:`Gateway`::

    router = Router(["http://w0:8000", "http://w1:8000"])
    with router.serve(port=8080, metrics_port=9090) as gateway:
        print("serving on", gateway.url)
        ...                     # Python may change membership and health, read loads, route
    # leaving the block stops the gateway (in-flight requests drain for up to 10 s)

Every request is routed through ``router`` itself, as ``router.route(headers=...)`` would
route it, and counted on its loads until its answer has been streamed (or the client or the
worker gave up). The proxy runs on the library's own threads: it does not take Python's GIL.
The gateway keeps the router alive while it runs, even through ``router.close()`` (which
only ends the Python handle): stop it with :meth:`Gateway.stop` first. A gateway that is never
stopped serves until the process exits.

Options (keyword arguments of :meth:`Router.serve`, all optional):

* ``metrics_port``: serve the router's Prometheus metrics on ``GET /metrics`` of this port
  (0 picks a free one); the proxy port never answers ``/metrics`` itself.
* ``expose_routing_headers``: add ``X-Bounded-Router-Worker`` and ``X-Bounded-Router-Branch``
  to responses, and let error bodies name the worker and the error.
* ``max_body_size`` (bytes, default 4 MiB): larger request bodies get 413. Bodies are read
  whole before a worker is chosen, so a client trickling its body holds no lease.
* timeouts in seconds: ``connect_timeout`` (10), ``first_byte_timeout`` (600: a worker's
  response headers; 504 past it), ``idle_timeout`` (300: no byte from a streaming
  worker), ``body_timeout`` (60: 408 past it), ``read_header_timeout`` (10),
  ``keep_alive_timeout`` (120), ``shutdown_timeout`` (10: the drain of :meth:`Gateway.stop`).
* ``max_header_bytes`` (64 KiB; 431 above), ``max_idle_conns_per_host`` (256),
  ``max_conns_per_host`` (0: unbounded), ``access_log`` (one JSON line per request on stderr).
* ``pprof``: serve Go's profiles (``net/http/pprof``, ``/debug/pprof/``) on the metrics port,
  which it needs; off by default (a profile shows the process's internals).
* ``prefix_blocks`` (``"off"``; ``"text"``: route with the prefix blocks of the JSON body's
  ``messages`` or ``prompt``, for ``cache_aware``; ``"tokens"``: of its token ids,
  ``input_ids`` or an integer ``prompt``, as the engines' KV events name blocks),
  ``prefix_block_bytes`` (64), ``prefix_block_size`` (16 token ids) and ``prefix_max_bytes``
  (1 MiB of the prompt hashed), as the Python proxies (docs/contract.md, "HTTP proxies").
* SMG's worker API (``POST /workers``, ``GET /workers``, ``DELETE /workers/{id}``, ...;
  docs/contract.md, "The worker API"): always on the metrics port, the admin listener;
  ``control_plane_api_keys`` (a list of bearer keys) requires one of them on every worker API
  request and serves it on the proxy port too; ``worker_api_on_proxy_port`` serves it on the
  proxy port without a key, as SMG does. ``/health``, ``/liveness`` and ``/readiness`` are the
  gateway's own on every port.
"""

from __future__ import annotations

import threading
from ctypes import byref, c_uint64
from types import TracebackType
from typing import Any, Dict, Optional, Type

from ._encoding import options_json
from ._native_router import NativeRouter



__all__ = ["Gateway"]

class Gateway:
    """A running native gateway (see the module documentation); made by :meth:`Router.serve`.

    Raises:
        ValueError: an unknown option or one that breaks its rule (the message names it), or
            the address cannot be listened on.
        RouterClosedError: the router is closed.
    """

    def __init__(self, native: NativeRouter, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self._handle = 0
        native.check_open()
        settings = {name: value for name, value in options.items() if value is not None}
        settings.update(host=host, port=port)
        text = options_json(settings)
        self._lib = native.lib
        out = c_uint64()
        self._lib.check(self._lib.br_gateway_start(native.handle, text, len(text), byref(out)))
        self._handle = out.value
        self._lock = threading.Lock()
        info = self._info()
        self.address: str = info["address"]
        self.metrics_address: Optional[str] = info["metrics_address"]

    def _info(self) -> Dict[str, Any]:
        return self._lib.read_json("br_gateway_address_json", self._handle)  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy."""
        return "http://" + self.address

    @property
    def metrics_url(self) -> Optional[str]:
        """``http://host:port/metrics`` of the metrics listener, or None without one."""
        return None if self.metrics_address is None else "http://%s/metrics" % self.metrics_address

    @property
    def running(self) -> bool:
        """Whether :meth:`stop` has not been called."""
        return self._handle != 0

    def in_flight(self) -> int:
        """How many requests the gateway is handling."""
        return int(self._info()["in_flight"]) if self.running else 0

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop accepting connections, let in-flight requests finish for up to ``timeout``
        seconds (the ``shutdown_timeout`` option when None), then cut the rest. Returns once
        every request has ended and released its lease: True if all finished in time, False if
        some were cut. Stopping again returns True.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError("timeout must be a number of seconds >= 0, or None, got %r" % (timeout,))
        with self._lock:
            handle, self._handle = self._handle, 0
        if not handle:
            return True
        # Capped at 2**62 ms (146 million years) so the int64 argument cannot wrap.
        milliseconds = 0 if timeout is None else max(1, int(min(timeout * 1000, 2.0**62)))
        return self._lib.check(self._lib.br_gateway_stop(handle, milliseconds)) == 0

    def __enter__(self) -> Gateway:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return "<Gateway %s%s>" % (self.url, "" if self.running else " stopped")
