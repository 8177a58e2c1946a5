"""The mock inference worker as a process on loopback: streaming, prefix cache, counters, errors."""

from __future__ import annotations

import time
import zlib
from typing import Any, Iterator

import httpx
import pytest
from integration_support import completion, events, streamed_text, wait_for

from bounded_router.simulate.model import CostModel
from bounded_router.testing.fleet import ServerProcess, start_mock_worker
from bounded_router.testing.mock_worker import expected_text, make_prompt, token_id


@pytest.fixture(scope="module")
def worker() -> Iterator[ServerProcess]:
    with start_mock_worker("m", CostModel(block_size=4), time_scale=0.01, lifetime=300) as w:
        yield w


def _emptied(worker: ServerProcess) -> Iterator[httpx.Client]:
    """A client of ``worker``, its cache and counters emptied first."""
    with httpx.Client(base_url=worker.url, trust_env=False, timeout=60.0) as c:
        c.post("/reset").raise_for_status()
        yield c


@pytest.fixture
def client(worker: ServerProcess) -> Iterator[httpx.Client]:
    yield from _emptied(worker)


def _stream(client: httpx.Client, body: Any) -> Any:
    with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["x-mock-worker"] == "m"
        return list(r.iter_lines())


def test_streams_tokens_then_usage_then_done(client: httpx.Client) -> None:
    lines = _stream(client, completion("one two three four five", 6))
    evs = events(lines)
    assert evs[-1] == "[DONE]"
    assert len([e for e in evs if isinstance(e, dict) and e["choices"]]) == 6
    assert streamed_text(lines) == expected_text("one two three four five", 6)
    usage = evs[-2]["usage"]
    assert usage == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}}
    assert evs[-2]["worker"] == "m" and evs[-2]["ttft_ms"] >= 0


def test_ttft_ms_is_the_models_time_not_the_processs(client: httpx.Client) -> None:
    # On an idle worker the model's time to first token is the prefill of the uncached tokens:
    # 1 ms per token x time scale 0.01, whatever this busy machine adds to the real time.
    prompt = "one two three four five"
    first = events(_stream(client, completion(prompt, 1)))[-2]
    again = events(_stream(client, completion(prompt, 1)))[-2]  # 4 of 5 words cached (blocks of 4)
    assert first["ttft_ms"] == pytest.approx(5 * 0.01, abs=1e-6)
    assert again["ttft_ms"] == pytest.approx(1 * 0.01, abs=1e-6)


def test_scheduled_at_queues_a_late_request_from_its_schedule(client: httpx.Client) -> None:
    # Two requests a replaying client meant to send at the same moment (now: every earlier
    # prefill has ended), delivered one after the other: the model queues the second behind the
    # first (5 + 3 tokens of prefill at 1 ms x 0.01), though the first was answered before the
    # second arrived.
    schedule = time.monotonic()
    first = events(_stream(client, completion("a b c d e", 1, scheduled_at=schedule)))[-2]
    second = events(_stream(client, completion("f g h", 1, scheduled_at=schedule)))[-2]
    assert first["ttft_ms"] == pytest.approx(5 * 0.01, abs=1e-6)
    assert second["ttft_ms"] == pytest.approx(8 * 0.01, abs=1e-6)
    # A schedule in the future counts from the arrival.
    later = events(_stream(client, completion("i j", 1, scheduled_at=time.monotonic() + 60.0)))[-2]
    assert later["ttft_ms"] == pytest.approx(2 * 0.01, abs=1e-6)


def test_prefix_cache_reuses_whole_blocks_of_a_shared_prefix(client: httpx.Client) -> None:
    first = make_prompt(1, 0, shared_tokens=10, own_tokens=3)  # blocks of 4: 3 whole blocks
    second = make_prompt(1, 1, shared_tokens=10, own_tokens=3)  # shares the first 10 words
    cached = []
    for prompt in (first, second, first):
        cached.append(events(_stream(client, completion(prompt, 1)))[-2]["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert cached == [0, 8, 12]  # 8: two whole blocks lie inside the shared 10 words
    stats = client.get("/stats").json()
    assert stats["prompt_tokens"] == 39 and stats["cached_tokens"] == 20 and stats["computed_tokens"] == 19
    assert stats["requests"] == stats["completed"] == 3 and stats["active"] == 0
    client.post("/reset")
    assert events(_stream(client, completion(first, 1)))[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_prompt_of_token_ids_shares_the_cache_with_its_text(client: httpx.Client) -> None:
    # The text's token ids are its words' CRC-32s (zlib.crc32, independent of the mock): the same
    # prompt either way, so the second request finds the first's two whole blocks of 4.
    words = "alpha beta gamma delta epsilon zeta eta theta iota".split()
    ids = [zlib.crc32(w.encode()) for w in words]
    assert [token_id(w) for w in words] == ids
    first = events(_stream(client, completion(" ".join(words), 2)))
    second = events(_stream(client, completion(ids, 2)))
    assert first[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second[-2]["usage"] == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 8}}
    r = client.post("/v1/completions", json=completion(ids, 3, stream=False))
    assert r.json()["choices"][0]["text"] == expected_text(ids, 3)


def test_non_streaming_answer(client: httpx.Client) -> None:
    r = client.post("/v1/completions", json=completion("a b", 3, stream=False))
    assert r.json()["choices"][0]["text"] == expected_text("a b", 3)
    assert r.json()["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    "body, message",
    [
        ({"max_tokens": 3}, "'prompt' must be a non-empty string or a list of token ids"),
        ({"prompt": "   "}, "'prompt' must be a non-empty string"),
        ({"prompt": []}, "'prompt' must be a non-empty string or a list of token ids"),
        ({"prompt": [1, -1]}, "list of token ids (ints from 0 to 2**32 - 1)"),
        ({"prompt": [1, 2.0]}, "list of token ids"),
        ({"prompt": [1, True]}, "list of token ids"),
        ({"prompt": [1, 1 << 32]}, "list of token ids"),
        ({"prompt": "a", "max_tokens": 0}, "'max_tokens' must be an integer from 1 to 100000"),
        ({"prompt": "a", "stream": "yes"}, "'stream' must be true or false"),
        ({"prompt": "a", "fail_after_tokens": -1}, "'fail_after_tokens' must be a non-negative integer"),
        ({"prompt": "a", "scheduled_at": "now"}, "'scheduled_at' must be a finite number of seconds >= 0"),
        ({"prompt": "a", "scheduled_at": True}, "'scheduled_at' must be a finite number of seconds >= 0"),
        ({"prompt": "a", "scheduled_at": -1}, "'scheduled_at' must be a finite number of seconds >= 0"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_requests_are_400_naming_the_field(client: httpx.Client, body: Any, message: str) -> None:
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 400
    assert message in r.json()["error"]


def test_unknown_endpoint_and_method(client: httpx.Client) -> None:
    assert client.get("/v2/nothing").status_code == 404
    assert client.get("/v1/completions").status_code == 405
    assert client.get("/health").json() == {"healthy": True, "worker": "m"}


# -- what SMG and sglang-router probe and send (SMG 1.13.0 asks for /health, /v1/models,
# /model_info then /get_model_info, /server_info, /version, then polls /loads, /v1/loads and
# /metrics; it refuses a completion body without "model" and sends unset fields as null) --


def test_probes_describe_an_sglang_worker_of_the_model(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in models["data"]] == [("mock-model", "sglang")]
    for path in ("/model_info", "/get_model_info"):
        assert client.get(path).json() == {"model_path": "mock-model", "tokenizer_path": "mock-model", "is_generation": True}
    for path in ("/server_info", "/get_server_info"):
        info = client.get(path).json()
        assert (info["served_model_name"], info["model_path"], info["dp_size"], info["page_size"]) == ("mock-model", "mock-model", 1, 4)
    assert client.get("/version").json() == {"version": "0.0.0-mock"}
    assert client.get("/health_generate").json() == {"healthy": True, "worker": "m"}
    for path in ("/v1/models", "/server_info", "/v1/loads", "/metrics"):
        assert client.get(path).headers["x-mock-worker"] == "m"
        assert client.post(path).status_code == 404


def _loads(client: httpx.Client) -> Any:
    report = client.get("/v1/loads").json()
    assert client.get("/loads").json() == report
    (load,) = report["loads"]
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    running = [line for line in metrics.text.splitlines() if line.startswith("sglang:num_running_reqs{")]
    assert running == ['sglang:num_running_reqs{model_name="mock-model"} %d' % load["num_running_reqs"]]
    return load["num_running_reqs"], client.get("/get_load").json()[0]["num_reqs"]


def test_loads_count_the_requests_in_flight(client: httpx.Client) -> None:
    assert _loads(client) == (0, 0)
    with client.stream("POST", "/v1/completions", json=completion("a b c", 100000)) as r:
        lines = r.iter_lines()  # kept: a dropped iterator closes the stream
        assert next(lines).startswith("data: ")  # the first token: the request is being decoded
        assert _loads(client) == (1, 1)
    wait_for(lambda: client.get("/stats").json()["active"] == 0, "the cancelled stream to end")
    assert _loads(client) == (0, 0)


def _chat(prompt_parts: Any, **extra: Any) -> Any:
    return dict({"model": "mock-model", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt_parts}]}, **extra)


def test_chat_completion(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=_chat("one two", max_tokens=3))
    assert r.status_code == 200 and r.headers["x-mock-worker"] == "m"
    answer = r.json()
    assert (answer["object"], answer["model"]) == ("chat.completion", "mock-model")
    assert answer["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": expected_text("be brief\none two", 3)}, "finish_reason": "length"}
    ]
    assert answer["usage"]["prompt_tokens"] == 4 and answer["usage"]["completion_tokens"] == 3


def test_chat_completion_streams_deltas(client: httpx.Client) -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "two"}]
    with client.stream("POST", "/v1/chat/completions", json=_chat(parts, stream=True, max_completion_tokens=4)) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        evs = events(list(r.iter_lines()))
    assert evs[-1] == "[DONE]"
    chunks = [e for e in evs[:-1] if e["choices"]]
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "mock-model" for e in evs[:-1])
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == expected_text("be brief\none\ntwo", 4)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert evs[-2]["usage"]["completion_tokens"] == 4


def test_sglang_generate_takes_input_ids_or_text_and_answers_with_meta_info(client: httpx.Client) -> None:
    # SGLang's native /generate, as slime and verl send it: the ids of "a b c d e" share the
    # text's cache (its first whole block of 4), the answer is {"text", "meta_info"}.
    ids = [zlib.crc32(w.encode()) for w in "a b c d e".split()]
    first = client.post("/generate", json={"text": "a b c d e", "sampling_params": {"max_new_tokens": 3}}).json()
    second = client.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 3, "temperature": 0}}).json()
    assert first["text"] == expected_text("a b c d e", 3) and second["text"] == expected_text(ids, 3)
    meta = {"id": "mock", "prompt_tokens": 5, "completion_tokens": 3, "finish_reason": {"type": "length", "length": 3}}
    assert first["meta_info"] == dict(meta, cached_tokens=0) and second["meta_info"] == dict(meta, cached_tokens=4)
    assert second["worker"] == "m"


def test_sglang_generate_streams_the_whole_text_so_far(client: httpx.Client) -> None:
    with client.stream("POST", "/generate", json={"input_ids": [7, 8, 9], "sampling_params": {"max_new_tokens": 3}, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        evs = events(list(r.iter_lines()))
    assert evs[-1] == "[DONE]" and len(evs) == 4
    whole = expected_text([7, 8, 9], 3)
    texts = [e["text"] for e in evs[:-1]]
    assert texts[-1] == whole and all(whole.startswith(t) for t in texts) and len(set(texts)) == 3
    assert [e["meta_info"]["completion_tokens"] for e in evs[:-1]] == [1, 2, 3]
    assert [e["meta_info"]["finish_reason"] for e in evs[:-1]] == [None, None, {"type": "length", "length": 3}]


def test_requests_as_gateways_send_them(client: httpx.Client) -> None:
    # SMG's re-serialised completion: a model, echo, and unset fields as null (absent).
    body = {"model": "mock-model", "prompt": "a b", "echo": False, "max_tokens": 2, "stream": False, "n": None, "stop": None}
    assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == expected_text("a b", 2)
    chat = _chat("x y", max_tokens=None, stream=None)  # null: 16 tokens, not streamed
    assert client.post("/v1/chat/completions", json=chat).json()["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/v1/chat/completions", {"model": "m"}, "'messages' must hold some text"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "'messages' must hold some text"),
        ("/v1/chat/completions", _chat("a", max_completion_tokens=0), "'max_tokens' must be an integer from 1 to 100000"),
        ("/v1/completions", {"model": 7, "prompt": "a"}, "'model' must be a string"),
        ("/generate", {"sampling_params": {}}, "'text' must be a non-empty string or 'input_ids' a list of token ids"),
        ("/generate", {"input_ids": [1, "2"]}, "'input_ids' a list of token ids"),
        ("/generate", {"text": "a", "sampling_params": []}, "'sampling_params' must be an object"),
        ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 0}}, "'sampling_params.max_new_tokens' must be an integer from 1 to 100000"),
    ],
)
def test_bad_chat_and_model_are_400_naming_the_field(client: httpx.Client, path: str, body: Any, message: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400
    assert message in r.json()["error"]


def test_model_name_flag() -> None:
    with start_mock_worker("n", time_scale=0.01, lifetime=60, model_name="org/other-7b") as w:
        with httpx.Client(base_url=w.url, trust_env=False) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["org/other-7b"]
            assert c.get("/server_info").json()["served_model_name"] == "org/other-7b"
            assert 'sglang:num_running_reqs{model_name="org/other-7b"} 0' in c.get("/metrics").text
            assert c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}]}).json()["model"] == "org/other-7b"


def test_load_reports_count_the_prefill_queue() -> None:
    """/v1/loads reports the prefill queue as SGLang does: num_waiting_reqs the requests queued
    behind the one in prefill, num_waiting_uncached_tokens the prompt tokens of them all that
    the cache does not hold. A prefill here lasts years (time_scale), so the queue stands still."""
    import asyncio
    import json

    from bounded_router.simulate.model import text_block_keys
    from bounded_router.testing.mock_worker import MockWorker, token_id

    async def scenario() -> Any:
        worker = MockWorker("m", CostModel(block_size=4), time_scale=1e9)
        port = await worker.start()
        # One block both prompts begin with, cached as the mock caches a text: by its words' ids.
        worker.cache.insert(text_block_keys([token_id("w%d" % i) for i in range(4)], 4))
        writers = []
        try:
            for words in (6, 10):
                body = json.dumps(completion(" ".join("w%d" % i for i in range(words)), 1)).encode()
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: m\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                writers.append(writer)
            for _ in range(1000):  # until both requests are in: a bounded wait, no timing asserted
                if worker.stats["active"] == 2 and worker._queue is not None and worker._queue.qsize() == 1:
                    break
                await asyncio.sleep(0.01)
            load = worker._load_report()["loads"][0]
            return load, worker._get_load()[0]
        finally:
            for writer in writers:
                writer.close()
            await worker.close()

    load, get_load = asyncio.run(scenario())
    assert (load["num_waiting_reqs"], load["num_waiting_uncached_tokens"], load["num_running_reqs"]) == (1, (6 - 4) + (10 - 4), 1)
    assert (get_load["num_reqs"], get_load["num_waiting_reqs"]) == (2, 1)


@pytest.fixture(scope="module")
def client_clock_worker() -> Iterator[ServerProcess]:
    cost = CostModel(prefill_ms_per_token=10.0, decode_ms_per_token=5.0, block_size=4)
    with start_mock_worker("c", cost, time_scale=1.0, lifetime=300, clock="client") as w:
        yield w


@pytest.fixture
def clocked(client_clock_worker: ServerProcess) -> Iterator[httpx.Client]:
    yield from _emptied(client_clock_worker)


def test_on_the_client_clock_a_stream_waits_for_the_clock_and_its_head_says_when_it_ends(clocked: httpx.Client) -> None:
    # Prefill 10 ms a token, decode 5 ms, blocks of 4, time scale 1. Both arrive at 1.0 s on the
    # client's clock: A (8 new tokens) is prefilled from 1.0 to 1.08, its 3 tokens at 1.08,
    # 1.085 and 1.09; B, queued behind it, finds A's first block cached (4 tokens) and computes
    # the other 4 from 1.08 to 1.12, its 2 tokens ending at 1.125.
    a_prompt, b_prompt = "a0 a1 a2 a3 a4 a5 a6 a7", "a0 a1 a2 a3 b4 b5 b6 b7"
    with clocked.stream("POST", "/v1/completions", json=completion(a_prompt, 3, scheduled_at=1.0)) as a:
        with clocked.stream("POST", "/v1/completions", json=completion(b_prompt, 2, scheduled_at=1.0)) as b:
            assert float(a.headers["x-mock-ends-at"]) == pytest.approx(1.09)
            assert float(b.headers["x-mock-ends-at"]) == pytest.approx(1.125)
            assert clocked.post("/clock", json={"now": 1.088}).json()["now"] == 1.088
            # A's last token is due at 1.09: by this clock neither answer can have ended.
            assert clocked.get("/stats").json()["completed"] == 0
            assert clocked.post("/clock", json={"now": 1.09}).json()["now"] == 1.09
            a_lines = list(a.iter_lines())
            clocked.post("/clock", json={"now": 2.0}).raise_for_status()
            b_lines = list(b.iter_lines())
    assert streamed_text(a_lines) == expected_text(a_prompt, 3) and streamed_text(b_lines) == expected_text(b_prompt, 2)
    a_usage, b_usage = events(a_lines)[-2], events(b_lines)[-2]
    assert a_usage["ttft_ms"] == pytest.approx(80.0) and a_usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert b_usage["ttft_ms"] == pytest.approx(120.0) and b_usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 4


def test_the_client_clock_never_goes_back_and_reset_restarts_it(clocked: httpx.Client) -> None:
    clocked.post("/clock", json={"now": 5.0}).raise_for_status()
    assert clocked.post("/clock", json={"now": 1.0}).json()["now"] == 5.0
    clocked.post("/reset").raise_for_status()
    # From 0 again, with an empty cache and an idle engine: 2 tokens prefilled by 0.02 s.
    with clocked.stream("POST", "/v1/completions", json=completion("x y", 1, scheduled_at=0.0)) as r:
        assert float(r.headers["x-mock-ends-at"]) == pytest.approx(0.02)
        clocked.post("/clock", json={"now": 0.02}).raise_for_status()
        assert events(list(r.iter_lines()))[-2]["ttft_ms"] == pytest.approx(20.0)


@pytest.mark.parametrize(
    "path, body, message",
    [("/v1/completions", completion("a", 1), "'scheduled_at' is required with --clock client"),
     ("/clock", {"now": "soon"}, 'POST /clock takes {"now": a finite number of seconds >= 0}'),
     ("/clock", {"now": -1}, 'POST /clock takes {"now": a finite number of seconds >= 0}'),
     ("/clock", [], 'POST /clock takes {"now": a finite number of seconds >= 0}')],
)  # fmt: skip
def test_client_clock_refusals_name_the_field(clocked: httpx.Client, path: str, body: Any, message: str) -> None:
    r = clocked.post(path, json=body)
    assert r.status_code == 400 and message in r.json()["error"]
    assert clocked.get("/stats").json()["requests"] == 0, "a refused request is not counted"


def test_a_wall_clock_worker_refuses_the_clock(client: httpx.Client) -> None:
    r = client.post("/clock", json={"now": 1.0})
    assert r.status_code == 400 and "POST /clock needs --clock client" in r.json()["error"]
