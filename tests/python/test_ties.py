"""Ties by the key (docs/contract.md, "Ties by the key"): least_load and manual's min_load break
ties among equally loaded workers by the routing key's ring position, so a burst of new keys on an
idle fleet spreads instead of landing on the first worker. Every placement is computed by the
reference model and checked against the library."""

from collections import Counter

import pytest

from bounded_router import Router
from reference_model import ReferenceRouter
from support import urls

WORKERS = 8
KEYS = ["session-%d" % i for i in range(64)]
POLICIES = [("least_load", {}), ("manual", {"assignment_mode": "min_load"})]


def _burst(router, keys):
    """Each key routed and its request finished before the next: every decision sees an idle fleet."""
    placed = []
    for key in keys:
        lease = router.route(key)
        placed.append(lease.worker_url)
        lease.release()
    return placed


def _model_burst(model, keys):
    placed = []
    for key in keys:
        decision = model.route(key)
        placed.append(decision.worker_url)
        model.release(decision.lease_id)
    return placed


@pytest.mark.parametrize("policy,options", POLICIES)
def test_a_burst_of_new_keys_spreads_over_an_idle_fleet(policy, options):
    fleet = urls(WORKERS)
    model = ReferenceRouter(fleet, policy=policy, **options)
    expected = _model_burst(model, KEYS)
    with Router(fleet, policy, **options) as router:
        assert _burst(router, KEYS) == expected
    counts = Counter(expected)
    share = len(KEYS) / WORKERS
    assert max(counts.values()) <= 2 * share, counts
    assert len(counts) == WORKERS, "every worker got some of the keys: %r" % counts


def test_manual_min_load_keys_stay_where_the_tie_put_them():
    fleet = urls(WORKERS)
    with Router(fleet, "manual", assignment_mode="min_load") as router:
        first = _burst(router, KEYS)
        assert _burst(router, KEYS) == first
        assert set(router.branch_counts()) >= {"manual_vacant", "manual_occupied_hit"}
        assert router.branch_counts()["manual_occupied_hit"] == len(KEYS)


def test_keyless_ties_are_drawn_among_the_tied_workers():
    fleet = urls(4)
    with Router(fleet, "least_load") as router:
        held = [router.acquire(fleet[0]), router.acquire(fleet[2])]
        seen = Counter(router.select().worker_url for _ in range(400))
        for lease in held:
            lease.release()
    assert set(seen) == {fleet[1], fleet[3]}, seen
