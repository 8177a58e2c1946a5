"""A/B of gateway builds against HAProxy, in alternating rounds on one machine.

Not part of CI. Each build is the native library (``go build -buildmode=c-shared -o
/tmp/a.so ./capi``) given as ``NAME=PATH``, optionally with environment settings for its
``bounded-router serve`` after commas (``one=/tmp/a.so,GOMAXPROCS=1``)::

    .venv/bin/python scripts/ab_gateway.py main=/tmp/main.so change=/tmp/change.so --rounds 10

It starts 4 workers (``scripts/bench_gateway_tool.go``), one gateway per build and HAProxy (as
``scripts/bench_gateway.py`` configures it) in front of them, and in every round, with the
targets in a new random order, measures: ``--sequential`` requests per target, sent to the
targets in turn, one at a time (each target's median minus the workers' own, the added median);
then per target ``--requests`` at concurrency 16 (the target's CPU time per request, utime +
stime) and as many at concurrency 64 (req/s). It prints each figure per round and on average,
and each build's ratios to HAProxy's.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gateway as bg  # noqa: E402  the same processes, tool and HAProxy configuration


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("builds", nargs="+", metavar="NAME=PATH[,VAR=VALUE...]")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=15000, help="per target and concurrency in each round")
    parser.add_argument("--sequential", type=int, default=300, help="sequential requests per target in each round")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    haproxy = bg.peer_executable("haproxy", False)
    if haproxy is None:
        parser.error("needs haproxy on PATH (apt-get install haproxy)")
    scratch = tempfile.mkdtemp(prefix="ab-gateway-")
    tool = os.path.join(scratch, "bench_gateway_tool")
    subprocess.run([os.environ.get("GO", "go"), "build", "-o", tool, os.path.join(bg.ROOT, "scripts", "bench_gateway_tool.go")], check=True, cwd=bg.ROOT)
    processes: List[object] = []
    try:
        workers = [bg.Process("worker %d" % i, [tool, "worker"]) for i in range(4)]
        processes += workers
        urls = [w.url for w in workers]
        targets: Dict[str, Tuple[str, Optional[int]]] = {"direct": (",".join(urls), None)}
        for build in args.builds:
            name, spec = build.split("=", 1)
            library, *settings = spec.split(",")
            env = dict(s.split("=", 1) for s in settings)
            env["BOUNDED_ROUTER_LIBRARY"] = library
            gateway = bg.Process(name, [sys.executable, "-m", "bounded_router", "serve", "--port", "0", "--worker-urls"] + urls, env=env)
            processes.append(gateway)
            targets[name] = (gateway.url, gateway.pid)
        peer = bg.haproxy(haproxy, scratch, urls)
        processes.append(peer)
        targets["haproxy"] = (peer.url, peer.pid)
        for url, _ in targets.values():
            bg.wait_http(url.split(",")[0])
        median: Dict[str, List[float]] = {n: [] for n in targets}
        cpu: Dict[str, List[float]] = {n: [] for n in targets}
        rate: Dict[str, List[float]] = {n: [] for n in targets}
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = list(targets)
            rng.shuffle(order)
            urls_in_turn = [urls[r % len(urls)] if name == "direct" else targets[name][0] for name in order]
            for name, seconds in bg.in_turn(tool, urls_in_turn, order, args.sequential, False).items():
                median[name].append(statistics.median(seconds))
            for name in order:
                url, pid = targets[name]
                if pid:
                    before = bg.cpu_seconds(pid)
                    bg.tool(tool, "conc", url, str(args.requests), "16", bg.KEYS)
                    cpu[name].append((bg.cpu_seconds(pid) - before) / args.requests * 1e6)
                rate[name].append(float(bg.tool(tool, "conc", url, str(args.requests), "64", bg.KEYS).split()[0]))
        direct = statistics.median(median["direct"])
        added = {n: statistics.median(median[n]) - direct for n in targets}
        for name in list(targets)[1:]:
            print("%-10s CPU per request %5.1f us (%s)" % (name, statistics.mean(cpu[name]), " ".join("%.0f" % x for x in cpu[name])))
            print("%-10s added median %.3f ms, req/s at c=64 %.0f (%s)" % (name, added[name], statistics.mean(rate[name]), " ".join("%.0f" % x for x in rate[name])))
        for name in list(targets)[1:-1]:
            print(
                "%-10s against haproxy: CPU %.2fx, added median %.2fx, req/s at c=64 %.2fx"
                % (name, statistics.mean(cpu[name]) / statistics.mean(cpu["haproxy"]), added[name] / added["haproxy"], statistics.mean(rate[name]) / statistics.mean(rate["haproxy"]))
            )
    finally:
        for p in reversed(processes):
            p.stop()  # type: ignore[attr-defined]
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
