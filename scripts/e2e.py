#!/usr/bin/env python3
"""The full end-to-end run over real HTTP: 400 groups x 8 streaming siblings (3,200 requests) per
policy, through a native routing gateway process (`bounded-router serve`) in front of 2 mock worker processes, under strict
consistent hashing and bounded consistent hashing with gaps 1, 2 and 4 (skew 1.5).

Checks every answer's text, that every lease is released (the proxy's /metrics) and reports the
simulator's figures measured from the outside: placement of each group's siblings, spill,
cached prompt tokens (the workers' own counters), time to first token and throughput.
Exits 1 if any check failed. Takes a few minutes; `make demo` is the short version.

    .venv/bin/python scripts/e2e.py                 # the full run
    .venv/bin/python scripts/e2e.py --groups 50     # a quick one
    .venv/bin/python scripts/e2e.py --json e2e.json # also write the rows
"""

import sys

from bounded_router.testing.e2e import main

DEFAULTS = ["--groups", "400", "--gaps", "1,2,4", "--time-scale", "0.05"]

if __name__ == "__main__":
    sys.exit(main(DEFAULTS + sys.argv[1:], description=__doc__.split("\n\n")[0]))
