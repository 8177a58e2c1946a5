"""contract: "Workers and membership", "The hash ring": the ring depends only on the set of worker URLs, so separate processes given the
same workers in different orders (and reaching that set in different ways) route every key
identically: both the idle choice of 10,000 keys and the bounded decisions of a fixed sequence
of routes with leases held."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

from reference_model import ReferenceRouter

WORKERS = ["http://10.0.%d.%d:8000" % (i // 4, i % 4) for i in range(12)]
KEYS = 10000
TIMEOUT = 120

# Run in a fresh interpreter: builds the router as told, then prints the decisions as JSON.
CHILD = textwrap.dedent(
    """
    import json, sys
    from bounded_router import Router
    spec = json.loads(sys.stdin.read())
    router = Router(spec["initial"], virtual_nodes=spec["virtual_nodes"])
    for op, url in spec["changes"]:
        getattr(router, op)(url)
    assert sorted(router.loads()) == sorted(spec["expected_set"]), router.loads()
    idle = [router.select("key-%d" % i).worker_url for i in range(spec["keys"])]
    held, routed = [], []
    for i, key in enumerate(spec["sequence"]):
        lease = router.route(key)
        routed.append([lease.worker_url, lease.branch])
        held.append(lease)
        if i % 3 == 2:
            held.pop(i % len(held)).release()
    json.dump({"idle": idle, "routed": routed, "pid": __import__("os").getpid()}, sys.stdout)
    """
)


def run_child(tmp_path, spec, hash_seed):
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(spec),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        # a different str hash seed in every process: no answer may depend on set/dict order
        env=dict({k: v for k, v in os.environ.items() if k != "BOUNDED_ROUTER_LIBRARY"}, PYTHONHASHSEED=str(hash_seed)),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_processes_with_the_same_worker_set_route_identically(tmp_path):
    rng = random.Random(7)
    sequence = ["group-%d" % rng.randrange(40) for _ in range(3000)]
    shuffled = WORKERS[:]
    rng.shuffle(shuffled)
    reversed_ = WORKERS[::-1]
    specs = [
        {"initial": WORKERS, "changes": []},
        {"initial": shuffled, "changes": []},
        # built up one by one in reverse order
        {"initial": [], "changes": [("add_worker", url) for url in reversed_]},
        # through other sets first: extra workers added and removed, a worker removed and re-added
        {
            "initial": shuffled[:6] + ["http://extra-a:8000", "http://extra-b:8000"],
            "changes": [("remove_worker", "http://extra-a:8000"), ("remove_worker", shuffled[0])]
            + [("add_worker", url) for url in shuffled[6:]]
            + [("remove_worker", "http://extra-b:8000"), ("add_worker", shuffled[0])],
        },
    ]
    answers = []
    for i, spec in enumerate(specs):
        spec.update(virtual_nodes=150, keys=KEYS, sequence=sequence, expected_set=WORKERS)
        answers.append(run_child(tmp_path, spec, hash_seed=i + 1))
    assert len({answer["pid"] for answer in answers}) == len(specs)
    first = answers[0]
    assert len(first["idle"]) == KEYS and len(set(first["idle"])) == len(WORKERS)
    branches = {branch for _, branch in first["routed"]}
    assert "explicit_routing_key_spillover" in branches  # the held leases did make keys spill
    for i, answer in enumerate(answers[1:], 1):
        assert answer["idle"] == first["idle"], "process %d chose other workers for idle keys" % i
        assert answer["routed"] == first["routed"], "process %d made other bounded decisions" % i

    # ... and they are the choices the reference model makes from docs/contract.md alone.
    model = ReferenceRouter(WORKERS[::-1])
    assert [model.select("key-%d" % i).worker_url for i in range(KEYS)] == first["idle"]
    held, routed = [], []
    for i, key in enumerate(sequence):
        decision = model.route(key)
        routed.append([decision.worker_url, decision.branch])
        held.append(decision.lease_id)
        if i % 3 == 2:
            assert model.release(held.pop(i % len(held)))
    assert routed == first["routed"]
