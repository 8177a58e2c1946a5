#!/usr/bin/env python3
"""make demo: the router in a real serving stack, in a few seconds.

Starts 2 mock LLM workers (streaming tokens, a prefix cache each, prefill and decode times of the
upstream A/B scaled down 50 times) and, for each policy, the native routing gateway
(`python -m bounded_router serve`) in front of them; sends 20 groups of 8 sibling requests that share a prompt prefix (one routing key per
group) through the proxy, streams every answer back and checks it; then prints where each
group's siblings landed, the spill, the cached prompt tokens, time to first token and
throughput, for strict hashing, bounded hashing with gaps 1, 2 and 4, and round robin.
`python -m bounded_router.simulate` predicts the same table for the full 400-group
A/B; scripts/e2e.py runs it over HTTP.
"""

import sys

from bounded_router.testing.e2e import main

if __name__ == "__main__":
    args = ["--groups", "20", "--gaps", "1,2,4", "--round-robin", "--output-tokens", "16", "--time-scale", "0.02"]
    status = main(args + sys.argv[1:], description=__doc__.split("\n\n")[0])
    print("\nThe same policies on the full 400-group A/B, simulated: .venv/bin/python -m bounded_router.simulate")
    sys.exit(status)
