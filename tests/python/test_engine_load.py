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
