"""The plain route+release from Python through two builds of the package, side by side: this
working tree and an earlier commit (by default the one before the first-token work of issue 25).

    .venv/bin/python scripts/bench_builds.py [--base bfd4b3f] [--rounds 9] [--seconds 0.2]

Each build is a tree's ``python/`` package with its library built by the same command
(``go build -buildmode=c-shared -trimpath``; the base from ``git archive``, under
``build/builds/``), so compiler flags cannot differ between them. Each round runs
``scripts/bench_weights.py --plain-only --rounds 1`` once per build, each in a fresh interpreter
(``PYTHONPATH`` and ``BOUNDED_ROUTER_LIBRARY`` pointed at the build), the order alternating
between rounds; the ratio this tree / the base is taken within each round and its median
reported, with the median time of each build and the ratio of their fastest runs. Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit before the first-token work (the merge of branch prefill, issue 25).
DEFAULT_BASE = "bfd4b3f"
_ROUTE = re.compile(r"^route\(key\)\s+([0-9.]+)", re.MULTILINE)


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


def route_release_ns(build_env: Dict[str, str], seconds: float) -> float:
    """One measurement of ``route(key)`` + release through a build, in a fresh interpreter."""
    env = dict(os.environ, **build_env)
    script = os.path.join(ROOT, "scripts", "bench_weights.py")
    command = [sys.executable, script, "--plain-only", "--rounds", "1", "--seconds", str(seconds)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    match = _ROUTE.search(output)
    if match is None:
        raise RuntimeError("bench_weights.py printed no route(key) row:\n" + output)
    return float(match.group(1))


def measure(base: str, rounds: int, seconds: float) -> Dict[str, float]:
    """Median ns per route+release of the base and of this tree, and the median ratio of the rounds."""
    builds = {"base": build(base), "tree": build("working tree")}
    times: Dict[str, List[float]] = {"base": [], "tree": []}
    for i in range(rounds):
        for name in ("base", "tree") if i % 2 == 0 else ("tree", "base"):
            times[name].append(route_release_ns(builds[name], seconds))
    ratios = [t / b for t, b in zip(times["tree"], times["base"])]
    return {
        "base_ns": statistics.median(times["base"]),
        "tree_ns": statistics.median(times["tree"]),
        "ratio": statistics.median(ratios),
        # The least disturbed run of each: on a shared machine, noise only ever adds time.
        "best_ratio": min(times["tree"]) / min(times["base"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=DEFAULT_BASE, help="the earlier commit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one measurement")
    args = parser.parse_args()
    result = measure(args.base, args.rounds, args.seconds)
    print("route(key) + release, 64 workers, %d rounds, medians" % args.rounds)
    print("%-28s %8.0f ns" % ("base %s" % args.base, result["base_ns"]))
    print("%-28s %8.0f ns" % ("this tree", result["tree_ns"]))
    print("%-28s %8.3f (target <= 1.10)" % ("this tree / base", result["ratio"]))
    print("%-28s %8.3f" % ("best run / best run", result["best_ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
