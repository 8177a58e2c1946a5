"""Benchmarks of bounded_router from Python, side by side with what a user could pick instead.

    python scripts/bench.py [--go build/bench-go.txt] [--out BENCHMARKS.md] [--plot BENCHMARKS.png]

Everything is measured in one run, case after case in rounds (so a noisy neighbour slows every
case of a round alike), and reported as the median over the rounds; ratios are taken within
each round, then their median is reported. ``make bench`` runs the Go benchmarks first and
passes their output with --go, so BENCHMARKS.md holds both, with the targets of issue 4.

Run it on the installed wheel (make bench does): it imports bounded_router, the reference model
from tests/reference_model.py (the pure-Python implementation of the same policy), uhashring and
Starlette (requirements-bench.txt).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from ctypes import c_size_t, c_uint32, c_uint64
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the reference model
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_report

import bench_builds  # noqa: E402
import bench_gateway  # noqa: E402
import bench_report  # noqa: E402
import bench_tricks  # noqa: E402
import bench_weights  # noqa: E402
from reference_model import ReferenceRouter  # noqa: E402
from starlette.datastructures import Headers  # noqa: E402
from uhashring import HashRing  # noqa: E402

from bounded_router import Router, _native  # noqa: E402

WORKER_COUNTS = (8, 64, 256, 1024)
THREAD_COUNTS = (1, 2, 4, 8)
BATCH_SIZES = (8, 64)
KEYS = ["session-%d" % i for i in range(4096)]
# A request as a Starlette app sees it: a dozen headers, the routing key among them.
STARLETTE_HEADERS = Headers(
    raw=[
        (b"host", b"router.internal:8080"),
        (b"user-agent", b"python-httpx/0.28.1"),
        (b"accept", b"text/event-stream"),
        (b"accept-encoding", b"gzip, deflate"),
        (b"connection", b"keep-alive"),
        (b"content-type", b"application/json"),
        (b"content-length", b"1843"),
        (b"authorization", b"Bearer sk-3f9a0c7e5b1d4a2f8e6c"),
        (b"x-request-id", b"5b2f6c1e-8d4a-4f3b-9c7e-2a1d0e9f8b7c"),
        (b"traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        (b"x-smg-routing-key", b"group-17"),
        (b"x-forwarded-for", b"10.1.2.3"),
    ]
)


def worker_urls(n: int) -> List[str]:
    return ["http://10.0.%d.%d:8000" % (i // 256, i % 256) for i in range(n)]


# -- timing --------------------------------------------------------------------------------------

# A case runs its operation n times and returns nothing; per-operation cost = time / n.
Case = Callable[[int], None]


def calibrate(case: Case, target_s: float) -> int:
    """How many operations of case take about target_s seconds."""
    n = 16
    while True:
        start = time.perf_counter()
        case(n)
        elapsed = time.perf_counter() - start
        if elapsed > target_s / 4:
            return max(1, int(n * target_s / elapsed))
        n *= 4


def measure(cases: Dict[str, Case], rounds: int, target_s: float) -> Dict[str, List[float]]:
    """Seconds per operation of every case in every round, the cases interleaved in each round."""
    sizes = {name: calibrate(case, target_s) for name, case in cases.items()}
    samples: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            n = sizes[name]
            start = time.perf_counter()
            case(n)
            samples[name].append((time.perf_counter() - start) / n)
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def median_ratio(samples: Dict[str, List[float]], name: str, base: str) -> float:
    """The median over rounds of samples[name] / samples[base] taken in the same round."""
    return median([a / b for a, b in zip(samples[name], samples[base])])


# -- the cases -----------------------------------------------------------------------------------


def floor_cases(lib: Any) -> Dict[str, Case]:
    """Two calls of the trivial export br_abi_version, through each way of loading the library."""
    cases: Dict[str, Case] = {}
    for loader in ("PyDLL", "CDLL"):
        function = getattr(ctypes, loader)(lib.path).br_abi_version
        function.restype = c_uint32

        def case(n: int, abi: Any = function) -> None:
            for _ in range(n):
                abi()
                abi()

        cases["floor " + loader] = case
    return cases


def bare_case(router: Router) -> Case:
    """The package's one call per request with ready-made arguments and nothing around it: each
    call routes a request and releases the previous one (out[2]), as route() does after a
    release(). The least that this binding of the C API pays for route+release."""
    route, handle = router._native.route_key, router._native.handle_arg
    out, out_ref = _native.thread_buffers()
    size = c_size_t.from_param(9)

    def case(n: int) -> None:
        for _ in range(n):
            route(handle, b"session-1", size, out_ref)
            out[2] = out[0]

    return case


def route_release_case(router: Router) -> Case:
    route = router.route

    def case(n: int) -> None:
        for i in range(n):
            route(routing_key=KEYS[i & 4095]).release()

    return case


def with_case(router: Router) -> Case:
    route = router.route

    def case(n: int) -> None:
        for i in range(n):
            with route(routing_key=KEYS[i & 4095]):
                pass

    return case


def headers_case(router: Router) -> Case:
    route, headers = router.route, STARLETTE_HEADERS

    def case(n: int) -> None:
        for _ in range(n):
            route(headers=headers).release()

    return case


def batch_case(router: Router, size: int) -> Case:
    """route_many + release_many; n counts requests, so the cost per request comes out."""
    groups = [KEYS[i : i + size] for i in range(0, 4096, size)]
    route_many, release_many = router.route_many, router.release_many

    def case(n: int) -> None:
        for i in range(max(1, n // size)):
            release_many(route_many(groups[i % len(groups)]))

    return case


def uhashring_case(urls: List[str]) -> Case:
    ring = HashRing(nodes=urls, vnodes=150)
    get_node = ring.get_node

    def case(n: int) -> None:
        for i in range(n):
            get_node(KEYS[i & 4095])

    return case


def reference_case(urls: List[str]) -> Case:
    model = ReferenceRouter(urls)
    route, release = model.route, model.release

    def case(n: int) -> None:
        for i in range(n):
            release(route(KEYS[i & 4095]).lease_id)

    return case


# -- threads -------------------------------------------------------------------------------------


def throughput(make_operation: Callable[[], Callable[[int], None]], threads: int, seconds: float) -> float:
    """Operations per second of `threads` threads running operation(i) in a loop together; each
    thread makes its own operation first (its own output buffers)."""
    stop = threading.Event()
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)

    def run(slot: int) -> None:
        operation = make_operation()
        start_line.wait()
        i = 0
        while not stop.is_set():
            for _ in range(256):
                operation(i)
                i += 1
        counts[slot] = i

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    start_line.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def route_release_operation(router: Router) -> Callable[[], Callable[[int], None]]:
    def make() -> Callable[[int], None]:
        route = router.route
        return lambda i: route(routing_key=KEYS[i & 4095]).release()

    return make


def bare_operation(router: Router, loader: str) -> Callable[[], Callable[[int], None]]:
    """What the package's route+release does at the ctypes level (one call, which also releases
    the previous lease), with the library loaded by `loader`: PyDLL keeps the GIL during each
    call, CDLL releases and takes it again."""
    dll = getattr(ctypes, loader)(router._native.lib.path)
    route, handle = dll.br_release_then_route_key, router._native.handle_arg

    def make() -> Callable[[int], None]:
        out = (c_uint64 * 3)()
        out_ref = ctypes.byref(out)

        def operation(i: int) -> None:
            key = KEYS[i & 4095].encode()
            route(handle, key, c_size_t(len(key)), out_ref)
            out[2] = out[0]

        return operation

    return make


PACKAGE = "route+release (the package: PyDLL)"
PINNED = "route+release, the process on one core"


def on_one_core(measure: Callable[[], float]) -> float:
    """measure() with the whole process held on one CPU: shows what threads lose by running on
    different cores in turn (the GIL moves them from one to another)."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        return measure()
    finally:
        os.sched_setaffinity(0, allowed)


def thread_operations(router: Router) -> Dict[str, Callable[[], Callable[[int], None]]]:
    return {
        PACKAGE: route_release_operation(router),
        "bare calls, PyDLL": bare_operation(router, "PyDLL"),
        "bare calls, CDLL": bare_operation(router, "CDLL"),
    }


# -- first calls, joins --------------------------------------------------------------------------

FIRST_CALL_SCRIPT = textwrap.dedent(
    """
    import json, threading, time
    t0 = time.perf_counter()
    from bounded_router import Router
    t1 = time.perf_counter()
    router = Router(["http://w%d:8000" % i for i in range(64)])
    t2 = time.perf_counter()
    router.route("k").release()
    t3 = time.perf_counter()
    router.route("k").release()
    t4 = time.perf_counter()
    times = {}
    def fresh_thread():
        a = time.perf_counter(); router.route("k").release(); b = time.perf_counter()
        router.route("k").release(); c = time.perf_counter()
        times["thread_first"], times["thread_second"] = b - a, c - b
    thread = threading.Thread(target=fresh_thread); thread.start(); thread.join()
    print(json.dumps(dict(times, import_=t1 - t0, router=t2 - t1, first=t3 - t2, second=t4 - t3)))
    """
)


def first_calls(runs: int) -> Dict[str, float]:
    """Median seconds of the first calls, each run in a new interpreter."""
    import json

    results: Dict[str, List[float]] = {}
    for _ in range(runs):
        output = subprocess.run([sys.executable, "-c", FIRST_CALL_SCRIPT], capture_output=True, text=True, check=True)
        for name, value in json.loads(output.stdout).items():
            results.setdefault(name, []).append(value)
    return {name: median(values) for name, values in results.items()}


def join_times(router: Router, url: str, rounds: int) -> List[float]:
    """Seconds of each add_worker(url), the worker removed again after each."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        router.add_worker(url)
        times.append(time.perf_counter() - start)
        router.remove_worker(url)
    return times


def joins(workers: int, rounds: int) -> Dict[str, float]:
    """add_worker at `workers` members, alone and while another thread routes without pause:
    join time, and the routing thread's latency and throughput."""
    urls = worker_urls(workers + 1)
    router = Router(urls[:workers])
    alone = join_times(router, urls[workers], rounds)
    latencies: List[float] = []
    stop = threading.Event()

    def route_loop() -> None:
        route, clock = router.route, time.perf_counter
        i = 0
        while not stop.is_set():
            start = clock()
            route(KEYS[i & 4095]).release()
            latencies.append(clock() - start)
            i += 1

    idle = throughput(route_release_operation(router), 1, 0.3)
    thread = threading.Thread(target=route_loop)
    thread.start()
    started = time.perf_counter()
    busy = join_times(router, urls[workers], rounds)
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join()
    router.close()
    latencies.sort()
    return {
        "join": median(alone),
        "join_busy": median(busy),
        "switch_interval": sys.getswitchinterval(),
        "route_p99": latencies[int(len(latencies) * 0.99)],
        "route_max": latencies[-1],
        "routes_per_s_during": len(latencies) / elapsed,
        "routes_per_s_idle": idle,
    }


# -- machine and commit --------------------------------------------------------------------------


def machine() -> Dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass

    def command(*args: str) -> str:
        try:
            return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    # The report and plot this run rewrites do not count as changes to what is measured.
    dirty = command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md", ":!BENCHMARKS.png")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": command("git", "rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else ""),
        "cpu": "%s, %d cores" % (cpu, os.cpu_count() or 0),
        "os": platform.platform(),
        "python": "%s %s" % (platform.python_implementation(), platform.python_version()),
        "go": command("go", "version"),
    }


# -- main ----------------------------------------------------------------------------------------


def single_costs(args: argparse.Namespace) -> Dict[str, Any]:
    """One request at 64 workers, every way of making it, against the floor."""
    router = Router(worker_urls(64))
    cases = floor_cases(router._native.lib)
    cases["bare calls"] = bare_case(router)
    cases["route+release"] = route_release_case(router)
    cases["with"] = with_case(router)
    cases["route(headers=)+release"] = headers_case(router)
    for size in BATCH_SIZES:
        cases["batch %d" % size] = batch_case(router, size)
    samples = measure(cases, args.rounds, args.seconds)
    router.close()
    return {
        "single": {name: median(values) for name, values in samples.items()},
        "ratio": {name: median_ratio(samples, name, "floor PyDLL") for name in samples},
    }


def alternatives(args: argparse.Namespace) -> Dict[int, Dict[str, Any]]:
    """Per request, at every worker count: us, and what a user could pick instead."""
    results = {}
    for n in WORKER_COUNTS:
        router = Router(worker_urls(n))
        cases = {
            "bounded_router route+release": route_release_case(router),
            "bounded_router batch 64": batch_case(router, 64),
            "uhashring lookup": uhashring_case(worker_urls(n)),
            "reference model route+release": reference_case(worker_urls(n)),
        }
        samples = measure(cases, args.rounds, args.seconds / 2)
        router.close()
        results[n] = {
            "cost": {name: median(values) for name, values in samples.items()},
            "vs_uhashring": median_ratio(samples, "bounded_router route+release", "uhashring lookup"),
        }
    return results


def thread_scaling(args: argparse.Namespace) -> Dict[str, Dict[int, float]]:
    """Aggregate operations per second at each thread count, the operations interleaved."""
    router = Router(worker_urls(64))
    operations = thread_operations(router)
    samples: Dict[str, Dict[int, List[float]]] = {name: {t: [] for t in THREAD_COUNTS} for name in operations}
    pinned = PINNED if hasattr(os, "sched_setaffinity") else None
    if pinned:
        samples[pinned] = {t: [] for t in THREAD_COUNTS}
    for _ in range(max(3, args.rounds // 2)):
        for t in THREAD_COUNTS:
            for name, make_operation in operations.items():
                samples[name][t].append(throughput(make_operation, t, args.seconds * 4))
            if pinned:
                samples[pinned][t].append(on_one_core(lambda: throughput(operations[PACKAGE], t, args.seconds * 4)))
    router.close()
    return {name: {t: median(v) for t, v in per_count.items()} for name, per_count in samples.items()}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    results: Dict[str, Any] = {"machine": machine(), "rounds": args.rounds}
    print("single-thread costs at 64 workers ...", flush=True)
    results.update(single_costs(args))
    print("against the alternatives at %s workers ..." % ", ".join(map(str, WORKER_COUNTS)), flush=True)
    results["workers"] = alternatives(args)
    print("threads ...", flush=True)
    results["threads"] = thread_scaling(args)
    print("shortcuts of the request path ...", flush=True)
    results["tricks"] = bench_tricks.measure(args.rounds, 20000)
    print("every route path (weights, prefix blocks, first tokens) ...", flush=True)
    results["route_paths"] = bench_weights.measure(args.rounds, args.seconds * 2, clock="cpu")
    print("route+release against the build of %s ..." % bench_builds.DEFAULT_BASE, flush=True)
    try:
        results["builds"] = bench_builds.measure(bench_builds.DEFAULT_BASE, args.rounds, args.seconds * 4)
    except (OSError, subprocess.CalledProcessError) as error:  # no git history or no Go here
        print("  skipped: %s" % error, flush=True)
    print("first calls and joins ...", flush=True)
    results["first"] = first_calls(args.first_runs)
    results["join"] = joins(1024, args.join_rounds)
    if args.go:
        with open(args.go) as f:
            results["go"] = bench_report.parse_go_bench(f.read())
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go", help="output of the Go benchmarks (go test -bench . -benchmem ./core)")
    parser.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"), help="the Markdown report to write")
    parser.add_argument("--plot", default=os.path.join(ROOT, "BENCHMARKS.png"), help="the plot to write")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per case (the median is reported)")
    parser.add_argument("--seconds", type=float, default=0.05, help="length of one measurement")
    parser.add_argument("--first-runs", type=int, default=7, help="fresh interpreters for the first-call costs")
    parser.add_argument("--join-rounds", type=int, default=30, help="workers joining 1024")
    parser.add_argument("--quick", action="store_true", help="few short rounds (a smoke test, not a measurement)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.first_runs, args.join_rounds = 3, 0.01, 2, 3
    results = run(args)
    # The section scripts/bench_gateway.py writes between its markers is kept.
    kept = ""
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        if "<!-- bench_gateway -->" in old:
            kept = "\n<!-- bench_gateway -->" + old.split("<!-- bench_gateway -->", 1)[1]
    with open(args.out, "w") as f:
        f.write(bench_report.markdown(results, os.path.basename(args.plot)) + kept)
    bench_report.plot(results, args.plot)
    print("wrote %s and %s" % (args.out, args.plot))
    print(bench_report.targets_text(results))
    print(bench_gateway.targets_text(kept))


if __name__ == "__main__":
    main()
