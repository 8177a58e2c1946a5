"""What each shortcut of the Python request path buys: route+release with the shortcut and with
it switched off, in one process, case after case in rounds (the median over rounds is reported).

    python scripts/bench_tricks.py [--rounds 15] [--n 50000]

Run it on the installed wheel. Each shortcut is switched off by swapping in what the code
would do without it (a plain ctypes call, a cache that never hits, ...), so the difference is
the shortcut's worth; the issue's rule is to keep one only when it is worth more than 10% of
route+release. Not part of `make test`: a measurement, not a check.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from contextlib import ExitStack, contextmanager
from ctypes import c_char_p, c_int64, c_size_t, c_uint64
from typing import Any, Callable, Dict, Iterator, List, Tuple

from bounded_router import Router, _encoding, _native, lease, router as router_module

KEYS = ["session-%d" % i for i in range(4096)]
HEADERS = {"x-smg-routing-key": "group-17", "authorization": "Bearer x", "accept": "*/*", "user-agent": "bench"}


class _NeverHits(dict):  # type: ignore[type-arg]
    """A cache that never answers and never keeps anything."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


class _SizeEachTime:
    """_SIZES without the table: a size_t argument built for every call."""

    def __getitem__(self, n: int) -> Any:
        return c_size_t(n)


class _FreshBuffers:
    """_native.BUFFERS without the per-thread buffers: new ones for every call."""

    @property
    def value(self) -> Any:
        out = (c_uint64 * 3)()
        return out, ctypes.byref(out)


class _AlwaysFinalized(lease._HeldLease):
    """Every lease keeps its finalizer, released or not."""

    __slots__ = ()


@contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def route_release(router: Router, n: int) -> None:
    route = router.route
    for i in range(n):
        route(KEYS[i & 4095]).release()


def route_headers_release(router: Router, n: int) -> None:
    route = router.route
    for i in range(n):
        route(headers=HEADERS).release()


def without_hand_over(router: Router, n: int) -> None:
    # Each release makes its own native call (br_release, with argtypes, releasing the GIL).
    native = router._native
    release, handle = native.lib.br_release, native.handle
    route = router.route
    for i in range(n):
        held = route(KEYS[i & 4095])
        release(handle, held._id)
        held._id = 0
        held.__class__ = lease.Lease


def cases(router: Router) -> Dict[str, Callable[[int], None]]:
    native = router._native
    plain = ctypes.CDLL(native.lib.path).br_release_then_route_key  # argtypes, GIL released
    plain.restype, plain.argtypes = c_int64, [c_uint64, c_char_p, c_size_t, ctypes.c_void_p]

    def variant(run: Callable[[Router, int], None], *patches: Any) -> Callable[[int], None]:
        def case(n: int) -> None:
            with ExitStack() as stack:
                for patch in patches:
                    stack.enter_context(patched(*patch))
                run(router, n)

        return case

    return {
        "route+release": variant(route_release),
        "no release hand-over": variant(without_hand_over),
        # argtypes convert plain ints: the handle and the sizes as a caller without the shortcut has them
        "no GIL-holding call without argtypes": variant(
            route_release, (native, "route_key", plain), (native, "handle_arg", native.handle), (router_module, "_SIZES", tuple(range(256)))
        ),
        "no decision cache": variant(route_release, (native, "decided", _NeverHits())),
        "no size_t table": variant(route_release, (router_module, "_SIZES", _SizeEachTime())),
        "no per-thread buffers": variant(route_release, (router_module, "_BUFFERS", _FreshBuffers())),
        "finalizer on every lease": variant(
            route_release, (router_module, "_HeldLease", _AlwaysFinalized), (lease, "Lease", _AlwaysFinalized)
        ),
        "route(headers)+release": variant(route_headers_release),
        "route(headers) no header-name cache": variant(route_headers_release, (_encoding, "_names", _NeverHits())),
    }


def measure(rounds: int, n: int) -> Dict[str, Tuple[float, float]]:
    """{case: (median seconds per request, median ratio to the same path with every shortcut)}."""
    router = Router(["http://10.0.0.%d:8000" % i for i in range(8)])
    timed = cases(router)
    samples: Dict[str, List[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, case in timed.items():
            start = time.perf_counter()
            case(n)
            samples[name].append((time.perf_counter() - start) / n)
    router.close()
    results = {}
    for name, values in samples.items():
        base = samples["route(headers)+release" if "headers" in name else "route+release"]
        results[name] = (statistics.median(values), statistics.median([a / b for a, b in zip(values, base)]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    print("%-40s %10s %10s" % ("case", "ns/op", "vs base"))
    for name, (seconds, ratio) in measure(args.rounds, args.n).items():
        print("%-40s %10.0f %9.2fx" % (name, seconds * 1e9, ratio))


if __name__ == "__main__":
    main()
