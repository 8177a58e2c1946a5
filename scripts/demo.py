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
The workers keep the replay's clock, not the machine's, so every run of a seed prints the same
table. The workload and its model: bounded_router/testing/sessions.py.
"""

import argparse
import sys
import time
from dataclasses import replace

from bounded_router.testing.sessions import Sessions, conclusion, format_table, problems, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the first draw's seed; the table pools the draws from it (default %(default)s)")
    args = parser.parse_args()
    workload = replace(Sessions(), seed=args.seed)
    print(__doc__.split("\n\n")[0].split(": ", 1)[1])
    print(workload.describe())
    started = time.monotonic()

    def progress(text: str) -> None:
        print("  [%3.0f s] %s" % (time.monotonic() - started, text), flush=True)

    outcomes = run(workload, progress=progress)
    progress("done")
    print("\n" + format_table(outcomes) + "\n")
    print("TTFT is the workers' own: their model's queueing and prefill from each request's")
    print("scheduled send, on a clock the replay keeps. The gateway and HTTP are real; the replay")
    print("sends a request once every answer the model ends before it has ended, so the gateway")
    print("routes alike on every run, whatever else loads this machine.\n")
    print(conclusion(outcomes))
    found = problems(outcomes)
    for problem in found:
        print("PROBLEM: " + problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
