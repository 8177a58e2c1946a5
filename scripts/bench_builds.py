"""The plain route+release from Python through two builds of the package, side by side: this
working tree and an earlier commit (by default the one before the first-token work of issue 25).

    .venv/bin/python scripts/bench_builds.py [--base bfd4b3f] [--rounds 9] [--seconds 0.2]
        [--case route_release|batch_64|add_worker_1024]

``--case`` measures another call instead: ``batch_64`` is ``route_many`` of 64 keys and
``release_many`` (per request), ``add_worker_1024`` one ``add_worker`` and ``remove_worker`` of a
worker joining 1,024 (per pair).

Each build is a tree's ``python/`` package with its library built by the same command
(``go build -buildmode=c-shared -trimpath``; the base from ``git archive``, under
``build/builds/``), so compiler flags cannot differ between them. Each round measures once per
build, each in a fresh interpreter (``PYTHONPATH`` and ``BOUNDED_ROUTER_LIBRARY`` pointed at the
build), the order alternating between rounds: ``route(key)`` + release at 64 workers in turn with
the floor (two calls of ``br_abi_version``, which does nothing), five times each, on the
measuring thread's CPU time (which other processes taking the cores do not stretch). The ratio this
tree / the base is taken within each round and its median reported, also with each build's time
over its own floor (a busy moment of the shared machine slows both alike), with the median time
of each build and the ratio of their fastest runs. Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit before the first-token work (the merge of branch prefill, issue 25).
DEFAULT_BASE = "bfd4b3f"
# Each measurement alternates route+release and the floor this many times (medians taken).
_SLICES = 5


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _build_library(tree: str, out: str) -> None:
    go = os.environ.get("GO", "go")
    subprocess.run([go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], cwd=tree, check=True)


def build(commit: str) -> Dict[str, str]:
    """The environment that runs ``commit``'s package (``HEAD`` and uncommitted changes: this tree)."""
    if commit == "working tree":
        tree, where = ROOT, os.path.join(ROOT, "build", "builds", "working-tree")
    else:
        sha = _git("rev-parse", "--short", commit)
        where = os.path.join(ROOT, "build", "builds", sha)
        tree = os.path.join(where, "tree")
        if not os.path.isdir(tree):
            os.makedirs(tree)
            archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True, check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tree)
    library = os.path.join(where, "libbounded_router.so")
    _build_library(tree, library)
    return {"PYTHONPATH": os.path.join(tree, "python"), "BOUNDED_ROUTER_LIBRARY": library}


#: The calls --case measures: the workers of the router, and how many requests one call is.
CASES = {"route_release": (64, 1), "batch_64": (64, 64), "add_worker_1024": (1024, 1)}


def route_release_ns(build_env: Dict[str, str], seconds: float, case: str) -> Tuple[float, float]:
    """One measurement through a build, in a fresh interpreter: ns per request of the case, and
    ns per floor (two calls of ``br_abi_version``, an export that does nothing, as
    scripts/bench.py's floor) measured in turn with it, so that a slower moment of the machine
    slows both."""
    env = dict(os.environ, **build_env)
    command = [sys.executable, os.path.abspath(__file__), "--child", str(seconds), "--case", case]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    route, floor = output.split()
    return float(route), float(floor)


def child(seconds: float, case: str) -> None:
    """The measurement of :func:`route_release_ns`, in the build's interpreter."""
    from bench_timing import CLOCKS, per_call_ns  # the same timing loop as the other Python benchmarks

    from bounded_router import Router, _native

    keys = ["session-%d" % i for i in range(4096)]
    counter = [0]
    workers, per_call = CASES[case]
    urls = ["http://127.0.0.1:%d" % (20000 + i) for i in range(workers + 1)]
    with Router(urls[:workers]) as router:
        abi = _native.library().br_abi_version

        def route() -> None:
            counter[0] = (counter[0] + 1) & 4095
            router.route(keys[counter[0]]).release()

        def batch() -> None:
            counter[0] = (counter[0] + 64) & 4095
            router.release_many(router.route_many(keys[counter[0] : counter[0] + 64]))

        def join() -> None:
            router.add_worker(urls[workers])
            router.remove_worker(urls[workers])

        call = {"route_release": route, "batch_64": batch, "add_worker_1024": join}[case]

        def floor() -> None:
            abi()
            abi()

        routes, floors = [], []
        for _ in range(_SLICES):
            routes.append(per_call_ns(call, seconds / _SLICES, CLOCKS["cpu"]) / per_call)
            floors.append(per_call_ns(floor, seconds / _SLICES, CLOCKS["cpu"]))
    print(statistics.median(routes), statistics.median(floors))


def measure(base: str, rounds: int, seconds: float, case: str = "route_release") -> Dict[str, float]:
    """Median ns per request of the case (route+release by default) for the base and this tree,
    the median of the rounds' ratios, that ratio with each build's time over its floor, and the
    ratio of the fastest runs."""
    builds = {"base": build(base), "tree": build("working tree")}
    times: Dict[str, List[Tuple[float, float]]] = {"base": [], "tree": []}
    for i in range(rounds):
        for name in ("base", "tree") if i % 2 == 0 else ("tree", "base"):
            times[name].append(route_release_ns(builds[name], seconds, case))
    pairs = list(zip(times["tree"], times["base"]))
    median = statistics.median
    return {
        "base_ns": median(t for t, _ in times["base"]),
        "tree_ns": median(t for t, _ in times["tree"]),
        "ratio": median(t[0] / b[0] for t, b in pairs),
        "floor_ratio": median((t[0] / t[1]) / (b[0] / b[1]) for t, b in pairs),
        # The least disturbed run of each: on a shared machine, noise only ever adds time.
        "best_ratio": min(t for t, _ in times["tree"]) / min(t for t, _ in times["base"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=DEFAULT_BASE, help="the earlier commit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one measurement")
    parser.add_argument("--case", choices=sorted(CASES), default="route_release", help="the call measured")
    parser.add_argument("--child", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.case)
        return 0
    result = measure(args.base, args.rounds, args.seconds, args.case)
    workers, per_call = CASES[args.case]
    print("%s, %d workers, ns per %s, %d rounds, medians" % (args.case, workers, "request" if per_call > 1 else "call", args.rounds))
    print("%-28s %8.0f ns" % ("base %s" % args.base, result["base_ns"]))
    print("%-28s %8.0f ns" % ("this tree", result["tree_ns"]))
    target = " (target <= 1.10)" if args.case == "route_release" else ""
    print("%-28s %8.3f%s" % ("this tree / base", result["ratio"], target))
    print("%-28s %8.3f" % ("the same, each over its floor", result["floor_ratio"]))
    print("%-28s %8.3f" % ("best run / best run", result["best_ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
