"""RandomConfig(seed=...): a seeded random router's choices repeat for the same calls
(docs/contract.md, "Random seed"); the seed is validated, serialised and passed from the flags."""

from __future__ import annotations

import argparse
import warnings

import pytest

from bounded_router import RandomConfig, Router, RouterArgs, config_from_dict
from support import W, urls


def choices(router: Router, n: int = 120):
    """n routes with held leases, releases, a health change and a removal along the way."""
    got, held = [], []
    for i in range(n):
        if i == 40:
            router.set_healthy(W[1], False)
        if i == 80:
            router.remove_worker(W[3])
        lease = router.route("k%d" % (i % 7), weight=1 + i % 3) if i % 2 else router.route()
        got.append(lease.worker_url)
        held.append(lease)
        if i % 5 == 4:
            held.pop(0).release()
    router.close()
    return got


def test_same_seed_same_choices_other_seed_other_choices():
    first = choices(Router(urls(5), RandomConfig(seed=7)))
    assert first == choices(Router(urls(5), "random", seed=7))
    assert first != choices(Router(urls(5), RandomConfig(seed=8)))
    assert set(first) == set(urls(5)), "every worker is chosen"
    assert W[1] not in first[40:] and W[3] not in first[80:], "only available members"


def test_seeds_span_64_bits_and_unseeded_routers_differ():
    largest = choices(Router(urls(5), RandomConfig(seed=2**64 - 1)))
    assert largest == choices(Router(urls(5), RandomConfig(seed=2**64 - 1)))
    assert choices(Router(urls(5), RandomConfig(seed=0))) == choices(Router(urls(5), RandomConfig(seed=0)))
    # Unseeded routers draw their own: 120 choices among 5 workers agree by chance with
    # probability far below 1e-80.
    assert choices(Router(urls(5), "random")) != choices(Router(urls(5), "random"))


@pytest.mark.parametrize("seed", [-1, 2**64, 1.0, "3", True])
def test_bad_seeds_are_refused_naming_the_field(seed):
    with pytest.raises(ValueError, match="seed must be an integer from 0 to 18446744073709551615 or None, got"):
        RandomConfig(seed=seed)


def test_seed_round_trips_and_reaches_the_library():
    assert RandomConfig().to_dict() == {"type": "random"}
    assert RandomConfig(seed=5).to_dict() == {"type": "random", "seed": 5}
    assert config_from_dict({"type": "random", "seed": 5}) == RandomConfig(5)
    with pytest.raises(ValueError, match="policy round_robin has no setting 'seed'"):
        config_from_dict({"type": "round_robin", "seed": 5})
    with Router(urls(2), RandomConfig(seed=2**63)) as router:
        assert router._native.read("br_stats_json")["policy"] == {"type": "random", "seed": 2**63}


def test_seed_with_another_policy_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="seed=3: no effect with policy consistent_hashing"):
        Router(urls(2), "consistent_hashing", seed=3).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Router(urls(2), "random", seed=3).close()


@pytest.mark.parametrize("prefix", [False, True])
def test_random_seed_flag(prefix):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    flag = "--router-random-seed" if prefix else "--random-seed"
    policy = "--router-policy" if prefix else "--policy"
    args = RouterArgs.from_cli_args(parser.parse_args([policy, "random", flag, "99"]), use_router_prefix=prefix)
    assert args.random_seed == 99
    assert RouterArgs.from_cli_args(parser.parse_args([]), use_router_prefix=prefix).random_seed is None
    args.worker_urls = urls(4)
    with Router.from_args(args) as a, Router(urls(4), RandomConfig(seed=99)) as b:
        assert [a.select().worker_url for _ in range(30)] == [b.select().worker_url for _ in range(30)]
