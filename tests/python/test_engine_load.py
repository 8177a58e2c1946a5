"""Engine load reports (docs/contract.md, "Engine load reports"): Router.report_load and
forget_load through the real library, with loads worked out by hand from the contract's formula."""

from __future__ import annotations

import pytest

from support import W


def test_routing_load_is_the_report_plus_the_leases_since(make_router):
    router = make_router(2, policy="least_load")
    before = [router.acquire(W[0]), router.acquire(W[0])]
    router.report_load(W[1], 5)  # the other replicas' requests on w1
    assert router.select().worker_url == W[0], "2 leases on w0 against 5 on w1"
    router.report_load(W[0], 6)  # w0's engine counts the two leases and four of other replicas
    assert router.select().worker_url == W[1], "6 on w0 against 5 on w1"
    for lease in before:
        lease.release()
    assert router.select().worker_url == W[1], "the report counted them: releasing does not drop it"
    assert router.loads() == {W[0]: 0, W[1]: 0}, "loads() counts this router's leases alone"
    since = [router.acquire(W[1]) for _ in range(2)]  # w1: 5 + 2
    assert router.select().worker_url == W[0]
    router.forget_load(W[0])  # w0: its leases alone, 0
    router.forget_load(W[1])  # w1: its 2 leases
    assert router.select().worker_url == W[0]
    for lease in since:
        lease.release()


@pytest.mark.parametrize("load, error", [(-1, ValueError), (1 << 40 | 1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_reports_are_refused(make_router, load, error):
    router = make_router(1, policy="least_load")
    with pytest.raises(error, match="load"):
        router.report_load(W[0], load)


def test_an_unknown_worker_is_a_key_error(make_router):
    router = make_router(1)
    with pytest.raises(KeyError):
        router.report_load("http://127.0.0.1:9", 1)
    with pytest.raises(KeyError):
        router.forget_load("http://127.0.0.1:9")


def test_prefill_load_is_the_waiting_plus_the_leases_since_not_started(make_router):
    # balance_by prefill, gap 2, skew 1.0 (contract: "Prefill load"): w0 holds the prefix, so it
    # is chosen unless its prefill load is more than 2 above w1's and above the mean.
    router = make_router(2, policy="cache_aware", balance_by="prefill", min_load_gap=2, max_load_skew=1.0)
    router.store_blocks(W[0], [1])
    before = router.acquire(W[0])
    router.report_load(W[0], 9, waiting=4)  # 4 waiting on w0, ours among them
    assert router.select(prefix_blocks=[1]).worker_url == W[1], "4 - 0 > 2 and 4 > 2"
    before.first_token()
    assert router.select(prefix_blocks=[1]).worker_url == W[1], "the report counted it waiting: still 4"
    router.report_load(W[0], 9, waiting=2)
    assert router.select(prefix_blocks=[1]).worker_url == W[0], "2 against 0: within the gap"
    since = router.acquire(W[0], weight=2)  # w0: 2 + 2
    assert router.select(prefix_blocks=[1]).worker_url == W[1]
    since.first_token()  # w0: 2 again
    assert router.select(prefix_blocks=[1]).worker_url == W[0]
    stats = router.statistics().workers[0]
    assert (stats.prefill_load, stats.prefill_requests) == (0, 0), "statistics count this router's leases"
    router.report_load(W[0], 9, waiting=9)
    router.report_load(W[0], 9)  # no waiting figure: w0's prefill load is its leases' again, 0
    assert router.select(prefix_blocks=[1]).worker_url == W[0]
    before.release()
    since.release()


def test_waiting_requests_weigh_the_mean_lease(make_router):
    router = make_router(2, policy="cache_aware", balance_by="prefill", min_load_gap=100, max_load_skew=1.0)
    router.store_blocks(W[0], [1])
    held = [router.acquire(W[1], weight=60), router.acquire(W[1], weight=40)]  # mean 50
    for lease in held:
        lease.first_token()
    router.report_load(W[0], waiting_requests=2)  # 2 x 50 = 100: not more than 100 above w1's 0
    assert router.select(prefix_blocks=[1]).worker_url == W[0]
    router.report_load(W[0], waiting_requests=3)  # 150 - 0 > 100 and 150 > 75
    assert router.select(prefix_blocks=[1]).worker_url == W[1]
    router.report_load(W[0], waiting=100, waiting_requests=3)  # the waiting figure comes first
    assert router.select(prefix_blocks=[1]).worker_url == W[0]
    for lease in held:
        lease.release()


@pytest.mark.parametrize("figure", ["load", "waiting", "waiting_requests"])
@pytest.mark.parametrize("value, error", [(-1, ValueError), (1 << 40 | 1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_figures_are_refused(make_router, figure, value, error):
    router = make_router(1, policy="least_load")
    with pytest.raises(error, match=figure.replace("_", ".")):
        router.report_load(W[0], **{figure: value})
