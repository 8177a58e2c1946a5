"""Policies, typed configs, RouterArgs and the configuration errors of Router (contract: "The bounded rule", "Validation")."""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounded_router import (
    BoundedConsistentHashingConfig,
    ConsistentHashingConfig,
    PolicyType,
    RandomConfig,
    RoundRobinConfig,
    Router,
    RouterArgs,
    config_from_dict,
    policy_from_str,
)
from bounded_router.policy import default_config
from reference_model import ReferenceRouter
from support import W, urls

NAMES = ["random", "round_robin", "consistent_hashing", "bounded_consistent_hashing", "power_of_two", "least_load", "manual", "cache_aware"]


def test_policy_type_members():
    assert [m.name for m in PolicyType] == [
        "Random", "RoundRobin", "ConsistentHashing", "BoundedConsistentHashing", "PowerOfTwo", "LeastLoad", "Manual", "CacheAware"
    ]  # fmt: skip
    assert [m.value for m in PolicyType] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_policy_from_str(name):
    assert policy_from_str(name) is PolicyType(name)


@pytest.mark.parametrize("name", ["", "nope", "Random", "RANDOM", "bounded", " random", None, 3])
def test_policy_from_str_unknown(name):
    with pytest.raises(KeyError):
        policy_from_str(name)


# -- typed configs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 0.999, 0.0, -1.0, 0, True, False, "1.5", None, [1.5], complex(2, 0)],
)
def test_bad_max_load_skew(value):
    with pytest.raises(ValueError, match=r"max_load_skew must be a finite number >= 1\.0, got"):
        BoundedConsistentHashingConfig(max_load_skew=value)


@pytest.mark.parametrize("value", [-1, -100, True, False, 2.0, 2.5, "2", None, math.nan])
def test_bad_min_load_gap(value):
    with pytest.raises(ValueError, match=r"min_load_gap must be an integer >= 0, got"):
        BoundedConsistentHashingConfig(min_load_gap=value)


def test_error_messages_name_the_value():
    with pytest.raises(ValueError, match="got nan"):
        BoundedConsistentHashingConfig(max_load_skew=math.nan)
    with pytest.raises(ValueError, match="got -1$"):
        BoundedConsistentHashingConfig(min_load_gap=-1)


@pytest.mark.parametrize("skew", [1, 1.0, 1.5, 10**6, Fraction(3, 2)])
@pytest.mark.parametrize("gap", [0, 2, 10**9])
def test_good_bounded_config(skew, gap):
    config = BoundedConsistentHashingConfig(max_load_skew=skew, min_load_gap=gap)
    assert type(config.max_load_skew) is float and config.max_load_skew == float(skew)
    assert type(config.min_load_gap) is int and config.min_load_gap == gap


def test_defaults_and_frozen():
    config = BoundedConsistentHashingConfig()
    assert (config.max_load_skew, config.min_load_gap) == (1.5, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_load_skew = 2.0  # type: ignore[misc]


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_skew_accepted_iff_finite_and_at_least_one(value):
    ok = math.isfinite(value) and value >= 1.0
    try:
        BoundedConsistentHashingConfig(max_load_skew=value)
    except ValueError:
        assert not ok
    else:
        assert ok


@pytest.mark.parametrize(
    "config, expected",
    [
        (RandomConfig(), {"type": "random"}),
        (RoundRobinConfig(), {"type": "round_robin"}),
        (ConsistentHashingConfig(), {"type": "consistent_hashing", "hash_ring": "xxh64"}),
        (ConsistentHashingConfig(hash_ring="smg"), {"type": "consistent_hashing", "hash_ring": "smg"}),
        (
            BoundedConsistentHashingConfig(),
            {"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2, "hash_ring": "xxh64", "spill_target": "clockwise", "key_memory": 0, "balance_by": "in_flight"},
        ),
        (
            BoundedConsistentHashingConfig(max_load_skew=3, min_load_gap=0, hash_ring="smg"),
            {"type": "bounded_consistent_hashing", "max_load_skew": 3.0, "min_load_gap": 0, "hash_ring": "smg", "spill_target": "clockwise", "key_memory": 0, "balance_by": "in_flight"},
        ),
    ],
)
def test_to_dict_round_trip(config, expected):
    assert config.to_dict() == expected
    assert config_from_dict(config.to_dict()) == config
    assert config.policy_type.value == expected["type"]


@given(
    st.floats(min_value=1.0, allow_infinity=False, allow_nan=False),
    st.integers(min_value=0, max_value=2**62),
)
def test_bounded_round_trip_property(skew, gap):
    config = BoundedConsistentHashingConfig(max_load_skew=skew, min_load_gap=gap)
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": "nope"},
        {"type": "random", "max_load_skew": 1.5},
        {"type": "consistent_hashing", "min_load_gap": 1},
        {"type": "bounded_consistent_hashing", "max_load_skew": 0.5},
        {"type": "bounded_consistent_hashing", "skew": 2},
        "random",
    ],
)
def test_config_from_dict_errors(data):
    with pytest.raises(ValueError):
        config_from_dict(data)


def test_config_from_dict_defaults():
    assert config_from_dict({"type": "bounded_consistent_hashing"}) == BoundedConsistentHashingConfig()


# -- Router configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, expected",
    [
        (PolicyType.Random, RandomConfig()),
        ("round_robin", RoundRobinConfig()),
        (ConsistentHashingConfig(), ConsistentHashingConfig()),
        ("bounded_consistent_hashing", BoundedConsistentHashingConfig()),
        (BoundedConsistentHashingConfig(2.0, 5), BoundedConsistentHashingConfig(2.0, 5)),
    ],
)
def test_router_policy_forms(make_router, policy, expected):
    assert make_router(2, policy=policy).policy == expected


def test_router_default_policy(make_router):
    router = make_router(2)
    assert router.policy == BoundedConsistentHashingConfig()
    assert make_router(2, max_load_skew=2).policy == BoundedConsistentHashingConfig(2.0, 2)
    assert make_router(2, min_load_gap=0).policy == BoundedConsistentHashingConfig(1.5, 0)


@pytest.mark.parametrize("policy", ["nope", "", "Bounded", 3, None])
def test_router_unknown_policy(policy):
    with pytest.raises(ValueError, match="policy"):
        Router(urls(2), policy=policy)


OTHER_POLICIES = [
    (PolicyType.Random, RandomConfig()),
    ("round_robin", RoundRobinConfig()),
    (PolicyType.ConsistentHashing, ConsistentHashingConfig()),
    (ConsistentHashingConfig(), ConsistentHashingConfig()),
]


@pytest.mark.parametrize("policy, in_force", OTHER_POLICIES)
@pytest.mark.parametrize("kwargs", [{"max_load_skew": 1.5}, {"min_load_gap": 2}, {"max_load_skew": 1.5, "min_load_gap": 2}])
def test_default_bounded_settings_are_accepted_quietly_by_other_policies(policy, in_force, kwargs):
    # Serving stacks pass the same flags whatever --policy says (as sglang_router accepts them).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Router(urls(2), policy=policy, **kwargs) as router:
            assert router.policy == in_force


@pytest.mark.parametrize("policy, in_force", OTHER_POLICIES)
def test_other_bounded_settings_are_ignored_by_other_policies_with_one_warning(policy, in_force):
    with pytest.warns(UserWarning) as caught:
        router = Router(urls(2), policy=policy, max_load_skew=3.0, min_load_gap=7)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "max_load_skew=3.0" in text and "min_load_gap=7" in text and in_force.policy_type.value in text
    assert caught[0].filename == __file__  # the warning points at the caller
    with router:
        assert router.policy == in_force
        # Ignored indeed: strict hashing keeps piling one key on its worker.
        if in_force == ConsistentHashingConfig():
            leases = [router.route("k") for _ in range(6)]
            assert len({lease.worker_url for lease in leases}) == 1


def test_only_the_setting_that_differs_is_named():
    with pytest.warns(UserWarning) as caught:
        Router(urls(1), policy="random", max_load_skew=1.5, min_load_gap=0).close()
    assert len(caught) == 1
    assert "min_load_gap=0" in str(caught[0].message) and "max_load_skew" not in str(caught[0].message)


@pytest.mark.parametrize("kwargs", [{"max_load_skew": 2.0}, {"min_load_gap": 3}])
def test_skew_and_gap_not_next_to_a_bounded_config(kwargs):
    with pytest.raises(ValueError, match="set them in the config"):
        Router(urls(2), policy=BoundedConsistentHashingConfig(), **kwargs)


@pytest.mark.parametrize("skew", [math.nan, math.inf, -math.inf, 0.5, True, "2"])
def test_router_bad_skew(skew):
    with pytest.raises(ValueError, match="max_load_skew"):
        Router(urls(2), max_load_skew=skew)


@pytest.mark.parametrize("gap", [-1, True, 1.0, "1"])
def test_router_bad_gap(gap):
    with pytest.raises(ValueError, match="min_load_gap"):
        Router(urls(2), min_load_gap=gap)


@pytest.mark.parametrize("virtual_nodes", [0, -1, 65537, 1.5, True, "150"])
def test_router_bad_virtual_nodes(virtual_nodes):
    with pytest.raises(ValueError, match="virtual_nodes"):
        Router(urls(2), virtual_nodes=virtual_nodes)


def test_router_virtual_nodes_changes_the_ring(make_router):
    keys = ["k%d" % i for i in range(200)]
    a = make_router(4, policy="consistent_hashing", virtual_nodes=1)
    b = make_router(4, policy="consistent_hashing", virtual_nodes=150)
    for router, n in ((a, 1), (b, 150)):
        model = ReferenceRouter(urls(4), virtual_nodes=n)
        assert [router.select(k).worker_url for k in keys] == [model.preferred(k.encode()) for k in keys]
    # the two rings are not the same ring: the models differ on these keys
    one, many = ReferenceRouter(urls(4), virtual_nodes=1), ReferenceRouter(urls(4), virtual_nodes=150)
    assert any(one.preferred(k.encode()) != many.preferred(k.encode()) for k in keys)


@pytest.mark.parametrize("worker_urls", [["http://a", "http://a"], ["http://a", ""], [""]])
def test_router_bad_urls(worker_urls):
    with pytest.raises(ValueError):
        Router(worker_urls)


@pytest.mark.parametrize("worker_urls", ["http://a", b"http://a", [b"http://a"], ["http://a", None], 5])
def test_router_url_types(worker_urls):
    with pytest.raises(TypeError):
        Router(worker_urls)


def test_router_accepts_any_iterable_and_no_workers(make_router):
    with Router(iter(urls(2))) as router:
        assert list(router.loads()) == urls(2)
    with Router([]) as router:
        assert router.loads() == {}


@pytest.mark.parametrize("make", [ConsistentHashingConfig, BoundedConsistentHashingConfig])
@pytest.mark.parametrize("value", ["SMG", "blake3", "", None, 1, b"smg"])
def test_hash_ring_must_be_xxh64_or_smg(make, value):
    with pytest.raises(ValueError, match=r"hash_ring must be one of 'xxh64', 'smg', got "):
        make(hash_ring=value)


@pytest.mark.parametrize("policy", ["random", "round_robin"])
def test_hash_ring_is_ignored_with_a_warning_by_policies_that_do_not_hash(policy):
    with pytest.raises(ValueError, match="policy %s has no setting 'hash_ring'" % policy):
        config_from_dict({"type": policy, "hash_ring": "smg"})
    with pytest.warns(UserWarning, match="hash_ring='smg': no effect with policy %s" % policy) as caught:
        router = Router.from_args(RouterArgs(worker_urls=[W[0]], policy=policy, hash_ring="smg"))
    assert len(caught) == 1
    with router:
        assert router.policy == default_config(PolicyType(policy))


def test_hash_ring_reaches_the_library(make_router):
    """The typed config's hash_ring is the library's: a router built from it reports it back,
    and the two rings place keys differently."""
    smg = make_router(4, policy=ConsistentHashingConfig(hash_ring="smg"))
    xxh = make_router(4, policy=ConsistentHashingConfig())
    assert smg.policy.hash_ring == "smg"
    keys = ["k%d" % i for i in range(200)]
    differ = sum(smg.select(k).worker_url != xxh.select(k).worker_url for k in keys)
    assert differ > 100  # about 3/4 of the keys with 4 workers


# -- RouterArgs ----------------------------------------------------------------------------


def test_router_args_defaults():
    args = RouterArgs()
    assert (args.worker_urls, args.policy, args.max_load_skew, args.min_load_gap, args.virtual_nodes, args.hash_ring) == (
        [],
        "bounded_consistent_hashing",
        1.5,
        2,
        150,
        "xxh64",
    )


@pytest.mark.parametrize("prefix", [False, True])
def test_cli_round_trip(prefix):
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-level", default="info")  # the host program's own flags
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    p = "--router-" if prefix else "--"
    argv = [
        "--worker-urls", W[0], W[1],  # unprefixed either way, as SMG
        p + "policy", "consistent_hashing",
        p + "virtual-nodes", "64",
        "--port", "9000",
        "--log-level", "debug",
    ]  # fmt: skip
    namespace = parser.parse_args(argv)
    assert namespace.log_level == "debug"
    args = RouterArgs.from_cli_args(namespace, use_router_prefix=prefix)
    assert args == RouterArgs(worker_urls=[W[0], W[1]], policy="consistent_hashing", virtual_nodes=64, port=9000)
    router = Router.from_args(args)
    assert router.policy == ConsistentHashingConfig()
    assert list(router.loads()) == [W[0], W[1]]
    router.close()


@pytest.mark.parametrize("prefix", [False, True])
def test_cli_bounded_settings(prefix):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    p = "--router-" if prefix else "--"
    namespace = parser.parse_args(["--worker-urls", W[0], p + "max-load-skew", "2.5", p + "min-load-gap", "4"])
    dest = "router_max_load_skew" if prefix else "max_load_skew"
    assert getattr(namespace, dest) == 2.5
    args = RouterArgs.from_cli_args(namespace, use_router_prefix=prefix)
    assert (args.policy, args.max_load_skew, args.min_load_gap) == ("bounded_consistent_hashing", 2.5, 4)
    with Router.from_args(args) as router:
        assert router.policy == BoundedConsistentHashingConfig(2.5, 4)


@pytest.mark.parametrize("prefix", [False, True])
@pytest.mark.parametrize("policy, config", [("consistent_hashing", ConsistentHashingConfig), ("bounded_consistent_hashing", BoundedConsistentHashingConfig)])
def test_cli_hash_ring(prefix, policy, config):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    p = "--router-" if prefix else "--"
    args = RouterArgs.from_cli_args(parser.parse_args(["--worker-urls", W[0], p + "policy", policy, p + "hash-ring", "smg"]), use_router_prefix=prefix)
    assert args.hash_ring == "smg"
    with Router.from_args(args) as router:
        assert router.policy == config(hash_ring="smg")
    with pytest.raises(SystemExit):
        parser.parse_args([p + "hash-ring", "blake3"])


def test_cli_defaults_and_choices():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    assert RouterArgs.from_cli_args(parser.parse_args([])) == RouterArgs()
    with pytest.raises(SystemExit):
        parser.parse_args(["--policy", "nope"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--min-load-gap", "1.5"])


def test_prefixed_flags_sit_next_to_a_servers_own():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="::1")  # the server's own address flags
    parser.add_argument("--port", type=int, default=1)
    parser.add_argument("--policy", default="fifo")  # and a flag named like one of the router's
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    namespace = parser.parse_args(["--policy", "random", "--router-policy", "round_robin", "--port", "7"])
    args = RouterArgs.from_cli_args(namespace, use_router_prefix=True)
    assert (args.policy, args.host, args.port) == ("round_robin", "::1", 7)


def test_prefix_keeps_worker_urls_host_and_port_unprefixed():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings}
    assert {"--worker-urls", "--host", "--port", "--router-policy", "--router-routing-key-headers", "--router-disable-arg-fallback"} <= flags
    assert not {f for f in flags if f.startswith("--router-") and f[9:] in ("worker-urls", "host", "port")}
    assert not {f for f in flags - {"--worker-urls", "--host", "--port", "-h", "--help"} if not f.startswith("--router-")}
    with pytest.raises(SystemExit):
        parser.parse_args(["--router-worker-urls", W[0]])


def test_exclude_host_port():
    for prefix in (False, True):
        parser = argparse.ArgumentParser()
        RouterArgs.add_cli_args(parser, use_router_prefix=prefix, exclude_host_port=True)
        namespace = parser.parse_args([])
        assert not hasattr(namespace, "host") and not hasattr(namespace, "port")
        args = RouterArgs.from_cli_args(namespace, use_router_prefix=prefix)
        assert (args.host, args.port) == (RouterArgs.host, RouterArgs.port)


def test_prefixed_value_falls_back_to_the_unprefixed_one_only_when_unset():
    # As SMG 1.13.0: a prefixed flag left at a None default reads the server's flag of the same
    # name; one with a default of its own (--router-policy) keeps it.
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="round_robin")
    parser.add_argument("--routing-key-headers", nargs="*")
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    namespace = parser.parse_args(["--policy", "random", "--routing-key-headers", "x-a"])
    args = RouterArgs.from_cli_args(namespace, use_router_prefix=True)
    assert (args.policy, args.routing_key_headers) == (RouterArgs.policy, ["x-a"])
    namespace = parser.parse_args(["--routing-key-headers", "x-a", "--router-routing-key-headers", "x-b"])
    assert RouterArgs.from_cli_args(namespace, use_router_prefix=True).routing_key_headers == ["x-b"]
    namespace = parser.parse_args(["--routing-key-headers", "x-a", "--router-disable-arg-fallback"])
    assert RouterArgs.from_cli_args(namespace, use_router_prefix=True).routing_key_headers == ["X-SMG-Routing-Key"]


def test_disable_arg_fallback_drops_the_unprefixed_flags_too():
    # SMG's rule, mirrored: the unprefixed --worker-urls/--host/--port are fallbacks as well.
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    namespace = parser.parse_args(["--worker-urls", W[0], "--port", "9", "--router-disable-arg-fallback"])
    args = RouterArgs.from_cli_args(namespace, use_router_prefix=True)
    assert (args.worker_urls, args.port) == ([], RouterArgs.port)


def test_from_args_with_another_policy_ignores_the_bounded_settings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults RouterArgs always carries: no warning
        with Router.from_args(RouterArgs(worker_urls=[W[0]], policy="random")) as router:
            assert router.policy == RandomConfig()
    with pytest.warns(UserWarning, match="max_load_skew=3.0") as caught:
        router = Router.from_args(RouterArgs(worker_urls=[W[0]], policy="consistent_hashing", max_load_skew=3.0))
    assert len(caught) == 1
    with router:
        assert router.policy == ConsistentHashingConfig()


def test_from_args_from_the_command_line_with_another_policy():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    flags = ["--worker-urls", W[0], W[1], "--router-policy", "round_robin", "--router-min-load-gap", "5"]
    args = RouterArgs.from_cli_args(parser.parse_args(flags), use_router_prefix=True)
    with pytest.warns(UserWarning, match="min_load_gap=5"):
        router = Router.from_args(args)
    with router:
        assert router.policy == RoundRobinConfig()
        assert [router.route().worker_url for _ in range(4)] == [W[0], W[1], W[0], W[1]]


def test_from_args_errors():
    with pytest.raises(ValueError, match="policy"):
        Router.from_args(RouterArgs(worker_urls=[W[0]], policy="nope"))
    with pytest.raises(ValueError, match="min_load_gap"):
        Router.from_args(RouterArgs(worker_urls=[W[0]], min_load_gap=-1))
