"""Router.metrics_text(): the Prometheus text exposition of branch counters, loads and leases.

Every exposition is read with prometheus_client's parser (the reference parser of the format, a
test-only dependency), never with bounded_router.metrics.parse, and compared with counts the test
kept itself or with the reference model (tests/reference_model.py), never with router.loads().
"""

from __future__ import annotations

import gc
import re
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reference_model import ReferenceRouter
from support import parse_metrics as parse
from support import urls

from bounded_router import Router, RouterClosedError
from bounded_router.metrics import CONTENT_TYPE, render_all

_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$')


def by_label(m: dict, name: str, label: str) -> dict:
    return {dict(labels)[label]: v for (n, labels), v in m.items() if n == name}


def test_families_and_types_by_the_reference_parser() -> None:
    with Router(urls(2)) as router:
        families = {f.name: f.type for f in text_string_to_metric_families(router.metrics_text())}
    # prometheus_client names a counter family without its _total suffix
    assert families == {
        "bounded_router_requests": "counter",
        "bounded_router_worker_load": "gauge",
        "bounded_router_worker_active_keys": "gauge",
        "bounded_router_worker_healthy": "gauge",
        "bounded_router_active_leases": "gauge",
        "bounded_router_leaked_leases": "counter",
        "bounded_router_worker_indexed_blocks": "gauge",
        "bounded_router_prefix_blocks": "counter",
        "bounded_router_prefix_blocks_matched": "counter",
        "bounded_router_indexed_blocks": "gauge",
        "bounded_router_worker_routed": "counter",
        "bounded_router_worker_outcomes": "counter",
        "bounded_router_worker_condition": "gauge",
        "bounded_router_worker_ejections": "counter",
        "bounded_router_worker_probes": "counter",
        "bounded_router_worker_prefill_load": "gauge",
        "bounded_router_worker_prefill_requests": "gauge",
    }


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
    assert len(declared) == len(set(declared)) == 17
    for name in declared:
        if name.endswith("_total"):
            assert "# TYPE %s counter" % name in text


def test_counts_branches_loads_active_keys_and_health() -> None:
    w0, w1 = urls(2)
    model = ReferenceRouter(urls(2))
    key = next("group-%d" % i for i in range(1000) if model.preferred(b"group-%d" % i) == w0)
    cookie = next("c%d" % i for i in range(1000) if model.preferred(b"c%d" % i) == w1)
    with Router(urls(2), policy="bounded_consistent_hashing", max_load_skew=1.5, min_load_gap=2) as router:
        leases = [router.route(key) for _ in range(4)]  # 3 hits on w0, then the 4th spills to w1 (3 > 2)
        leases.append(router.route(headers={"Cookie": cookie}))  # w1, no explicit key
        router.set_healthy(w1, False)
        m = parse(router.metrics_text())
        branches = by_label(m, "bounded_router_requests_total", "branch")
        expected = {name: 0.0 for name in ("no_healthy_workers", "target_worker_hit", "target_worker_miss",
                                           "explicit_routing_key_no_eligible_candidate", "random_fallback")}
        expected.update(explicit_routing_key_hit=3.0, explicit_routing_key_spillover=1.0, implicit_routing_key_hit=1.0)
        assert {b: branches[b] for b in expected} == expected
        assert sum(branches.values()) == 5
        assert by_label(m, "bounded_router_worker_load", "worker") == {w0: 3.0, w1: 2.0}
        assert by_label(m, "bounded_router_worker_active_keys", "worker") == {w0: 1.0, w1: 1.0}
        assert by_label(m, "bounded_router_worker_healthy", "worker") == {w0: 1.0, w1: 0.0}
        assert m[("bounded_router_active_leases", ())] == 5
        assert m[("bounded_router_leaked_leases_total", ())] == 0
        leases[0].release()
        leases[4].release()
        m = parse(router.metrics_text())
        assert by_label(m, "bounded_router_worker_load", "worker") == {w0: 2.0, w1: 1.0}
        assert m[("bounded_router_active_leases", ())] == 3
        for lease in leases[1:4]:
            lease.release()
        m = parse(router.metrics_text())
        assert by_label(m, "bounded_router_worker_load", "worker") == {w0: 0.0, w1: 0.0}
        assert by_label(m, "bounded_router_worker_active_keys", "worker") == {w0: 0.0, w1: 0.0}
        assert m[("bounded_router_active_leases", ())] == 0
        assert m[("bounded_router_leaked_leases_total", ())] == 0


@pytest.mark.parametrize("n", [1, 3, 5])
def test_each_worker_load_is_what_the_test_put_there(n: int) -> None:
    # acquire() puts a chosen number of leases on each worker: i + 1 on worker i
    with Router(urls(n)) as router:
        held = [router.acquire(url) for i, url in enumerate(urls(n)) for _ in range(i + 1)]
        m = parse(router.metrics_text())
        assert by_label(m, "bounded_router_worker_load", "worker") == {url: float(i + 1) for i, url in enumerate(urls(n))}
        assert m[("bounded_router_active_leases", ())] == len(held) == n * (n + 1) // 2
        for lease in held:
            lease.release()


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
    # A worker URL cannot hold a backslash or a newline (contract: "Workers and membership"); a
    # quote in its host it can, and a constant label any of the three.
    odd, label = 'http://w"0:8000', 'a\\b\n"c'
    with Router([odd]) as router:
        text = router.metrics_text({"router": label})
    assert 'worker="http://w\\"0:8000"' in text and 'router="a\\\\b\\n\\"c"' in text
    assert parse(text)[("bounded_router_worker_load", (("router", label), ("worker", odd)))] == 0


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
                m = parse(router.metrics_text())
                loads = by_label(m, "bounded_router_worker_load", "worker")
                assert m[("bounded_router_active_leases", ())] == sum(loads.values())
        finally:
            stop.set()
            thread.join()
        m = parse(router.metrics_text())
        assert sum(by_label(m, "bounded_router_requests_total", "branch").values()) == routed[0]
        assert m[("bounded_router_active_leases", ())] == 0


@pytest.mark.parametrize("labels", [({"router": "a"}, {"router": "a"}), (None, None), ({}, None)])
def test_render_all_refuses_routers_with_the_same_labels(labels) -> None:
    with Router(urls(1)) as a, Router(urls(1)) as b:
        with pytest.raises(ValueError, match="same labels"):
            render_all([(a, labels[0]), (b, labels[1])])
