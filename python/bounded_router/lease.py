"""Leases: the load token of one request in flight.

:meth:`Router.route <bounded_router.Router.route>` and :meth:`Router.acquire
<bounded_router.Router.acquire>` count a request on a worker and return a :class:`Lease`;
:meth:`Lease.release` undoes that count, once. A lease is also a (sync and async) context
manager, and :meth:`Lease.wrap_iter` / :meth:`Lease.wrap_aiter` hold it for the life of a
streaming body::

    lease = router.route("session-42")
    return StreamingResponse(lease.wrap_aiter(upstream_body()))

A lease that is garbage-collected without having been released is released by a safety net
and counted by the router as leaked (:meth:`Router.leaked_leases
<bounded_router.Router.leaked_leases>`). Leases cannot be copied or pickled: a copy would
release the same request twice.
"""

from __future__ import annotations

from ctypes import c_uint64
from types import TracebackType
from typing import (
    Any,
    AsyncGenerator,
    AsyncIterable,
    Generator,
    Iterable,
    NoReturn,
    Optional,
    Type,
    TypeVar,
    cast,
)


from ._native_router import HAND_OVER_AT, LeaseDecision, NativeRouter
from .health import OUTCOMES

__all__ = ["Lease", "LeasedIterator", "LeasedAsyncIterator"]

T = TypeVar("T")

_SPILLOVER = "explicit_routing_key_spillover"


class Lease:
    """One request counted on a worker, until :meth:`release`.

    Leases are created by a :class:`~bounded_router.Router`; do not construct them directly.

    Attributes:
        worker_url: the worker the request was counted on (where to send it).
        preferred_url: the worker the routing key prefers; differs from ``worker_url`` only
            when the request spilled. Equal to ``worker_url`` for a lease from ``acquire``.
        branch: the rule that chose the worker (e.g. ``"explicit_routing_key_hit"``), or None
            for a lease from ``acquire``, which made no routing decision.
    """

    # _decision is the (worker_url, preferred_url, branch) of the routing decision, shared by
    # every lease of the same decision (NativeRouter.decided), so a route sets three slots.
    __slots__ = ("_native", "_id", "_decision")

    _native: NativeRouter
    _id: int
    _decision: LeaseDecision

    def __init__(self, native: NativeRouter, lease_id: int, decision: LeaseDecision) -> None:
        self._native = native
        self._id = lease_id
        self._decision = decision

    @property
    def worker_url(self) -> str:
        """The worker the request was counted on."""
        return self._decision[0]

    @property
    def preferred_url(self) -> str:
        """The worker the routing key prefers (``worker_url`` unless the request spilled)."""
        return self._decision[1]

    @property
    def branch(self) -> Optional[str]:
        """The branch that chose the worker, or None for a lease from ``acquire``."""
        return self._decision[2]

    @property
    def spilled(self) -> bool:
        """Whether the request left its preferred worker (branch ``explicit_routing_key_spillover``)."""
        return self._decision[2] == _SPILLOVER

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called (or the router was closed)."""
        return not self._id or self._native.closed

    def release(self, outcome: str = "success") -> bool:
        """Stop counting the request; return True if this call released it.

        ``outcome`` is how the request ended on the worker (docs/contract.md, "Worker
        failures"): ``"success"`` (the default), ``"failure"`` (connection refused or reset,
        no answer in time, a 500/502/503/504: the circuit breaker counts it), ``"pushback"``
        (a 429) or ``"neutral"`` (another 4xx; counts neither way). Only a plain success takes
        the fast path described below; the others make one call into the library.

        Idempotent and thread-safe: only the first call releases, later ones return False.
        Releasing after the router was closed returns False. Releasing after the worker was
        removed is fine and never touches a new worker with the same URL.

        The release costs no call into the native library: the router hands it over with its
        next call (a route takes it along in the same call), before that call decides or
        reports anything, so every route, selection and statistic made after ``release``
        returned sees the request gone.

        Raises:
            ForkedProcessError: in a process forked after the lease was taken.
        """
        if outcome != "success":
            return self._finish(outcome)
        lease_id = self._id
        if not lease_id:
            return False
        self._id = 0
        native = self._native
        if native.closed:
            self.__class__ = Lease
            return False
        released = native.released
        try:
            released.append(lease_id)  # the release path: see _native_router
        except BaseException:  # ForkedProcessError: nothing was released
            self._id = lease_id
            raise
        self.__class__ = Lease  # nothing left for the safety net (see _HeldLease)
        if len(released) > HAND_OVER_AT:
            native.hand_over()
        return True

    def first_token(self) -> bool:
        """Say that the worker's answer has begun (its first token or first byte); return True
        if this call marked the lease.

        The lease's weight then leaves its worker's prefill load (``WorkerInfo.prefill_load``),
        the load a policy with ``balance_by="prefill"`` weighs (docs/contract.md, "Prefill
        load"); its load and its place in flight stay until :meth:`release`. Idempotent and
        thread-safe: later calls, and calls after the release, return False without a call into
        the library. The first makes one short call (the GIL held, as a route); :meth:`wrap_iter`
        and :meth:`wrap_aiter` make it on the first item, the proxies on the worker's first body
        byte.

        Raises:
            ForkedProcessError: in a process forked after the lease was taken.
        """
        lease_id = self._id
        native = self._native
        if not lease_id or native.closed:
            return False
        # The request path's binding (see _native): ready-made uint64 arguments. A negative status
        # (the router closed meanwhile by another thread) marked nothing.
        marked: int = native.lib.br_first_token(native.handle_arg, c_uint64(lease_id))
        if marked != 1:
            return False
        if self.__class__ is _HeldLease:  # not released meanwhile by another thread
            self.__class__ = _StartedLease
            if not self._id:  # released between the check and the change: no safety net left
                self.__class__ = Lease  # type: ignore[assignment]  # (mypy narrowed self to _HeldLease)
        return True

    def fail(self) -> bool:
        """Release the lease as a failure of its worker: ``release(outcome="failure")``."""
        return self._finish("failure")

    def _finish(self, outcome: str) -> bool:
        """Release with an outcome other than success: one ``br_finish`` call."""
        try:
            code = OUTCOMES.index(outcome)
        except ValueError:
            raise ValueError("outcome must be one of %s, got %r" % (", ".join(OUTCOMES), outcome)) from None
        lease_id = self._id
        if not lease_id:
            return False
        native = self._native
        self._id = 0
        if native.closed:
            self.__class__ = Lease
            return False
        try:
            finished = native.call("br_finish", lease_id, code)
        except BaseException:  # ForkedProcessError: nothing was released
            self._id = lease_id
            raise
        self.__class__ = Lease  # nothing left for the safety net (see _HeldLease)
        return bool(finished)

    def __copy__(self) -> NoReturn:
        raise TypeError("a Lease cannot be copied: each one counts one request, released once")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self.__copy__()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("a Lease cannot be pickled: it counts a request in this process's router")

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    def wrap_iter(self, iterable: Iterable[T]) -> LeasedIterator[T]:
        """Yield the items of ``iterable`` and release this lease when the iteration ends.

        The lease is released when the iterable is exhausted, when it raises, and when the
        returned generator is closed or garbage-collected (even before its first item), so a
        streaming response body holds the lease exactly as long as it is being sent. The first
        item marks the lease's first token (:meth:`first_token`).
        """
        return LeasedIterator(self, iterable)

    def wrap_aiter(self, iterable: AsyncIterable[T]) -> LeasedAsyncIterator[T]:
        """Async version of :meth:`wrap_iter`.

        The lease is released when the iterable is exhausted or raises, when the returned
        async generator is closed (``aclose()``) or garbage-collected, and when the task
        iterating it is cancelled while waiting for an item. The first item marks the lease's
        first token (:meth:`first_token`).
        """
        return LeasedAsyncIterator(self, iterable)

    def __repr__(self) -> str:
        state = "released" if self.released else "active"
        return "<Lease %s worker_url=%r preferred_url=%r branch=%r>" % ((state,) + self._decision)


class _HeldLease(Lease):
    """A lease not released yet: the same object, plus the safety net.

    Routers hand out leases of this class, and :meth:`Lease.release` turns them into plain
    :class:`Lease` objects: CPython calls the finalizer of every object whose class has one, so
    only the leases that still need it carry it (what that buys: BENCHMARKS.md).
    """

    __slots__ = ()

    def __del__(self) -> None:
        # Safety net: a lease dropped without release is released and counted as leaked. Must
        # never raise (interpreter shutdown, closed router, forked child).
        try:
            lease_id = self._id
            if lease_id:
                self._id = 0
                self._native.release_abandoned(lease_id)
        except BaseException:
            pass


class _StartedLease(_HeldLease):
    """A lease not released yet whose first token was marked: :meth:`first_token` has nothing
    left to do and answers without a call into the library (a release turns it into a plain
    :class:`Lease`, as it does a :class:`_HeldLease`)."""

    __slots__ = ()

    def first_token(self) -> bool:
        return False


class _WrappedLease(Lease):
    """A lease a wrapper (:meth:`Lease.wrap_iter`, :meth:`Lease.wrap_aiter`) releases: its own
    safety net is gone, for in a reference cycle the collector may run the lease's finalizer
    before the wrapper's, and the lease would count as leaked though the wrapper releases it."""

    __slots__ = ()


def _owned_by(lease: Lease) -> Lease:
    """Leave the lease's release to the wrapper taking it (see _WrappedLease)."""
    if type(lease) in (_HeldLease, _StartedLease):
        lease.__class__ = _WrappedLease
    return lease


class LeasedIterator(Generator[T, None, None]):
    """The generator returned by :meth:`Lease.wrap_iter`.

    It behaves like ``yield from iterable`` inside ``try: ... finally: lease.release()``, except
    that closing it (or dropping it) before the first item also releases the lease.
    """

    __slots__ = ("_lease", "_iterator", "_done", "_started")

    def __init__(self, lease: Lease, iterable: Iterable[T]) -> None:
        # The iterator first: if iterable is not iterable, no half-built wrapper releases the lease.
        self._iterator: Any = iter(iterable)
        self._lease = _owned_by(lease)
        self._done = False
        self._started = False

    def _finish(self) -> None:
        self._done = True
        self._lease.release()

    def send(self, value: None) -> T:
        if self._done:
            raise StopIteration
        try:
            item = next(self._iterator) if value is None else self._iterator.send(value)
            if not self._started:  # the first item is the answer's first token
                self._started = True
                self._lease.first_token()
            return cast(T, item)
        except BaseException:
            self._finish()
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> T:
        exc = _thrown_exception(typ, val, tb)
        if not self._done:
            inner_throw = getattr(self._iterator, "throw", None)
            if inner_throw is not None:
                try:
                    return cast(T, inner_throw(exc))
                except BaseException:
                    self._finish()
                    raise
            self.close()
        raise exc

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            inner_close = getattr(self._iterator, "close", None)
            if inner_close is not None:
                inner_close()
        finally:
            self._lease.release()

    def __del__(self) -> None:
        try:
            if not self._done:
                self._done = True
                self._lease.release()
        except BaseException:
            pass


class LeasedAsyncIterator(AsyncGenerator[T, None]):
    """The async generator returned by :meth:`Lease.wrap_aiter`.

    It behaves like an async generator that re-yields ``iterable`` inside
    ``try: ... finally: lease.release()``; since releasing is synchronous, it also releases
    when dropped without ``aclose()`` (no event loop needed) and when closed before its first
    item.
    """

    __slots__ = ("_lease", "_iterator", "_done", "_started")

    def __init__(self, lease: Lease, iterable: AsyncIterable[T]) -> None:
        try:
            make_iterator = type(iterable).__aiter__
        except AttributeError:
            raise TypeError("wrap_aiter needs an async iterable, got %s" % type(iterable).__name__) from None
        self._iterator: Any = make_iterator(iterable)
        self._lease = _owned_by(lease)
        self._done = False
        self._started = False

    def _finish(self) -> None:
        self._done = True
        self._lease.release()

    async def asend(self, value: None) -> T:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await (self._iterator.__anext__() if value is None else self._iterator.asend(value))
            if not self._started:  # the first item is the answer's first token
                self._started = True
                self._lease.first_token()
            return cast(T, item)
        except BaseException:  # StopAsyncIteration, an error, or CancelledError
            self._finish()
            raise

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> T:
        exc = _thrown_exception(typ, val, tb)
        if not self._done:
            inner_throw = getattr(self._iterator, "athrow", None)
            if inner_throw is not None:
                try:
                    return cast(T, await inner_throw(exc))
                except BaseException:
                    self._finish()
                    raise
            await self.aclose()
        raise exc

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            inner_close = getattr(self._iterator, "aclose", None)
            if inner_close is not None:
                await inner_close()
        finally:
            self._lease.release()

    def __del__(self) -> None:
        try:
            if not self._done:
                self._done = True
                self._lease.release()
        except BaseException:
            pass


def _thrown_exception(typ: Any, val: Any, tb: Any) -> BaseException:
    """The exception a generator's ``throw(typ, val, tb)`` (either signature) raises."""
    if isinstance(typ, BaseException):
        exc = typ
    elif val is None:
        exc = typ()
    elif isinstance(val, BaseException):
        exc = val
    else:
        exc = typ(val)
    return exc if tb is None else exc.with_traceback(tb)
