"""The mock worker's KV cache events (bounded_router.testing.kv_events): their bytes against
vLLM's format, and a router fed by them over ZeroMQ on loopback (docs/contract.md, "Reported
blocks")."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict


# requirements-dev.txt installs the kv-events extra: without it these tests fail, not skip.
import msgpack  # noqa: E402, F401
import zmq  # noqa: E402, F401

from bounded_router import Router, prefix_blocks  # noqa: E402
from bounded_router.testing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventPublisher, encode_batch  # noqa: E402
from bounded_router.testing.mock_worker import cache_events, token_id  # noqa: E402

# [1.5, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, None, None]]] as msgspec's
# encoder writes vLLM's KVEventBatch (array_like, tag first, fields in declaration order:
# block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name), byte by
# byte from the msgpack specification; kvevents/format_test.go decodes the same bytes.
STORED = bytes(
    [0x92, 0xCB, 0x3F, 0xF8, 0, 0, 0, 0, 0, 0, 0x91, 0x98, 0xAB]
    + list(b"BlockStored")
    + [0x92, 0x0B, 0x0C, 0xC0, 0x94, 0x01, 0x02, 0x03, 0x04, 0x02, 0xC0, 0xC0, 0xC0]
)


def test_frames_follow_vllms_field_order_byte_for_byte() -> None:
    assert encode_batch(1.5, [BlockStored([11, 12], None, [1, 2, 3, 4], 2)]) == STORED
    removed = encode_batch(0.0, [BlockRemoved([2**64 - 1]), AllBlocksCleared()])
    assert removed == bytes([0x92, 0xCB, 0, 0, 0, 0, 0, 0, 0, 0, 0x92, 0x93, 0xAC]) + b"BlockRemoved" + bytes(
        [0x91, 0xCF] + [0xFF] * 8 + [0xC0, 0x91, 0xB0]
    ) + b"AllBlocksCleared"


def test_a_prompts_insertion_is_a_stored_run_per_new_stretch_and_a_removal() -> None:
    ids = [101, 102, 103, 104, 105, 106]
    events = cache_events(["k0", "k1", "k2"], ids, 2, stored={"k1", "k2"}, evicted=["old"])
    assert events == [
        BlockStored(["k1", "k2"], "k0", [103, 104, 105, 106], 2),
        BlockRemoved(["old"]),
    ]


def _wait_for(what: str, done: Callable[[], bool]) -> None:
    for _ in range(1000):  # bounded: 1000 x 10 ms
        if done():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def test_a_router_learns_the_published_blocks_and_replays_a_lost_batch() -> None:
    W0, W1 = "http://127.0.0.1:9/w0", "http://127.0.0.1:9/w1"
    publisher = KVEventPublisher(replay_endpoint="tcp://127.0.0.1:0")
    try:
        router = Router([W0, W1], policy="cache_aware", kv_events={W1: publisher.endpoint})
        router.kv_events.stop()  # type: ignore[union-attr]  # one feed per worker: this one with the replay endpoint
        feed = router.subscribe_kv_events({W1: publisher.endpoint}, {W1: publisher.replay_endpoint or ""})
        tokens = list(range(8))
        blocks = prefix_blocks(tokens, 2)

        def stats() -> Dict[str, Any]:
            return feed.statistics()[W1]

        # ZeroMQ's slow joiner: publish the first batch until the subscriber has it.
        first = [BlockStored([100], None, tokens[:2], 2)]
        _wait_for("the first batch", lambda: publisher.publish(first) >= 0 and stats()["batches"] > 0)
        publisher.publish([BlockStored([101], 100, tokens[2:4], 2)], skip=True)  # lost on the way
        publisher.publish([BlockStored([102, 103], 101, tokens[4:8], 2)])
        _wait_for("the replay", lambda: stats()["replayed"] == 1 and stats()["batches"] >= 3)
        assert stats()["gaps"] == 1 and stats()["lost"] == 0 and stats()["stale"] is False
        decision = router.select(prefix_blocks=blocks)
        assert (decision.worker_url, decision.branch) == (W1, "cache_aware_prefix_hit")
        assert router.workers()[1].indexed_blocks == 4
        publisher.publish([BlockRemoved([103])])
        _wait_for("the removal", lambda: router.workers()[1].indexed_blocks == 3)
        feed.stop()
        router.close()
    finally:
        publisher.close()


def test_a_mock_workers_cache_reaches_the_router() -> None:
    """A real mock worker (in this process, on loopback) publishes its cache; a request's
    prompt, as token ids (the mock's token_id of each word), then routes to it by its blocks."""
    from bounded_router.testing.mock_worker import MockWorker
    from bounded_router.simulate.model import CostModel

    words = ["w%d" % i for i in range(64)]
    cost = CostModel(block_size=16)
    blocks = prefix_blocks([token_id(w) for w in words], cost.block_size)

    async def scenario() -> None:
        worker = MockWorker("w1", cost, time_scale=0.001)
        worker.kv_events = KVEventPublisher()
        port = await worker.start()
        url = "http://127.0.0.1:%d" % port
        router = Router(["http://127.0.0.1:9/w0", url], policy="cache_aware", kv_events={url: worker.kv_events.endpoint})
        try:
            assert router.kv_events is not None
            # The slow joiner again: prompts until a batch has reached the router.
            for _ in range(200):
                body = '{"model": "mock-model", "prompt": "%s", "max_tokens": 1}' % " ".join(words)
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)).encode())
                await writer.drain()
                await reader.read()
                writer.close()
                await asyncio.sleep(0.01)
                if router.workers()[1].indexed_blocks:
                    break
                worker.reset()  # the next prompt stores its blocks again
            decision = router.select(prefix_blocks=blocks)
            assert (decision.worker_url, decision.branch) == (url, "cache_aware_prefix_hit")
        finally:
            router.close()
            await worker.close()
            worker.kv_events.close()

    asyncio.run(scenario())
