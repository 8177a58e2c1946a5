"""Sibling groups (docs/contract.md, "Sibling groups"): route_many([group_key] * n) places a GRPO
group as n successive routes in one step, and the bound spreads a hot group. Placements come
from the contract's vector and from the reference model."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from bounded_router import NoWorkerAvailableError, Router
from reference_model import ReferenceRouter
from support import urls

W = urls(4)


def group_key() -> str:
    """A key whose clockwise order is w0 w1 w2 w3, found by the reference model's ring."""
    model = ReferenceRouter(W)
    return next(k for k in ("group-%d" % i for i in range(100000)) if list(model.clockwise(k.encode())) == W)


@pytest.mark.parametrize(
    "policy, options, expected",
    [
        ("bounded_consistent_hashing", {"spill_target": "clockwise"}, [0, 0, 0, 1, 1, 2, 1, 2]),
        ("bounded_consistent_hashing", {"spill_target": "least_loaded"}, [0, 0, 0, 1, 2, 3, 0, 1]),
        ("consistent_hashing", {}, [0] * 8),
    ],
)
def test_the_contract_vector(policy, options, expected):
    key = group_key()
    with Router(W, policy, **options) as router:
        leases = router.route_many([key] * 8)
        assert [lease.worker_url for lease in leases] == [W[i] for i in expected]
        assert router.release_many(leases) == 8
        assert router.active_leases() == 0


def test_random_groups_match_successive_routes_of_the_model():
    rng = random.Random(22)
    with Router(W, spill_target="least_loaded", key_memory=64) as router:
        model = ReferenceRouter(W, spill_target="least_loaded", key_memory=64)
        held = []
        for step in range(60):
            if held and rng.random() < 0.4:  # a group finishes
                leases, ids = held.pop(rng.randrange(len(held)))
                assert router.release_many(leases) == len(leases)
                for lease_id in ids:
                    model.release(lease_id)
                continue
            key, n = "prompt-%d" % rng.randrange(12), rng.choice([1, 2, 4, 8, 16])
            leases = router.route_many([key] * n)
            decisions = [model.route(key) for _ in range(n)]
            assert [(l.worker_url, l.branch) for l in leases] == [(d.worker_url, d.branch) for d in decisions], (step, key)
            held.append((leases, [d.lease_id for d in decisions]))
        for leases, _ in held:
            router.release_many(leases)
        assert router.active_leases() == 0 and router.leaked_leases() == 0


def test_a_hot_group_is_spread_and_a_small_one_kept_together():
    key = group_key()
    with Router(W) as router:
        small = router.route_many([key] * 3)
        assert {lease.worker_url for lease in small} == {W[0]}
        router.release_many(small)
        hot = router.route_many([key] * 16)
        counts = {url: sum(lease.worker_url == url for lease in hot) for url in W}
        assert max(counts.values()) < 16 and sum(counts.values()) == 16
        router.release_many(hot)


def test_a_group_is_all_or_nothing():
    with Router(W) as router:
        for url in W:
            router.set_healthy(url, False)
        with pytest.raises(NoWorkerAvailableError):
            router.route_many([group_key()] * 8)
        assert router.active_leases() == 0


def test_the_example_sends_groups_through_the_gateway():
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "grpo_siblings.py")
    out = subprocess.run([sys.executable, example, "--groups", "2"], capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["prompt-0", "prompt-1"]
    assert lines[-1] == "leases left: 0 leaked: 0"
