"""Stress without leaks: Python threads take and release leases with random early exits while
workers are added, removed and flip health underneath; then every count must be zero.

    .venv/bin/python scripts/stress.py                 # 1,000,000 leases, 8 threads, + the Go stress
    .venv/bin/python scripts/stress.py --leases 50000 --no-go

Eight threads share one router. Six take leases synchronously and leave early in every way a
caller can: an exception inside ``with``, a double release, a streaming body (``wrap_iter``)
exhausted, failing, closed, or abandoned half-way, a lease dropped without release (the safety
net counts it as leaked). Two run asyncio loops whose tasks hold leases across ``await`` with
``async with`` and ``wrap_aiter`` and are cancelled at random, or abandon their async
iterators. Meanwhile a churn thread adds, removes and replaces workers and flips their health,
and a monitor thread checks that no load or key count is ever negative.

Afterwards: no lease is active (members and removed workers alike), every load and key count
is 0, the leaked count equals the leases dropped on purpose, no thread raised. With ``--go``
(the default) it also runs the Go stress test (goroutines, under the race detector) for the
same number of leases. The figures are printed; the exit status is 0 only if every check held.

tests/python/test_conformance_stress.py runs a small version in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, Dict, List

from bounded_router import NoWorkerAvailableError, Router

POOL = ["http://stress-w%d:8000" % i for i in range(10)]
KEYS = ["session-%d" % i for i in range(40)]
# Each synchronous lease thread also makes a membership or health change every this many leases.
CHURN_EVERY = 500


class Boom(Exception):
    """The request failed while the lease was held."""


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter = Counter()

    def add(self, **counts: int) -> None:
        with self.lock:
            self.counts.update(counts)


def _body(rng: random.Random, n: int, fail_at: int = -1):
    for i in range(n):
        if i == fail_at:
            raise Boom("stream failed")
        yield b"chunk"


async def _abody(n: int, fail_at: int = -1):
    for i in range(n):
        if i == fail_at:
            raise Boom("stream failed")
        await asyncio.sleep(0)
        yield b"chunk"


def sync_worker(router: Router, quota: int, seed: int, stats: Stats, errors: List[BaseException]) -> None:
    rng = random.Random(seed)
    taken = 0
    try:
        while taken < quota:
            if taken % CHURN_EVERY == 0:  # churn that does not depend on thread scheduling
                churn_once(router, rng, stats)
            kind = rng.random()
            key = rng.choice(KEYS)
            try:
                if kind < 0.30:  # with-block, sometimes failing inside
                    try:
                        with router.route(key) as lease:
                            taken += 1
                            if rng.random() < 0.25:
                                raise Boom(lease.worker_url)
                    except Boom:
                        stats.add(exceptions=1)
                elif kind < 0.45:  # headers, explicit release, sometimes twice
                    headers = {"X-SMG-Routing-Key": key} if rng.random() < 0.7 else {"Cookie": key}
                    if rng.random() < 0.1:
                        headers = {"X-SMG-Target-Worker": str(rng.randrange(10))}
                    lease = router.route(headers=headers)
                    taken += 1
                    assert lease.release() is True
                    if rng.random() < 0.2:
                        assert lease.release() is False
                        stats.add(double_releases=1)
                elif kind < 0.65:  # a streaming body: exhausted, failing, closed or abandoned
                    lease = router.route(key)
                    taken += 1
                    n = rng.randrange(1, 6)
                    how = rng.randrange(4)
                    iterator = lease.wrap_iter(_body(rng, n, fail_at=rng.randrange(n) if how == 1 else -1))
                    del lease
                    try:
                        if how == 0:
                            for _ in iterator:
                                pass
                        elif how == 1:
                            for _ in iterator:
                                pass
                        elif how == 2:
                            next(iterator, None)
                            iterator.close()
                        else:
                            next(iterator, None)
                            stats.add(abandoned_iterators=1)
                    except Boom:
                        stats.add(exceptions=1)
                    del iterator  # abandoned: the wrapper's finalizer releases
                elif kind < 0.75:  # acquire on a worker chosen elsewhere (it may have left)
                    try:
                        lease = router.acquire(rng.choice(POOL), key if rng.random() < 0.5 else None)
                    except KeyError:
                        stats.add(acquire_unknown=1)
                        continue
                    taken += 1
                    lease.release()
                elif kind < 0.77:  # dropped without release: the safety net releases it, as leaked
                    router.route(key)
                    taken += 1
                    stats.add(dropped=1)
                else:  # route and release
                    lease = router.route(key if rng.random() < 0.8 else None)
                    taken += 1
                    lease.release()
            except NoWorkerAvailableError:
                stats.add(no_worker=1)
    except BaseException as e:  # reported by the main thread
        errors.append(e)
    stats.add(leases=taken)


def async_worker(router: Router, quota: int, seed: int, stats: Stats, errors: List[BaseException]) -> None:
    rng = random.Random(seed)
    taken = 0

    async def hold(key: str) -> None:
        nonlocal taken
        how = rng.randrange(3)
        try:
            lease = router.route(key)
        except NoWorkerAvailableError:
            stats.add(no_worker=1)
            return
        taken += 1
        if how == 0:
            async with lease:
                await asyncio.sleep(0)
                await asyncio.sleep(0)
        elif how == 1:
            n = rng.randrange(1, 5)
            try:
                async for _ in lease.wrap_aiter(_abody(n, fail_at=rng.randrange(n + 2))):
                    pass
            except Boom:
                stats.add(exceptions=1)
        else:  # an async iterator abandoned after its first item, without aclose()
            iterator = lease.wrap_aiter(_abody(3))
            del lease
            await iterator.__anext__()
            stats.add(abandoned_iterators=1)
            del iterator

    async def main() -> None:
        while taken < quota:
            tasks = [asyncio.ensure_future(hold(rng.choice(KEYS))) for _ in range(min(64, quota - taken))]
            await asyncio.sleep(0)  # let them start and take their leases
            for task in tasks:
                if rng.random() < 0.3:
                    task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, asyncio.CancelledError):
                    stats.add(cancelled=1)
                elif isinstance(result, BaseException):
                    raise result

    try:
        asyncio.run(main())
    except BaseException as e:
        errors.append(e)
    stats.add(leases=taken)


def churn_once(router: Router, rng: random.Random, stats: Stats) -> None:
    """One membership or health change."""
    url = rng.choice(POOL)
    kind = rng.randrange(10)
    try:
        if kind == 0:
            router.add_worker(url)
        elif kind == 1:
            router.remove_worker(url)
        elif kind == 2:
            size = 0 if rng.random() < 0.05 else rng.randrange(1, len(POOL) + 1)
            router.set_workers(rng.sample(POOL, size))
        else:
            router.set_healthy(url, rng.random() < 0.75)
    except (KeyError, ValueError):  # not a member / already a member
        pass
    if kind < 3:
        stats.add(membership_changes=1)
    else:
        stats.add(health_flips=1)


def churn(router: Router, stop: threading.Event, seed: int, stats: Stats, errors: List[BaseException]) -> None:
    rng = random.Random(seed)
    try:
        while not stop.is_set():
            churn_once(router, rng, stats)
            time.sleep(0.0002)
    except BaseException as e:
        errors.append(e)


def monitor(router: Router, stop: threading.Event, stats: Stats, errors: List[BaseException]) -> None:
    try:
        while not stop.is_set():
            for worker in router.workers():
                if worker.load < 0 or worker.active_keys < 0 or worker.active_keys > worker.load:
                    stats.add(negative=1)
            if router.active_leases() < 0:
                stats.add(negative=1)
            stats.add(monitor_checks=1)
            time.sleep(0.001)
    except BaseException as e:
        errors.append(e)


def run(leases: int = 1_000_000, threads: int = 8, async_threads: int = 2, seed: int = 0) -> Dict[str, Any]:
    """Run the stress and check it; return the figures. Raises AssertionError on any failure."""
    router = Router(POOL[:8], max_load_skew=1.25, min_load_gap=1)
    stats = Stats()
    errors: List[BaseException] = []
    stop = threading.Event()
    background = [
        threading.Thread(target=churn, args=(router, stop, seed, stats, errors), name="churn"),
        threading.Thread(target=monitor, args=(router, stop, stats, errors), name="monitor"),
    ]
    quotas = [leases // threads + (1 if i < leases % threads else 0) for i in range(threads)]
    workers = [
        threading.Thread(
            target=async_worker if i < async_threads else sync_worker,
            args=(router, quotas[i], seed * 1000 + i, stats, errors),
            name="leases-%d" % i,
        )
        for i in range(threads)
    ]
    for thread in background:
        thread.start()
    start = time.perf_counter()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    duration = time.perf_counter() - start
    stop.set()
    for thread in background:
        thread.join()
    gc.collect()

    counts = stats.counts
    workers_after = router.workers()
    figures = {
        "leases": counts["leases"],
        "threads": threads,
        "async_threads": async_threads,
        "duration_s": round(duration, 2),
        "leases_per_s": round(counts["leases"] / duration),
        "active_leases": router.active_leases(),
        "final_loads": {w.url: w.load for w in workers_after},
        "final_active_keys": sum(w.active_keys for w in workers_after),
        "leaked": router.leaked_leases(),
        "dropped_on_purpose": counts["dropped"],
        "unexpected_leaks": router.leaked_leases() - counts["dropped"],
        "negative_counts_seen": counts["negative"],
        "errors": [repr(e) for e in errors],
    }
    for name in ("exceptions", "double_releases", "abandoned_iterators", "cancelled", "no_worker",
                 "acquire_unknown", "membership_changes", "health_flips", "monitor_checks"):
        figures[name] = counts[name]
    figures["branches"] = {k: v for k, v in router.branch_counts().items() if v}
    router.close()

    assert not errors, errors
    assert figures["leases"] == leases, figures
    assert figures["active_leases"] == 0, figures
    assert all(load == 0 for load in figures["final_loads"].values()), figures
    assert figures["final_active_keys"] == 0, figures
    assert figures["unexpected_leaks"] == 0, figures
    assert figures["negative_counts_seen"] == 0, figures
    return figures


def run_go(leases: int) -> str:
    """The Go stress test (goroutines, race detector) for the same number of leases."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        ["go", "test", "-race", "-count=1", "-run", "^TestStressLeasesUnderChurn$", "-v", "./core"],
        cwd=root,
        env=dict(os.environ, BR_STRESS_LEASES=str(leases)),
        capture_output=True,
        text=True,
    )
    lines = [line.strip() for line in result.stdout.splitlines() if "leases in" in line or "FAIL" in line or "ok " in line]
    if result.returncode != 0:
        raise AssertionError("the Go stress failed:\n" + result.stdout[-4000:] + result.stderr[-2000:])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--async-threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-go", dest="go", action="store_false", help="skip the Go stress test")
    args = parser.parse_args()
    figures = run(args.leases, args.threads, args.async_threads, args.seed)
    width = max(map(len, figures))
    print("Python stress: %d threads (%d asyncio), %d leases" % (args.threads, args.async_threads, args.leases))
    for name, value in figures.items():
        print("  %-*s  %s" % (width, name, value))
    if args.go:
        print("Go stress (8 goroutines, -race), %d leases:" % args.leases)
        print("  " + run_go(args.leases).replace("\n", "\n  "))
    print("OK: no lease leaked, every count is zero, nothing went negative")
    return 0


if __name__ == "__main__":
    sys.exit(main())
