#!/usr/bin/env python3
"""Router replicas end to end over real HTTP and ZeroMQ on loopback (issue 21): 4 mock workers
publishing KV events, 4 native gateway processes (cache_aware, token prefix blocks) sharing them,
multi-turn sessions sent as token ids, each request to a random gateway; events off, then on.

Prints, for one gateway (the reference), the replicas without events, with events, with events
and engine loads, and both again with the gateways sharing their routes (peer routes): the
workers' cache hits and the client's mean and p99 time to first token, with the ratio to the
replicas without events. Takes 1-2 minutes; every process it starts is stopped by PID. The workload and modes: bounded_router/testing/replicas.py.

    .venv/bin/python scripts/e2e_replicas.py
    .venv/bin/python scripts/e2e_replicas.py --sessions 32 --modes 2,3   # a quick one
"""

import argparse
import dataclasses
import sys
import time

from bounded_router.testing.replicas import MODES, ReplicaSessions, format_table, run
from bounded_router.testing.sessions import problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=ReplicaSessions.sessions, help="sessions (default %(default)s)")
    parser.add_argument("--turns", type=int, default=ReplicaSessions.turns, help="turns per session (default %(default)s)")
    parser.add_argument("--time-scale", type=float, default=ReplicaSessions.time_scale, help="multiply the workers' modelled times (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--modes", default=",".join(str(i + 1) for i in range(len(MODES))),
        help="which modes, by number: " + "; ".join("%d %s" % (i + 1, m.label) for i, m in enumerate(MODES)),
    )  # fmt: skip
    args = parser.parse_args()
    workload = dataclasses.replace(ReplicaSessions(), sessions=args.sessions, turns=args.turns, time_scale=args.time_scale, seed=args.seed)
    numbers = args.modes.split(",")
    if not all(n.isdigit() and 1 <= int(n) <= len(MODES) for n in numbers):
        parser.error("--modes takes numbers from 1 to %d separated by commas, got %r" % (len(MODES), args.modes))
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1, got %d and %d" % (args.sessions, args.turns))
    modes = [MODES[int(n) - 1] for n in numbers]
    print(workload.describe())
    print("Sent as token ids (--prefix-blocks tokens), no routing key, each request to a random gateway.")
    started = time.monotonic()

    def progress(text: str) -> None:
        print("  [%3.0f s] %s" % (time.monotonic() - started, text), flush=True)

    results = run(workload, modes, progress=progress)
    print("\n" + format_table(results))
    found = problems([r.outcome for r in results])
    for problem in found:
        print("PROBLEM: " + problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
