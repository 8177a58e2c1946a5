"""The mock inference worker as a process on loopback: streaming, prefix cache, counters, errors."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest
from integration_support import completion, events, streamed_text

from bounded_router.simulate.model import CostModel
from bounded_router.testing.fleet import ServerProcess, start_mock_worker
from bounded_router.testing.mock_worker import expected_text, make_prompt


@pytest.fixture(scope="module")
def worker() -> Iterator[ServerProcess]:
    with start_mock_worker("m", CostModel(block_size=4), time_scale=0.01, lifetime=300) as w:
        yield w


@pytest.fixture
def client(worker: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=worker.url, trust_env=False, timeout=60.0) as c:
        c.post("/reset").raise_for_status()
        yield c


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
    assert usage == {"prompt_tokens": 5, "completion_tokens": 6, "prompt_tokens_details": {"cached_tokens": 0}}
    assert evs[-2]["worker"] == "m" and evs[-2]["ttft_ms"] >= 0


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


def test_non_streaming_answer(client: httpx.Client) -> None:
    r = client.post("/v1/completions", json=completion("a b", 3, stream=False))
    assert r.json()["choices"][0]["text"] == expected_text("a b", 3)
    assert r.json()["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    "body, message",
    [
        ({"max_tokens": 3}, "'prompt' must be a non-empty string"),
        ({"prompt": "   "}, "'prompt' must be a non-empty string"),
        ({"prompt": "a", "max_tokens": 0}, "'max_tokens' must be an integer from 1 to 100000"),
        ({"prompt": "a", "stream": "yes"}, "'stream' must be true or false"),
        ({"prompt": "a", "fail_after_tokens": -1}, "'fail_after_tokens' must be a non-negative integer"),
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
