"""Stress without leaks, the CI size of scripts/stress.py: 8 threads (2 of them asyncio loops)
take and release 40,000 leases with random early exits (exceptions, double releases, closed and
abandoned streaming iterators, cancelled tasks, dropped leases) while workers are added, removed
and flip health underneath. Afterwards every count is zero and only the leases dropped on
purpose are counted as leaked. The long run: `.venv/bin/python scripts/stress.py`."""

from __future__ import annotations

import importlib.util
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "stress.py")


@pytest.fixture(scope="module")
def stress():
    spec = importlib.util.spec_from_file_location("bounded_router_stress", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stress_without_leaks(stress):
    leases = 40000
    figures = stress.run(leases=leases, threads=8, async_threads=2, seed=1)  # asserts the checks itself
    assert figures["leases"] == leases
    assert figures["active_leases"] == 0 and figures["final_active_keys"] == 0
    assert set(figures["final_loads"].values()) <= {0}
    assert figures["leaked"] == figures["dropped_on_purpose"] > 0
    assert figures["negative_counts_seen"] == 0 and not figures["errors"]
    # every kind of early exit happened, and the workers changed underneath
    for name in ("exceptions", "double_releases", "abandoned_iterators", "cancelled", "acquire_unknown"):
        assert figures[name] > 0, name
    assert figures["membership_changes"] + figures["health_flips"] >= 6 * (leases // 8) // stress.CHURN_EVERY
    assert figures["branches"].get("explicit_routing_key_spillover", 0) > 0
