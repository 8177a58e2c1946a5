"""Policy cache_aware from Python (docs/contract.md, "cache_aware"): CacheAwareConfig and its
validation, the flags, and routing with prefix blocks through the real library."""

from __future__ import annotations

import argparse
import warnings

import pytest

from bounded_router import CacheAwareConfig, PolicyType, Router, RouterArgs, config_from_dict
from bounded_router import _native
from bounded_router import policy as policy_module
from support import W, key_preferring, parse_metrics


def test_defaults_and_limits_are_the_library_ones():
    constants = _native.library().constants
    assert "cache_aware" in constants["policies"]
    assert policy_module.DEFAULT_BLOCKS_PER_WORKER == constants["defaults"]["blocks_per_worker"]
    assert policy_module.MAX_BLOCKS_PER_WORKER == constants["limits"]["max_blocks_per_worker"]
    assert CacheAwareConfig() == CacheAwareConfig(1.5, 2, policy_module.DEFAULT_BLOCKS_PER_WORKER, "xxh64")
    assert RouterArgs().blocks_per_worker == policy_module.DEFAULT_BLOCKS_PER_WORKER
    assert policy_module.DEFAULT_CACHE_THRESHOLD == constants["defaults"]["cache_threshold"] == RouterArgs().cache_threshold


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"blocks_per_worker": 0}, "blocks_per_worker must be an integer from 1 to 1048576, got 0"),
        ({"blocks_per_worker": 1 << 20 | 1}, "blocks_per_worker"),
        ({"blocks_per_worker": 1.0}, "blocks_per_worker"),
        ({"blocks_per_worker": True}, "blocks_per_worker"),
        ({"blocks_per_worker": "8"}, "blocks_per_worker"),
        ({"max_load_skew": 0.9}, "max_load_skew"),
        ({"min_load_gap": -1}, "min_load_gap"),
        ({"hash_ring": "md5"}, "hash_ring"),
        ({"cache_threshold": 1.5}, "cache_threshold must be a number from 0.0 to 1.0, got 1.5"),
        ({"cache_threshold": -0.1}, "cache_threshold"),
        ({"cache_threshold": "0.3"}, "cache_threshold"),
        ({"cache_threshold": True}, "cache_threshold"),
        ({"cache_threshold": 10**400}, "cache_threshold must be a number from 0.0 to 1.0"),  # too large for a float
    ],
)
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        CacheAwareConfig(**settings)
    with pytest.raises(ValueError, match=field):
        Router(W[:2], policy="cache_aware", **settings)


def test_the_config_round_trips_and_reaches_the_library():
    config = CacheAwareConfig(max_load_skew=1.25, min_load_gap=64, blocks_per_worker=100, hash_ring="smg", cache_threshold=0.5)
    assert config.policy_type is PolicyType.CacheAware
    assert config_from_dict(config.to_dict()) == config
    with Router(W[:2], policy=config) as router:
        assert router.policy == config
        assert router.statistics().workers[0].indexed_blocks == 0
    with pytest.raises(ValueError, match="spill_target"):
        config_from_dict({"type": "cache_aware", "spill_target": "least_loaded"})


def test_settings_of_other_policies_are_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="key_memory=5"):
        with Router(W[:2], policy="cache_aware", key_memory=5) as router:
            assert router.policy == CacheAwareConfig()
    with pytest.warns(UserWarning, match="blocks_per_worker=7"):
        Router(W[:2], policy="consistent_hashing", blocks_per_worker=7).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Router(W[:2], policy="cache_aware", max_load_skew=2.0, min_load_gap=8, blocks_per_worker=7).close()


@pytest.mark.parametrize("prefix", [False, True])
def test_blocks_per_worker_flag(prefix):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    flag = "--router-blocks-per-worker" if prefix else "--blocks-per-worker"
    policy = "--router-policy" if prefix else "--policy"
    args = RouterArgs.from_cli_args(parser.parse_args([policy, "cache_aware", flag, "123"]), use_router_prefix=prefix)
    assert args.blocks_per_worker == 123
    with Router.from_args(RouterArgs(worker_urls=W[:2], policy=args.policy, blocks_per_worker=args.blocks_per_worker)) as router:
        assert router.policy == CacheAwareConfig(blocks_per_worker=123)


def place(router, index, blocks):
    """Route the blocks to available worker number index with the target header, then release."""
    router.route(headers={"X-SMG-Target-Worker": str(index)}, prefix_blocks=blocks).release()


def test_the_longest_prefix_wins_and_is_counted(make_router):
    router = make_router(4, policy="cache_aware")
    place(router, 1, [1, 2])
    place(router, 2, [1, 2, 3])
    lease = router.route(prefix_blocks=[1, 2, 3, 4])
    assert (lease.worker_url, lease.branch) == (W[2], "cache_aware_prefix_hit")
    stats = router.statistics()
    assert (stats.prefix_blocks, stats.prefix_blocks_matched) == (2 + 3 + 4, 3)
    assert [w.indexed_blocks for w in stats.workers] == [0, 2, 4, 0]
    assert stats.indexed_blocks == 6
    metrics = parse_metrics(router.metrics_text())
    assert metrics[("bounded_router_prefix_blocks_total", ())] == 9
    assert metrics[("bounded_router_prefix_blocks_matched_total", ())] == 3
    assert metrics[("bounded_router_worker_indexed_blocks", (("worker", W[2]),))] == 4
    assert router.branch_counts()["cache_aware_prefix_hit"] == 1


def test_an_overloaded_holder_is_a_balance_on_weighted_loads(make_router):
    router = make_router(4, policy=CacheAwareConfig(min_load_gap=100))
    place(router, 1, [1, 2])
    place(router, 2, [1, 2, 3])
    held = router.acquire(W[2], weight=100)  # gap 100 is not exceeded: still passes
    assert router.select(prefix_blocks=[1, 2, 3]).worker_url == W[2]
    more = router.acquire(W[2], weight=1)
    decision = router.select(prefix_blocks=[1, 2, 3])
    assert (decision.worker_url, decision.branch) == (W[1], "cache_aware_balance")
    held.release()
    more.release()


def test_keys_break_ties_and_route_without_a_match(make_router):
    router = make_router(4, policy="cache_aware")
    key = key_preferring(router, W[3])
    lease = router.route(key, prefix_blocks=[50, 51])
    assert (lease.worker_url, lease.branch) == (W[3], "cache_aware_key_hit")
    lease.release()
    # The key's blocks are on w3 now: a new request of the same prefix, without key, follows them.
    assert router.select(prefix_blocks=[50, 51, 52]).worker_url == W[3]


def test_a_removed_worker_is_forgotten(make_router):
    router = make_router(3, policy="cache_aware")
    place(router, 1, [7, 8, 9])
    router.remove_worker(W[1])
    assert router.statistics().indexed_blocks == 0
    router.add_worker(W[1])
    assert router.select(prefix_blocks=[7, 8, 9]).branch == "cache_aware_no_match"


def test_route_many_with_prefix_blocks_equals_successive_routes(make_router):
    keys = ["a", None, "b", "a", None]
    blocks = [[1, 2], [1, 2, 3], [9], [1, 5], [9, 10]]
    batched, single = make_router(5, policy="cache_aware"), make_router(5, policy="cache_aware")
    got = batched.route_many(keys, prefix_blocks=blocks)
    want = [single.route(k, prefix_blocks=b) for k, b in zip(keys, blocks)]
    assert [(x.worker_url, x.branch) for x in got] == [(x.worker_url, x.branch) for x in want]
    assert batched.statistics() == single.statistics()
    assert any(x.branch == "cache_aware_prefix_hit" for x in got)


def test_a_match_at_or_under_the_cache_threshold_is_no_prefix_hit():
    # Worker 0 holds blocks 1 and 2. A request of 10 blocks sharing them matches 2/10 = 0.2: under
    # the default threshold (0.3) it goes to the least loaded; with threshold 0 it is a prefix hit.
    for threshold, branch in ((None, "cache_aware_no_match"), (0.0, "cache_aware_prefix_hit")):
        with Router(W[:2], policy="cache_aware", cache_threshold=threshold) as router:
            router.route(prefix_blocks=[1, 2]).release()
            first = router.route(prefix_blocks=[1, 2])  # the holder again; its lease stays
            assert first.branch == "cache_aware_prefix_hit"
            shared = router.route(prefix_blocks=[1, 2] + list(range(100, 108)))
            assert shared.branch == branch
            assert (shared.worker_url == first.worker_url) == (branch == "cache_aware_prefix_hit")


def test_the_cache_threshold_flag_reaches_the_router():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    args = RouterArgs.from_cli_args(parser.parse_args(["--worker-urls", *W[:2], "--policy", "cache_aware", "--cache-threshold", "0.5"]))
    with Router.from_args(args) as router:
        assert router.policy == CacheAwareConfig(cache_threshold=0.5)
