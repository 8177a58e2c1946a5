"""Binding parity with SMG: the new policies, the routing-key headers and SMG's names this package
refuses, through the Python API, RouterArgs and the C configuration (docs/contract.md, sections
"power_of_two", "least_load", "manual", "Inputs and precedence")."""

import argparse
import json

import pytest

from bounded_router import (
    LeastLoadConfig,
    ManualConfig,
    PolicyType,
    PowerOfTwoConfig,
    Router,
    RouterArgs,
    config_from_dict,
    policy_from_str,
)
from bounded_router.policy import resolve_policy
from reference_model import ReferenceRouter
from support import W, urls


@pytest.mark.parametrize("name", ["bucket", "prefix_hash", "passthrough"])
def test_smg_only_policies_are_refused_saying_so(name):
    said = "exists in SMG but is not implemented by bounded-router"
    with pytest.raises(KeyError, match=said):
        policy_from_str(name)
    with pytest.raises(ValueError, match=said):
        resolve_policy(name)
    with pytest.raises(ValueError, match=said):
        Router([W[0]], name)
    with pytest.raises(ValueError, match=said):
        config_from_dict({"type": name})
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--policy", name])
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        policy_from_str("nope")


def test_smg_only_policy_in_the_cli_error(capsys):
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--router-policy", "bucket"])
    err = capsys.readouterr().err
    assert "--router-policy" in err and "exists in SMG but is not implemented" in err


def test_smg_only_policy_in_the_c_configuration():
    from bounded_router._native_router import NativeRouter

    with pytest.raises(ValueError, match='policy type "prefix_hash" exists in SMG but is not implemented by bounded-router'):
        NativeRouter(json.dumps({"worker_urls": [W[0]], "policy": {"type": "prefix_hash"}}).encode())


def test_new_policy_types_and_configs():
    assert PolicyType("power_of_two") is PolicyType.PowerOfTwo
    assert resolve_policy("least_load") == LeastLoadConfig()
    assert resolve_policy(PolicyType.Manual, assignment_mode="min_load", max_keys=5) == ManualConfig("min_load", 5)
    assert config_from_dict(ManualConfig("min_load", 9).to_dict()) == ManualConfig("min_load", 9)
    assert PowerOfTwoConfig().to_dict() == {"type": "power_of_two"}
    with pytest.warns(UserWarning, match="max_keys=5: no effect with policy random"):
        assert resolve_policy("random", max_keys=5).policy_type is PolicyType.Random
    with pytest.raises(ValueError, match="'min_group' exists in SMG but is not implemented"):
        ManualConfig(assignment_mode="min_group")
    for bad in (0, -1, True, 1.0, 2**22 + 1):
        with pytest.raises(ValueError, match="max_keys must be an integer from 1 to 4194304"):
            ManualConfig(max_keys=bad)
    with pytest.raises(ValueError, match="assignment_mode must be one of 'random', 'min_load'"):
        ManualConfig(assignment_mode="fastest")


def test_least_load_through_python_follows_the_leases():
    with Router(urls(3), "least_load") as router:
        held = [router.route(), router.route(), router.route()]
        assert sorted(lease.worker_url for lease in held) == urls(3)  # keyless ties are drawn among the tied
        held[1].release()
        assert router.route().worker_url == held[1].worker_url
        assert router.branch_counts()["least_load"] == 4


def test_power_of_two_through_python_never_takes_the_busier_of_two():
    with Router(urls(2), "power_of_two") as router:
        busy = [router.acquire(urls(2)[0]) for _ in range(3)]
        # With two workers both are always drawn: the idle one wins every time.
        assert {router.select().worker_url for _ in range(20)} == {urls(2)[1]}
        assert router.select().branch == "power_of_two"
        for lease in busy:
            lease.release()


def test_manual_through_python():
    # contract: "Ties by the key": idle workers tie, so the key's clockwise order decides.
    clockwise = list(ReferenceRouter(urls(3)).clockwise(b"session"))
    with Router(urls(3), ManualConfig(assignment_mode="min_load")) as router:
        first = router.route("session")
        assert (first.worker_url, first.branch) == (clockwise[0], "manual_vacant")
        again = router.route("session")
        assert (again.worker_url, again.branch) == (clockwise[0], "manual_occupied_hit")
        router.set_healthy(clockwise[0], False)
        moved = router.route(headers={"X-SMG-Routing-Key": "session"})
        assert (moved.worker_url, moved.branch) == (clockwise[1], "manual_occupied_miss")  # the others tie at 0
        keyless = router.route(headers={"X-SMG-Target-Worker": "0", "Cookie": "c"})
        assert keyless.branch == "manual_no_routing_key"


def test_manual_cli_flags_reach_the_router():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True)
    namespace = parser.parse_args(
        ["--worker-urls", W[0], "--router-policy", "manual", "--router-assignment-mode", "min_load", "--router-max-keys", "7"]
    )
    with Router.from_args(RouterArgs.from_cli_args(namespace, use_router_prefix=True)) as router:
        assert router.policy == ManualConfig("min_load", 7)
    with pytest.raises(SystemExit):
        parser.parse_args(["--router-assignment-mode", "delegate"])


def test_routing_key_headers_replace_the_default():
    with Router(urls(4), "consistent_hashing", routing_key_headers=["X-Session-Id", "X-SMG-Routing-Key"]) as router:
        assert router.routing_key_headers == ["X-Session-Id", "X-SMG-Routing-Key"]
        by_key = router.select("s-1")
        d = router.select(headers={"x-session-id": "s-1", "X-SMG-Routing-Key": "other"})
        assert (d.worker_url, d.branch) == (by_key.worker_url, "routing_key_hit")
        d = router.select(headers=[("X-Session-Id", ""), ("X-SMG-Routing-Key", "s-1")])  # empty: next name
        assert d.worker_url == by_key.worker_url
    with Router(urls(4), "consistent_hashing", routing_key_headers=["X-Session-Id"]) as router:
        d = router.select(headers={"X-SMG-Routing-Key": "s-1"})
        assert d.branch == "random_fallback"  # not a routing-key header any more
        lease = router.route(headers={"X-Session-Id": "s-1"})
        assert lease.branch == "routing_key_hit"
        lease.release()
    with Router(urls(2)) as router:
        assert router.routing_key_headers == ["X-SMG-Routing-Key"]


@pytest.mark.parametrize(
    "names, error",
    [
        ([], "routing_key_headers must list from 1 to 8"),
        (["a"] * 9, "routing_key_headers must list from 1 to 8"),
        (["x key"], r"routing_key_headers\[0\] \"x key\" is not a header name"),
        (["ok", ""], r"routing_key_headers\[1\] \"\" is not a header name"),
        (["Cookie"], "already carries another routing input"),
        (["a", "A"], "repeats"),
        (["caf\u00e9"], "is not a header name"),
    ],
)
def test_bad_routing_key_headers_are_refused_naming_the_field(names, error):
    with pytest.raises(ValueError, match=error):
        Router([W[0]], routing_key_headers=names)


def test_routing_key_headers_types():
    for bad in ("X-Key", b"X-Key", 3, [b"X-Key"], [None]):
        with pytest.raises(TypeError, match="routing_key_headers"):
            Router([W[0]], routing_key_headers=bad)


def test_routing_key_headers_flag():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    args = RouterArgs.from_cli_args(parser.parse_args(["--worker-urls", W[0], "--routing-key-headers", "X-A", "X-B"]))
    assert args.routing_key_headers == ["X-A", "X-B"]
    with Router.from_args(args) as router:
        assert router.routing_key_headers == ["X-A", "X-B"]
    assert RouterArgs.from_cli_args(parser.parse_args([])).routing_key_headers == ["X-SMG-Routing-Key"]
    # Repeated list flags accumulate, as SMG's.
    repeated = parser.parse_args(["--worker-urls", W[0], "--worker-urls", W[1], "--routing-key-headers", "X-A", "--routing-key-headers", "X-B"])
    args = RouterArgs.from_cli_args(repeated)
    assert (args.worker_urls, args.routing_key_headers) == ([W[0], W[1]], ["X-A", "X-B"])
    assert RouterArgs.from_cli_args(parser.parse_args([])).worker_urls == []  # the default list is not shared
