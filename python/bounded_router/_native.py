"""The ctypes binding of the native library ``libbounded_router.so`` (the Go core).

The library is loaded lazily, on the first call of :func:`library` (i.e. when the first router
is created), from the package directory, or from the file named by the environment variable
``BOUNDED_ROUTER_LIBRARY``. Loading checks ``br_abi_version()`` against :data:`ABI_VERSION`.

Every export has its argtypes and restype set once, at load time. Negative status codes are
turned into Python exceptions by :meth:`Library.error`, with the text of ``br_last_error()``
(kept per thread by the library, so it is read on the thread that made the failing call).

The exports on the request path are also bound a second time, as ``fast_<name>`` (see
:data:`_FAST_PATH`): through a ``PyDLL`` handle, which keeps the GIL during the call, and without
argtypes. Measured by ``scripts/bench.py``: a ctypes argument converter costs about 90 ns per
argument, more than the Go routing work itself; and releasing the GIL around a call that lasts
~100 ns costs more than it saves and makes threads queue for the GIL after every call (aggregate
throughput drops as threads are added, where with the GIL held it stays flat). Callers of
``fast_*`` pass exactly the C types of the header, in the forms ctypes passes without building
anything: bytes, Python ints for 32-bit parameters, and ready-made argument objects
(``c_uint64.from_param(...)``, ``byref(...)``, see :func:`thread_buffers`) for the others.

Fork safety: the Go runtime does not survive ``fork()``. In a child forked after the library
was loaded, every native call raises :class:`~bounded_router.errors.ForkedProcessError` instead
of hanging; a child of a process that never loaded the library loads it normally.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from ctypes import POINTER, c_char, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64
from typing import Any, Callable, NoReturn, Optional, Tuple

from .errors import ForkedProcessError, LibraryLoadError, RouterClosedError

__all__ = [
    "ABI_VERSION",
    "BRANCHES",
    "BRANCH_CHOSE_WORKER",
    "LIBRARY_ENV",
    "LIBRARY_NAME",
    "Library",
    "library",
    "library_path",
    "is_loaded",
]

#: The ABI version this binding implements (``BR_ABI_VERSION`` of the C header).
ABI_VERSION = 2
#: Environment variable naming another build of the library to load.
LIBRARY_ENV = "BOUNDED_ROUTER_LIBRARY"
#: File name of the library inside the package.
LIBRARY_NAME = "libbounded_router.so"

# Status codes (BR_* in the C header).
STATUS_INVALID_HANDLE = -1
STATUS_INVALID_ARGUMENT = -2
STATUS_UNKNOWN_WORKER = -3
STATUS_DUPLICATE_WORKER = -4
STATUS_INTERNAL = -5

#: Branch names indexed by the branch codes br_route_key and br_route return (BR_BRANCH_*).
BRANCHES = (
    "no_healthy_workers",
    "target_worker_hit",
    "target_worker_miss",
    "explicit_routing_key_hit",
    "explicit_routing_key_spillover",
    "explicit_routing_key_no_eligible_candidate",
    "implicit_routing_key_hit",
    "random_fallback",
    "routing_key_hit",
    "random",
    "round_robin",
)
#: Packed decisions (BR_DECISION_* in the C header), answered by br_release_then_route_key,
#: br_release_then_route and br_route_keys: the branch code in the low 4 bits, the chosen and
#: the preferred worker's ids above it, both 0 (so the decision is below 16) when no worker was
#: chosen. With DECISION_IDS_DONT_FIT set the ids did not fit and come separately.
DECISION_BRANCH = 0xF
DECISION_IDS_DONT_FIT = 1 << 60
#: For each branch code, whether that branch chose a worker.
BRANCH_CHOSE_WORKER = tuple(name not in ("no_healthy_workers", "target_worker_miss") for name in BRANCHES)

_u64p = POINTER(c_uint64)
_buf = POINTER(c_char)

# name: (restype, argtypes), as declared in libbounded_router.h.
_SIGNATURES = {
    "br_abi_version": (c_uint32, []),
    "br_last_error": (c_char_p, []),
    "br_router_new": (c_int32, [c_char_p, c_size_t, _u64p]),
    "br_router_free": (c_int32, [c_uint64]),
    "br_add_worker": (c_int32, [c_uint64, c_char_p, c_size_t]),
    "br_remove_worker": (c_int32, [c_uint64, c_char_p, c_size_t]),
    "br_set_workers": (c_int32, [c_uint64, c_char_p, c_size_t]),
    "br_set_healthy": (c_int32, [c_uint64, c_char_p, c_size_t, c_int32]),
    "br_route_key": (c_int32, [c_uint64, c_char_p, c_size_t, _u64p]),
    "br_route": (c_int32, [c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, c_int32, _u64p]),
    "br_release_then_route_key": (c_int64, [c_uint64, c_char_p, c_size_t, _u64p]),
    "br_release_then_route": (c_int64, [c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, _u64p]),
    "br_acquire": (c_int32, [c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, _u64p]),
    "br_release": (c_int32, [c_uint64, c_uint64]),
    "br_release_abandoned": (c_int32, [c_uint64, c_uint64]),
    "br_route_keys": (c_int32, [c_uint64, c_char_p, c_size_t, POINTER(c_uint32), c_uint32, _u64p]),
    "br_release_many": (c_int32, [c_uint64, _u64p, c_uint32]),
    "br_lease_workers_json": (c_int64, [c_uint64, c_uint64, _buf, c_size_t]),
    "br_workers_json": (c_int64, [c_uint64, _buf, c_size_t]),
    "br_stats_json": (c_int64, [c_uint64, _buf, c_size_t]),
}

# The request path: name -> restype. Bound as Library.fast_<name without "br_"> (see the module
# docstring); none of them may block or run long, since they hold the GIL.
_FAST_PATH = {
    "br_release_then_route_key": c_int64,
    "br_release_then_route": c_int64,
    "br_route_keys": c_int32,
    "br_release_many": c_int32,
}

_FORKED_MESSAGE = (
    "bounded_router cannot be used in this process: it was forked after the parent process had "
    "loaded the native library (the Go runtime does not survive fork()). Create routers after "
    "forking, in each child process: do not create them before gunicorn forks its workers "
    "(preload_app) or in a multiprocessing parent that uses the 'fork' start method (or use "
    "the 'spawn' or 'forkserver' start method)."
)

# 4 KiB holds the JSON of a few dozen workers; larger answers are fetched again at their size.
_JSON_BUFFER = 4096


def _forked(*_args: Any) -> NoReturn:
    raise ForkedProcessError(_FORKED_MESSAGE)


def _fast_name(export: str) -> str:
    return "fast_" + export[len("br_") :]


class Library:
    """The loaded library: one attribute per export (``br_route_key``, ...) plus helpers.

    Callers look the functions up on this object at each call (``lib.br_release(...)``) rather
    than keeping references to them, so that :meth:`_disable_after_fork` reaches every caller.
    """

    br_abi_version: Callable[[], int]
    br_last_error: Callable[[], Optional[bytes]]
    br_router_new: Callable[..., int]
    br_router_free: Callable[[int], int]
    br_add_worker: Callable[[int, bytes, int], int]
    br_remove_worker: Callable[[int, bytes, int], int]
    br_set_workers: Callable[[int, bytes, int], int]
    br_set_healthy: Callable[[int, bytes, int, int], int]
    br_route_key: Callable[..., int]
    br_route: Callable[..., int]
    br_acquire: Callable[..., int]
    br_release: Callable[[int, int], int]
    br_release_abandoned: Callable[[int, int], int]
    br_route_keys: Callable[..., int]
    br_release_many: Callable[..., int]
    br_lease_workers_json: Callable[..., int]
    br_workers_json: Callable[..., int]
    br_stats_json: Callable[..., int]
    br_release_then_route_key: Callable[..., int]
    br_release_then_route: Callable[..., int]
    fast_release_then_route_key: Callable[..., int]
    fast_release_then_route: Callable[..., int]
    fast_route_keys: Callable[..., int]
    fast_release_many: Callable[..., int]

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # CDLL releases the GIL during each call: other threads run while a membership
            # change rebuilds the ring (the request path uses the fast_* functions below).
            self._dll = ctypes.CDLL(path)
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
        for name in _SIGNATURES:
            self._bind(name)
        # The same library again (dlopen returns the loaded one), with functions that keep the GIL.
        holding_gil = ctypes.PyDLL(path)
        for name, restype in _FAST_PATH.items():
            function = getattr(holding_gil, name)
            function.restype = restype
            setattr(self, _fast_name(name), function)

    def _bind(self, name: str) -> None:
        """Set the argtypes and restype of an export and make it an attribute of this object."""
        try:
            function = getattr(self._dll, name)
        except AttributeError as e:
            raise LibraryLoadError("%s does not export %s: it is not a bounded_router library" % (self.path, name)) from e
        function.restype, function.argtypes = _SIGNATURES[name]
        setattr(self, name, function)

    def _disable_after_fork(self) -> None:
        """Replace every export with a function that raises ForkedProcessError."""
        for name in _SIGNATURES:
            setattr(self, name, _forked)
        for name in _FAST_PATH:
            setattr(self, _fast_name(name), _forked)

    def last_error(self) -> str:
        """The calling thread's last error text."""
        text = self.br_last_error()
        return text.decode("utf-8", "replace") if text else "unknown error"

    def error(self, status: int) -> Exception:
        """The exception for a negative status, carrying this thread's last error text."""
        if status == STATUS_INVALID_HANDLE:
            return RouterClosedError("the router is closed")
        message = self.last_error()
        if status == STATUS_UNKNOWN_WORKER:
            return KeyError(message)
        if status in (STATUS_INVALID_ARGUMENT, STATUS_DUPLICATE_WORKER):
            return ValueError(message)
        if status == STATUS_INTERNAL:
            return RuntimeError(message)
        return RuntimeError("bounded_router: unexpected status %d: %s" % (status, message))

    def check(self, status: int) -> int:
        """Return ``status`` if it is a success, raise its exception otherwise."""
        if status < 0:
            raise self.error(status)
        return status

    def read_json(self, export: str, *args: Any) -> Any:
        """Call a ``*_json`` export (buffer and capacity appended to ``args``) and decode its answer.

        The export returns the length of the whole text and writes it only when it fits; the
        call is repeated with a large enough buffer (the text may grow in between).
        """
        capacity = _JSON_BUFFER
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            length = getattr(self, export)(*args, buffer, capacity)
            if length < 0:
                raise self.error(length)
            if length <= capacity:
                return json.loads(buffer.raw[:length])
            capacity = length + length // 2


#: Per-thread state of the fast_* calls; ``BUFFERS.value`` is set by :func:`thread_buffers`.
BUFFERS = threading.local()


def thread_buffers() -> Tuple[Any, Any]:
    """This thread's ``(out, out_ref)`` for the fast route calls, made on first use.

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
            _forked()
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
        _library._disable_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
