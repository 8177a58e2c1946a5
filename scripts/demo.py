#!/usr/bin/env python3
"""make demo: why keep a session on one worker, and why bound it, in about a minute.

Starts 4 mock LLM workers (a prefix cache each, a prefill queue, prefill and decode times scaled
down) on fixed loopback ports and, for each policy, the native gateway (`bounded-router serve`) in
front of them; then replays the same seeded schedule of multi-turn chat sessions through it over
real HTTP (a turn's prompt repeats the session's history, so the worker that served the session
before has most of it cached; a few sessions send 8 or 16 siblings a turn, hot keys), checks
every streamed answer, and prints one table:
round robin and least load (no affinity), strict hashing (affinity without a bound), bounded
hashing (affinity with a load bound) and cache_aware (routing by the prompt's prefix blocks).
The workload and its model: bounded_router/testing/sessions.py.
"""

import argparse
import sys
import time
from dataclasses import replace

from bounded_router.testing.sessions import Sessions, caveats, conclusion, format_table, problems, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each policy, the table showing medians (about 50 s each)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1, got %d" % args.rounds)
    workload = replace(Sessions(), rounds=args.rounds)
    print(__doc__.split("\n\n")[0].split(": ", 1)[1])
    print(workload.describe())
    started = time.monotonic()

    def progress(text: str) -> None:
        print("  [%3.0f s] %s" % (time.monotonic() - started, text), flush=True)

    outcomes = run(workload, progress=progress)
    progress("done")
    print("\n" + format_table(outcomes) + "\n")
    print("TTFT columns but the last are the workers' own: their model's queueing and prefill from")
    print("the schedule's send time, so this machine's load enters them only through the routing it")
    print("changes (the order of arrivals, requests in flight); the client column is real time.\n")
    for caveat in caveats(outcomes, workload):
        print("Note: " + caveat)
    print(conclusion(outcomes))
    found = problems(outcomes)
    for problem in found:
        print("PROBLEM: " + problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
