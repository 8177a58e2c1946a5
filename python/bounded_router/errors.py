"""Exceptions raised by bounded_router.

Configuration mistakes are plain :class:`ValueError` / :class:`TypeError`, unknown worker URLs
are :class:`KeyError`; the classes here cover the conditions specific to a router.
"""

from __future__ import annotations

from typing import Any, Tuple

__all__ = ["NoWorkerAvailableError", "RouterClosedError", "ForkedProcessError", "LibraryLoadError"]


class NoWorkerAvailableError(RuntimeError):
    """No worker could be chosen for a request.

    ``branch`` names the rule that decided: ``"no_healthy_workers"`` (the router has no
    available worker) or ``"target_worker_miss"`` (an ``X-SMG-Target-Worker`` header did not
    name an available worker; that header never falls back to another worker).
    """

    def __init__(self, branch: str, message: str | None = None) -> None:
        if message is None:
            if branch == "target_worker_miss":
                message = "no worker available: X-SMG-Target-Worker does not name an available worker"
            elif branch == "no_healthy_workers":
                message = "no worker available: the router has no healthy workers"
            else:
                message = "no worker available (%s)" % branch
        super().__init__(message)
        self.branch = branch

    def __reduce__(self) -> Tuple[Any, Tuple[str, str]]:  # keep .branch when pickled
        return (type(self), (self.branch, str(self)))


class RouterClosedError(RuntimeError):
    """The router was closed; create a new one."""


class ForkedProcessError(RuntimeError):
    """The native library was loaded before this process was forked and cannot be used here.

    The Go runtime inside the library does not survive ``fork()``: its threads exist only in the
    parent. Create routers after forking (in each gunicorn worker rather than with
    ``preload_app``, in each ``multiprocessing`` child, or use the ``spawn``/``forkserver`` start
    methods) and do not use bounded_router in the parent before it forks.
    """


class LibraryLoadError(ImportError):
    """The native library could not be loaded, or it implements another ABI version.

    Raised on first use of a router (the library is loaded lazily). The message names the file
    that was tried; ``BOUNDED_ROUTER_LIBRARY`` may point to another build of the library.
    """
