"""contract: "Leases": leases, their release, the safety net and the streaming wrappers."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from bounded_router import Lease
from reference_model import ReferenceRouter
from support import W, key_preferring, unraisable_exceptions

W0, W1 = W[0], W[1]


@pytest.fixture
def router(make_router):
    return make_router(4)


def active_keys(router):
    return {w.url: w.active_keys for w in router.workers()}


def test_route_counts_and_release_undoes(router):
    key = key_preferring(router, W0)
    lease = router.route(key)
    assert isinstance(lease, Lease)
    assert router.loads()[W0] == 1 and active_keys(router)[W0] == 1
    assert router.active_leases() == 1
    assert not lease.released
    assert lease.release() is True
    assert lease.released
    assert router.loads()[W0] == 0 and active_keys(router)[W0] == 0
    assert router.active_leases() == 0
    assert lease.release() is False  # double release is a no-op
    assert lease.release() is False
    assert router.loads()[W0] == 0 and router.leaked_leases() == 0


def test_route_without_key_counts_no_active_key(router):
    lease = router.route()
    assert lease.branch == "random_fallback"
    assert router.loads()[lease.worker_url] == 1
    assert active_keys(router)[lease.worker_url] == 0
    lease.release()


@pytest.mark.parametrize("key", ["k", b"k", "\u00e9t\u00e9", b"\xff\x00binary"])
def test_str_and_bytes_keys(router, key):
    raw = key.encode("utf-8") if isinstance(key, str) else key
    expected = ReferenceRouter(W[:4]).preferred(raw)  # a str key is hashed as its UTF-8 bytes
    assert router.select(key).worker_url == router.select(raw).worker_url == expected
    with router.route(key) as lease:
        assert (lease.worker_url, lease.branch) == (expected, "explicit_routing_key_hit")


@pytest.mark.parametrize("key", ["", b""])
def test_empty_key_is_absent(router, key):
    assert router.select(key).branch == "random_fallback"
    with router.route(key) as lease:
        assert lease.branch == "random_fallback"


@pytest.mark.parametrize("key", [1, 1.5, bytearray(b"k"), memoryview(b"k"), ["k"], object()])
def test_bad_key_types(router, key):
    with pytest.raises(TypeError, match="routing_key"):
        router.route(key)
    with pytest.raises(TypeError, match="routing_key"):
        router.select(key)
    with pytest.raises(TypeError, match="routing_key"):
        router.acquire(W0, key)
    assert router.active_leases() == 0


def test_str_subclass_key(router):
    class Key(str):
        pass

    with router.route(Key("abc")) as lease:
        assert (lease.worker_url, lease.branch) == (ReferenceRouter(W[:4]).preferred(b"abc"), "explicit_routing_key_hit")
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_acquire(router):
    lease = router.acquire(W1, "some-key")
    assert (lease.worker_url, lease.preferred_url, lease.branch, lease.spilled) == (W1, W1, None, False)
    assert router.loads() == {W[0]: 0, W[1]: 1, W[2]: 0, W[3]: 0}
    assert active_keys(router)[W1] == 1
    assert router.acquire(W1).release() is True  # no key: no active key
    assert active_keys(router)[W1] == 1
    assert sum(router.branch_counts().values()) == 0  # acquire is not a routing decision
    assert lease.release() is True
    assert router.loads()[W1] == 0 and active_keys(router)[W1] == 0


def test_acquire_counts_on_unhealthy_worker_and_in_statistics(router):
    router.set_healthy(W1, False)
    lease = router.acquire(W1)
    assert router.loads()[W1] == 1
    lease.release()


def test_acquire_unknown_worker(router):
    with pytest.raises(KeyError, match="http://nope"):
        router.acquire("http://nope")
    with pytest.raises(TypeError):
        router.acquire(b"http://w0:8000")  # type: ignore[arg-type]
    assert router.active_leases() == 0


def test_active_keys_per_distinct_key(router):
    a1, a2, b = router.acquire(W0, "a"), router.acquire(W0, b"a"), router.acquire(W0, "b")
    other = router.acquire(W1, "a")
    assert active_keys(router) == {W[0]: 2, W[1]: 1, W[2]: 0, W[3]: 0}
    assert router.loads()[W0] == 3
    a1.release()
    assert active_keys(router)[W0] == 2  # "a" is still held by a2
    a2.release()
    assert active_keys(router)[W0] == 1
    b.release()
    other.release()
    assert active_keys(router) == {url: 0 for url in W[:4]}


def test_release_after_remove_worker(router):
    lease = router.acquire(W0, "k")
    router.remove_worker(W0)
    assert W0 not in router.loads()
    assert router.active_leases() == 1  # still held, on a worker that left
    assert lease.worker_url == W0
    assert lease.release() is True
    assert router.active_leases() == 0
    assert lease.release() is False


def test_release_after_remove_and_re_add_leaves_the_new_worker_alone(router):
    old = router.acquire(W0, "k")
    routed = router.route(key_preferring(router, W0, prefix="r"))
    assert routed.worker_url == W0
    router.remove_worker(W0)
    router.add_worker(W0)
    new = router.acquire(W0, "k")
    assert router.loads()[W0] == 1
    assert old.release() is True
    assert routed.release() is True
    assert router.loads()[W0] == 1  # the new worker's counters are untouched
    assert active_keys(router)[W0] == 1
    assert router.active_leases() == 1
    assert new.release() is True
    assert router.loads()[W0] == 0 and router.active_leases() == 0


def test_release_after_set_workers_drops_the_worker(router):
    lease = router.acquire(W0)
    router.set_workers(W[1:4])
    assert lease.release() is True
    assert router.loads() == {url: 0 for url in W[1:4]}


def test_safety_net_counts_a_leak(router):
    lease = router.route("k")
    url = lease.worker_url
    assert router.loads()[url] == 1
    del lease
    gc.collect()
    assert router.loads()[url] == 0
    assert router.leaked_leases() == 1
    assert router.active_leases() == 0


def test_safety_net_in_a_reference_cycle(router):
    class Holder:
        pass

    holder = Holder()
    holder.self = holder
    holder.lease = router.acquire(W1)
    del holder
    gc.collect()
    assert router.loads()[W1] == 0 and router.leaked_leases() == 1


def test_released_leases_are_not_leaks(router):
    for _ in range(5):
        router.route("k").release()
    with router.route("k"):
        pass
    gc.collect()
    assert router.leaked_leases() == 0


def test_lease_keeps_router_alive_and_releasable():
    from bounded_router import Router

    lease = Router(W[:2]).route("k")
    gc.collect()
    assert lease.release() is True  # the router was not collected while the lease held it


def test_release_after_close_returns_false(make_router, capfd):
    router = make_router(2)
    lease = router.route("k")
    router.close()
    assert lease.released
    assert lease.release() is False
    unreleased = make_router(2).route("k")
    unreleased._native.close()
    capfd.readouterr()
    with unraisable_exceptions() as raised:
        del unreleased  # the safety net of a lease of a closed router is quiet
        gc.collect()
    assert raised == []
    assert capfd.readouterr() == ("", "")


def test_with_releases_on_exception(router):
    with pytest.raises(ZeroDivisionError):
        with router.route("k") as lease:
            assert router.loads()[lease.worker_url] == 1
            1 / 0
    assert lease.released and set(router.loads().values()) == {0}
    with router.route("k") as lease:
        lease.release()  # released early inside the block: the exit is a no-op
    assert router.active_leases() == 0


def test_async_with(router):
    async def main():
        async with router.route("k") as lease:
            assert router.loads()[lease.worker_url] == 1
            await asyncio.sleep(0)
        return lease

    lease = asyncio.run(main())
    assert lease.released and router.active_leases() == 0

    async def failing():
        async with router.route("k"):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        asyncio.run(failing())
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_concurrent_release_releases_once(router):
    for _ in range(50):
        lease = router.route("k")
        results = []
        barrier = threading.Barrier(4)

        def release():
            barrier.wait()
            results.append(lease.release())

        threads = [threading.Thread(target=release) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, False, False, True]
    assert router.active_leases() == 0 and set(router.loads().values()) == {0}


def test_lease_attributes_are_read_only(router):
    lease = router.route("k")
    for name in ("worker_url", "preferred_url", "branch", "spilled"):
        with pytest.raises(AttributeError):
            setattr(lease, name, "x")
    with pytest.raises(AttributeError):
        lease.extra = 1  # __slots__
    assert "Lease active" in repr(lease) and lease.worker_url in repr(lease)
    lease.release()
    assert "Lease released" in repr(lease)


# -- wrap_iter -----------------------------------------------------------------------------


class Source:
    """A generator over items that records how it ended; raises at index ``fail_at``."""

    def __init__(self, items, fail_at=None):
        self.items, self.fail_at, self.closed, self.finished = items, fail_at, False, False

    def __iter__(self):
        try:
            for i, item in enumerate(self.items):
                if i == self.fail_at:
                    raise RuntimeError("upstream failed")
                yield item
            self.finished = True
        except GeneratorExit:
            self.closed = True
            raise


def test_wrap_iter_exhaustion(router):
    lease = router.route("k")
    source = Source([1, 2, 3])
    stream = lease.wrap_iter(source)
    assert router.loads()[lease.worker_url] == 1
    assert next(stream) == 1
    assert not lease.released  # held while streaming
    assert list(stream) == [2, 3]
    assert source.finished and lease.released
    assert list(stream) == []
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_wrap_iter_exception(router):
    lease = router.route("k")
    stream = lease.wrap_iter(Source([1, 2, 3], fail_at=1))
    assert next(stream) == 1
    with pytest.raises(RuntimeError, match="upstream failed"):
        next(stream)
    assert lease.released and router.active_leases() == 0


def test_wrap_iter_close(router):
    lease = router.route("k")
    source = Source([1, 2, 3])
    stream = lease.wrap_iter(source)
    assert next(stream) == 1
    stream.close()
    assert source.closed and lease.released
    assert router.active_leases() == 0 and router.leaked_leases() == 0
    stream.close()  # idempotent
    with pytest.raises(StopIteration):
        next(stream)


def test_wrap_iter_close_before_start(router):
    lease = router.route("k")
    stream = lease.wrap_iter([1, 2])
    stream.close()
    assert lease.released


def test_wrap_iter_garbage_collected(router):
    lease = router.route("k")
    stream = lease.wrap_iter(Source([1, 2, 3]))
    for item in stream:
        break  # a client went away mid-stream
    del lease, stream
    gc.collect()
    assert router.active_leases() == 0
    assert router.leaked_leases() == 0  # released by the wrapper, not by the safety net


@pytest.mark.parametrize("kind", ["iter", "aiter"])
def test_a_wrapper_collected_in_a_reference_cycle_releases_its_lease(router, kind):
    # Regression (found by a review): when the wrapper was its lease's only holder and both were
    # collected in a cycle (a frame that kept the exception it caught), the collector could run
    # the lease's safety net first, which counted the lease as leaked.
    async def chunks():
        yield b"a"

    def handler():
        lease = router.route("k")
        body = lease.wrap_iter(iter([b"a"])) if kind == "iter" else lease.wrap_aiter(chunks())
        del lease  # the wrapper is the lease's only holder
        try:
            raise ConnectionError("the client left")
        except ConnectionError as e:
            caught = e  # the frame holds caught, whose traceback holds the frame: a cycle with body
        assert body and caught

    gc.disable()
    try:
        handler()
        gc.collect()
    finally:
        gc.enable()
    assert (router.active_leases(), router.leaked_leases()) == (0, 0)


def test_wrap_non_iterable_keeps_the_lease(router):
    lease = router.route("k")
    with pytest.raises(TypeError):
        lease.wrap_iter(5)
    with pytest.raises(TypeError, match="async iterable"):
        lease.wrap_aiter([1, 2])
    gc.collect()
    assert not lease.released and router.active_leases() == 1
    lease.release()


def test_wrap_iter_is_a_generator(router):
    import collections.abc

    lease = router.route("k")
    stream = lease.wrap_iter(iter(range(3)))
    assert isinstance(stream, collections.abc.Generator)
    assert iter(stream) is stream
    with pytest.raises(ValueError):
        stream.throw(ValueError("stop"))
    assert lease.released


# -- wrap_aiter ----------------------------------------------------------------------------


class AsyncSource:
    def __init__(self, items, fail_at=None, block_at=None):
        self.items, self.fail_at, self.block_at = items, fail_at, block_at
        self.closed = self.finished = self.cancelled = False
        self.blocked = None  # an asyncio.Event, set once the source waits at block_at

    async def __call__(self):
        self.blocked = asyncio.Event()
        try:
            for i, item in enumerate(self.items):
                if i == self.fail_at:
                    raise RuntimeError("upstream failed")
                if i == self.block_at:
                    self.blocked.set()
                    await asyncio.Event().wait()  # never set: only cancellation ends it
                await asyncio.sleep(0)
                yield item
            self.finished = True
        except GeneratorExit:
            self.closed = True
            raise
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_wrap_aiter_exhaustion(router):
    lease = router.route("k")
    source = AsyncSource([1, 2, 3])

    async def main():
        stream = lease.wrap_aiter(source())
        first = await stream.__anext__()
        assert not lease.released
        return [first] + [item async for item in stream]

    assert asyncio.run(main()) == [1, 2, 3]
    assert source.finished and lease.released and router.active_leases() == 0


def test_wrap_aiter_exception(router):
    lease = router.route("k")

    async def main():
        return [item async for item in lease.wrap_aiter(AsyncSource([1, 2], fail_at=1)())]

    with pytest.raises(RuntimeError, match="upstream failed"):
        asyncio.run(main())
    assert lease.released and router.active_leases() == 0


def test_wrap_aiter_aclose(router):
    lease = router.route("k")
    source = AsyncSource([1, 2, 3])

    async def main():
        stream = lease.wrap_aiter(source())
        assert await stream.__anext__() == 1
        await stream.aclose()
        await stream.aclose()  # idempotent
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()

    asyncio.run(main())
    assert source.closed and lease.released
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_wrap_aiter_aclose_before_start(router):
    lease = router.route("k")

    async def main():
        await lease.wrap_aiter(AsyncSource([1])()).aclose()

    asyncio.run(main())
    assert lease.released


def test_wrap_aiter_task_cancellation(router):
    lease = router.route("k")
    source = AsyncSource([1, 2, 3], block_at=1)
    received = []

    async def consume():
        async for item in lease.wrap_aiter(source()):
            received.append(item)

    async def main():
        task = asyncio.ensure_future(consume())
        for _ in range(1000):  # bounded: the task starts the source within a few turns
            if source.blocked is not None:
                break
            await asyncio.sleep(0)
        await asyncio.wait_for(source.blocked.wait(), 10)  # the consumer now waits inside the source
        assert received == [1] and not lease.released
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert received == [1] and source.cancelled and lease.released
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_wrap_aiter_garbage_collected(router):
    lease = router.route("k")

    async def main():
        stream = lease.wrap_aiter(AsyncSource([1, 2, 3])())
        async for _ in stream:
            break

    asyncio.run(main())
    del lease
    gc.collect()
    assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_wrap_aiter_accepts_async_iterables(router):
    class Numbers:
        def __aiter__(self):
            return AsyncSource([7, 8])().__aiter__()

    lease = router.route("k")

    async def main():
        return [item async for item in lease.wrap_aiter(Numbers())]

    assert asyncio.run(main()) == [7, 8]
    assert lease.released
