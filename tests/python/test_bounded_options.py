"""The options of bounded_consistent_hashing from Python (docs/contract.md, "Spill target" and
"Key memory"): off by default, validated, and doing what the contract says. The rules
themselves are tested against a model in core/."""

from __future__ import annotations

import warnings

import pytest
from support import hold, key_preferring, urls

from bounded_router import BoundedConsistentHashingConfig, Router, RouterArgs


def test_defaults_keep_the_contract_and_are_reported():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Router(urls(2)) as router:
            assert (router.policy.spill_target, router.policy.key_memory) == ("clockwise", 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"spill_target": "nearest"}, "spill_target must be one of 'clockwise', 'least_loaded', got 'nearest'"),
        ({"key_memory": -1}, "key_memory must be an integer from 0 to 4194304, got -1"),
        ({"key_memory": 1 << 22 + 1}, "key_memory must be an integer from 0 to 4194304"),
        ({"key_memory": 1.0}, "key_memory must be an integer"),
        ({"key_memory": True}, "key_memory must be an integer"),
    ],
)
def test_bad_values_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BoundedConsistentHashingConfig(**kwargs)


def test_other_policies_ignore_them_with_one_warning():
    with pytest.warns(UserWarning, match="spill_target='least_loaded', key_memory=8: no effect with policy random"):
        Router(urls(1), "random", spill_target="least_loaded", key_memory=8).close()


def test_least_loaded_spill_goes_to_a_least_loaded_worker():
    # Loads [3, 1, 0, 0] with gap 2, skew 1.5: w0 spills (3 - 0 > 2 and 3 > 1.5); the eligible
    # workers are those at most 1.5, and the least loaded of them carry 0.
    with Router(urls(4), spill_target="least_loaded") as router:
        key = key_preferring(router, urls(4)[0])
        held = hold(router, [3, 1, 0, 0], urls(4))
        lease = router.route(key)
        assert lease.branch == "explicit_routing_key_spillover"
        assert lease.worker_url in urls(4)[2:]
        lease.release()
        for h in held:
            h.release()


@pytest.mark.parametrize("key_memory, branch_after", [(0, "explicit_routing_key_hit"), (16, "explicit_routing_key_remembered")])
def test_a_remembered_key_returns_to_the_worker_it_spilled_to(key_memory, branch_after):
    with Router(urls(4), key_memory=key_memory) as router:
        key = key_preferring(router, urls(4)[0])
        held = hold(router, [3, 0, 0, 0], urls(4))
        spilled = router.route(key)
        assert spilled.branch == "explicit_routing_key_spillover"
        for lease in held + [spilled]:
            lease.release()
        # All idle again: without memory the key is back on its ring worker; with memory it
        # stays where its latest prefix is, while that worker is not overloaded.
        again = router.route(key)
        assert again.branch == branch_after
        assert again.worker_url == (spilled.worker_url if key_memory else urls(4)[0])
        assert again.preferred_url == urls(4)[0]
        again.release()


@pytest.mark.parametrize("policy", ["bounded_consistent_hashing", "manual", "random"])
def test_forget_keys_sends_each_key_to_where_a_new_key_would_go(policy):
    # contract: "Key memory", "Forgetting every key" (verl's clear_sticky_cache).
    kwargs = {"key_memory": 16} if policy == "bounded_consistent_hashing" else {}
    with Router(urls(4), policy, **kwargs) as router:
        if policy == "random":
            assert router.forget_keys() == 0
            return
        key = key_preferring(router, urls(4)[0])
        held = hold(router, [3, 0, 0, 0], urls(4)) if policy != "manual" else []
        first = router.route(key)
        for lease in held:
            lease.release()
        assert router.forget_keys() == 1
        again = router.route(key)
        assert again.branch == ("explicit_routing_key_hit" if policy != "manual" else "manual_vacant")
        assert first.release() and again.release()
        assert router.forget_keys() == 1 and router.forget_keys() == 0


def test_flags_reach_the_router():
    import argparse

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    args = RouterArgs.from_cli_args(
        parser.parse_args(["--worker-urls", "http://a", "--router-spill-target", "least_loaded", "--router-key-memory", "64"]),
        use_router_prefix=True,
    )
    with Router.from_args(args) as router:
        assert (router.policy.spill_target, router.policy.key_memory) == ("least_loaded", 64)
