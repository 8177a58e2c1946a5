"""Worker failures from Python (docs/contract.md, "Worker failures"): outcomes through the lease,
ejection, retries away from tried workers, settings refused with the flag's name, and the
metrics, read with prometheus_client's parser."""

import argparse
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bounded_router import CircuitBreakerConfig, HealthCheckConfig, Router, RouterArgs
from bounded_router.errors import NoWorkerAvailableError

# Loopback ports nothing listens on.
URLS = ["http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11", "http://127.0.0.1:12"]


def worker(router, url):
    return next(w for w in router.workers() if w.url == url)


def test_failures_eject_after_the_threshold_and_successes_reset():
    with Router(URLS[:3], circuit_breaker=CircuitBreakerConfig(failure_threshold=3, timeout_duration_secs=60)) as router:
        for _ in range(2):
            assert router.acquire(URLS[0]).fail() is True
        router.acquire(URLS[0]).release()  # a plain release is a success
        assert worker(router, URLS[0]).consecutive_failures == 0
        for _ in range(3):
            router.acquire(URLS[0]).release(outcome="failure")
        w = worker(router, URLS[0])
        assert (w.condition, w.healthy, w.ejections) == ("ejected", False, 1)
        assert w.outcomes == {"success": 1, "failure": 5, "pushback": 0, "neutral": 0}
        assert w.routed == 6
        for i in range(50):
            with router.route("key-%d" % i) as lease:
                assert lease.worker_url != URLS[0]


def test_pushback_and_neutral_count_neither_way():
    with Router(URLS[:2], circuit_breaker=CircuitBreakerConfig(failure_threshold=1)) as router:
        router.acquire(URLS[0]).release(outcome="pushback")
        router.acquire(URLS[0]).release(outcome="neutral")
        assert worker(router, URLS[0]).condition == "available"
        lease = router.acquire(URLS[0])
        with pytest.raises(ValueError, match="outcome must be one of success, failure, pushback, neutral"):
            lease.release(outcome="broken")
        assert lease.release() is True
        assert lease.fail() is False, "released once"


def test_disabled_breaker_never_ejects():
    with Router(URLS[:2], circuit_breaker=False) as router:
        for _ in range(20):
            router.acquire(URLS[0]).fail()
        assert worker(router, URLS[0]).condition == "available"


def test_exclude_follows_the_keys_ring_and_never_a_tried_worker():
    with Router(URLS) as router:
        # The key's ring order, read off the preferred-worker rule by setting each preferred
        # worker unhealthy in turn.
        with Router(URLS) as probe:
            order = []
            for _ in URLS:
                order.append(probe.select(routing_key="session-9").worker_url)
                probe.set_healthy(order[-1], False)
        tried = []
        for step in range(len(URLS)):
            lease = router.route("session-9", exclude=tried)
            assert lease.worker_url == order[step]
            assert lease.branch == ("failover" if tried else "explicit_routing_key_hit")
            tried.append(lease.worker_url)
            lease.fail()
        with pytest.raises(NoWorkerAvailableError):
            router.route("session-9", exclude=tried)
        assert router.statistics().active_leases == 0
        assert all(w.healthy for w in router.workers()), "excluding never changes health"


def test_exclude_names_a_worker_in_any_spelling():
    # contract: "Workers and membership": a member is found under any spelling of its URL.
    with Router(URLS[:2]) as router:
        first = router.select(routing_key="k").worker_url
        other = [u for u in URLS[:2] if u != first][0]
        for spelling in (first + "/", first.upper()):
            with router.route("k", exclude=[spelling]) as lease:
                assert lease.worker_url == other, spelling


def test_exclude_keeps_the_weight():
    with Router(URLS[:2]) as router:
        lease = router.route("k", exclude=[URLS[0]], weight=7)
        assert worker(router, lease.worker_url).load == 7
        lease.release()


@pytest.mark.parametrize(
    "settings, flag",
    [
        (HealthCheckConfig(interval_secs=0), "health_check_interval_secs"),
        (HealthCheckConfig(timeout_secs=-1), "health_check_timeout_secs"),
        (HealthCheckConfig(failure_threshold=-3), "health_failure_threshold"),
        (HealthCheckConfig(endpoint="health"), "health_check_endpoint"),
        # Regression (found by a review): JSON's error, naming nothing.
        (HealthCheckConfig(interval_secs=float("nan")), r"health_check\.interval_secs must be a finite number, got nan"),
        (HealthCheckConfig(timeout_secs=float("inf")), r"health_check\.timeout_secs must be a finite number, got inf"),
    ],
)
def test_bad_health_check_settings_name_the_flag(settings, flag):
    with pytest.raises(ValueError, match=flag):
        Router(URLS[:1], health_check=settings)


def test_bad_breaker_settings_name_the_flag():
    with pytest.raises(ValueError, match="cb_success_threshold"):
        Router(URLS[:1], circuit_breaker=CircuitBreakerConfig(success_threshold=0))
    with pytest.raises(TypeError, match="health_check must be"):
        Router(URLS[:1], health_check="yes")


def test_a_non_finite_gateway_option_is_refused_naming_it():
    # Regression (found by a review): the gateway's options went to the library as JSON with NaN
    # in it, and the error was the JSON parser's ("invalid character 'N'").
    with Router(URLS[:1]) as router:
        with pytest.raises(ValueError, match="request_timeout_secs must be a finite number, got nan"):
            router.serve(request_timeout_secs=float("nan"))


def test_probes_mark_a_dead_worker_unhealthy():
    # Nothing listens on these ports: every probe is refused at once.
    with Router(URLS[:2], health_check=HealthCheckConfig(interval_secs=0.05, timeout_secs=0.5, failure_threshold=2)) as router:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(w.condition != "unhealthy_probe" for w in router.workers()):
            time.sleep(0.02)
        assert [w.condition for w in router.workers()] == ["unhealthy_probe", "unhealthy_probe"]
        assert all(w.probes_failed >= 2 for w in router.workers())
        router.set_healthy(URLS[0], False)
        assert worker(router, URLS[0]).condition == "unhealthy_user", "the user's word is shown first"


def test_router_args_take_smgs_failure_flags():
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    args = RouterArgs.from_cli_args(
        parser.parse_args(
            ["--worker-urls", URLS[0], "--router-disable-circuit-breaker", "--router-disable-health-check", "--router-cb-failure-threshold", "7"]
        ),
        use_router_prefix=True,
    )
    assert args.disable_circuit_breaker and args.disable_health_check and args.cb_failure_threshold == 7
    assert args.health_check_config() is None and args.circuit_breaker_config() is False
    # Attribute writes as slime makes them.
    args = RouterArgs(worker_urls=URLS[:2])
    args.disable_circuit_breaker = True
    with Router.from_args(args) as router:
        for _ in range(30):
            router.acquire(URLS[0]).fail()
        assert worker(router, URLS[0]).condition == "available"


def test_metrics_report_outcomes_and_conditions():
    with Router(URLS[:2], circuit_breaker=CircuitBreakerConfig(failure_threshold=1)) as router:
        router.acquire(URLS[0]).fail()
        router.acquire(URLS[1]).release()
        samples = {}
        for family in text_string_to_metric_families(router.metrics_text()):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        assert samples[("bounded_router_worker_outcomes_total", (("outcome", "failure"), ("worker", URLS[0])))] == 1
        assert samples[("bounded_router_worker_outcomes_total", (("outcome", "success"), ("worker", URLS[1])))] == 1
        assert samples[("bounded_router_worker_condition", (("condition", "ejected"), ("worker", URLS[0])))] == 1
        assert samples[("bounded_router_worker_condition", (("condition", "available"), ("worker", URLS[0])))] == 0
        assert samples[("bounded_router_worker_ejections_total", (("worker", URLS[0]),))] == 1
        assert samples[("bounded_router_worker_routed_total", (("worker", URLS[1]),))] == 1


def test_from_args_probes_only_when_asked():
    # The library probes nothing unless asked; the servers pass probe=True (contract: Worker
    # failures). Both routers are built together, so the one that does not probe has had as long.
    args = RouterArgs(worker_urls=URLS[:2], health_check_interval_secs=0.05, health_check_timeout_secs=0.5, health_failure_threshold=2)
    with Router.from_args(args) as quiet, Router.from_args(args, probe=True) as probing:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(w.condition != "unhealthy_probe" for w in probing.workers()):
            time.sleep(0.02)
        assert [w.condition for w in probing.workers()] == ["unhealthy_probe", "unhealthy_probe"]
        assert [(w.condition, w.probes_failed) for w in quiet.workers()] == [("available", 0), ("available", 0)]


def test_exclude_keeps_the_prefix_blocks():
    # Regression (found by an audit): route(exclude=...) dropped prefix_blocks, so
    # route(prefix_blocks=b, exclude=[]) was not route(prefix_blocks=b) under cache_aware.
    from bounded_router import prefix_blocks

    blocks = list(prefix_blocks(list(range(64)), 16))
    with Router(URLS, policy="cache_aware") as router:
        router.store_blocks(URLS[3], blocks)
        plain = router.route(prefix_blocks=blocks)
        plain.release()
        none_excluded = router.route(prefix_blocks=blocks, exclude=[])
        none_excluded.release()
        assert (none_excluded.worker_url, none_excluded.branch) == (plain.worker_url, plain.branch) == (URLS[3], "cache_aware_prefix_hit")
        router.store_blocks(URLS[2], blocks[:3])
        retry = router.route(prefix_blocks=blocks, exclude=[URLS[3]])
        assert (retry.worker_url, retry.branch) == (URLS[2], "cache_aware_prefix_hit")
        retry.release()
