"""The ctypes binding of the native library ``libbounded_router.so`` (the Go core).

The library is loaded lazily, on the first call of :func:`library` (when the first router is
created), from the package directory or from the file named by ``BOUNDED_ROUTER_LIBRARY``.
Loading checks ``br_abi_version()`` against :data:`ABI_VERSION` and reads the library's
constants (branch names, status codes, decision layout, limits, defaults) from
``br_constants_json()``: this binding keeps no copy of them.

Each export is declared once, below, by :func:`_export` on a typed stub that carries its
documentation; the C declarations are in the public header (``libbounded_router.h`` in the
package, ``capi/bounded_router.h`` in the repository).

The request path (``holds_gil=True``): those exports are bound through a ``PyDLL`` handle,
which keeps the GIL during the call, and without argtypes, because a ctypes argument converter
costs more than the Go routing work behind the call and releasing the GIL around so short a call
makes threads queue for it (BENCHMARKS.md has the figures). Their callers must pass exactly
the C types of the header, in forms ctypes passes as they are: bytes, Python ints for 32-bit
parameters, and ready-made argument objects (``c_uint64.from_param(...)``, ``c_size_t``,
``byref(...)``, see :func:`thread_buffers`) for the others.

Fork safety: the Go runtime does not survive ``fork()``. In a child forked after the library
was loaded, every export raises :class:`~bounded_router.errors.ForkedProcessError` instead of
hanging; a child of a process that never loaded the library loads it normally.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from ctypes import POINTER, c_char, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64
from typing import Any, Callable, Dict, NamedTuple, NoReturn, Optional, Tuple

from .errors import ForkedProcessError, LibraryLoadError, RouterClosedError

__all__ = ["ABI_VERSION", "LIBRARY_ENV", "LIBRARY_NAME", "BrRequest", "Library", "library", "library_path", "is_loaded"]

#: The ABI version this binding implements (``BR_ABI_VERSION`` of the header): the one constant
#: a binding must hold itself, to know whether it can read the others.
ABI_VERSION = 11
#: Environment variable naming another build of the library to load.
LIBRARY_ENV = "BOUNDED_ROUTER_LIBRARY"
#: File name of the library inside the package.
LIBRARY_NAME = "libbounded_router.so"

_u64p = POINTER(c_uint64)
_buf = POINTER(c_char)


class BrRequest(ctypes.Structure):
    """``br_request``: every routing input of one request (key, header block, lease weight,
    prefix blocks), for ``br_route_request`` and ``br_route_requests``. The binding packs these
    structs itself (``_request``); the fields name the layout, which the tests check against the
    header."""

    _fields_ = [
        ("key", c_char_p),
        ("key_len", c_size_t),
        ("headers", c_char_p),
        ("headers_len", c_size_t),
        ("weight", c_int64),
        ("prefix_blocks", _u64p),
        ("prefix_blocks_len", c_size_t),
    ]


_requestp = POINTER(BrRequest)


class Export(NamedTuple):
    """How an export is called: its C result and parameter types, and whether it keeps the GIL."""

    restype: Any
    argtypes: Tuple[Any, ...]
    holds_gil: bool


#: Every export of the library, by name, as declared on :class:`Library`.
EXPORTS: Dict[str, Export] = {}


def _export(restype: Any, *argtypes: Any, holds_gil: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the export named like the decorated stub; loading binds it in the stub's place."""

    def declare(stub: Callable[..., Any]) -> Callable[..., Any]:
        EXPORTS[stub.__name__] = Export(restype, argtypes, holds_gil)
        return stub

    return declare


_FORKED_MESSAGE = (
    "bounded_router cannot be used in this process: it was forked after the parent process had "
    "loaded the native library (the Go runtime does not survive fork()). Create routers after "
    "forking, in each child process: do not create them before gunicorn forks its workers "
    "(preload_app) or in a multiprocessing parent that uses the 'fork' start method (or use "
    "the 'spawn' or 'forkserver' start method)."
)

# 4 KiB holds the JSON of a few dozen workers; larger answers are fetched again at their size.
_JSON_BUFFER = 4096


def forked(*_args: Any) -> NoReturn:
    """What every native call does in a process forked after the library was loaded."""
    raise ForkedProcessError(_FORKED_MESSAGE)


class Library:
    """The loaded library: one attribute per export, and the constants it reports.

    Callers look the exports up on this object at each call (``lib.br_release(...)``) or keep
    them only where the fork handler reaches them (see ``_native_router``), so that a forked
    child never calls into the Go runtime it lost.

    Attributes:
        path: the file loaded.
        branches: branch names, indexed by branch code.
        status: status codes by name (``"invalid_handle"``, ...).
        branch_mask: the bits of a packed decision that hold the branch code.
        ids_dont_fit: the flag of a packed decision whose worker ids come apart.
        limits: ``max_virtual_nodes``, ``max_ring_entries``, ``max_min_load_gap``, ``max_arg_len``,
            ``max_key_memory``, ``max_lease_weight``, ``max_prefix_blocks``.
        defaults: ``policy``, ``max_load_skew``, ``min_load_gap``, ``virtual_nodes``.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        # The buffer size each *_json export needed last, so that a large answer (the workers of
        # a big membership) is encoded once per call, not twice.
        self._json_capacity: Dict[str, int] = {}
        try:
            # CDLL releases the GIL during each call: other threads run while a membership
            # change rebuilds the ring. The request path binds through PyDLL (module docstring).
            self._dll = ctypes.CDLL(path)
            self._gil_dll = ctypes.PyDLL(path)  # the same library: dlopen returns the loaded one
        except OSError as e:
            raise LibraryLoadError(
                "cannot load the bounded_router native library %s: %s (reinstall the wheel, or set %s "
                "to a libbounded_router.so built with `make lib`)" % (path, e, LIBRARY_ENV)
            ) from e
        # The version first: a library of another ABI version may lack exports this one binds.
        self._bind("br_abi_version")
        version = self.br_abi_version()
        if version != ABI_VERSION:
            raise LibraryLoadError(
                "%s implements ABI version %d but this bounded_router package needs version %d: "
                "install a matching wheel, or point %s to a matching build" % (path, version, ABI_VERSION, LIBRARY_ENV)
            )
        for name in EXPORTS:
            self._bind(name)
        constants = self.read_json("br_constants_json")
        self.constants: Dict[str, Any] = constants
        self.branches: Tuple[str, ...] = tuple(constants["branches"])
        self.status: Dict[str, int] = constants["status"]
        self.branch_mask: int = (1 << constants["decision"]["branch_bits"]) - 1
        self.ids_dont_fit: int = constants["decision"]["ids_dont_fit"]
        self.limits: Dict[str, int] = constants["limits"]
        self.defaults: Dict[str, Any] = constants["defaults"]
        self._errors = {
            self.status["unknown_worker"]: KeyError,
            self.status["invalid_argument"]: ValueError,
            self.status["duplicate_worker"]: ValueError,
        }

    def _bind(self, name: str) -> None:
        export = EXPORTS[name]
        try:
            function = getattr(self._gil_dll if export.holds_gil else self._dll, name)
        except AttributeError as e:
            raise LibraryLoadError("%s does not export %s: it is not a bounded_router library" % (self.path, name)) from e
        function.restype = export.restype
        if not export.holds_gil:
            function.argtypes = export.argtypes
        setattr(self, name, function)

    def disable_after_fork(self) -> None:
        """Replace every export with :func:`forked`."""
        for name in EXPORTS:
            setattr(self, name, forked)

    # -- errors and answers ------------------------------------------------------------------

    def error(self, status: int) -> Exception:
        """The exception for a negative status, carrying this thread's last error text."""
        if status == self.status["invalid_handle"]:
            return RouterClosedError("the router is closed")
        text = self.br_last_error()
        message = text.decode("utf-8", "replace") if text else "unknown error"
        kind = self._errors.get(status)
        if kind is not None:
            return kind(message)
        return RuntimeError("bounded_router: status %d: %s" % (status, message))

    def check(self, status: int) -> int:
        """Return ``status`` if it is a success, raise its exception otherwise."""
        if status < 0:
            raise self.error(status)
        return status

    def read_json(self, export: str, *args: Any) -> Any:
        """Call a ``*_json`` export (buffer and capacity appended to ``args``) and decode its answer.

        The export returns the length of the whole text and writes it only when it fits; the
        call is repeated with a large enough buffer (the text may grow in between). The next call
        of the export starts at half again this answer's length, so a large answer is usually
        encoded once.
        """
        capacity = self._json_capacity.get(export, _JSON_BUFFER)
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            length = getattr(self, export)(*args, buffer, capacity)
            if length < 0:
                raise self.error(length)
            if length <= capacity:
                self._json_capacity[export] = max(_JSON_BUFFER, length + length // 2)
                return json.loads(buffer.raw[:length])
            capacity = length + length // 2

    # -- the exports (capi/bounded_router.h) -------------------------------------------------
    # Each stub is replaced by the library's function when the library is loaded.

    @_export(c_char_p)
    def br_last_error(self) -> Optional[bytes]:
        """The calling thread's last error text."""
        raise NotImplementedError

    @_export(c_uint32)
    def br_abi_version(self) -> int:
        """BR_ABI_VERSION of the library."""
        raise NotImplementedError

    @_export(c_int64, _buf, c_size_t)
    def br_constants_json(self, buf: Any, capacity: int) -> int:
        """The library's constants as JSON (see :meth:`read_json`)."""
        raise NotImplementedError

    @_export(c_int32, c_char_p, c_size_t, _u64p)
    def br_router_new(self, config_json: bytes, config_len: int, out_router: Any) -> int:
        """Build a router from its JSON configuration; its handle goes to ``out_router``."""
        raise NotImplementedError

    @_export(c_int32, c_uint64)
    def br_router_free(self, router: int) -> int:
        """Close a router."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t)
    def br_add_worker(self, router: int, url: bytes, url_len: int) -> int:
        """Add a member."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t)
    def br_remove_worker(self, router: int, url: bytes, url_len: int) -> int:
        """Remove a member."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t)
    def br_set_workers(self, router: int, urls_json: bytes, urls_len: int) -> int:
        """Replace the membership with a JSON array of URLs."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, c_int32)
    def br_set_healthy(self, router: int, url: bytes, url_len: int, healthy: int) -> int:
        """Mark a member healthy (1) or not (0)."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, c_int32, _u64p)
    def br_route(self, router: int, key: bytes, key_len: int, headers: bytes, headers_len: int, take_lease: int, out: Any) -> int:
        """Route (or, with take_lease 0, select) from a key and a header block: the branch code."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, c_char_p, c_size_t, _u64p, holds_gil=True)
    def br_release_then_route_key(self, router: Any, key: bytes, key_len: Any, io: Any) -> int:
        """Release the lease in io[2], then route a key: the packed decision."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, _u64p, holds_gil=True)
    def br_release_then_route(self, router: Any, key: bytes, key_len: Any, headers: bytes, headers_len: Any, io: Any) -> int:
        """Release the lease in io[2], then route from a key and a header block: the packed decision."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, c_int32, _u64p, c_size_t, _u64p, holds_gil=True)
    def br_release_then_route_request(
        self, router: Any, key: bytes, key_len: Any, headers: bytes, headers_len: Any, weight: int, prefix_blocks: bytes, prefix_blocks_len: Any, io: Any
    ) -> int:
        """Release the lease in io[2], then route from every input of a request (weight 0 is 1,
        the prefix blocks as the bytes of their uint64s): the packed decision."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, POINTER(c_uint32), c_uint32, _u64p, holds_gil=True)
    def br_route_keys(self, router: Any, keys: bytes, keys_len: Any, lengths: bytes, n: int, out: Any) -> int:
        """Route n keys as one step: leases, packed decisions and worker ids in out."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, POINTER(c_uint32), POINTER(c_int64), c_uint32, _u64p, holds_gil=True)
    def br_route_weighted_keys(self, router: Any, keys: bytes, keys_len: Any, lengths: bytes, weights: bytes, n: int, out: Any) -> int:
        """br_route_keys with a lease of weights[i] (the bytes of int64s) for key i."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, _requestp, c_int32, _u64p, holds_gil=True)
    def br_route_request(self, router: Any, request: Any, take_lease: int, out: Any) -> int:
        """Route (or, with take_lease 0, select) from a :class:`BrRequest`: the branch code."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, _requestp, c_uint32, _u64p, holds_gil=True)
    def br_route_requests(self, router: Any, requests: Any, n: int, out: Any) -> int:
        """Route n :class:`BrRequest` as one step: leases, packed decisions and worker ids in out."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, c_int64, _u64p)
    def br_acquire(self, router: int, url: bytes, url_len: int, key: bytes, key_len: int, weight: int, out: Any) -> int:
        """Count a request of a weight (0 means 1) on a member chosen elsewhere: out[0] the lease."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_uint64)
    def br_release(self, router: int, lease: int) -> int:
        """Release a lease: 1 if released, 0 if it was not active."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_uint64)
    def br_release_abandoned(self, router: int, lease: int) -> int:
        """Release a lease its holder lost and count it as leaked."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, _u64p, c_uint32, holds_gil=True)
    def br_release_many(self, router: Any, leases: bytes, n: int) -> int:
        """Release n leases in one step: how many were released."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_uint64, c_int32)
    def br_finish(self, router: Any, lease: int, outcome: int) -> int:
        """Release a lease with its request's outcome (BR_OUTCOME_*): 1 if released, 0 if not."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_uint64, holds_gil=True)
    def br_first_token(self, router: Any, lease: Any) -> int:
        """Mark a lease as having seen its first token: 1 if marked, 0 if marked before or not active."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, _requestp, c_char_p, c_size_t, _u64p)
    def br_route_avoiding(self, router: Any, request: Any, avoid: bytes, avoid_len: int, out: Any) -> int:
        """Route a retry of a :class:`BrRequest` away from the workers whose URLs the JSON array
        lists: the branch code."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, c_uint64, _buf, c_size_t)
    def br_lease_workers_json(self, router: int, lease: int, buf: Any, capacity: int) -> int:
        """{"worker_url", "preferred_url"} of an active lease, as JSON."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, _buf, c_size_t)
    def br_workers_json(self, router: int, buf: Any, capacity: int) -> int:
        """The members in membership order, as JSON."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, _buf, c_size_t)
    def br_members_json(self, router: int, buf: Any, capacity: int) -> int:
        """The members' ids and URLs in membership order, as JSON pairs."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, _buf, c_size_t)
    def br_stats_json(self, router: int, buf: Any, capacity: int) -> int:
        """Counters, policy and members in one snapshot, as JSON."""
        raise NotImplementedError

    @_export(c_int64, c_char_p, c_size_t, c_size_t, _u64p, c_size_t)
    def br_prefix_blocks(self, data: bytes, data_len: int, block_len: int, out: Any, out_capacity: int) -> int:
        """Chained XXH64 of each full block of block_len bytes into out: how many blocks."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, c_int64, c_int64, c_int64)
    def br_report_load(self, router: int, url: bytes, url_len: int, load: int, waiting: int, waiting_requests: int) -> int:
        """The worker's engine reports its requests running and waiting, its prefill queue in
        lease weights and its requests waiting (-1: a figure not reported)."""
        raise NotImplementedError

    @_export(c_int32, c_uint64)
    def br_forget_keys(self, router: int) -> int:
        """Forget every routing key's remembered worker; how many keys were remembered."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t)
    def br_forget_load(self, router: int, url: bytes, url_len: int) -> int:
        """Drop the worker's standing engine load report."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, c_int64, _u64p, c_size_t)
    def br_peer_route(self, router: int, url: bytes, url_len: int, weight: int, blocks: Any, n: int) -> int:
        """Another router replica sent a request of weight and n prefix blocks to the worker."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p, c_size_t, _u64p)
    def br_store_blocks(self, router: int, url: bytes, url_len: int, blocks: Any, n: int, engine_hashes: Any) -> int:
        """The worker's engine stores n blocks (engine_hashes: its names for them, or NULL)."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p, c_size_t)
    def br_remove_blocks(self, router: int, url: bytes, url_len: int, engine_hashes: Any, n: int) -> int:
        """The worker's engine evicted the n blocks it names engine_hashes."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t)
    def br_clear_blocks(self, router: int, url: bytes, url_len: int) -> int:
        """The worker's engine dropped every block."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p)
    def br_load_poll_start(self, router: int, options_json: bytes, options_len: int, out_feed: Any) -> int:
        """Start a feed polling the workers' load endpoints (options as JSON)."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p)
    def br_kv_events_start(self, router: int, options_json: bytes, options_len: int, out_feed: Any) -> int:
        """Start a feed subscribing to the workers' KV event streams (options as JSON)."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p)
    def br_peer_routes_start(self, router: int, options_json: bytes, options_len: int, out_feed: Any) -> int:
        """Start a feed sharing routes with other router replicas (options as JSON)."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, _buf, c_size_t)
    def br_feed_stats_json(self, feed: int, buf: Any, capacity: int) -> int:
        """A feed's counters, as JSON."""
        raise NotImplementedError

    @_export(c_int32, c_uint64)
    def br_feed_stop(self, feed: int) -> int:
        """Stop a feed and wait for it."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_char_p, c_size_t, _u64p)
    def br_gateway_start(self, router: int, options_json: bytes, options_len: int, out_gateway: Any) -> int:
        """Start the native HTTP gateway in front of a router's workers (options as JSON)."""
        raise NotImplementedError

    @_export(c_int64, c_uint64, _buf, c_size_t)
    def br_gateway_address_json(self, gateway: int, buf: Any, capacity: int) -> int:
        """Where a gateway listens and how many requests it is handling, as JSON."""
        raise NotImplementedError

    @_export(c_int32, c_uint64, c_int64)
    def br_gateway_stop(self, gateway: int, timeout_ms: int) -> int:
        """Stop a gateway, draining in-flight requests for up to timeout_ms: 0, or 1 if some were cut."""
        raise NotImplementedError


#: Per-thread state of the request path; ``BUFFERS.value`` is set by :func:`thread_buffers`.
BUFFERS = threading.local()


def thread_buffers() -> Tuple[Any, Any]:
    """This thread's ``(out, out_ref)`` for the route calls, made on first use.

    ``out`` is a ``c_uint64 * 3`` array: a route's answer comes back in ``out[0]`` and
    ``out[1]``, and ``out[2]`` carries a lease for ``br_release_then_*`` to release first (the
    call clears it). ``out_ref`` is a ``byref`` pointer to it, made once: ctypes passes such an
    argument object without allocating.
    """
    try:
        return BUFFERS.value  # type: ignore[no-any-return]
    except AttributeError:
        out = (c_uint64 * 3)()
        BUFFERS.value = buffers = (out, ctypes.byref(out))
        return buffers


_library: Optional[Library] = None
_lock = threading.Lock()
# Set in a child forked after the library was loaded: loading again is impossible there.
_inherited = False


def library_path() -> str:
    """The file :func:`library` loads: ``$BOUNDED_ROUTER_LIBRARY`` or the package's copy."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)


def library() -> Library:
    """The native library, loaded on the first call.

    Raises:
        LibraryLoadError: the library is missing, not a bounded_router library, or of another
            ABI version.
        ForkedProcessError: this process was forked after its parent loaded the library.
    """
    global _library
    loaded = _library
    if loaded is not None:
        return loaded
    with _lock:
        if _inherited:
            forked()
        if _library is None:
            _library = Library(library_path())
        return _library


def is_loaded() -> bool:
    """Whether this process has loaded the native library (which starts the Go runtime)."""
    return _library is not None


def _after_fork_in_child() -> None:
    global _inherited, _lock
    # Another thread may have held the lock when the parent forked.
    _lock = threading.Lock()
    if _library is not None:
        _inherited = True
        _library.disable_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

