"""The native router behind a :class:`~bounded_router.Router`: the library handle and its
lifecycle (close, garbage collection, fork), the release path, and the map from the library's
worker ids to URLs. Internal; :mod:`bounded_router.router` and :mod:`bounded_router.lease` use
it, and it knows neither.

The release path: :meth:`Lease.release <bounded_router.Lease.release>` makes no native call.
It appends the lease id to :attr:`NativeRouter.released`, and the next call into the library
hands the waiting ids over before it decides or reports anything: a route passes one in
``out[2]`` of its own call (``br_release_then_*``), every other call whose answer depends on the
loads runs :meth:`NativeRouter.hand_over` first, and a release that finds more than
:data:`HAND_OVER_AT` waiting hands them over itself. So a release is seen by every route,
selection and statistic that begins after it returned. Two threads may hand the same id over:
the library releases a lease once and skips it after that.
"""

from __future__ import annotations

import os
import weakref
from array import array
from ctypes import c_uint64
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _native
from .errors import ForkedProcessError, NoWorkerAvailableError, RouterClosedError
from .stats import Statistics, WorkerInfo

__all__ = ["NativeRouter", "HAND_OVER_AT", "LeaseDecision"]

#: What a lease knows of its routing decision: (worker_url, preferred_url, branch).
LeaseDecision = Tuple[str, str, Optional[str]]

#: Releases wait in NativeRouter.released for the router's next call; past this many (a burst
#: of releases with no route in between) the releasing thread hands them over itself.
HAND_OVER_AT = 64

_LOW32 = 0xFFFFFFFF
# Decisions whose URLs are cached (see NativeRouter.decided); the cache starts again past this.
_DECIDED_MAX = 4096
# Every native router of this process, for the fork handler at the end of this module.
_ROUTERS: "weakref.WeakSet[NativeRouter]" = weakref.WeakSet()


class NativeRouter:
    """One router of the native library, from creation to close.

    Attributes:
        lib: the loaded library.
        handle: the router's handle, and ``handle_arg`` the same as a ready-made uint64
            argument for the request path's exports.
        closed: whether the router was closed (its handle is invalid from then on).
        released: lease ids released but not yet handed over (see the module docstring).
        route_key, route_headers, route_request: ``br_release_then_route_key``,
            ``br_release_then_route`` and ``br_release_then_route_request``, bound here so that
            the fork handler can replace them.
        urls: worker id -> URL, replaced (never mutated) after every membership change.
        decided: packed decision -> (worker_url, preferred_url, branch). Worker ids are never
            reused, so an entry never goes stale; the cache starts again after a membership
            change or when it grows past 4096 entries.
    """

    def __init__(self, config_json: bytes) -> None:
        self.closed = True  # until the native router exists, so __del__ has nothing to do
        lib = _native.library()
        out = c_uint64()
        lib.check(lib.br_router_new(config_json, len(config_json), out))
        self.lib = lib
        self.handle = out.value
        self.handle_arg = c_uint64.from_param(self.handle)
        self.route_key: Callable[..., int] = lib.br_release_then_route_key
        self.route_headers: Callable[..., int] = lib.br_release_then_route
        self.route_request: Callable[..., int] = lib.br_release_then_route_request
        self.released: List[int] = []
        self.urls: Dict[int, str] = {}
        self.decided: Dict[int, LeaseDecision] = {}
        self.closed = False
        _ROUTERS.add(self)
        self.refresh_urls()

    def __del__(self) -> None:
        try:
            self.close()
        except BaseException:
            pass

    def close(self) -> None:
        """Free the native router. Idempotent. In a forked child it only marks this copy closed."""
        if self.closed:
            return
        self.closed = True
        self.released.clear()
        try:
            status = self.lib.br_router_free(self.handle)
        except ForkedProcessError:  # nothing of ours to free in this process
            return
        if status < 0 and status != self.lib.status["invalid_handle"]:
            raise self.lib.error(status)

    def check_open(self) -> None:
        """Raise :class:`RouterClosedError` once the router is closed."""
        if self.closed:
            raise RouterClosedError("the router is closed")

    # -- the release path (module docstring) -------------------------------------------------

    def hand_over(self) -> None:
        """Release in the library the leases released since the last call into it."""
        released = self.released
        if released and not self.closed:
            lease_ids = released[:]  # one step, even with other threads appending
            self.release_ids(lease_ids)
            for lease_id in lease_ids:
                try:
                    released.remove(lease_id)
                except ValueError:  # handed over by another thread as well
                    pass

    def release_ids(self, lease_ids: List[int]) -> int:
        """Release leases in one call; how many the library released."""
        status = self.lib.br_release_many(self.handle_arg, array("Q", lease_ids).tobytes(), len(lease_ids))
        if status == self.lib.status["invalid_handle"]:  # closed by another thread meanwhile
            return 0
        return self.lib.check(status)

    def release_abandoned(self, lease_id: int) -> None:
        """Release a lease dropped without release, counted as leaked (the safety net)."""
        if not self.closed:
            self.lib.br_release_abandoned(self.handle, lease_id)

    # -- calls that change or report the state -----------------------------------------------

    def call(self, export: str, *args: Any) -> int:
        """Call an export that takes the handle first, after the hand-over; raise on error."""
        self.check_open()
        self.hand_over()
        return self.lib.check(getattr(self.lib, export)(self.handle, *args))

    def change_membership(self, export: str, *args: Any) -> None:
        """A membership export, then the worker id map of the new membership."""
        self.call(export, *args)
        self.refresh_urls()

    def read(self, export: str, *args: Any) -> Any:
        """The decoded answer of a ``*_json`` export, after the hand-over."""
        self.check_open()
        self.hand_over()
        return self.lib.read_json(export, self.handle, *args)

    def workers(self) -> List[WorkerInfo]:
        states = self.read("br_workers_json")
        self.urls = {state["id"]: state["url"] for state in states}
        return [WorkerInfo.from_json(state) for state in states]

    def statistics(self) -> Statistics:
        return Statistics.from_json(self.read("br_stats_json"), self.lib.branches)

    # -- worker id -> URL --------------------------------------------------------------------

    def refresh_urls(self) -> None:
        self.urls = {worker_id: url for worker_id, url in self.lib.read_json("br_members_json", self.handle)}
        self.decided = {}

    def urls_of(self, ids: int) -> Optional[Tuple[str, str]]:
        """The (chosen, preferred) URLs of worker ids packed as ``out[1]``, refreshing the map
        once for workers added since; None when one of them has left the membership."""
        for attempt in range(2):
            urls = self.urls
            worker, preferred = urls.get(ids & _LOW32), urls.get(ids >> 32)
            if worker is not None and preferred is not None:
                return worker, preferred
            if attempt == 0:
                self.refresh_urls()
        return None

    def decision_urls(self, decision: int, ids: int, lease_id: int) -> LeaseDecision:
        """The (worker_url, preferred_url, branch) of a route's packed decision, cached for the
        next route with the same decision. ``ids`` are the worker ids as ``out[1]`` has them
        (the decision lacks them when its ids did not fit; such decisions are not cached)."""
        urls, current = self._lease_urls(decision & self.lib.branch_mask, ids, lease_id)
        if current and not decision & self.lib.ids_dont_fit:
            decided = self.decided
            if len(decided) >= _DECIDED_MAX:
                decided.clear()
            decided[decision] = urls
        return urls

    def lease_decision(self, branch_code: int, ids: int, lease_id: int) -> LeaseDecision:
        """The (worker_url, preferred_url, branch) of a lease from its branch code and worker ids
        (``out[1]``), uncached."""
        return self._lease_urls(branch_code, ids, lease_id)[0]

    def _lease_urls(self, branch_code: int, ids: int, lease_id: int) -> Tuple[LeaseDecision, bool]:
        """:meth:`lease_decision`, and whether its URLs come from the current worker id map."""
        branch = self.lib.branches[branch_code]
        found = self.urls_of(ids)
        if found is None:
            # The membership changed concurrently: the lease knows its workers even if they
            # have been removed since.
            answer = self.lib.read_json("br_lease_workers_json", self.handle, lease_id)
            return (answer["worker_url"], answer["preferred_url"], branch), False
        return (found[0], found[1], branch), True

    def unrouted(self, decision: int) -> Exception:
        """The error of a route that took no lease: its status, or no worker chosen (the
        decision is then a branch code alone)."""
        if decision < 0:
            return self.lib.error(decision)
        return NoWorkerAvailableError(self.lib.branches[decision])


class _ReleasedInForkedChild(List[int]):
    """``NativeRouter.released`` in a process forked after the router was made: a release
    raises :class:`ForkedProcessError` there, as every call into the library does."""

    def append(self, lease_id: int) -> None:
        _native.forked()


def _after_fork_in_child() -> None:
    for native in list(_ROUTERS):
        native.released = _ReleasedInForkedChild()
        native.route_key = native.route_headers = native.route_request = _native.forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
