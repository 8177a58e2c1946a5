"""Router.metrics_text(): the Prometheus text exposition of branch counters, loads and leases."""

from __future__ import annotations

import gc
import re
import threading

import pytest
from support import urls

from bounded_router import Router, RouterClosedError
from bounded_router.metrics import CONTENT_TYPE, parse, render_all

_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$')


def test_every_line_is_valid_exposition_and_each_family_is_declared_once() -> None:
    with Router(urls(2)) as router:
        text = router.metrics_text()
    assert text.endswith("\n")
    declared = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            declared.append(line.split()[2])
        elif line.startswith("# TYPE "):
            assert line.split()[3] in ("counter", "gauge")
        else:
            assert _SAMPLE.match(line), line
    assert len(declared) == len(set(declared)) == 6
    for name in declared:
        if name.endswith("_total"):
            assert "# TYPE %s counter" % name in text


def test_counts_branches_loads_active_keys_and_health() -> None:
    with Router(urls(2), policy="bounded_consistent_hashing", max_load_skew=1.5, min_load_gap=2) as router:
        leases = [router.route("group-1") for _ in range(4)]  # 3 hits, then the 4th spills (3 > 2)
        leases.append(router.route(headers={"Cookie": "c"}))
        router.set_healthy(urls(2)[1], False)
        m = parse(router.metrics_text())
        branches = {labels[0][1]: v for (name, labels), v in m.items() if name == "bounded_router_requests_total"}
        assert branches["explicit_routing_key_hit"] == 3
        assert branches["explicit_routing_key_spillover"] == 1
        assert branches["implicit_routing_key_hit"] == 1
        assert set(branches) >= {"no_healthy_workers", "target_worker_miss", "random_fallback"}  # zeros are present
        loads = {labels[0][1]: v for (name, labels), v in m.items() if name == "bounded_router_worker_load"}
        assert loads == {url: float(n) for url, n in router.loads().items()}
        assert sum(loads.values()) == 5
        keys = {labels[0][1]: v for (name, labels), v in m.items() if name == "bounded_router_worker_active_keys"}
        assert keys == {w.url: float(w.active_keys) for w in router.workers()}
        healthy = {labels[0][1]: v for (name, labels), v in m.items() if name == "bounded_router_worker_healthy"}
        assert healthy == {urls(2)[0]: 1.0, urls(2)[1]: 0.0}
        assert m[("bounded_router_active_leases", ())] == 5
        for lease in leases:
            lease.release()
        m = parse(router.metrics_text())
        assert m[("bounded_router_active_leases", ())] == 0
        assert m[("bounded_router_leaked_leases_total", ())] == 0


def test_leaked_leases_are_counted() -> None:
    with Router(urls(2)) as router:
        router.route("dropped")  # never released: the safety net releases it and counts it
        gc.collect()
        m = parse(router.metrics_text())
        assert m[("bounded_router_leaked_leases_total", ())] == 1
        assert m[("bounded_router_active_leases", ())] == 0


def test_constant_labels_and_several_routers() -> None:
    with Router(urls(1)) as a, Router(urls(2)) as b:
        a.route("k").release()
        text = render_all([(a, {"router": "chat"}), (b, {"router": "batch"})])
        assert text.count("# HELP bounded_router_worker_load ") == 1
        m = parse(text)
        assert m[("bounded_router_requests_total", (("branch", "explicit_routing_key_hit"), ("router", "chat")))] == 1
        assert m[("bounded_router_requests_total", (("branch", "explicit_routing_key_hit"), ("router", "batch")))] == 0
        assert ("bounded_router_worker_load", (("router", "batch"), ("worker", urls(2)[1]))) in m
        assert 'router="chat"' in a.metrics_text({"router": "chat"})


def test_label_values_are_escaped() -> None:
    odd = 'http://w"0\\:8000/\n'
    with Router([odd]) as router:
        text = router.metrics_text()
    assert 'worker="http://w\\"0\\\\:8000/\\n"' in text
    assert parse(text)[("bounded_router_worker_load", (("worker", odd),))] == 0


@pytest.mark.parametrize(
    "labels, message",
    [
        ({"0bad": "x"}, "not a valid Prometheus label name"),
        ({"__name": "x"}, "not a valid Prometheus label name"),
        ({"worker": "x"}, "used by the router's own metrics"),
        ({"branch": "x"}, "used by the router's own metrics"),
    ],
)
def test_bad_labels_are_rejected_by_name(labels: dict, message: str) -> None:
    with Router(urls(1)) as router:
        with pytest.raises(ValueError, match=message):
            router.metrics_text(labels)


def test_closed_router_and_content_type() -> None:
    router = Router(urls(1))
    router.close()
    with pytest.raises(RouterClosedError):
        router.metrics_text()
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def _samples(text: str) -> dict:
    """{name + labels: value} of an exposition, read with a regular expression of the format
    (independent of bounded_router.metrics.parse)."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            samples[head] = float(value)
    return samples


def test_one_scrape_is_one_snapshot_while_requests_flow() -> None:
    # Another thread routes and releases without pause; in every scrape the active leases equal
    # the sum of the worker loads (no worker is removed) and the routed requests add up.
    with Router(urls(4)) as router:
        stop = threading.Event()
        routed = []

        def churn() -> None:
            n = 0
            while not stop.is_set():
                with router.route("key-%d" % (n % 7)):
                    n += 1
            routed.append(n)

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            for _ in range(300):
                samples = _samples(router.metrics_text())
                loads = sum(v for k, v in samples.items() if k.startswith("bounded_router_worker_load{"))
                assert samples["bounded_router_active_leases"] == loads
        finally:
            stop.set()
            thread.join()
        total = sum(v for k, v in _samples(router.metrics_text()).items() if k.startswith("bounded_router_requests_total{"))
        assert total == routed[0]


@pytest.mark.parametrize("labels", [({"router": "a"}, {"router": "a"}), (None, None), ({}, None)])
def test_render_all_refuses_routers_with_the_same_labels(labels) -> None:
    with Router(urls(1)) as a, Router(urls(1)) as b:
        with pytest.raises(ValueError, match="same labels"):
            render_all([(a, labels[0]), (b, labels[1])])
