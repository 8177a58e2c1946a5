"""GRPO sibling groups through the native gateway with the OpenAI SDK (docs/contract.md, "Sibling groups").

Each prompt is sampled ``--siblings`` times; every sibling carries the prompt's id as
``X-SMG-Routing-Key``, so the group shares its preferred worker's prefix cache until that worker
is clearly overloaded, and then spills. The siblings of a group are sent at once, one group after
another, as streaming completions of the OpenAI SDK (``pip install openai``) pointed at the
gateway, and the worker that answered each is read from the mock worker's ``X-Mock-Worker``
header::

    python examples/grpo_siblings.py                      # 4 mock workers on 127.0.0.1
    python examples/grpo_siblings.py --worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000

Inside the trainer's own process the same placement is one call: ``router.route_many([group] * n)``
gives the n leases at once (all or none), each to be released when its completion ends.
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from typing import List

import openai

from bounded_router import Router
from bounded_router.testing.fleet import start_mock_worker


def sample(client: openai.OpenAI, group: str, prompt: str, out: List[str]) -> None:
    """One sibling: a streaming completion keyed by its group; appends the answering worker."""
    raw = client.completions.with_raw_response.create(
        model="mock-model", prompt=prompt, max_tokens=16, stream=True, extra_headers={"X-SMG-Routing-Key": group}
    )
    worker = raw.headers.get("X-Mock-Worker", "?")
    for _ in raw.parse():  # the stream's chunks until data: [DONE]
        pass
    out.append(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker-urls", nargs="*", default=[])
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--siblings", type=int, default=8)
    args = parser.parse_args()
    mocks = [] if args.worker_urls else [start_mock_worker("w%d" % i, time_scale=0.01, lifetime=120) for i in range(4)]
    try:
        with Router(args.worker_urls or [m.url for m in mocks], min_load_gap=2, max_load_skew=1.5) as router:
            with router.serve() as gateway:
                client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
                for g in range(args.groups):
                    group = "prompt-%d" % g
                    placed: List[str] = []
                    siblings = [
                        threading.Thread(target=sample, args=(client, group, "Solve problem %d." % g, placed))
                        for _ in range(args.siblings)
                    ]
                    for t in siblings:
                        t.start()
                    for t in siblings:
                        t.join()
                    print("%s: %s" % (group, dict(sorted(Counter(placed).items()))))
            print("branches:", {b: n for b, n in router.branch_counts().items() if n})
            print("leases left:", router.active_leases(), "leaked:", router.leaked_leases())
    finally:
        for m in mocks:
            m.stop()


if __name__ == "__main__":
    main()
