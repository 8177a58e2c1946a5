"""The prefill load (docs/contract.md, "Prefill load"): Lease.first_token, the iterators and the
statistics that report it, the balance_by setting and its rule on hand-computed vectors (the
same as the Go tests'), and its metric families read with prometheus_client's parser."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, List

import pytest
from reference_model import fmix64
from support import key_preferring, model_of, parse_metrics, urls

from bounded_router import BoundedConsistentHashingConfig, CacheAwareConfig, Router


def prefill(router: Router) -> List[tuple]:
    return [(w.prefill_load, w.prefill_requests) for w in router.workers()]


def test_first_token_is_idempotent_and_leaves_the_load() -> None:
    with Router(urls(2)) as router:
        a = router.acquire(urls(2)[0], weight=5)
        b = router.acquire(urls(2)[0], weight=3)
        assert prefill(router) == [(8, 2), (0, 0)]
        assert a.first_token() is True
        assert a.first_token() is False
        assert prefill(router) == [(3, 1), (0, 0)]
        assert router.loads() == {urls(2)[0]: 8, urls(2)[1]: 0}
        a.release()
        b.release()
        assert b.first_token() is False, "a released lease"
        assert prefill(router) == [(0, 0), (0, 0)]
        stats = router.statistics()
        assert [(w.prefill_load, w.prefill_requests) for w in stats.workers] == [(0, 0), (0, 0)]


def test_first_token_after_close_is_a_no_op() -> None:
    router = Router(urls(1))
    lease = router.acquire(urls(1)[0])
    router.close()
    assert lease.first_token() is False


def test_wrap_iter_marks_the_first_item() -> None:
    with Router(urls(1)) as router:
        body = router.acquire(urls(1)[0]).wrap_iter(iter([b"a", b"b"]))
        assert prefill(router) == [(1, 1)]
        assert next(body) == b"a"
        assert prefill(router) == [(0, 0)] and router.active_leases() == 1
        assert list(body) == [b"b"]
        assert router.active_leases() == 0


def test_wrap_aiter_marks_the_first_item() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    async def main(router: Router) -> None:
        body = router.acquire(urls(1)[0]).wrap_aiter(chunks())
        assert prefill(router) == [(1, 1)]
        assert await body.__anext__() == b"a"
        assert prefill(router) == [(0, 0)] and router.active_leases() == 1
        assert [chunk async for chunk in body] == [b"b"]

    with Router(urls(1)) as router:
        asyncio.run(main(router))
        assert router.active_leases() == 0


def test_an_empty_stream_never_marks_a_first_token() -> None:
    with Router(urls(1)) as router:
        lease = router.acquire(urls(1)[0])
        assert list(lease.wrap_iter([])) == []
        assert router.workers()[0].routed == 1 and prefill(router) == [(0, 0)]


def test_metrics_report_the_prefill_load() -> None:
    with Router(urls(2)) as router:
        waiting = router.acquire(urls(2)[1], weight=7)
        router.acquire(urls(2)[1], weight=2).first_token()
        samples = parse_metrics(router.metrics_text())
    waiting.release()
    assert samples[("bounded_router_worker_prefill_load", (("worker", urls(2)[1]),))] == 7
    assert samples[("bounded_router_worker_prefill_requests", (("worker", urls(2)[1]),))] == 1
    assert samples[("bounded_router_worker_prefill_load", (("worker", urls(2)[0]),))] == 0


def test_balance_by_is_validated_and_passed_on() -> None:
    assert CacheAwareConfig(balance_by="prefill").to_dict()["balance_by"] == "prefill"
    with pytest.raises(ValueError, match="balance_by must be one of 'in_flight', 'prefill', got 'waiting'"):
        BoundedConsistentHashingConfig(balance_by="waiting")
    with pytest.raises(ValueError, match="balance_by"):
        Router(urls(2), "cache_aware", balance_by=1)  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="balance_by='prefill': no effect with policy least_load"):
        Router(urls(2), "least_load", balance_by="prefill").close()
    with Router(urls(2), "cache_aware", balance_by="prefill") as router:
        assert router.policy == CacheAwareConfig(balance_by="prefill")


def hold(router: Router, waiting: List[int], started: List[int]) -> list:
    leases = []
    for url, w, s in zip([info.url for info in router.workers()], waiting, started):
        leases += [router.acquire(url) for _ in range(w)]
        for _ in range(s):
            leases.append(router.acquire(url))
            leases[-1].first_token()
    return leases


def test_bounded_by_prefill_vectors() -> None:
    # docs/contract.md, "Prefill load": w0 decodes 4 answers; under in_flight the key would spill.
    w = urls(4)
    with Router(w, "bounded_consistent_hashing", max_load_skew=1.0, min_load_gap=2, balance_by="prefill", spill_target="least_loaded") as router:
        key = next(k for k in ("k%d" % i for i in range(1000)) if model_of(router).preferred(k.encode()) == w[0])
        held = hold(router, [0, 0, 0, 0], [4, 0, 0, 0])
        assert router.select(key).branch == "explicit_routing_key_hit"
        for lease in held:
            lease.release()
        # Prefill [4,0,1,0]: spill; w1 (2 in flight) and w3 (3) tie at 0: w1.
        held = hold(router, [4, 0, 1, 0], [0, 2, 0, 3])
        decision = router.select(key)
        assert (decision.branch, decision.worker_url) == ("explicit_routing_key_spillover", w[1])
        assert len(held) == 10 and router.leaked_leases() == 0


def test_cache_aware_by_prefill_vectors() -> None:
    w = urls(4)
    with Router(w, "cache_aware", max_load_skew=1.0, min_load_gap=2, blocks_per_worker=64, balance_by="prefill") as router:
        for i in (1, 2):
            router.route(headers={"X-SMG-Target-Worker": str(i)}, prefix_blocks=[1, 2, 3]).release()
        # w1 decodes 3 answers, w2 has one prompt queued: w1, which in_flight would call overloaded.
        held = hold(router, [0, 0, 1, 0], [0, 3, 0, 0])
        decision = router.select(prefix_blocks=[1, 2, 3, 4])
        assert (decision.branch, decision.worker_url) == ("cache_aware_prefix_hit", w[1])
        assert len(held) == 4 and router.leaked_leases() == 0


@pytest.mark.parametrize(
    "factor, weight, waiting, stays",
    [
        (2.0, 400, [600], True),  # 600 is not over 2 x 400 x 3/4
        (2.0, 400, [601], False),
        (0.0, 400, [601], True),  # off: the documented rule
        (2.0, None, [1], True),  # no weight: 1: 2 x 1 x 3/4 = 1.5
        (2.0, None, [1, 1], False),
    ],
)
def test_hit_wait_vectors(factor: float, weight: object, waiting: List[int], stays: bool) -> None:
    # docs/contract.md, "Prefill load", rule 5: w1 holds [1,2,3]; [1,2,3,4] matches 3 of 4 blocks.
    w = urls(4)
    config = CacheAwareConfig(max_load_skew=1.0, min_load_gap=1 << 20, blocks_per_worker=64, balance_by="prefill", hit_wait_factor=factor)
    for keyed in (False, True):
        with Router(w, config) as router:
            router.route(headers={"X-SMG-Target-Worker": "1"}, prefix_blocks=[1, 2, 3]).release()
            held = [router.acquire(w[1], weight=n) for n in waiting]
            key = key_preferring(router, w[2]) if keyed else None
            decision = router.route(key, prefix_blocks=[1, 2, 3, 4], weight=weight)  # type: ignore[arg-type]
            if stays:
                assert (decision.branch, decision.worker_url) == ("cache_aware_prefix_hit", w[1])
            else:
                # A miss: the ring walk from the key, else from fmix64 of the first unmatched
                # block, among w0, w2, w3.
                model = model_of(router)
                order = model.clockwise(key.encode()) if key else model.clockwise_from(fmix64(4))
                want = next(u for u in order if u != w[1])
                assert (decision.branch, decision.worker_url) == ("cache_aware_balance", want)
            for lease in held + [decision]:
                lease.release()


def test_hit_wait_factor_is_validated() -> None:
    assert CacheAwareConfig(balance_by="prefill", hit_wait_factor=6).to_dict()["hit_wait_factor"] == 6.0
    with pytest.raises(ValueError, match="hit_wait_factor applies only with balance_by prefill, got balance_by in_flight"):
        CacheAwareConfig(hit_wait_factor=6)
    for bad in (-1, float("nan"), float("inf"), True, "6", 10**400):
        with pytest.raises(ValueError, match="hit_wait_factor must be a finite number >= 0"):
            CacheAwareConfig(balance_by="prefill", hit_wait_factor=bad)  # type: ignore[arg-type]
    with Router(urls(2), "cache_aware", balance_by="prefill", hit_wait_factor=6) as router:
        assert router.policy == CacheAwareConfig(balance_by="prefill", hit_wait_factor=6)
    with pytest.warns(UserWarning, match="hit_wait_factor=6: no effect with policy least_load"):
        Router(urls(2), "least_load", hit_wait_factor=6).close()


def test_the_balance_by_flag() -> None:
    import argparse

    from bounded_router import RouterArgs

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    args = RouterArgs.from_cli_args(parser.parse_args(["--worker-urls", urls(1)[0], "--policy", "cache_aware", "--balance-by", "prefill"]))
    with Router.from_args(args) as router:
        assert router.policy.balance_by == "prefill"
    with pytest.raises(SystemExit):
        parser.parse_args(["--balance-by", "waiting"])
    flags = ["--worker-urls", urls(1)[0], "--policy", "cache_aware", "--balance-by", "prefill", "--hit-wait-factor", "6"]
    with Router.from_args(RouterArgs.from_cli_args(parser.parse_args(flags))) as router:
        assert router.policy == CacheAwareConfig(balance_by="prefill", hit_wait_factor=6)
