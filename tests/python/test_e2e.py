"""End to end over real HTTP, the CI-sized version of scripts/e2e.py: 2 mock worker processes, a
FastAPI proxy process per policy, groups of 8 streaming siblings sharing a prompt prefix (one
routing key per group), under strict and bounded routing."""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List

import pytest

from bounded_router.simulate import PolicySpec
from bounded_router.testing.e2e import PolicyRun, Scenario, format_report, problems, run

GROUPS = 24
SHARED = Scenario().workload.shared_prefix_tokens


@pytest.fixture(scope="module")
def runs() -> Dict[str, PolicyRun]:
    scenario = Scenario(workload=replace(Scenario().workload, groups=GROUPS, output_tokens=16))
    policies = [PolicySpec("consistent_hashing"), PolicySpec("bounded_consistent_hashing", 2, 1.5)]
    done = run(scenario, policies)
    print(format_report(done, scenario))
    return {pr.spec.policy: pr for pr in done}


def _workers_per_group(pr: PolicyRun) -> List[int]:
    return [len([w for w, n in per.items() if n]) for per in pr.group_placements.values()]


def test_every_request_succeeds_with_intact_output_and_no_lease_is_left(runs: Dict[str, PolicyRun]) -> None:
    assert problems(runs.values()) == []
    for pr in runs.values():
        assert len(pr.records) == GROUPS * 8
        assert all(r.ok and r.status == 200 for r in pr.records)
        assert set(pr.loads().values()) == {0.0}
        assert pr.metric("bounded_router_active_leases") == 0
        assert pr.metric("bounded_router_leaked_leases_total") == 0
        for stats in pr.worker_stats.values():
            assert stats["active"] == 0 and stats["failed"] == 0


def test_strict_keeps_every_group_on_one_worker(runs: Dict[str, PolicyRun]) -> None:
    strict = runs["consistent_hashing"]
    assert _workers_per_group(strict) == [1] * GROUPS
    assert strict.result.placement == {"8:0": GROUPS}
    assert strict.result.spilled == 0
    assert strict.metric("bounded_router_requests_total", branch="routing_key_hit") == GROUPS * 8


def test_bounded_spills_some_siblings(runs: Dict[str, PolicyRun]) -> None:
    bounded = runs["bounded_consistent_hashing"]
    assert bounded.result.spilled > 0
    assert max(_workers_per_group(bounded)) == 2
    hits = bounded.metric("bounded_router_requests_total", branch="explicit_routing_key_hit")
    assert hits + bounded.result.spilled == GROUPS * 8


def test_each_worker_computes_a_group_prefix_once(runs: Dict[str, PolicyRun]) -> None:
    # The workers' own counters: every sibling but the first on each worker reuses the prefix.
    for pr in runs.values():
        expected = sum((8 - used) * SHARED for used in _workers_per_group(pr))
        assert pr.result.cached_tokens == expected
        assert sum(s["cached_tokens"] for s in pr.worker_stats.values()) == expected
    assert runs["bounded_consistent_hashing"].result.cached_tokens < runs["consistent_hashing"].result.cached_tokens
