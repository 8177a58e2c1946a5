"""The proxies' ``prefix_blocks`` option: the prompt of an OpenAI-style body ("text") or its token
ids ("tokens") become the request's prefix blocks (integrations/_prompt.py, docs/contract.md "HTTP
proxies"), over real HTTP on loopback for both framework helpers, with echo workers behind them; a
body without a usable prompt is routed without blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import httpx
import pytest
from echo_worker import EchoWorker
from integration_support import ProxyServer, client, serve_proxy  # noqa: F401 - client, serve_proxy are fixtures

from bounded_router import MAX_PREFIX_BLOCKS, prefix_blocks, text_prefix_blocks
from bounded_router.integrations import serve
from bounded_router.integrations._prompt import INLINE_BODY_LIMIT, body_prefix_blocks, body_token_blocks, prompt_text
from bounded_router.integrations.options import ProxyOptions

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image_url", "image_url": {"url": "http://i/1.png"}}]},
    ],
}
CHAT_TEXT = 'system\nYou are terse.\nuser\nLook: {"image_url": {"url": "http://i/1.png"}, "type": "image_url"}\n'


@pytest.mark.parametrize(
    "body, text",
    [
        (CHAT, CHAT_TEXT),
        ({"messages": [{"role": "user", "content": "hi"}, "junk", {"content": None}]}, "user\nhi\n\n\n"),
        ({"prompt": "once upon a time"}, "once upon a time"),
        ({"prompt": ["first", "second"]}, "first\nsecond"),
        ({"prompt": [1, 2, 3]}, None),  # token ids: the proxy cannot know the engine's blocks
        ({"prompt": ""}, None),
        ({"messages": []}, None),
        ({"model": "m"}, None),
        ([1, 2], None),
    ],
)
def test_the_prompt_text_is_role_and_content_in_order_or_the_prompt(body: Any, text: Optional[str]) -> None:
    assert prompt_text(json.dumps(body).encode()) == text


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"[" * 100000 + b"]" * 100000, b'{"prompt": "abc"'])
def test_a_body_that_is_not_json_has_no_prompt(body: bytes) -> None:
    assert prompt_text(body) is None
    assert body_prefix_blocks(body, 64) is None


def test_a_lone_surrogate_in_the_prompt_is_hashed_not_an_error() -> None:
    assert body_prefix_blocks(b'{"prompt": "\\ud800abcd"}', 2) == text_prefix_blocks("\ud800abcd", 2)


def test_a_later_message_extends_the_blocks_of_the_conversation_so_far() -> None:
    first = {"messages": CHAT["messages"][:1]}
    assert prompt_text(json.dumps(CHAT).encode()).startswith(prompt_text(json.dumps(first).encode()))  # type: ignore[union-attr]
    short, long = body_prefix_blocks(json.dumps(first).encode(), 4), body_prefix_blocks(json.dumps(CHAT).encode(), 4)
    assert short and long and long[: len(short)] == short


def test_a_prompt_longer_than_the_block_limit_is_cut_to_it_not_refused() -> None:
    limit = MAX_PREFIX_BLOCKS
    body = json.dumps({"prompt": "ab" * (limit + 50)}).encode()
    blocks = body_prefix_blocks(body, 2)
    assert blocks is not None and len(blocks) == limit
    assert blocks == text_prefix_blocks("ab" * limit, 2)


def test_prefix_max_bytes_cuts_the_text_before_the_blocks() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 100}, {"role": "a", "content": "more"}]}).encode()
    text = prompt_text(body)
    assert text is not None and body_prefix_blocks(body, 8, 50) == text_prefix_blocks(text[:50], 8)
    assert len(text_prefix_blocks(text[:50], 8)) == 6
    assert body_prefix_blocks(body, 8, 7) is None  # less than a block


def test_the_option_is_validated_and_has_flags() -> None:
    assert ProxyOptions().prefix_blocks == "off"
    assert ProxyOptions().prefix_max_bytes == 1 << 20
    with pytest.raises(ValueError, match="prefix_blocks must be one of off, text, tokens"):
        ProxyOptions(prefix_blocks="words")
    with pytest.raises(ValueError, match=r"prefix_block_size must be a positive integer \(token ids\), not 0"):
        ProxyOptions(prefix_block_size=0)
    # As the gateway refuses it (regression: there 2**62 ids a block overflowed to 0 bytes).
    with pytest.raises(ValueError, match=r"prefix_block_size must be at most prefix_max_bytes / 4 \(262144 token ids\), got 4611686018427387904"):
        ProxyOptions(prefix_blocks="tokens", prefix_block_size=1 << 62)
    with pytest.raises(ValueError, match=r"prefix_block_bytes must be at most prefix_max_bytes \(1024\), got 2048"):
        ProxyOptions(prefix_blocks="text", prefix_block_bytes=2048, prefix_max_bytes=1024)
    with pytest.raises(ValueError, match="prefix_block_bytes"):
        ProxyOptions(prefix_block_bytes=0)
    with pytest.raises(ValueError, match="prefix_max_bytes"):
        ProxyOptions(prefix_max_bytes=0)
    args = serve._parser().parse_args(
        ["--worker-urls", "http://127.0.0.1:1", "--prefix-blocks", "text", "--prefix-block-bytes", "32", "--prefix-max-bytes", "4096"]
    )
    options = ProxyOptions.from_cli_args(args)
    assert (options.prefix_blocks, options.prefix_block_bytes, options.prefix_max_bytes) == ("text", 32, 4096)
    args = serve._parser().parse_args(["--worker-urls", "http://127.0.0.1:1", "--prefix-blocks", "tokens", "--prefix-block-size", "4"])
    options = ProxyOptions.from_cli_args(args)
    assert (options.prefix_blocks, options.prefix_block_size, ProxyOptions().prefix_block_size) == ("tokens", 4, 16)
    with pytest.raises(SystemExit):
        serve._parser().parse_args(["--prefix-blocks", "words"])


class RecordingRouter:
    """The proxy's router, recording the prefix blocks of each route before routing with them."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.prefixes: List[Optional[List[int]]] = []

    def route(self, *args: Any, **kwargs: Any) -> Any:
        self.prefixes.append(kwargs.get("prefix_blocks"))
        return self.router.route(*args, **kwargs)


def post(client: httpx.Client, url: str, body: bytes) -> Any:
    r = client.post(url + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_text_option_routes_with_the_blocks_of_the_prompt_and_forwards_the_body_untouched(
    worker: EchoWorker, serve_proxy: ProxyServer, client: httpx.Client
) -> None:
    small = json.dumps(CHAT).encode()
    # Over INLINE_BODY_LIMIT: parsed and hashed in a worker thread.
    large = json.dumps({"prompt": "The quick brown fox. " * (2 * INLINE_BODY_LIMIT // 21)}).encode()
    assert len(large) > INLINE_BODY_LIMIT
    with serve_proxy([worker.url], proxy_options={"prefix_blocks": "text", "prefix_block_bytes": 16}) as (url, proxy, router):
        proxy.router = recorder = RecordingRouter(proxy.router)
        for body in (small, large, b"{not json", json.dumps({"prompt": [1, 2]}).encode()):
            post(client, url, body)
        assert [r.body for r in worker.received] == [small, large, b"{not json", b'{"prompt": [1, 2]}']
        assert recorder.prefixes == [
            text_prefix_blocks(CHAT_TEXT, 16),
            text_prefix_blocks(json.loads(large)["prompt"], 16),
            None,  # routed without blocks, never refused
            None,
        ]


def test_without_the_option_the_body_is_not_read_for_routing(worker: EchoWorker, serve_proxy: ProxyServer, client: httpx.Client) -> None:
    with serve_proxy([worker.url]) as (url, proxy, router):
        proxy.router = recorder = RecordingRouter(proxy.router)
        post(client, url, json.dumps(CHAT).encode())
        assert recorder.prefixes == [None]


def test_the_native_gateway_takes_the_option_from_python_and_its_command_line(worker: EchoWorker, client: httpx.Client) -> None:
    from bounded_router import Router
    from bounded_router import __main__ as cli

    args = cli._parser()[0].parse_args(["serve", "--worker-urls", worker.url, "--prefix-blocks", "text", "--prefix-block-bytes", "8"])
    assert (args.prefix_blocks, args.prefix_block_bytes) == ("text", 8)
    with Router([worker.url]) as router, router.serve(prefix_blocks="text", prefix_block_bytes=8) as gateway:
        for body in (json.dumps(CHAT).encode(), b"{not json"):
            assert post(client, gateway.url, body)  # forwarded, whatever the body
        assert [r.body for r in worker.received] == [json.dumps(CHAT).encode(), b"{not json"]
    with Router([worker.url]) as router:
        with pytest.raises(ValueError, match="prefix_blocks"):
            router.serve(prefix_blocks="words")
        with pytest.raises(ValueError, match="prefix_max_bytes"):
            router.serve(prefix_max_bytes=-1)


def test_the_gateway_and_the_python_proxy_hash_the_same_blocks_up_to_prefix_max_bytes(
    worker: EchoWorker, serve_proxy: ProxyServer, client: httpx.Client
) -> None:
    # Counted by cache_aware: the blocks of each body's first 40 bytes (5 blocks of 8), or of its
    # whole text when shorter.
    from bounded_router import Router

    bodies = [json.dumps(CHAT).encode(), json.dumps({"prompt": "short text"}).encode(), json.dumps({"prompt": ["a" * 30, "\u00e9" * 9]}).encode()]
    want = sum(len(body_prefix_blocks(body, 8, 40) or []) for body in bodies)
    assert want == 5 + 1 + 5
    options = {"prefix_blocks": "text", "prefix_block_bytes": 8, "prefix_max_bytes": 40}
    with Router([worker.url], policy="cache_aware") as router, router.serve(**options) as gateway:
        for body in bodies:
            post(client, gateway.url, body)
        assert router.statistics().prefix_blocks == want
    with serve_proxy([worker.url], policy="cache_aware", proxy_options=options) as (url, proxy, router):
        for body in bodies:
            post(client, url, body)
        assert router.statistics().prefix_blocks == want


TOKEN_VECTORS = json.loads((Path(__file__).parent.parent / "testdata" / "token_prefix_blocks.json").read_text())


@pytest.mark.parametrize("case", TOKEN_VECTORS, ids=[c["name"] for c in TOKEN_VECTORS])
def test_token_blocks_match_the_shared_vectors(case: Any) -> None:
    # The same file checks the gateway (gateway/prompt_tokens_test.go): both edges agree.
    want = None if case["blocks"] is None else [int(b, 16) for b in case["blocks"]]
    assert body_token_blocks(case["body"].encode(), case["block_size"], case["max_bytes"]) == want


def test_a_long_token_prompt_is_cut_to_max_prefix_blocks() -> None:
    ids = list(range(MAX_PREFIX_BLOCKS + 10))
    assert body_token_blocks(json.dumps({"prompt": ids}).encode(), 1, 1 << 30) == prefix_blocks(ids[:MAX_PREFIX_BLOCKS], 1)


def test_the_tokens_option_routes_with_the_blocks_of_the_ids_and_forwards_the_body_untouched(
    worker: EchoWorker, serve_proxy: ProxyServer, client: httpx.Client
) -> None:
    ids = list(range(50, 90))
    small = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}).encode()
    # Over INLINE_BODY_LIMIT: parsed and hashed in a worker thread.
    many = [7919 * i % 150000 for i in range(20000)]
    large = json.dumps({"model": "m", "prompt": many}).encode()
    assert len(large) > INLINE_BODY_LIMIT
    with serve_proxy([worker.url], proxy_options={"prefix_blocks": "tokens", "prefix_block_size": 16}) as (url, proxy, router):
        proxy.router = recorder = RecordingRouter(proxy.router)
        for body in (small, large, CHAT_BODY, b"{not json"):
            post(client, url, body)
        assert [r.body for r in worker.received] == [small, large, CHAT_BODY, b"{not json"]
        assert recorder.prefixes == [prefix_blocks(ids[:32], 16), prefix_blocks(many, 16), None, None]


CHAT_BODY = json.dumps(CHAT).encode()


def test_the_gateway_and_the_python_proxy_route_token_ids_to_the_worker_reporting_their_blocks(
    worker: EchoWorker, serve_proxy: ProxyServer, client: httpx.Client
) -> None:
    # A second worker reports holding the prompt's first two blocks, named as its KV events name
    # them (prefix_blocks of its token ids): both edges send the ids there.
    from bounded_router import Router

    other = EchoWorker()
    other.start()
    try:
        ids = list(range(1000, 1010))
        bodies = [json.dumps({"prompt": ids}).encode(), json.dumps({"input_ids": ids, "sampling_params": {}}).encode()]
        options = {"prefix_blocks": "tokens", "prefix_block_size": 4}
        with Router([worker.url, other.url], policy="cache_aware") as router, router.serve(**options) as gateway:
            router.store_blocks(other.url, prefix_blocks(ids[:8], 4))
            for body in bodies:
                post(client, gateway.url, body)
            assert router.statistics().prefix_blocks_matched == 4
        with serve_proxy([worker.url, other.url], policy="cache_aware", proxy_options=options) as (url, proxy, router):
            router.store_blocks(other.url, prefix_blocks(ids[:8], 4))
            for body in bodies:
                post(client, url, body)
            assert router.statistics().prefix_blocks_matched == 4
        assert [r.body for r in other.received] == bodies * 2 and not worker.received
    finally:
        other.stop()
