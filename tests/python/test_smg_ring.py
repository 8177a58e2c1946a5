"""hash_ring="smg" against SMG itself: key -> worker tables recorded from the real gateway
(``smg==1.13.0``, ``consistent_hashing``) by scripts/record_smg_ring.py, checked without SMG."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from bounded_router import BoundedConsistentHashingConfig, ConsistentHashingConfig, Router

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata")


def recording(workers: int) -> Dict[str, Any]:
    with open(os.path.join(TESTDATA, "smg_ring_%d.json" % workers)) as f:
        rec = json.load(f)
    assert rec["smg_version"] == "smg 1.13.0" and rec["policy"] == "consistent_hashing"
    assert len(rec["worker_urls"]) == workers and len(rec["routes"]) >= 1000
    return rec


@pytest.mark.parametrize("workers", [2, 4, 8])
@pytest.mark.parametrize("config", [ConsistentHashingConfig(hash_ring="smg"), BoundedConsistentHashingConfig(hash_ring="smg")])
def test_every_recorded_key_goes_to_smgs_worker(workers, config):
    rec = recording(workers)
    with Router(rec["worker_urls"], config) as router:
        for key, url in rec["routes"].items():
            assert router.select(key).worker_url == url, key
            assert router.select(headers={"X-SMG-Routing-Key": key}).worker_url == url, key
            assert router.select(headers={"Authorization": key}).worker_url == url, key  # SMG's implicit key
            with router.route(key) as lease:  # a route with nothing else in flight cannot spill
                assert lease.worker_url == url, key


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_the_default_ring_agrees_only_by_chance(workers):
    rec = recording(workers)
    with Router(rec["worker_urls"], ConsistentHashingConfig()) as router:
        agree = sum(router.select(key).worker_url == url for key, url in rec["routes"].items())
    assert agree / len(rec["routes"]) < 1.5 / workers
